#include "weightport/store/session_keys.h"

#include <cstdio>

namespace weightport::session_keys {

Status CheckSessionName(std::string_view session) {
  constexpr size_t kMaxLength = 128;
  bool ok = !session.empty() && session.size() <= kMaxLength && session != "." && session != "..";
  for (char c : session) {
    ok = ok && ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
                c == '_' || c == '-');
  }
  if (ok) return Status::Ok();
  std::string shown(session.substr(0, kMaxLength));
  for (char& c : shown)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  return InvalidArgument("session name '" + shown +
                         "': expected 1 to 128 characters of A-Z a-z 0-9 . _ -, not '.' or '..'");
}

std::string Prefix(std::string_view session) { return "/weightport/" + std::string(session) + "/"; }
std::string Coordinator(std::string_view session) { return Prefix(session) + "coordinator"; }
std::string DecisionPrefix(std::string_view session) { return Prefix(session) + "decision/"; }

std::string Decision(std::string_view session, uint64_t version) {
  char digits[21];
  std::snprintf(digits, sizeof(digits), "%020llu", static_cast<unsigned long long>(version));
  return DecisionPrefix(session) + digits;
}

std::string Live(std::string_view session) { return Prefix(session) + "live"; }
std::string Members(std::string_view session) { return Prefix(session) + "members"; }
std::string KeyEpoch(std::string_view session) { return Prefix(session) + "key_epoch"; }
std::string SecretCheck(std::string_view session) { return Prefix(session) + "secret_check"; }

}  // namespace weightport::session_keys
