// Where a plan session's state lives in etcd: every key under /weightport/<session>/.
//
//   /weightport/<session>/coordinator         the elected coordinator's address, as text, on the
//                                             leader's lease (coordinator_election.h)
//   /weightport/<session>/decision/<version>  a version's decision, JSON, written once
//                                             (fleet_record.h); <version> is 20 decimal digits, so
//                                             the keys sort by version
//   /weightport/<session>/live                the highest committed version, JSON
//   /weightport/<session>/members             the membership and its epoch, JSON
//   /weightport/<session>/key_epoch           the key epoch, JSON
//   /weightport/<session>/secret_check        an HMAC of a fixed text under the session's secret,
//                                             written once by its first coordinator: who may lead
//                                             it, and which ranks belong (plan_service.h)
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "weightport/core/status.h"

namespace weightport::session_keys {

// A session name is 1 to 128 characters of A-Z a-z 0-9 . _ -, not "." or "..": one path segment
// that cannot reach another session's keys. InvalidArgument names it otherwise.
Status CheckSessionName(std::string_view session);

std::string Prefix(std::string_view session);  // "/weightport/<session>/"
std::string Coordinator(std::string_view session);
std::string DecisionPrefix(std::string_view session);  // ".../decision/"
std::string Decision(std::string_view session, uint64_t version);
std::string Live(std::string_view session);
std::string Members(std::string_view session);
std::string KeyEpoch(std::string_view session);
std::string SecretCheck(std::string_view session);

}  // namespace weightport::session_keys
