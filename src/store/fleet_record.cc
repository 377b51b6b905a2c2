#include "weightport/store/fleet_record.h"

#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "weightport/core/json_util.h"
#include "weightport/core/printable.h"
#include "weightport/store/session_keys.h"

namespace weightport {
namespace {

using Json = nlohmann::json;

// A read-modify-write retries when another writer moved the key between the read and the
// transaction; each try is one or two bounded calls.
constexpr int kMaxTries = 64;
constexpr size_t kMaxReasonBytes = 4096;

using json_util::Dump;

// A stored value that is not what this class writes: DataLoss, naming the key.
Status Corrupt(const EtcdClient& client, std::string_view key, const Status& why) {
  return DataLoss("etcd " + client.endpoint() + ": '" + Printable(key, 120) + "': " + why.message());
}

Result<Json> ParseValue(const EtcdClient& client, const EtcdKeyValue& kv) {
  auto j = json_util::Parse(kv.value, "the value");
  if (!j.ok()) return Corrupt(client, kv.key, j.status());
  if (!j->is_object()) return Corrupt(client, kv.key, InvalidArgument("the value is not a JSON object"));
  return j;
}

Result<uint64_t> U64Of(const EtcdClient& client, const EtcdKeyValue& kv, std::string_view field) {
  WP_ASSIGN_OR_RETURN(Json j, ParseValue(client, kv));
  auto v = json_util::GetU64(j, field, "the value");
  if (!v.ok()) return Corrupt(client, kv.key, v.status());
  return *v;
}

Json DecisionJson(const DecisionRecord& d) {
  return {{"version", d.version}, {"outcome", OutcomeName(d.outcome)}, {"reason", d.reason}};
}

Result<DecisionRecord> ParseDecision(const EtcdClient& client, const EtcdKeyValue& kv, uint64_t version) {
  WP_ASSIGN_OR_RETURN(Json j, ParseValue(client, kv));
  DecisionRecord d;
  auto v = json_util::GetU64(j, "version", "the value");
  if (!v.ok()) return Corrupt(client, kv.key, v.status());
  if (*v != version)
    return Corrupt(client, kv.key, InvalidArgument("the record is of version " + std::to_string(*v)));
  d.version = *v;
  auto outcome = json_util::GetString(j, "outcome", "the value");
  if (!outcome.ok()) return Corrupt(client, kv.key, outcome.status());
  if (*outcome == OutcomeName(Outcome::kCommitted)) {
    d.outcome = Outcome::kCommitted;
  } else if (*outcome == OutcomeName(Outcome::kAborted)) {
    d.outcome = Outcome::kAborted;
  } else {
    return Corrupt(client, kv.key, InvalidArgument("unknown outcome '" + Printable(*outcome, 60) + "'"));
  }
  auto reason = json_util::GetString(j, "reason", "the value");
  if (!reason.ok()) return Corrupt(client, kv.key, reason.status());
  d.reason = ReplaceUnprintable(*reason, kMaxReasonBytes);  // it reaches logs and every rank's errors
  return d;
}

Result<Membership> ParseMembership(const EtcdClient& client, const EtcdKeyValue& kv) {
  WP_ASSIGN_OR_RETURN(Json j, ParseValue(client, kv));
  Membership m;
  auto epoch = json_util::GetU64(j, "epoch", "the value");
  if (!epoch.ok()) return Corrupt(client, kv.key, epoch.status());
  m.epoch = *epoch;
  auto ranks = json_util::GetArray(j, "ranks", "the value");
  if (!ranks.ok()) return Corrupt(client, kv.key, ranks.status());
  for (const Json& r : **ranks) {
    if (!r.is_string()) return Corrupt(client, kv.key, InvalidArgument("a rank name is not a string"));
    m.ranks.push_back(r.get<std::string>());
  }
  return m;
}

}  // namespace

std::string_view OutcomeName(Outcome outcome) {
  return outcome == Outcome::kCommitted ? "committed" : "aborted";
}

Result<FleetRecord> FleetRecord::Open(EtcdClient& client, std::string_view session) {
  WP_RETURN_IF_ERROR(session_keys::CheckSessionName(session));
  return FleetRecord(client, std::string(session));
}

Result<DecisionRecord> FleetRecord::Decide(uint64_t version, Outcome outcome, std::string_view reason) {
  // As every reader of the record will see it (ParseDecision), so a winner and a loser agree.
  const DecisionRecord mine{version, outcome, ReplaceUnprintable(reason, kMaxReasonBytes)};
  const std::string key = session_keys::Decision(session_, version);
  const std::string live_key = session_keys::Live(session_);
  for (int i = 0; i < kMaxTries; ++i) {
    EtcdTxn txn;
    txn.compares.push_back({key, 0});
    txn.puts.push_back({key, Dump(DecisionJson(mine))});
    txn.reads.push_back(key);
    if (outcome == Outcome::kCommitted) {
      // Raise the live version with the decision, conditioned on the live version read.
      WP_ASSIGN_OR_RETURN(auto live, client_->Get(live_key));
      uint64_t live_version = 0;
      if (live) {
        WP_ASSIGN_OR_RETURN(live_version, U64Of(*client_, *live, "version"));
      }
      if (!live || version > live_version) {
        txn.compares.push_back({live_key, live ? live->mod_revision : 0});
        txn.puts.push_back({live_key, Dump(Json{{"version", version}})});
      }
    }
    WP_ASSIGN_OR_RETURN(EtcdTxnResult result, client_->Txn(txn));
    if (result.succeeded) return mine;
    if (result.reads[0]) return ParseDecision(*client_, *result.reads[0], version);
    // The decision is still open but the live version moved meanwhile: read it again.
  }
  return Unavailable("etcd " + client_->endpoint() + ": '" + key + "': not recorded after " +
                     std::to_string(kMaxTries) + " tries: the live version kept changing");
}

Result<std::optional<DecisionRecord>> FleetRecord::Decision(uint64_t version) {
  WP_ASSIGN_OR_RETURN(auto kv, client_->Get(session_keys::Decision(session_, version)));
  if (!kv) return std::optional<DecisionRecord>();
  WP_ASSIGN_OR_RETURN(DecisionRecord d, ParseDecision(*client_, *kv, version));
  return std::optional<DecisionRecord>(std::move(d));
}

Result<std::optional<uint64_t>> FleetRecord::LiveVersion() {
  WP_ASSIGN_OR_RETURN(auto kv, client_->Get(session_keys::Live(session_)));
  if (!kv) return std::optional<uint64_t>();
  WP_ASSIGN_OR_RETURN(uint64_t v, U64Of(*client_, *kv, "version"));
  return std::optional<uint64_t>(v);
}

Status FleetRecord::SetMembers(uint64_t epoch, const std::vector<std::string>& ranks) {
  const std::string key = session_keys::Members(session_);
  const std::string what = "session '" + session_ + "': members of epoch " + std::to_string(epoch);
  std::set<std::string_view> seen;
  for (const auto& r : ranks) {
    if (r.empty()) return InvalidArgument(what + ": an empty rank name");
    if (!seen.insert(r).second) return InvalidArgument(what + ": rank '" + r + "' is listed twice");
  }
  const Membership mine{epoch, ranks};
  for (int i = 0; i < kMaxTries; ++i) {
    WP_ASSIGN_OR_RETURN(auto kv, client_->Get(key));
    if (kv) {
      WP_ASSIGN_OR_RETURN(Membership recorded, ParseMembership(*client_, *kv));
      if (recorded == mine) return Status::Ok();
      if (recorded.epoch > epoch)
        return FailedPrecondition(what + ": epoch " + std::to_string(recorded.epoch) +
                                  " is recorded already");
      if (recorded.epoch == epoch) return FailedPrecondition(what + ": recorded already, with other ranks");
    }
    Json j = {{"epoch", epoch}, {"ranks", ranks}};
    WP_ASSIGN_OR_RETURN(bool written, client_->PutIf(key, Dump(j), kv ? kv->mod_revision : 0));
    if (written) return Status::Ok();
  }
  return Unavailable(what + ": not recorded after " + std::to_string(kMaxTries) + " tries: '" + key +
                     "' kept changing");
}

Result<std::optional<Membership>> FleetRecord::Members() {
  WP_ASSIGN_OR_RETURN(auto kv, client_->Get(session_keys::Members(session_)));
  if (!kv) return std::optional<Membership>();
  WP_ASSIGN_OR_RETURN(Membership m, ParseMembership(*client_, *kv));
  return std::optional<Membership>(std::move(m));
}

Result<uint64_t> FleetRecord::BumpKeyEpoch() {
  const std::string key = session_keys::KeyEpoch(session_);
  for (int i = 0; i < kMaxTries; ++i) {
    WP_ASSIGN_OR_RETURN(auto kv, client_->Get(key));
    uint64_t epoch = 0;
    if (kv) {
      WP_ASSIGN_OR_RETURN(epoch, U64Of(*client_, *kv, "epoch"));
    }
    if (epoch == std::numeric_limits<uint64_t>::max())
      return OutOfRange("etcd " + client_->endpoint() + ": '" + key + "': the key epoch is at its maximum");
    WP_ASSIGN_OR_RETURN(bool written,
                        client_->PutIf(key, Dump(Json{{"epoch", epoch + 1}}), kv ? kv->mod_revision : 0));
    if (written) return epoch + 1;
  }
  return Unavailable("etcd " + client_->endpoint() + ": '" + key + "': not raised after " +
                     std::to_string(kMaxTries) + " tries: other writers kept changing it");
}

Result<uint64_t> FleetRecord::KeyEpoch() {
  WP_ASSIGN_OR_RETURN(auto kv, client_->Get(session_keys::KeyEpoch(session_)));
  if (!kv) return uint64_t{0};
  return U64Of(*client_, *kv, "epoch");
}

}  // namespace weightport
