#include "weightport/core/memory_check.h"

#include <sys/resource.h>
#include <sys/statvfs.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace weightport {
namespace {

std::string Gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

std::optional<uint64_t> ReadNumberFile(const char* path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return std::nullopt;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0') return std::nullopt;
  return v;
}

}  // namespace

MemoryAvailability QueryMemoryAvailability() {
  MemoryAvailability have;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    have.ram_available = std::strtoull(line.c_str() + 13, nullptr, 10) * 1024;  // kB
    break;
  }
  struct statvfs fs {};
  if (statvfs("/dev/shm", &fs) == 0)
    have.shm_free = static_cast<uint64_t>(fs.f_bavail) * static_cast<uint64_t>(fs.f_frsize);
  // cgroup v2: this process's group is the root of the unified hierarchy as seen from inside it.
  const std::optional<uint64_t> max = ReadNumberFile("/sys/fs/cgroup/memory.max");
  const std::optional<uint64_t> current = ReadNumberFile("/sys/fs/cgroup/memory.current");
  if (max && current) have.cgroup_left = *max > *current ? *max - *current : 0;
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    uint64_t vm_size = 0;
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("VmSize:", 0) == 0) vm_size = std::strtoull(line.c_str() + 7, nullptr, 10) * 1024;
    have.address_left = as.rlim_cur > vm_size ? as.rlim_cur - vm_size : 0;
  }
  return have;
}

Status CheckMemoryFits(uint64_t bytes, bool shared, std::string_view what, const MemoryAvailability& have) {
  const auto usable = [](uint64_t available) { return available / 10 * 9; };
  bool fits = true;
  std::ostringstream figures;
  const auto consider = [&](std::optional<uint64_t> available, const char* name) {
    if (!available) return;
    if (bytes > usable(*available)) fits = false;
    figures << (figures.tellp() > 0 ? ", " : "") << Gib(*available) << " " << name;
  };
  consider(have.ram_available > 0 ? std::optional<uint64_t>(have.ram_available) : std::nullopt,
           "of memory available");
  consider(have.cgroup_left, "left under this cgroup's memory.max");
  consider(have.address_left, "of address space left under ulimit -v");
  if (shared) consider(have.shm_free, "free in /dev/shm");
  if (fits) return Status::Ok();
  return ResourceExhausted(std::string(what) + ": " + Gib(bytes) + " (" + std::to_string(bytes) +
                           " bytes) does not fit in this machine's memory: " + figures.str() +
                           " (at most 90% of each may be used)");
}

Status CheckMemoryFits(uint64_t bytes, bool shared, std::string_view what) {
  return CheckMemoryFits(bytes, shared, what, QueryMemoryAvailability());
}

}  // namespace weightport
