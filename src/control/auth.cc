#include "weightport/control/auth.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

namespace weightport {
namespace {

constexpr size_t kMaxSecretFileSize = 4096;

std::span<const std::byte> AsBytes(std::string_view s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

// Fills `out` from getrandom(), retrying on EINTR and short reads.
Status FillRandom(std::span<std::byte> out) {
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = getrandom(out.data() + done, out.size() - done, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("getrandom", errno);
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

// Closes a file descriptor on scope exit.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace

Secret& Secret::operator=(const Secret& other) {
  if (this != &other) {
    Wipe();
    bytes_ = other.bytes_;
  }
  return *this;
}

Secret::Secret(Secret&& other) noexcept : bytes_(std::move(other.bytes_)) { other.bytes_.clear(); }

Secret& Secret::operator=(Secret&& other) noexcept {
  if (this != &other) {
    Wipe();
    bytes_ = std::move(other.bytes_);
    other.bytes_.clear();
  }
  return *this;
}

Secret::~Secret() { Wipe(); }

void Secret::Wipe() {
  if (!bytes_.empty()) OPENSSL_cleanse(bytes_.data(), bytes_.size());
  bytes_.clear();
}

Result<Secret> Secret::FromBytes(std::span<const std::byte> bytes, std::string_view what) {
  if (bytes.size() < kMinSecretSize) {
    return InvalidArgument(std::string(what) + ": secret is " + std::to_string(bytes.size()) +
                           " bytes, at least " + std::to_string(kMinSecretSize) + " are required");
  }
  return Secret(std::vector<std::byte>(bytes.begin(), bytes.end()));
}

Result<Secret> Secret::Generate() {
  std::vector<std::byte> random(kGeneratedSecretSize / 2);
  WP_RETURN_IF_ERROR(FillRandom(random));
  static constexpr char kHex[] = "0123456789abcdef";
  std::vector<std::byte> text;
  text.reserve(kGeneratedSecretSize);
  for (std::byte b : random) {
    text.push_back(static_cast<std::byte>(kHex[std::to_integer<uint8_t>(b) >> 4]));
    text.push_back(static_cast<std::byte>(kHex[std::to_integer<uint8_t>(b) & 15]));
  }
  std::fill(random.begin(), random.end(), std::byte{0});
  return Secret(std::move(text));
}

Result<Secret> Secret::LoadFromFile(const std::string& path) {
  // O_NONBLOCK: a FIFO planted at the path must not hang the open; regular files ignore it.
  FdCloser file{open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (file.fd < 0) return ErrnoError("secret file " + path, errno);
  struct stat st {};
  if (fstat(file.fd, &st) != 0) return ErrnoError("secret file " + path, errno);
  if (!S_ISREG(st.st_mode)) return InvalidArgument("secret file " + path + ": not a regular file");
  // Checked on the open descriptor, so the file cannot be swapped between the check and the read.
  if ((st.st_mode & (S_IROTH | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%03o", static_cast<unsigned>(st.st_mode & 0777));
    return PermissionDenied("secret file " + path + ": readable or writable by other users (mode " + mode +
                            "); run chmod 600 " + path);
  }
  std::vector<std::byte> bytes(kMaxSecretFileSize + 1);
  size_t size = 0;
  while (size < bytes.size()) {
    ssize_t n = read(file.fd, bytes.data() + size, bytes.size() - size);
    if (n < 0) {
      if (errno == EINTR) continue;
      OPENSSL_cleanse(bytes.data(), bytes.size());
      return ErrnoError("secret file " + path, errno);
    }
    if (n == 0) break;
    size += static_cast<size_t>(n);
  }
  Status error;
  if (size > kMaxSecretFileSize) {
    error = InvalidArgument("secret file " + path + ": larger than " + std::to_string(kMaxSecretFileSize) +
                            " bytes; is this really a secret?");
  }
  if (size > 0 && bytes[size - 1] == std::byte{'\n'}) {
    --size;
    if (size > 0 && bytes[size - 1] == std::byte{'\r'}) --size;
  }
  if (error.ok() && size == 0) error = InvalidArgument("secret file " + path + ": empty");
  if (error.ok() && size < kMinSecretSize) {
    error = InvalidArgument("secret file " + path + ": secret is " + std::to_string(size) +
                            " bytes, at least " + std::to_string(kMinSecretSize) + " are required");
  }
  Result<Secret> secret = error.ok() ? FromBytes(std::span(bytes.data(), size), path) : Result<Secret>(error);
  OPENSSL_cleanse(bytes.data(), bytes.size());
  return secret;
}

Status Secret::WriteToFile(const std::string& path) const {
  FdCloser file{open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600)};
  if (file.fd < 0) return ErrnoError("secret file " + path, errno);
  // The umask can only remove bits, but be explicit about the mode the reader insists on.
  if (fchmod(file.fd, 0600) != 0) return ErrnoError("secret file " + path, errno);
  size_t done = 0;
  while (done < bytes_.size()) {
    ssize_t n = write(file.fd, bytes_.data() + done, bytes_.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("secret file " + path, errno);
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(file.fd) != 0) return ErrnoError("secret file " + path, errno);
  return Status::Ok();
}

Result<Digest> HmacSha256(std::span<const std::byte> key,
                          std::initializer_list<std::span<const std::byte>> parts) {
  // Fetched once: the algorithm object is immutable and may be shared by threads.
  static EVP_MAC* const mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (mac == nullptr) return Internal("OpenSSL: HMAC is not available");
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(mac);
  if (ctx == nullptr) return ResourceExhausted("OpenSSL: EVP_MAC_CTX_new failed");
  char digest_name[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest_name, 0),
                         OSSL_PARAM_construct_end()};
  // A zero-length key is legal HMAC; OpenSSL wants a non-null pointer for it.
  static const unsigned char kEmpty = 0;
  const auto* key_ptr = key.empty() ? &kEmpty : reinterpret_cast<const unsigned char*>(key.data());
  bool ok = EVP_MAC_init(ctx, key_ptr, key.size(), params) == 1;
  for (const auto& part : parts) {
    if (!ok) break;
    if (part.empty()) continue;
    ok = EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(part.data()), part.size()) == 1;
  }
  Digest out{};
  size_t out_len = 0;
  if (ok) ok = EVP_MAC_final(ctx, reinterpret_cast<unsigned char*>(out.data()), &out_len, out.size()) == 1;
  EVP_MAC_CTX_free(ctx);
  if (!ok || out_len != out.size()) return Internal("OpenSSL: HMAC-SHA256 failed");
  return out;
}

bool ConstantTimeEqual(std::span<const std::byte> a, std::span<const std::byte> b) {
  if (a.size() != b.size()) return false;
  if (a.empty()) return true;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Result<Nonce> RandomNonce() {
  Nonce nonce{};
  WP_RETURN_IF_ERROR(FillRandom(nonce));
  return nonce;
}

Result<Digest> ClientProof(const Secret& secret, const Nonce& server_nonce, const Nonce& client_nonce,
                           std::string_view client_name) {
  return HmacSha256(secret.bytes(), {AsBytes("wp-client"), server_nonce, client_nonce, AsBytes(client_name)});
}

Result<Digest> ServerProof(const Secret& secret, const Nonce& client_nonce, const Nonce& server_nonce,
                           std::string_view server_name) {
  return HmacSha256(secret.bytes(), {AsBytes("wp-server"), client_nonce, server_nonce, AsBytes(server_name)});
}

Result<Digest> SessionKey(const Secret& secret, const Nonce& server_nonce, const Nonce& client_nonce) {
  return HmacSha256(secret.bytes(), {AsBytes("wp-session"), server_nonce, client_nonce});
}

std::string ToHex(std::span<const std::byte> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (std::byte b : bytes) {
    out.push_back(kDigits[std::to_integer<unsigned>(b) >> 4]);
    out.push_back(kDigits[std::to_integer<unsigned>(b) & 0xf]);
  }
  return out;
}

}  // namespace weightport
