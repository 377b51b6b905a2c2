// Control-plane authentication: a shared secret, HMAC-SHA256 and the mutual challenge-response that
// both ends of a control connection run before anything else is trusted.
//
//   client -> server  Hello{role, client_name}
//   server -> client  Challenge{Ns}                       Ns: 32 random bytes
//   client -> server  Proof{Nc, HMAC(secret, "wp-client" || Ns || Nc || client_name)}
//   server -> client  Welcome{server_name, HMAC(secret, "wp-server" || Nc || Ns || server_name)}
//   both              session key = HMAC(secret, "wp-session" || Ns || Nc)
//
// Each side proves knowledge of the secret over a nonce the other side chose, so neither proof can be
// replayed into another connection; the distinct labels keep a client proof from ever being accepted
// as a server proof (no reflection). Every later frame is MACed with the session key.
//
// All functions here are pure (apart from RandomNonce and the file I/O of Secret) and thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weightport/core/status.h"

namespace weightport {

inline constexpr size_t kDigestSize = 32;  // HMAC-SHA256 output
inline constexpr size_t kNonceSize = 32;
inline constexpr size_t kMinSecretSize = 16;
inline constexpr size_t kGeneratedSecretSize = 64;  // hex characters: 256 random bits

using Digest = std::array<std::byte, kDigestSize>;
using Nonce = std::array<std::byte, kNonceSize>;

// The shared secret of a deployment. Its bytes are wiped on destruction.
class Secret {
 public:
  // Reads a secret file. Refuses a file that is readable or writable by others ("chmod 600 <file>"),
  // empty, larger than 4 KiB, or shorter than kMinSecretSize bytes once one trailing newline ("\n"
  // or "\r\n") is trimmed. Errors name the file.
  static Result<Secret> LoadFromFile(const std::string& path);
  // 32 bytes from getrandom(), as kGeneratedSecretSize lowercase hex characters: text, so the file
  // form loads back the same (raw bytes ending in '\n' lost it to the trailing-newline trim, and
  // the peers that loaded the file failed to authenticate against the process that generated it).
  static Result<Secret> Generate();
  // Wraps bytes held elsewhere (tests, a secret manager). `what` names the source in errors.
  static Result<Secret> FromBytes(std::span<const std::byte> bytes, std::string_view what);

  Secret(const Secret& other) = default;
  Secret& operator=(const Secret& other);
  Secret(Secret&& other) noexcept;
  Secret& operator=(Secret&& other) noexcept;
  ~Secret();

  // Writes the raw bytes to `path`, created with mode 0600 (an existing file is refused, so a secret
  // is never silently replaced).
  Status WriteToFile(const std::string& path) const;

  std::span<const std::byte> bytes() const { return bytes_; }

 private:
  explicit Secret(std::vector<std::byte> bytes) : bytes_(std::move(bytes)) {}
  void Wipe();
  std::vector<std::byte> bytes_;
};

// HMAC-SHA256(key, parts[0] || parts[1] || ...). Fails only if OpenSSL does.
Result<Digest> HmacSha256(std::span<const std::byte> key,
                          std::initializer_list<std::span<const std::byte>> parts);

// Constant-time equality (CRYPTO_memcmp); different lengths compare unequal.
bool ConstantTimeEqual(std::span<const std::byte> a, std::span<const std::byte> b);

// kNonceSize bytes from getrandom().
Result<Nonce> RandomNonce();

Result<Digest> ClientProof(const Secret& secret, const Nonce& server_nonce, const Nonce& client_nonce,
                           std::string_view client_name);
Result<Digest> ServerProof(const Secret& secret, const Nonce& client_nonce, const Nonce& server_nonce,
                           std::string_view server_name);
Result<Digest> SessionKey(const Secret& secret, const Nonce& server_nonce, const Nonce& client_nonce);

// Lower-case hex of bytes (test vectors, diagnostics). Never use it on the secret in a log.
std::string ToHex(std::span<const std::byte> bytes);

}  // namespace weightport
