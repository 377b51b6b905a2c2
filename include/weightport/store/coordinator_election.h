// Leader election of a plan session's coordinator, in etcd.
//
// A candidate grants itself a lease and writes its address to /weightport/<session>/coordinator on
// that lease, in a transaction that writes only when the key is absent: there is at most one
// leader. A thread of the election renews the lease every ttl/3 (at least 100 ms, at most 10 s
// apart). When a renewal fails (etcd unreachable or silent) or finds the lease expired, the leader
// stops leading at once and on_lost is called: it can no longer know that its key is still there.
// is_leader() is also false once the lease's TTL has passed since the last renewal was sent, even
// while the thread is still waiting on a call, so a leader never believes it leads when its key may
// be gone. Keep the client's request timeout under ttl/3 so that one slow call does not cost the
// lease, and give the election a client of its own: the client runs one call at a time, so other
// calls on it delay the renewals.
//
// Destroying an election stops its renewals but does not revoke its lease: like a crashed process,
// it leaves its key to expire within the TTL. Resign() hands over at once.
//
// Thread-safety: every method may be called from any thread. on_lost runs on the renewal thread,
// without the election's lock held; it must not call Resign or destroy the election.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "weightport/core/status.h"
#include "weightport/core/thread_annotations.h"
#include "weightport/store/etcd_client.h"

namespace weightport {

struct ElectionOptions {
  // How often WaitForLeadership tries again while another candidate leads.
  std::chrono::milliseconds poll_interval{250};
  // Called once each time this candidate stops leading other than by Resign, with the reason.
  std::function<void(const Status&)> on_lost;
  // Called after every call to the store while campaigning, waiting or renewing the lease: OK when
  // it answered (whatever it answered), its error otherwise. For reporting the store's health
  // (engine/session/store_health.h); called with no lock held, from the caller's thread or the
  // renewer's.
  std::function<void(const Status&)> on_store_call;
};

class CoordinatorElection {
 public:
  // Grants a lease of `ttl` (at least 1 s) and tries once to become the session's leader. Returns
  // the election whether it won or not (is_leader()); a candidate that did not win may call
  // WaitForLeadership. Errors: InvalidArgument for a bad session name (session_keys.h), an empty
  // address or TTL; etcd's errors. `client` must outlive the election.
  static Result<std::unique_ptr<CoordinatorElection>> Campaign(EtcdClient& client, std::string_view session,
                                                               std::string_view my_address,
                                                               std::chrono::seconds ttl,
                                                               ElectionOptions options = {});
  // The session's leader's address; NotFound when there is none.
  static Result<std::string> Leader(EtcdClient& client, std::string_view session);

  ~CoordinatorElection();  // stops renewing; does not revoke (see above)
  CoordinatorElection(const CoordinatorElection&) = delete;
  CoordinatorElection& operator=(const CoordinatorElection&) = delete;

  const std::string& session() const { return session_; }
  const std::string& address() const { return address_; }
  bool is_leader() const EXCLUDES(mu_);
  // The lease this candidate holds (0: none, after it expired or Resign).
  int64_t lease() const EXCLUDES(mu_);

  // Tries every poll_interval until this candidate leads, within `timeout`: when the leader's key
  // is gone (resigned, or its lease expired) one waiting candidate wins. OK at once when leading.
  // A lease that expired meanwhile is replaced by a fresh one. Timeout names the current leader;
  // FailedPrecondition after Resign.
  Status WaitForLeadership(std::chrono::milliseconds timeout) EXCLUDES(mu_);

  // Stops renewing and revokes the lease, which deletes the key if this candidate led: another
  // candidate can win at once. Idempotent; this candidate cannot lead again.
  Status Resign() EXCLUDES(mu_);

 private:
  using Clock = std::chrono::steady_clock;

  CoordinatorElection(EtcdClient& client, std::string session, std::string address, std::chrono::seconds ttl,
                      ElectionOptions options);
  // A lease, granted if there is none.
  Result<int64_t> EnsureLease() EXCLUDES(mu_);
  // One transaction: writes the key on the lease when it is absent. True when this candidate won;
  // `holder` is then this address, else the current leader's ("" when none).
  Result<bool> TryOnce(std::string& holder) EXCLUDES(mu_);
  void RenewLoop() EXCLUDES(mu_);
  void StopRenewing() EXCLUDES(mu_);

  EtcdClient& client_;
  const std::string session_;
  const std::string address_;
  const std::string key_;
  const std::chrono::seconds ttl_;
  const ElectionOptions options_;

  mutable Mutex mu_;
  std::condition_variable cv_;  // wakes the renewal thread to stop
  int64_t lease_ GUARDED_BY(mu_) = 0;
  bool leader_ GUARDED_BY(mu_) = false;
  Clock::time_point lease_deadline_ GUARDED_BY(mu_);  // the lease may be gone from here on
  bool stopping_ GUARDED_BY(mu_) = false;
  bool resigned_ GUARDED_BY(mu_) = false;
  std::thread renewer_;
};

}  // namespace weightport
