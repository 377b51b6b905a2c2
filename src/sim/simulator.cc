// The event loop of the flow-level simulator (the model is described in simulator.h).
#include "weightport/sim/simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <queue>

#include "sim/flows.h"
#include "sim/max_min.h"

namespace weightport::sim {
namespace {

enum class State : uint8_t { kWaiting, kRunning, kCapped, kDone };
enum class EventKind : uint8_t { kMotion, kOpen };

struct Event {
  double t;
  int flow;
  uint32_t version;
  EventKind kind;
  int dep;
  // Ties broken by kind, flow and dependency, so the order never depends on the heap's.
  bool operator>(const Event& o) const {
    if (t != o.t) return t > o.t;
    if (kind != o.kind) return kind > o.kind;
    if (flow != o.flow) return flow > o.flow;
    return dep > o.dep;
  }
};

class Engine {
 public:
  Engine(FlowSet set, const SimOptions& options, double quantum)
      : set_(std::move(set)),
        flows_(set_.flows),
        solver_(set_.capacity),
        quantum_(quantum),
        points_(options.timeline_points) {
    const size_t n = flows_.size();
    x0_.assign(n, 0), t0_.assign(n, 0), rate_.assign(n, 0), done_s_.assign(n, 0);
    state_.assign(n, State::kWaiting);
    motion_version_.assign(n, 0), open_version_.assign(n, 0);
    residual_ = set_.capacity;
    flows_on_.assign(set_.capacity.size(), 0);
  }

  // Error when flows are left that can never finish (a plan the model cannot run).
  Status Run(double lower_bound, SimResult& out);

 private:
  double Tol(int f) const { return 1e-9 * flows_[f].bytes + 1e-3; }
  double X(int f, double t) const {
    if (state_[f] == State::kDone) return flows_[f].bytes;
    return std::min(flows_[f].bytes, x0_[f] + rate_[f] * (t - t0_[f]));
  }
  void Rebase(int f, double t) { x0_[f] = X(f, t), t0_[f] = t; }
  double DepAvail(const Dependency& d, double t) const {
    if (!d.open) return 0;
    if (state_[d.leader] == State::kDone) return d.bytes;
    const double v = X(d.leader, t) / flows_[d.leader].bytes * d.bytes - d.lag_bytes;
    return std::clamp(v, 0.0, d.bytes);
  }
  double Avail(int f, double t) const {
    double a = flows_[f].own_bytes;
    for (const Dependency& d : flows_[f].deps) a += DepAvail(d, t);
    return a;
  }
  // How fast the available bytes grow under `rates`.
  double AvailRate(int f, const std::vector<double>& rates) const {
    double r = 0;
    for (const Dependency& d : flows_[f].deps)
      if (d.open && state_[d.leader] != State::kDone) r += rates[d.leader] * d.bytes / flows_[d.leader].bytes;
    return r;
  }
  double PathResidual(int f) const {
    double m = MaxMinSolver::kNoCap;
    for (int l : set_.paths[f]) m = std::min(m, residual_[l]);
    return std::max(0.0, m);
  }
  // Between solves. A re-solve is due only when freed capacity could go to another flow on the
  // same links, or a flow started with less than an equal share of its tightest link; otherwise
  // the allocation is still max-min fair (a relay chain's hops share nothing).
  // `limited_by_path`: r is what the path had left (not a cap), so it should be a fair share.
  void SetRate(int f, double r, bool limited_by_path = false) {
    const double old = rate_[f];
    if (std::abs(r - old) <= 1e-12 * std::max(r, old)) return;  // rounding, not a change
    const int delta = (r > 0) - (old > 0);
    double share = MaxMinSolver::kNoCap;
    bool shared = false;
    for (int l : set_.paths[f]) {
      residual_[l] += old - r;
      flows_on_[l] += delta;
      shared |= flows_on_[l] > (r > 0);
      share = std::min(share, set_.capacity[l] / std::max(1, flows_on_[l]));
    }
    if ((r < old && shared) || (limited_by_path && r < share * (1 - 1e-9))) dirty_ = true;
    rate_[f] = r;
    for (auto [g, k] : flows_[f].followers) Enqueue(g);
  }
  void Enqueue(int f) {
    if (state_[f] != State::kDone && !queued_[f]) queued_[f] = 1, work_.push_back(f);
  }
  void ScheduleMotion(int f, double t);
  void ScheduleOpens(int f, double t);
  void Touch(int f, double t);
  void Complete(int f, double t);
  // In the order flows were queued (leaders before the followers they wake).
  void DrainWork(double t) {
    for (size_t i = 0; i < work_.size(); ++i) {
      const int f = work_[i];
      queued_[f] = 0;
      Touch(f, t);
    }
    work_.clear();
  }
  void Solve(double t);
  // Holds every caught-up flow to what its leaders feed it under `rate` (leaders first); sets cap
  // for those it lowers. True when it lowered any.
  bool ClampToFeed(const std::vector<char>& caught, std::vector<double>& rate, std::vector<double>& cap);
  void Sample(double t, SimResult& out);

  FlowSet set_;
  std::vector<Flow>& flows_;
  MaxMinSolver solver_;
  double quantum_;
  int points_;
  std::vector<double> x0_, t0_, rate_, done_s_, residual_;
  std::vector<int> flows_on_;                           // per link: flows with a rate > 0
  std::vector<std::vector<MaxMinSolver::Lead>> leads_;  // per flow, for the solver
  std::vector<State> state_;
  std::vector<uint32_t> motion_version_, open_version_;
  std::vector<int> work_;
  std::vector<char> queued_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  bool dirty_ = false;
  size_t solves_ = 0, events_handled_ = 0;
  // Timeline.
  double sample_dt_ = 0, next_sample_ = 0, done_bytes_ = 0;
  std::vector<double> dst_done_times_;
  std::vector<int> flows_into_;  // per destination rank: flows not done
};

void Engine::ScheduleMotion(int f, double t) {
  ++motion_version_[f];
  if (state_[f] == State::kDone || state_[f] == State::kWaiting || rate_[f] <= 0) return;
  const double x = X(f, t);
  double dt = (flows_[f].bytes - x) / rate_[f];
  if (state_[f] == State::kRunning) {
    const double a = Avail(f, t), grow = AvailRate(f, rate_);
    if (a < flows_[f].bytes - Tol(f) && rate_[f] > grow)
      dt = std::min(dt, std::max(0.0, a - x) / (rate_[f] - grow));
  }
  events_.push({t + dt, f, motion_version_[f], EventKind::kMotion, -1});
}

// A dependency opens one path latency after its leader crossed the lag. The crossing time is kept,
// so rescheduling (every solve, every change of a leader's rate) never pushes an opening back.
void Engine::ScheduleOpens(int f, double t) {
  ++open_version_[f];
  std::vector<Dependency>& deps = flows_[f].deps;
  for (size_t k = 0; k < deps.size(); ++k) {
    Dependency& d = deps[k];
    if (d.open) continue;
    const int l = d.leader;
    double at;
    if (state_[l] == State::kDone) {
      at = done_s_[l];
    } else {
      const double need = d.lag_bytes / d.bytes * flows_[l].bytes;
      if (x0_[l] < need && rate_[l] > 0) {
        d.cross_s = t0_[l] + (need - x0_[l]) / rate_[l];  // exact under the current rate
      } else if (x0_[l] < need) {
        continue;  // the leader is not moving: no crossing yet
      } else if (d.cross_s < 0) {
        d.cross_s = t;  // crossed before anyone asked: no earlier than now is known
      }
      at = d.cross_s + flows_[l].latency_s;
    }
    events_.push({std::max(at, t), f, open_version_[f], EventKind::kOpen, static_cast<int>(k)});
  }
}

// Re-derives a flow's state after its inputs changed; between solves it takes only what its path
// has left.
void Engine::Touch(int f, double t) {
  if (state_[f] == State::kDone) return;
  Rebase(f, t);
  if (x0_[f] >= flows_[f].bytes - Tol(f)) return Complete(f, t);
  const double x = x0_[f], a = Avail(f, t);
  double r = rate_[f];
  bool limited_by_path = false;
  if (a > x + Tol(f)) {
    // It has bytes to send: it may take whatever its path has left (a relay that fell behind its
    // leaders must not stay at the rate it had while it was caught up).
    state_[f] = State::kRunning;
    const double room = PathResidual(f);
    if (room > 0 || r <= 0) r += room, limited_by_path = true;
  } else {
    const double grow = AvailRate(f, rate_);
    state_[f] = grow > 0 ? State::kCapped : State::kWaiting;
    const double room = r + PathResidual(f);
    limited_by_path = grow > room;
    r = std::min(grow, room);
  }
  SetRate(f, r, limited_by_path);
  if (r <= 0 && state_[f] != State::kWaiting) dirty_ = true;  // wants to send, got nothing yet
  ScheduleMotion(f, t);
  ScheduleOpens(f, t);
}

void Engine::Complete(int f, double t) {
  Rebase(f, t);
  SetRate(f, 0);
  state_[f] = State::kDone;
  done_s_[f] = t + flows_[f].latency_s;
  done_bytes_ += flows_[f].payload;
  ++motion_version_[f];
  if (--flows_into_[flows_[f].dst_rank] == 0) dst_done_times_.push_back(done_s_[f]);
  for (auto [g, k] : flows_[f].followers) Enqueue(g);
}

void Engine::Solve(double t) {
  const size_t n = flows_.size();
  // Flows within rounding of their end are done, and their followers see it first.
  for (size_t i = 0; i < n; ++i)
    if (state_[i] != State::kDone && X(static_cast<int>(i), t) >= flows_[i].bytes - Tol(static_cast<int>(i)))
      Complete(static_cast<int>(i), t);
  DrainWork(t);
  std::vector<int> active;
  std::vector<char> caught(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const int f = static_cast<int>(i);
    if (state_[f] == State::kDone) continue;
    Rebase(f, t);
    caught[f] = Avail(f, t) <= x0_[f] + Tol(f);
  }
  // A caught-up relay runs no faster than its leaders feed it; leaders that are not sending feed
  // nothing, so a caught-up flow with no sending leader waits. Leaders are decided first.
  std::vector<char> sending(n, 0);
  for (int f : set_.order) {
    if (state_[f] == State::kDone) continue;
    bool fed = !caught[f];
    for (const Dependency& d : flows_[f].deps)
      fed |= caught[f] && d.open && state_[d.leader] != State::kDone && sending[d.leader];
    sending[f] = fed;
  }
  leads_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const int f = static_cast<int>(i);
    leads_[f].clear();
    if (state_[f] == State::kDone || !sending[f]) continue;
    active.push_back(f);
    if (!caught[f]) continue;
    for (const Dependency& d : flows_[f].deps)
      if (d.open && state_[d.leader] != State::kDone && sending[d.leader])
        leads_[f].push_back({d.leader, d.bytes / flows_[d.leader].bytes});
  }
  std::vector<double> cap(n, MaxMinSolver::kNoCap), rate(n, 0);
  solver_.Solve(active, set_.paths, cap, rate, leads_);
  // The solver's coupling is exact when a follower's leaders freeze no later than it does; when a
  // link froze a follower first and its leaders' feed came out lower, hold it to the feed (leaders
  // first) and solve again with those caps, so that what it cannot use goes to others.
  if (ClampToFeed(caught, rate, cap)) {
    solver_.Solve(active, set_.paths, cap, rate, leads_);
    ClampToFeed(caught, rate, cap);
  }
  residual_ = set_.capacity;
  std::fill(flows_on_.begin(), flows_on_.end(), 0);
  for (size_t i = 0; i < n; ++i) {
    const int f = static_cast<int>(i);
    if (state_[f] == State::kDone) continue;
    rate_[f] = rate[f];
    state_[f] = !caught[f] ? State::kRunning : rate[f] > 0 ? State::kCapped : State::kWaiting;
    for (int l : set_.paths[f]) residual_[l] -= rate[f], flows_on_[l] += rate[f] > 0;
  }
  for (size_t i = 0; i < n; ++i)
    if (state_[i] != State::kDone)
      ScheduleMotion(static_cast<int>(i), t), ScheduleOpens(static_cast<int>(i), t);
  dirty_ = false;
  ++solves_;
}

bool Engine::ClampToFeed(const std::vector<char>& caught, std::vector<double>& rate,
                         std::vector<double>& cap) {
  bool clamped = false;
  for (int f : set_.order) {
    if (!caught[f] || state_[f] == State::kDone) continue;
    const double feed = AvailRate(f, rate);
    if (rate[f] > feed * (1 + 1e-12)) rate[f] = cap[f] = feed, clamped = true;
  }
  return clamped;
}

void Engine::Sample(double t, SimResult& out) {
  while (next_sample_ <= t) {
    TimelineSample s;
    s.t_s = next_sample_;
    s.delivered_bytes = done_bytes_;
    for (size_t f = 0; f < flows_.size(); ++f) {
      if (state_[f] == State::kDone) continue;
      s.delivered_bytes += X(static_cast<int>(f), next_sample_) * flows_[f].payload / flows_[f].bytes;
      s.running_flows += rate_[f] > 0;
    }
    s.destinations_done = static_cast<int>(std::count_if(dst_done_times_.begin(), dst_done_times_.end(),
                                                         [&](double d) { return d <= next_sample_; }));
    out.timeline.push_back(s);
    next_sample_ += sample_dt_;
    if (static_cast<int>(out.timeline.size()) >= 2 * points_) {
      // Halve the resolution: keep every other sample.
      std::vector<TimelineSample> kept;
      for (size_t i = 0; i < out.timeline.size(); i += 2) kept.push_back(out.timeline[i]);
      if (out.timeline.size() % 2 == 0) kept.push_back(out.timeline.back());
      out.timeline = std::move(kept);
      sample_dt_ *= 2;
      next_sample_ = out.timeline.back().t_s + sample_dt_;
    }
  }
}

Status Engine::Run(double lower_bound, SimResult& out) {
  const size_t n = flows_.size();
  queued_.assign(n, 0);
  sample_dt_ = std::max(lower_bound, 1e-9) * 1.25 / std::max(1, points_);
  // Destinations: done when the last flow into them is.
  const int max_rank = set_.dst_ranks - 1;
  flows_into_.assign(max_rank + 1, 0);
  for (const Flow& f : flows_) ++flows_into_[f.dst_rank];
  for (size_t f = 0; f < n; ++f) state_[f] = flows_[f].own_bytes > 0 ? State::kRunning : State::kWaiting;
  for (size_t f = 0; f < n; ++f)
    if (flows_[f].bytes <= 0) Complete(static_cast<int>(f), 0);
  Solve(0);
  double now = 0, last_solve = 0;
  auto stale = [&](const Event& e) {
    return state_[e.flow] == State::kDone ||
           e.version != (e.kind == EventKind::kMotion ? motion_version_[e.flow] : open_version_[e.flow]);
  };
  while (true) {
    while (!events_.empty() && stale(events_.top())) events_.pop();
    if (dirty_ && quantum_ == 0 && (events_.empty() || events_.top().t > now)) {
      Solve(now), last_solve = now;
      continue;
    }
    if (events_.empty()) {
      if (dirty_) {
        Solve(now), last_solve = now;
        continue;
      }
      break;
    }
    const Event e = events_.top();
    if (dirty_ && quantum_ > 0 && last_solve + quantum_ <= e.t) {
      now = std::max(now, last_solve + quantum_);
      Sample(now, out);
      Solve(now), last_solve = now;
      continue;
    }
    events_.pop();
    now = std::max(now, e.t);
    Sample(now, out);
    ++events_handled_;
    const int f = e.flow;
    if (e.kind == EventKind::kOpen) {
      flows_[f].deps[e.dep].open = true;
      Touch(f, now);
    } else if (X(f, now) >= flows_[f].bytes - Tol(f)) {
      Complete(f, now);
    } else {
      Touch(f, now);
    }
    DrainWork(now);
  }
  for (size_t f = 0; f < n; ++f)
    if (state_[f] != State::kDone)
      return Internal("simulation stalled at t = " + std::to_string(now) + " s: flow " + std::to_string(f) +
                      " to dst rank " + std::to_string(flows_[f].dst_rank) + " has " +
                      std::to_string(flows_[f].bytes - X(static_cast<int>(f), now)) +
                      " bytes left and no way to send them");
  // Results.
  out.destinations.assign(max_rank + 1, {});
  for (int r = 0; r <= max_rank; ++r) out.destinations[r].rank = r, out.destinations[r].node = -1;
  for (size_t f = 0; f < n; ++f) {
    DestinationTime& d = out.destinations[flows_[f].dst_rank];
    d.node = flows_[f].to_node;
    d.bytes += static_cast<uint64_t>(flows_[f].payload);
    d.done_s = std::max(d.done_s, done_s_[f]);
    out.makespan_s = std::max(out.makespan_s, done_s_[f]);
  }
  next_sample_ = std::min(next_sample_, out.makespan_s);
  Sample(out.makespan_s, out);
  // The last sample is the end: everything delivered (sampling may have halved its way past it).
  if (out.timeline.empty() || out.timeline.back().t_s < out.makespan_s) {
    TimelineSample end;
    end.t_s = out.makespan_s;
    for (const Flow& f : flows_) end.delivered_bytes += f.payload;
    end.destinations_done = static_cast<int>(dst_done_times_.size());
    out.timeline.push_back(end);
  }
  out.stats.flows = n;
  out.stats.split_pairs = set_.split_pairs;
  for (const Flow& f : flows_) out.stats.messages += static_cast<uint64_t>(f.messages);
  out.stats.events = events_handled_;
  out.stats.solves = solves_;
  return Status::Ok();
}

}  // namespace

Result<SimResult> Simulate(const Plan& plan, const topology::Graph& graph, const EndpointMap& endpoints,
                           const SimOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  WP_ASSIGN_OR_RETURN(FlowSet set, BuildFlows(plan, graph, endpoints, options));
  SimResult out;
  // Bytes per link, and the bound they set.
  std::vector<double> link_bytes(set.capacity.size(), 0);
  for (size_t f = 0; f < set.flows.size(); ++f)
    for (int l : set.paths[f]) link_bytes[l] += set.flows[f].payload;
  for (size_t l = 0; l < link_bytes.size(); ++l) {
    if (link_bytes[l] <= 0) continue;
    LinkUse use;
    use.link = static_cast<int>(l);
    use.bytes = static_cast<uint64_t>(link_bytes[l]);
    use.busy_s = link_bytes[l] / set.capacity[l];
    out.links.push_back(use);
    if (use.busy_s > out.lower_bound_s) out.lower_bound_s = use.busy_s, out.bottleneck_link = use.link;
  }
  const double quantum = options.quantum_s < 0 ? out.lower_bound_s / 2000 : options.quantum_s;
  out.stats.steps = plan.steps.size();
  out.stats.quantum_s = quantum;
  Engine engine(std::move(set), options, quantum);
  WP_RETURN_IF_ERROR(engine.Run(out.lower_bound_s, out));
  for (LinkUse& use : out.links) use.utilisation = out.makespan_s > 0 ? use.busy_s / out.makespan_s : 0;
  std::sort(out.links.begin(), out.links.end(), [](const LinkUse& a, const LinkUse& b) {
    return a.busy_s != b.busy_s ? a.busy_s > b.busy_s : a.link < b.link;
  });
  out.stats.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace weightport::sim
