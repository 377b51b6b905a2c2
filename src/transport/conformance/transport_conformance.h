// Transport conformance suite: the tests every Transport backend must pass, written once.
//
// A backend's test file instantiates the suite with a factory for its transports:
//
//   #include "transport/conformance/transport_conformance.h"
//   INSTANTIATE_TEST_SUITE_P(Ucx, TransportConformance,
//                            ::testing::Values(weightport::conformance::TransportConformanceParam{
//                                .name = "Ucx", .factory = MakeUcxForTest, .supports_fork = true}),
//                            weightport::conformance::ParamName);
//
// The TEST_P bodies live in transport_conformance*_test.cc in this folder, linked into the same
// transport_tests binary. Every transport runs on its own ProgressLoop thread (the normal case);
// the test thread talks to it only through Post/Call, and every wait has a timeout.
//
// Header-only test support: include it from *_test.cc files only (it pulls in gtest).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "weightport/core/sanitizer_build.h"
#include "weightport/core/status.h"
#include "weightport/transport/progress_loop.h"
#include "weightport/transport/transport.h"

namespace weightport::conformance {

struct TransportConformanceParam {
  std::string name;  // test-name suffix: letters, digits and '_' only
  // Makes a fresh transport named `name`. Called on the test thread, and in forked children.
  std::function<Result<std::unique_ptr<Transport>>(const std::string& name)> factory;
  bool supports_fork = false;              // transports may live in fork()ed processes
  uint64_t max_size = uint64_t{64} << 20;  // largest single transfer tested; >= 1 GiB runs the 1 GiB case
  bool detects_deregistered_keys = true;   // a Put/Get with the key of a deregistered region fails
  std::chrono::milliseconds peer_loss_timeout{10000};  // bound on noticing a destroyed peer
};

inline std::string ParamName(const ::testing::TestParamInfo<TransportConformanceParam>& info) {
  return info.param.name;
}
inline void PrintTo(const TransportConformanceParam& p, std::ostream* os) { *os << p.name; }

#if defined(WEIGHTPORT_TSAN)
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
#endif
// While one lives, ThreadSanitizer does not check this thread's reads. The checks below read bytes
// a transport delivered; the transfer's ordering goes through UCX's uninstrumented code, so every
// word read is a race to TSan, suppressed by tsan.supp, but one report (stack restored, then
// suppressed) per word takes minutes over 64 MiB.
struct UncheckedReads {
#if defined(WEIGHTPORT_TSAN)
  UncheckedReads() { AnnotateIgnoreReadsBegin(__FILE__, __LINE__); }
  ~UncheckedReads() { AnnotateIgnoreReadsEnd(__FILE__, __LINE__); }
#else
  UncheckedReads() = default;
#endif
  UncheckedReads(const UncheckedReads&) = delete;
  UncheckedReads& operator=(const UncheckedReads&) = delete;
};

using Millis = std::chrono::milliseconds;
inline constexpr Millis kOpTimeout{20000};      // any single small operation
inline constexpr Millis kLargeTimeout{180000};  // one transfer of up to 1 GiB (slow under sanitizers)

inline ::testing::AssertionResult IsOk(const Status& s) {
  if (s.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << s.ToString();
}
// The error every failed operation must carry: non-OK and naming the peer.
inline ::testing::AssertionResult FailsNaming(const Status& s, const std::string& peer) {
  if (s.ok()) return ::testing::AssertionFailure() << "succeeded, expected an error naming '" << peer << "'";
  if (s.message().find(peer) == std::string::npos)
    return ::testing::AssertionFailure() << s.ToString() << " does not name the peer '" << peer << "'";
  return ::testing::AssertionSuccess();
}

// `lhs = value of expr`, or fails the test (fatally) with the error.
#define WP_ASSERT_OK_AND_ASSIGN(lhs, expr) \
  WP_ASSERT_OK_AND_ASSIGN_IMPL_(WP_CONCAT_(wp_assert_, __LINE__), lhs, expr)
#define WP_ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr)         \
  auto tmp = (expr);                                          \
  ASSERT_TRUE(::weightport::conformance::IsOk(tmp.status())); \
  lhs = std::move(tmp).value()

// Collects the completions of `n` operations, each by index; counts calls so "exactly once" can be
// checked. State is shared with the callbacks, so late completions after a failed test are safe.
class Tally {
 public:
  explicit Tally(size_t n = 1) : s_(std::make_shared<State>(n)) {}
  Completion callback(size_t i = 0) const {
    return [s = s_, i](const Status& status) {
      {
        std::lock_guard<std::mutex> lock(s->mu);
        if (s->calls[i]++ == 0) ++s->distinct;
        s->status[i] = status;
      }
      s->cv.notify_all();
    };
  }
  // Waits until every operation completed at least once; false on timeout.
  bool WaitAll(Millis timeout = kOpTimeout) const {
    std::unique_lock<std::mutex> lock(s_->mu);
    return s_->cv.wait_for(lock, timeout, [&] { return s_->distinct == s_->calls.size(); });
  }
  // Waits for operation `i`; kTimeout if it did not complete in time.
  Status Wait(size_t i = 0, Millis timeout = kOpTimeout) const {
    std::unique_lock<std::mutex> lock(s_->mu);
    if (!s_->cv.wait_for(lock, timeout, [&] { return s_->calls[i] > 0; }))
      return Timeout("operation " + std::to_string(i) + " did not complete within " +
                     std::to_string(timeout.count()) + " ms");
    return s_->status[i];
  }
  int calls(size_t i = 0) const {
    std::lock_guard<std::mutex> lock(s_->mu);
    return s_->calls[i];
  }
  Status status(size_t i = 0) const {
    std::lock_guard<std::mutex> lock(s_->mu);
    return s_->status[i];
  }
  size_t size() const { return s_->calls.size(); }

 private:
  struct State {
    explicit State(size_t n) : calls(n, 0), status(n) {}
    std::mutex mu;
    std::condition_variable cv;
    std::vector<int> calls;
    std::vector<Status> status;
    size_t distinct = 0;
  };
  std::shared_ptr<State> s_;
};

// One operation's completion (a Tally of one).
using Waiter = Tally;

// Messages received by one transport's handler.
class MessageSink {
 public:
  struct Message {
    std::string from;
    Bytes bytes;
  };
  MessageHandler handler() const {
    return [s = s_](const std::string& from, Bytes bytes) {
      {
        std::lock_guard<std::mutex> lock(s->mu);
        s->messages.push_back(Message{from, std::move(bytes)});
      }
      s->cv.notify_all();
    };
  }
  // Waits until at least `n` messages arrived; returns a copy of all of them (fewer on timeout).
  std::vector<Message> WaitFor(size_t n, Millis timeout = kOpTimeout) const {
    std::unique_lock<std::mutex> lock(s_->mu);
    s_->cv.wait_for(lock, timeout, [&] { return s_->messages.size() >= n; });
    return s_->messages;
  }
  size_t count() const {
    std::lock_guard<std::mutex> lock(s_->mu);
    return s_->messages.size();
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<Message> messages;
  };
  std::shared_ptr<State> s_ = std::make_shared<State>();
};

// Deterministic bytes: byte i of pattern `seed` depends on both. Fast enough for 1 GiB.
inline uint64_t PatternWord(uint64_t seed, uint64_t word) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ULL + word + 1;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
inline std::byte PatternByte(uint64_t seed, uint64_t i) {
  return static_cast<std::byte>(PatternWord(seed, i / 8) >> (8 * (i % 8)));
}
// Writes pattern bytes [first, first + n) of `seed` to p.
inline void FillPattern(std::byte* p, size_t n, uint64_t seed, uint64_t first = 0) {
  size_t k = 0;
  for (; k < n && (first + k) % 8 != 0; ++k) p[k] = PatternByte(seed, first + k);
  for (; k + 8 <= n; k += 8) {
    const uint64_t w = PatternWord(seed, (first + k) / 8);  // little-endian hosts only
    std::memcpy(p + k, &w, 8);
  }
  for (; k < n; ++k) p[k] = PatternByte(seed, first + k);
}
// Checks that p holds pattern bytes [first, first + n) of `seed`; reports the first mismatch.
inline ::testing::AssertionResult HasPattern(const std::byte* p, size_t n, uint64_t seed,
                                             uint64_t first = 0) {
  const UncheckedReads unchecked;
  size_t k = 0;
  auto mismatch = [&](size_t at) {
    return ::testing::AssertionFailure()
           << "byte " << at << " of " << n << " is " << int(p[at]) << ", expected "
           << int(PatternByte(seed, first + at)) << " (pattern " << seed << ")";
  };
  for (; k < n && (first + k) % 8 != 0; ++k)
    if (p[k] != PatternByte(seed, first + k)) return mismatch(k);
  for (; k + 8 <= n; k += 8) {
    const uint64_t w = PatternWord(seed, (first + k) / 8);
    if (std::memcmp(p + k, &w, 8) != 0) {
      for (size_t j = k;; ++j)
        if (p[j] != PatternByte(seed, first + j)) return mismatch(j);
    }
  }
  for (; k < n; ++k)
    if (p[k] != PatternByte(seed, first + k)) return mismatch(k);
  return ::testing::AssertionSuccess();
}

// Memory plus its registration. The memory is shared so a test can keep it alive after the
// registration (or the whole peer) is gone: a backend that failed to refuse a stale key must not
// scribble on freed memory.
struct Buffer {
  std::shared_ptr<std::byte[]> memory;  // not touched at allocation: pages arrive on first write
  size_t size = 0;
  std::unique_ptr<MemoryRegion> region;
  RemoteKey key;  // as a peer sees it: serialized and deserialized
  std::byte* data() const { return memory.get(); }
};

// One transport on its own ProgressLoop thread, with the buffers and connections it owns. All of
// them are destroyed on the loop thread, before the loop stops.
class TestPeer {
 public:
  static Result<std::unique_ptr<TestPeer>> Create(const TransportConformanceParam& param, std::string name) {
    WP_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport, param.factory(name));
    std::unique_ptr<TestPeer> peer(new TestPeer(std::move(name), std::move(transport)));
    peer->address_ = peer->loop_->Call([](Transport& t) { return t.address(); });
    peer->loop_->Call([h = peer->sink_.handler()](Transport& t) { t.SetMessageHandler(h); });
    return peer;
  }
  ~TestPeer() { Destroy(); }

  const std::string& name() const { return name_; }
  const Bytes& address() const { return address_; }
  ProgressLoop& loop() { return *loop_; }
  MessageSink& sink() { return sink_; }

  // Allocates and registers `size` bytes (owned by this peer).
  Result<Buffer*> Allocate(size_t size) {
    auto buffer = std::make_unique<Buffer>();
    buffer->memory.reset(new (std::nothrow) std::byte[size == 0 ? 1 : size]);
    if (buffer->memory == nullptr)
      return ResourceExhausted(name_ + ": cannot allocate " + std::to_string(size));
    buffer->size = size;
    WP_ASSIGN_OR_RETURN(buffer->region,
                        loop_->Call([&](Transport& t) { return t.Register(buffer->data(), size); }));
    WP_ASSIGN_OR_RETURN(buffer->key, RemoteKey::Deserialize(buffer->region->remote_key().Serialize(), name_));
    buffers_.push_back(std::move(buffer));
    return buffers_.back().get();
  }
  // Deregisters (on the loop thread); the memory stays until the peer is destroyed.
  void Deregister(Buffer* buffer) {
    loop_->Call([&](Transport&) { buffer->region.reset(); });
  }
  // Deregisters and frees one buffer now.
  void Free(Buffer* buffer) {
    Deregister(buffer);
    std::erase_if(buffers_, [&](const auto& b) { return b.get() == buffer; });
  }

  Result<Connection*> Connect(const TestPeer& to) { return Connect(to.address(), to.name()); }
  Result<Connection*> Connect(const Bytes& address, const std::string& peer_name) {
    WP_ASSIGN_OR_RETURN(std::shared_ptr<Connection> conn,
                        loop_->Call([&](Transport& t) { return t.Connect(address, peer_name); }));
    connections_.push_back(std::move(conn));
    return connections_.back().get();
  }

  // Releases connections and registrations on the loop thread, then stops and destroys the
  // transport. Buffer memory lives on until the TestPeer is destroyed. Idempotent.
  void Destroy() {
    if (loop_ == nullptr) return;
    loop_->Call([&](Transport&) {
      connections_.clear();
      for (auto& b : buffers_) b->region.reset();
    });
    loop_.reset();
  }

 private:
  TestPeer(std::string name, std::unique_ptr<Transport> transport)
      : name_(std::move(name)), loop_(std::make_unique<ProgressLoop>(std::move(transport))) {}

  std::string name_;
  std::unique_ptr<ProgressLoop> loop_;
  Bytes address_;
  MessageSink sink_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::vector<std::shared_ptr<Connection>> connections_;
};

// Polls `done` until it holds or `timeout` passes.
inline bool WaitUntil(const std::function<bool()>& done, Millis timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(Millis(2));
  }
  return true;
}

class TransportConformance : public ::testing::TestWithParam<TransportConformanceParam> {
 public:
  // A fresh transport on its own loop: WP_ASSERT_OK_AND_ASSIGN(auto a, Peer("a"));
  Result<std::unique_ptr<TestPeer>> Peer(const std::string& name) {
    return TestPeer::Create(GetParam(), name);
  }
};

}  // namespace weightport::conformance
