#include "weightport/store/coordinator_election.h"

#include <algorithm>

#include "weightport/store/session_keys.h"

namespace weightport {
namespace {

using std::chrono::milliseconds;

// Renew three times per TTL, so that two renewals in a row may fail before the lease runs out.
milliseconds RenewInterval(std::chrono::seconds ttl) {
  return std::clamp<milliseconds>(std::chrono::duration_cast<milliseconds>(ttl) / 3, milliseconds(100),
                                  milliseconds(10'000));
}

}  // namespace

Result<std::unique_ptr<CoordinatorElection>> CoordinatorElection::Campaign(EtcdClient& client,
                                                                           std::string_view session,
                                                                           std::string_view my_address,
                                                                           std::chrono::seconds ttl,
                                                                           ElectionOptions options) {
  WP_RETURN_IF_ERROR(session_keys::CheckSessionName(session));
  const std::string what = "session '" + std::string(session) + "': campaign";
  if (my_address.empty()) return InvalidArgument(what + ": the candidate's address is empty");
  if (ttl < std::chrono::seconds(1)) return InvalidArgument(what + ": the TTL must be at least 1 s");
  if (options.poll_interval <= milliseconds(0))
    return InvalidArgument(what + ": poll_interval must be positive");
  std::unique_ptr<CoordinatorElection> election(new CoordinatorElection(
      client, std::string(session), std::string(my_address), ttl, std::move(options)));
  std::string holder;
  auto won = election->TryOnce(holder);
  if (election->options_.on_store_call) election->options_.on_store_call(won.status());
  if (!won.ok()) return won.status();
  return election;
}

Result<std::string> CoordinatorElection::Leader(EtcdClient& client, std::string_view session) {
  WP_RETURN_IF_ERROR(session_keys::CheckSessionName(session));
  WP_ASSIGN_OR_RETURN(auto kv, client.Get(session_keys::Coordinator(session)));
  if (!kv) return NotFound("session '" + std::string(session) + "' has no coordinator");
  return std::move(kv->value);
}

CoordinatorElection::CoordinatorElection(EtcdClient& client, std::string session, std::string address,
                                         std::chrono::seconds ttl, ElectionOptions options)
    : client_(client),
      session_(std::move(session)),
      address_(std::move(address)),
      key_(session_keys::Coordinator(session_)),
      ttl_(ttl),
      options_(std::move(options)) {
  renewer_ = std::thread([this] { RenewLoop(); });
}

CoordinatorElection::~CoordinatorElection() { StopRenewing(); }

bool CoordinatorElection::is_leader() const {
  MutexLock lock(mu_);
  return leader_ && Clock::now() < lease_deadline_;
}

int64_t CoordinatorElection::lease() const {
  MutexLock lock(mu_);
  return lease_;
}

Result<int64_t> CoordinatorElection::EnsureLease() {
  {
    MutexLock lock(mu_);
    if (resigned_) return FailedPrecondition("session '" + session_ + "': " + address_ + " has resigned");
    if (lease_ != 0) return lease_;
  }
  const auto sent = Clock::now();
  WP_ASSIGN_OR_RETURN(int64_t lease, client_.GrantLease(ttl_.count()));
  MutexLock lock(mu_);
  if (resigned_ || lease_ != 0) {  // Resign, or another caller's grant, came first
    lock.Unlock();
    client_.Revoke(lease).IgnoreError();
    lock.Lock();
    if (resigned_) return FailedPrecondition("session '" + session_ + "': " + address_ + " has resigned");
    return lease_;
  }
  lease_ = lease;
  lease_deadline_ = sent + ttl_;  // etcd may grant more than asked for, never less
  return lease;
}

Result<bool> CoordinatorElection::TryOnce(std::string& holder) {
  WP_ASSIGN_OR_RETURN(int64_t lease, EnsureLease());
  EtcdTxn txn;
  txn.compares.push_back({key_, 0});
  txn.puts.push_back({key_, address_, lease});
  txn.reads.push_back(key_);
  auto result = client_.Txn(txn);
  if (!result.ok()) {
    if (result.status().code() == StatusCode::kNotFound) {  // the lease expired: take a fresh one next time
      MutexLock lock(mu_);
      if (lease_ == lease) lease_ = 0;
    }
    return result.status().WithContext("session '" + session_ + "': " + address_ + " campaigning");
  }
  if (!result->succeeded) {
    holder = result->reads[0] ? result->reads[0]->value : "";
    return false;
  }
  MutexLock lock(mu_);
  if (lease_ != lease) return false;  // lost the lease while the write was on its way: the key goes with it
  leader_ = true;
  holder = address_;
  return true;
}

Status CoordinatorElection::WaitForLeadership(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  const int64_t max_tries = timeout / options_.poll_interval + 2;
  std::string holder;
  Status last;
  for (int64_t i = 0; i < max_tries; ++i) {
    if (is_leader()) return Status::Ok();
    auto won = TryOnce(holder);
    if (options_.on_store_call) options_.on_store_call(won.status());
    if (won.ok() && *won) return Status::Ok();
    if (!won.ok()) {
      if (won.status().code() == StatusCode::kFailedPrecondition) return won.status();
      last = won.status();  // etcd unreachable or the lease gone: try again until the deadline
    }
    const auto now = Clock::now();
    if (now >= deadline) break;
    MutexLock lock(mu_);
    cv_.wait_for(lock.native(), std::min<Clock::duration>(options_.poll_interval, deadline - now),
                 [&]() REQUIRES(mu_) { return resigned_; });
  }
  std::string msg = "session '" + session_ + "': " + address_ + " not leader within " +
                    std::to_string(timeout.count()) + " ms";
  if (!holder.empty()) msg += "; the leader is " + holder;
  if (!last.ok()) msg += "; last error: " + last.ToString();
  return Timeout(msg);
}

Status CoordinatorElection::Resign() {
  int64_t lease = 0;
  {
    MutexLock lock(mu_);
    resigned_ = true;
    leader_ = false;
    lease = lease_;
    lease_ = 0;
  }
  StopRenewing();
  if (lease == 0) return Status::Ok();
  Status revoked = client_.Revoke(lease);
  if (revoked.code() == StatusCode::kNotFound) return Status::Ok();  // already expired: the key is gone too
  return revoked.WithContext("session '" + session_ + "': " + address_ + " resigning");
}

void CoordinatorElection::StopRenewing() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (renewer_.joinable() && renewer_.get_id() != std::this_thread::get_id()) renewer_.join();
}

void CoordinatorElection::RenewLoop() {
  const milliseconds interval = RenewInterval(ttl_);
  MutexLock lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock.native(), interval, [&]() REQUIRES(mu_) { return stopping_; });
    if (stopping_ || lease_ == 0) continue;
    const int64_t lease = lease_;
    const auto sent = Clock::now();
    lock.Unlock();
    auto ttl = client_.KeepAliveOnce(lease);
    if (options_.on_store_call)
      options_.on_store_call(ttl.status().code() == StatusCode::kNotFound ? Status::Ok() : ttl.status());
    lock.Lock();
    if (lease != lease_) continue;  // resigned, or replaced, meanwhile
    if (ttl.ok()) {
      lease_deadline_ = sent + std::chrono::seconds(*ttl);
      continue;
    }
    // Expired, or unknown: either way this candidate can no longer count on its key.
    const bool was_leader = leader_;
    leader_ = false;
    lease_ = 0;
    if (was_leader && options_.on_lost) {
      Status why = ttl.status().WithContext("session '" + session_ + "': " + address_ + " lost leadership");
      lock.Unlock();
      options_.on_lost(why);
      lock.Lock();
    }
  }
}

}  // namespace weightport
