// The durable commit record of a plan session, in etcd: what was decided for each version, the
// live version, the membership and the key epoch. A coordinator writes a version's decision here
// before it tells any rank to commit or abort, so a coordinator that takes over after a crash
// finds the outcome, or finds none and may decide.
//
// Values are JSON under /weightport/<session>/ (session_keys.h); readers ignore fields they do not
// know:
//
//   decision/<version>  {"version": 7, "outcome": "committed", "reason": "all 8 ranks staged"}
//                       outcome is "committed" or "aborted"; reason is free text (its first 4096
//                       bytes, invalid UTF-8 replaced). Written once: never changed or deleted.
//   live                {"version": 7}: the highest committed version, raised in the same
//                       transaction as the decision that commits a higher one.
//   members             {"epoch": 3, "ranks": ["rank-0", "rank-1"]}
//   key_epoch           {"epoch": 4}
//
// Every write is a transaction conditioned on what was read, so concurrent writers (two
// coordinators, one of them stale) never overwrite each other: a decision is written once and two
// writers can never record different outcomes for one version; the live version, the membership
// epoch and the key epoch only rise. A value that is not of the format above is DataLoss naming
// its key.
//
// Thread-safety: a FleetRecord holds only the session's name and the client: any thread may use
// it, and copies of it, at once. The client must outlive it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "weightport/core/status.h"
#include "weightport/store/etcd_client.h"

namespace weightport {

enum class Outcome { kCommitted, kAborted };
std::string_view OutcomeName(Outcome outcome);  // "committed", "aborted"

struct DecisionRecord {
  uint64_t version = 0;
  Outcome outcome = Outcome::kAborted;
  std::string reason;
  friend bool operator==(const DecisionRecord&, const DecisionRecord&) = default;
};

struct Membership {
  uint64_t epoch = 0;
  std::vector<std::string> ranks;
  friend bool operator==(const Membership&, const Membership&) = default;
};

class FleetRecord {
 public:
  // InvalidArgument for a bad session name (session_keys.h). Does not contact etcd.
  static Result<FleetRecord> Open(EtcdClient& client, std::string_view session);

  const std::string& session() const { return session_; }

  // Records `outcome` for `version` unless a decision is recorded already, and returns the recorded
  // decision: this one, or the earlier one, unchanged. A caller whose outcome differs from the one
  // returned must act on the one returned.
  Result<DecisionRecord> Decide(uint64_t version, Outcome outcome, std::string_view reason);
  // nullopt when nothing is decided for `version`.
  Result<std::optional<DecisionRecord>> Decision(uint64_t version);
  // The highest committed version; nullopt before the first commit.
  Result<std::optional<uint64_t>> LiveVersion();

  // Records the ranks of membership epoch `epoch`. OK when exactly this is recorded already;
  // FailedPrecondition when a higher epoch is recorded, or this epoch with other ranks;
  // InvalidArgument for an empty or repeated rank name.
  Status SetMembers(uint64_t epoch, const std::vector<std::string>& ranks);
  // nullopt before the first SetMembers.
  Result<std::optional<Membership>> Members();

  // Raises the key epoch by one and returns the new value (1 the first time). Concurrent bumps each
  // count: N calls raise it by N.
  Result<uint64_t> BumpKeyEpoch();
  // 0 before the first bump.
  Result<uint64_t> KeyEpoch();

 private:
  FleetRecord(EtcdClient& client, std::string session) : client_(&client), session_(std::move(session)) {}

  EtcdClient* client_;
  std::string session_;
};

}  // namespace weightport
