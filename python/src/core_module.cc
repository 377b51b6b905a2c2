// weightport._core: the C++ engine's plan sessions for Python (the package's public API is in
// python/weightport/*.py, written on top of this).
//
// Every call that waits (joining, publishing, waiting for a version, closing) releases the GIL. A
// Status error becomes an instance of the weightport exception of its code (weightport.errors),
// raised with the same message. Shard memory is handed out as NumPy uint8 arrays that share it
// (zero-copy) and keep their owner (the publisher, or the subscriber's pin) alive.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <map>

#include <nlohmann/json.hpp>

#include "bind_util.h"
#include "weightport/core/dtype.h"
#include "weightport/core/option_bounds.h"
#include "weightport/engine/session/plan_member.h"
#include "weightport/engine/session/plan_publisher.h"
#include "weightport/engine/session/plan_service.h"
#include "weightport/engine/session/plan_subscriber.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace weightport::python {
namespace {

using std::chrono::milliseconds;

LayoutOffer MakeOffer(bool source, int rank, int side_ranks, const std::string& host,
                      const std::string& placement_json) {
  LayoutOffer o;
  o.endpoint = {source ? PlanSide::kSource : PlanSide::kDestination, rank};
  o.side_ranks = side_ranks;
  o.host = host;
  auto j = nlohmann::json::parse(placement_json, nullptr, false);
  if (j.is_discarded()) throw StatusError{StatusCode::kInvalidArgument, "the layout is not valid JSON"};
  o.placement = Take(Placement::FromJson(j));
  return o;
}

// (tensor, dtype, global shape, start, length) of a shard.
using ShardInfo =
    std::tuple<std::string, std::string, std::vector<int64_t>, std::vector<int64_t>, std::vector<int64_t>>;
ShardInfo InfoOf(const PlanShardView& v) {
  std::vector<int64_t> start, length;
  if (v.slice.is_box()) {
    start = v.slice.box().start;
    length = v.slice.box().length;
  } else {
    start = {v.slice.flat().start};
    length = {v.slice.flat().length};
  }
  return {v.tensor, std::string(DTypeName(v.dtype)), v.shape, start, length};
}

using ByteArray = nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>;
ByteArray ArrayOver(std::span<const std::byte> bytes, nb::handle owner) {
  size_t shape[1] = {bytes.size()};
  return ByteArray(const_cast<std::byte*>(bytes.data()), 1, shape, owner);
}

struct MemberArgs {
  std::string coordinator;
  int rank = 0;
  int side_ranks = 1;
  std::string host;
  std::string placement_json;
  std::string transport = "auto";
  double timeout_s = 60;
  double pin_timeout_s = 30;
  bool delta = true;
  bool rotate_keys = false;  // PlanRankOptions::rotate_keys: the session's coordinator rotates keys
  size_t keep_versions = 0;  // a subscriber's PlanRankOptions::keep_versions: rollback targets kept
  double max_gbps = 0;       // a subscriber's PlanRankOptions::max_bytes_per_s, in Gbit/s; 0: no cap
  bool background = false;   // a subscriber's PlanRankOptions::background: yields to other traffic
  // A coordinator that can fail: the ranks find it in this store ("etcd://host:port") under
  // `session`, and join the one that takes over when it is lost (PlanMemberOptions::find_coordinator).
  std::string store;
  std::string session = "default";
};

// Offers the layout and joins as a source (Member = PlanPublisher) or a destination (PlanSubscriber);
// the wait for every other rank runs without the GIL.
template <typename Member>
std::unique_ptr<Member> JoinAs(nb::bytes secret, const MemberArgs& a, bool source) {
  PlanMemberOptions o;
  o.coordinator = a.coordinator;
  o.offer = MakeOffer(source, a.rank, a.side_ranks, a.host, a.placement_json);
  o.make_transport = Take(UcxTransportFactory(a.transport));
  o.connect_timeout = o.update_timeout = o.rank.timeout = Millis(a.timeout_s);
  o.pin_timeout = Millis(a.pin_timeout_s);
  o.rank.delta = a.delta;
  o.rank.rotate_keys = a.rotate_keys;
  if (!source) o.rank.keep_versions = a.keep_versions;
  if (!source) o.rank.max_bytes_per_s = a.max_gbps * 1e9 / 8;
  if (!source && a.background) o.rank.background = std::make_shared<BackgroundYield>();
  Secret s = MakeSecret(secret);
  if (!a.store.empty()) o.find_coordinator = CoordinatorFinder(a.store, a.session, s);
  nb::gil_scoped_release release;
  return Take(Member::Join(s, std::move(o)));
}

size_t CheckShard(size_t i, size_t shards) {
  if (i >= shards) throw StatusError{StatusCode::kOutOfRange, "no shard " + std::to_string(i)};
  return i;
}

class PyService {
 public:
  PyService(nb::bytes secret, const std::string& host, int port, uint64_t chunk_bytes, int relay_fanout,
            double timeout_s, size_t quorum, bool rotate_keys, const std::string& store,
            const std::string& session, bool rejoin) {
    PlanServiceOptions o;
    o.rejoin = rejoin;
    o.store = store;
    o.session = session;
    o.quorum = quorum;
    o.rotate_keys = rotate_keys;
    o.listen_host = host;
    o.listen_port = static_cast<uint16_t>(port);
    if (chunk_bytes) o.rendezvous.plan.chunk_bytes = chunk_bytes;
    o.rendezvous.plan.relay_fanout = relay_fanout;
    o.rendezvous.timeout = o.join_timeout = o.update_timeout = Millis(timeout_s);
    Secret s = MakeSecret(secret);
    nb::gil_scoped_release release;
    service_ = Take(PlanService::Start(s, o));
  }
  std::string address() const { return service_->address(); }
  // Outcomes listed so far: a later WaitOutcome(..., from = this) sees only newer ones.
  size_t OutcomeCount() const { return service_->outcomes().size(); }
  nb::dict WaitOutcome(uint64_t version, double timeout_s, bool rollback, size_t from) {
    PlanVersionOutcome o;
    {
      nb::gil_scoped_release release;
      o = Take(service_->WaitForOutcome(version, Millis(timeout_s), rollback, from));
    }
    nb::dict d;
    d["version"] = o.version;
    d["committed"] = o.committed;
    d["reason"] = o.reason;
    d["bytes"] = o.bytes;
    d["seconds"] = o.seconds;
    d["rekey_seconds"] = o.rekey_seconds;
    d["rollback"] = o.rollback;
    nb::list dropped;
    for (const std::string& why : o.dropped) dropped.append(why);
    d["dropped"] = dropped;
    nb::list rejoined;
    for (const std::string& rank : o.rejoined) rejoined.append(rank);
    d["rejoined"] = rejoined;
    return d;
  }
  std::string PlanJson() const {
    auto p = service_->plan();
    return p ? p->ToJson().dump() : "";
  }
  void Stop() {
    nb::gil_scoped_release release;
    service_->Stop();
  }

 private:
  std::unique_ptr<PlanService> service_;
};

class PyPublisher {
 public:
  PyPublisher(nb::bytes secret, const MemberArgs& args) : pub_(JoinAs<PlanPublisher>(secret, args, true)) {}
  size_t num_shards() const { return live().num_shards(); }
  ShardInfo shard_info(size_t i) { return InfoOf(live().shard(CheckShard(i, num_shards()))); }
  ByteArray shard_array(nb::handle self, size_t i) {
    return ArrayOver(live().shard(CheckShard(i, num_shards())).bytes, self);
  }
  void WaitIdle(double timeout_s) {
    nb::gil_scoped_release release;
    ThrowIfError(live().WaitIdle(Millis(timeout_s)));
  }
  void Publish(uint64_t version) {
    nb::gil_scoped_release release;
    ThrowIfError(live().Publish(version));
  }
  void Wait(uint64_t version, double timeout_s) {
    nb::gil_scoped_release release;
    ThrowIfError(live().Wait(version, Millis(timeout_s)));
  }
  void Rollback(uint64_t version, double timeout_s) {
    nb::gil_scoped_release release;
    ThrowIfError(live().Rollback(version, Millis(timeout_s)));
  }
  std::string PlanJson() const { return live().plan().ToJson().dump(); }
  void Close() {
    nb::gil_scoped_release release;
    pub_->Close();
    closed_ = true;
  }

 private:
  // Close leaves the member without its rank: every later call raises instead of reaching it.
  PlanPublisher& live() const {
    if (closed_) throw StatusError{StatusCode::kFailedPrecondition, "this publisher was closed"};
    return *pub_;
  }

  std::unique_ptr<PlanPublisher> pub_;
  std::atomic<bool> closed_{false};
};

class PyPin {
 public:
  explicit PyPin(PlanSubscriber::Pin pin) : pin_(std::move(pin)) {}
  uint64_t version() const { return pin_.version(); }
  ByteArray shard_array(nb::handle self, size_t i) {
    if (pin_.num_shards() == 0) throw StatusError{StatusCode::kFailedPrecondition, "the pin was released"};
    return ArrayOver(pin_.shard(CheckShard(i, pin_.num_shards())), self);
  }
  void Release() { pin_.Release(); }

 private:
  PlanSubscriber::Pin pin_;
};

class PySubscriber {
 public:
  PySubscriber(nb::bytes secret, const MemberArgs& args)
      : sub_(JoinAs<PlanSubscriber>(secret, args, false)) {}
  size_t num_shards() const { return live().num_shards(); }
  ShardInfo shard_info(size_t i) const {
    return InfoOf(live().shard_info(CheckShard(i, live().num_shards())));
  }
  // A shard quantised in flight: (where its f32 scales start in its bytes, its scale grid's lengths:
  // one per 128x128 block, or [1, 1] for one per tensor); None for any other shard.
  std::optional<std::pair<uint64_t, std::vector<int64_t>>> shard_scales(size_t i) const {
    const PlanShardView v = live().shard_info(CheckShard(i, live().num_shards()));
    if (!v.quantized) return std::nullopt;
    return std::make_pair(v.scale_offset, v.scale_blocks.box().length);
  }
  uint64_t live_version() const { return live().live_version(); }
  std::vector<uint64_t> kept_versions() const { return live().kept_versions(); }
  uint64_t kept_bytes() const { return live().kept_bytes(); }
  void WaitForVersion(uint64_t version, double timeout_s) {
    nb::gil_scoped_release release;
    ThrowIfError(live().WaitForVersion(version, Millis(timeout_s)));
  }
  PyPin* Acquire() { return new PyPin(Take(live().Acquire())); }
  bool ended() const { return live().ended(); }
  std::string PlanJson() const { return live().plan().ToJson().dump(); }
  void Close() {
    nb::gil_scoped_release release;
    sub_->Close();
    closed_ = true;
  }

 private:
  PlanSubscriber& live() const {
    if (closed_) throw StatusError{StatusCode::kFailedPrecondition, "this subscriber was closed"};
    return *sub_;
  }

  std::unique_ptr<PlanSubscriber> sub_;
  std::atomic<bool> closed_{false};
};

}  // namespace
}  // namespace weightport::python

NB_MODULE(_core, m) {
  using namespace weightport;
  using namespace weightport::python;
  m.doc() = "weightport's C++ engine (use the weightport package, not this module)";
  // A zero-copy model keeps its version's Pin alive until the interpreter ends: not a leak.
  nb::set_leak_warnings(false);

  // Exception classes are created in Python (weightport/errors.py) and handed over here once.
  m.def(
      "check_option",
      [](const std::string& name, double value) {
        for (const OptionBound& b : kOptionBounds) {
          if (b.name == name) return ThrowIfError(CheckOption(b, value));
        }
        throw StatusError{StatusCode::kInternal, "no bound for option '" + name + "'"};
      },
      "name"_a, "value"_a,
      "Raises InvalidArgument unless `value` is within option `name`'s bound (the CLI's table).");
  m.def(
      "load_secret_file",
      [](const std::string& path) {
        Secret secret = Take(Secret::LoadFromFile(path));
        const auto bytes = secret.bytes();
        return nb::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
      },
      "path"_a,
      "The secret in a file, read as the CLI reads --secret-file: a regular file of mode 600 or\n"
      "stricter, one trailing newline dropped, at least 16 bytes.");
  m.def(
      "_set_exception_types",
      [](nb::dict types) {
        static const std::map<std::string, StatusCode> by_name = {
            {"InvalidArgument", StatusCode::kInvalidArgument},
            {"NotFound", StatusCode::kNotFound},
            {"AlreadyExists", StatusCode::kAlreadyExists},
            {"OutOfRange", StatusCode::kOutOfRange},
            {"FailedPrecondition", StatusCode::kFailedPrecondition},
            {"DataLoss", StatusCode::kDataLoss},
            {"IoError", StatusCode::kIoError},
            {"Timeout", StatusCode::kTimeout},
            {"Unavailable", StatusCode::kUnavailable},
            {"PermissionDenied", StatusCode::kPermissionDenied},
            {"ResourceExhausted", StatusCode::kResourceExhausted},
            {"Cancelled", StatusCode::kCancelled},
            {"Unimplemented", StatusCode::kUnimplemented},
            {"Internal", StatusCode::kInternal},
        };
        for (auto [key, value] : types) {
          auto it = by_name.find(nb::cast<std::string>(key));
          if (it == by_name.end()) continue;
          value.inc_ref();  // kept for the life of the process
          ExceptionTypes()[it->second] = value.ptr();
        }
      },
      "types"_a);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusError& e) {
      auto it = ExceptionTypes().find(e.code);
      // A message may quote bytes a peer or a store sent; never let them turn into a decode error.
      PyObject* text = PyUnicode_DecodeUTF8(e.message.data(), static_cast<Py_ssize_t>(e.message.size()),
                                            "backslashreplace");
      PyErr_SetObject(it != ExceptionTypes().end() ? it->second : PyExc_RuntimeError, text);
      Py_XDECREF(text);
    }
  });

  BindFederated(m);

  nb::class_<MemberArgs>(m, "MemberArgs")
      .def(nb::init<>())
      .def_rw("coordinator", &MemberArgs::coordinator)
      .def_rw("store", &MemberArgs::store)
      .def_rw("session", &MemberArgs::session)
      .def_rw("rank", &MemberArgs::rank)
      .def_rw("side_ranks", &MemberArgs::side_ranks)
      .def_rw("host", &MemberArgs::host)
      .def_rw("placement_json", &MemberArgs::placement_json)
      .def_rw("transport", &MemberArgs::transport)
      .def_rw("timeout_s", &MemberArgs::timeout_s)
      .def_rw("pin_timeout_s", &MemberArgs::pin_timeout_s)
      .def_rw("delta", &MemberArgs::delta)
      .def_rw("rotate_keys", &MemberArgs::rotate_keys)
      .def_rw("keep_versions", &MemberArgs::keep_versions)
      .def_rw("max_gbps", &MemberArgs::max_gbps)
      .def_rw("background", &MemberArgs::background);

  nb::class_<PyService>(m, "Service")
      .def(nb::init<nb::bytes, const std::string&, int, uint64_t, int, double, size_t, bool,
                    const std::string&, const std::string&, bool>(),
           "secret"_a, "host"_a, "port"_a, "chunk_bytes"_a, "relay_fanout"_a, "timeout_s"_a, "quorum"_a,
           "rotate_keys"_a, "store"_a = "", "session"_a = "default", "rejoin"_a = false)
      .def_prop_ro("address", &PyService::address)
      .def("wait_outcome", &PyService::WaitOutcome, "version"_a, "timeout_s"_a, "rollback"_a = false,
           "from_index"_a = 0)
      .def("outcome_count", &PyService::OutcomeCount)
      .def("plan_json", &PyService::PlanJson)
      .def("stop", &PyService::Stop);

  nb::class_<PyPublisher>(m, "Publisher")
      .def(nb::init<nb::bytes, MemberArgs>(), "secret"_a, "args"_a)
      .def("num_shards", &PyPublisher::num_shards)
      .def("shard_info", &PyPublisher::shard_info, "i"_a)
      .def(
          "shard_array",
          [](nb::handle self, size_t i) { return nb::cast<PyPublisher&>(self).shard_array(self, i); }, "i"_a)
      .def("wait_idle", &PyPublisher::WaitIdle, "timeout_s"_a)
      .def("publish", &PyPublisher::Publish, "version"_a)
      .def("wait", &PyPublisher::Wait, "version"_a, "timeout_s"_a)
      .def("rollback", &PyPublisher::Rollback, "version"_a, "timeout_s"_a)
      .def("plan_json", &PyPublisher::PlanJson)
      .def("close", &PyPublisher::Close);

  nb::class_<PyPin>(m, "Pin")
      .def_prop_ro("version", &PyPin::version)
      .def(
          "shard_array",
          [](nb::handle self, size_t i) { return nb::cast<PyPin&>(self).shard_array(self, i); }, "i"_a)
      .def("release", &PyPin::Release);

  nb::class_<PySubscriber>(m, "Subscriber")
      .def(nb::init<nb::bytes, MemberArgs>(), "secret"_a, "args"_a)
      .def("num_shards", &PySubscriber::num_shards)
      .def("shard_info", &PySubscriber::shard_info, "i"_a)
      .def("shard_scales", &PySubscriber::shard_scales, "i"_a)
      .def_prop_ro("live_version", &PySubscriber::live_version)
      .def_prop_ro("kept_versions", &PySubscriber::kept_versions)
      .def_prop_ro("kept_bytes", &PySubscriber::kept_bytes)
      .def("wait_for_version", &PySubscriber::WaitForVersion, "version"_a, "timeout_s"_a)
      .def("acquire", &PySubscriber::Acquire, nb::rv_policy::take_ownership)
      .def_prop_ro("ended", &PySubscriber::ended)
      .def("plan_json", &PySubscriber::PlanJson)
      .def("close", &PySubscriber::Close);
}
