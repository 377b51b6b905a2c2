#include "bench_util.h"

#include <sys/mman.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "weightport/transport/ucx_transport.h"

namespace weightport::bench {

Result<uint64_t> ParseSize(std::string_view text, std::string_view what) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument(std::string(what) + ": bad size '" + std::string(text) + "': " + std::string(why) +
                           " (expected a number with an optional K, M, G or T suffix, e.g. 64M or 1G)");
  };
  std::string_view s = text;
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  if (s.empty()) return bad("empty");
  size_t digits = 0;
  bool dot = false;
  while (digits < s.size() &&
         (std::isdigit(static_cast<unsigned char>(s[digits])) || (s[digits] == '.' && !dot))) {
    if (s[digits] == '.') dot = true;
    ++digits;
  }
  if (digits == 0 || (digits == 1 && dot)) return bad("no number");
  const std::string number(s.substr(0, digits));
  std::string suffix(s.substr(digits));
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double scale = 1;
  if (suffix.empty() || suffix == "B") {
    scale = 1;
  } else {
    const char unit = suffix[0];
    const std::string rest = suffix.substr(1);
    if (!(rest.empty() || rest == "B" || rest == "I" || rest == "IB")) return bad("unknown suffix");
    switch (unit) {
      case 'K':
        scale = 1024.0;
        break;
      case 'M':
        scale = 1024.0 * 1024;
        break;
      case 'G':
        scale = 1024.0 * 1024 * 1024;
        break;
      case 'T':
        scale = 1024.0 * 1024 * 1024 * 1024;
        break;
      default:
        return bad("unknown suffix");
    }
  }
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(number.c_str(), &end);
  if (errno != 0 || end != number.c_str() + number.size() || !std::isfinite(value))
    return bad("not a number");
  const double bytes = value * scale;
  if (bytes < 1) return bad("must be at least 1 byte");
  if (bytes > std::ldexp(1.0, 50)) return bad("larger than 1 PiB");
  if (bytes != std::floor(bytes)) return bad("not a whole number of bytes");
  return static_cast<uint64_t>(bytes);
}

Result<std::vector<uint64_t>> ParseSizeList(std::string_view text, std::string_view what) {
  std::vector<uint64_t> sizes;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string_view item =
        text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    WP_ASSIGN_OR_RETURN(uint64_t size, ParseSize(item, what));
    sizes.push_back(size);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return sizes;
}

std::string FormatSize(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"", "K", "M", "G", "T"};
  int unit = 0;
  while (unit < 4 && bytes != 0 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + kUnits[unit];
}

std::string HumanSize(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (unit < 4 && value >= 1024) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  if (unit == 0) {
    std::snprintf(text, sizeof text, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(text, sizeof text, value < 10 ? "%.2f %s" : "%.1f %s", value, kUnits[unit]);
  }
  return text;
}

Stats Summarize(std::vector<double> values) {
  Stats stats;
  if (values.empty()) return stats;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  stats.median = n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  stats.min = values.front();
  stats.max = values.back();
  return stats;
}

Result<Buffer> Buffer::Allocate(size_t size, std::string_view what) {
  Buffer buffer;
  if (size == 0) return buffer;
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return ErrnoError("mmap of " + std::to_string(size) + " bytes for " + std::string(what), errno);
  buffer.data_ = static_cast<std::byte*>(p);
  buffer.size_ = size;
  return buffer;
}

Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

Buffer::~Buffer() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

void Buffer::Touch(unsigned seed) { std::memset(data_, static_cast<int>(0x11 * (seed % 15 + 1)), size_); }

Result<std::unique_ptr<Transport>> RankTransport(const std::string& kind,
                                                 const std::shared_ptr<FakeFabric>& fabric,
                                                 const std::string& name) {
  if (kind == "fake") return MakeFakeTransport(fabric, name);
  UcxOptions o;
  o.name = name;
  o.transports = {"posix", "sysv", "cma", "self"};
  return MakeUcxTransport(o);
}

}  // namespace weightport::bench
