#include "weightport/engine/pubsub/versioned_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

namespace weightport {
namespace {

constexpr uint64_t kBytes = 256 << 10;

std::unique_ptr<VersionedStore> MakeStore(
    SwapMode mode, uint64_t bytes = kBytes,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
  auto store = VersionedStore::Create({.bytes = bytes, .mode = mode, .wait_timeout = timeout});
  EXPECT_TRUE(store.ok());
  return std::move(store).value();
}

// Writes version v: every byte is v mod 251 + 1, written in 16 pieces with yields in between so
// that a reader racing the writer would catch a half-written buffer.
void WriteVersion(std::span<std::byte> buf, uint64_t v) {
  const auto value = static_cast<std::byte>(v % 251 + 1);
  const size_t piece = buf.size() / 16;
  for (size_t off = 0; off < buf.size(); off += piece) {
    std::memset(buf.data() + off, static_cast<int>(value), std::min(piece, buf.size() - off));
    std::this_thread::yield();
  }
}

bool Consistent(const VersionedStore::Pin& pin) {
  const auto value = static_cast<std::byte>(pin.version() % 251 + 1);
  return std::all_of(pin.bytes().begin(), pin.bytes().end(), [&](std::byte b) { return b == value; });
}

class VersionedStoreModes : public ::testing::TestWithParam<SwapMode> {};

TEST_P(VersionedStoreModes, ReadersNeverSeeAMixOfVersionsOver100Updates) {
  auto store = MakeStore(GetParam());
  EXPECT_FALSE(store->Acquire().ok());  // nothing committed yet
  std::atomic<bool> done{false};
  std::atomic<uint64_t> reads{0}, torn{0}, backwards{0}, newest_seen{0};
  auto reader = [&] {
    uint64_t last = 0;
    while (!done.load()) {
      auto pin = store->Acquire();
      if (!pin.ok()) continue;  // before the first commit
      if (!Consistent(*pin)) torn.fetch_add(1);
      if (pin->version() < last) backwards.fetch_add(1);
      last = pin->version();
      reads.fetch_add(1);
      if (last > newest_seen.load()) newest_seen.store(last);
    }
  };
  std::thread r1(reader), r2(reader);
  for (uint64_t v = 1; v <= 100; ++v) {
    auto buf = store->BeginUpdate(v);
    ASSERT_TRUE(buf.ok()) << buf.status().ToString();
    WriteVersion(*buf, v);
    ASSERT_TRUE(store->Commit().ok());
    EXPECT_EQ(store->live_version(), v);
    // Let a reader see this version before the next update, so reads interleave with every update
    // however the threads are scheduled (bounded wait).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (newest_seen.load() < v && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    EXPECT_GE(newest_seen.load(), v);
  }
  done.store(true);
  r1.join();
  r2.join();
  EXPECT_EQ(torn.load(), 0u);
  EXPECT_EQ(backwards.load(), 0u);
  EXPECT_GE(reads.load(), 100u);
  EXPECT_EQ(store->stats().commits, 100u);
  auto last = store->Acquire();
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->version(), 100u);
  EXPECT_TRUE(Consistent(*last));
}

TEST_P(VersionedStoreModes, RejectsOutOfOrderCalls) {
  auto store = MakeStore(GetParam());
  EXPECT_EQ(store->Commit().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->Abort().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store->BeginUpdate(5).ok());
  EXPECT_EQ(store->BeginUpdate(6).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store->Commit().ok());
  EXPECT_EQ(store->BeginUpdate(5).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->BeginUpdate(4).status().code(), StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(AllModes, VersionedStoreModes,
                         ::testing::Values(SwapMode::kDoubleBuffer, SwapMode::kStageThenCopy,
                                           SwapMode::kInPlace),
                         [](const auto& info) {
                           std::string n(SwapModeName(info.param));
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(VersionedStoreTest, AbortLeavesPreviousVersionLiveAndExact) {
  for (SwapMode mode : {SwapMode::kDoubleBuffer, SwapMode::kStageThenCopy}) {
    auto store = MakeStore(mode);
    WriteVersion(*store->BeginUpdate(1), 1);
    ASSERT_TRUE(store->Commit().ok());
    auto buf = store->BeginUpdate(2);
    ASSERT_TRUE(buf.ok());
    WriteVersion(buf->subspan(0, kBytes / 2), 2);  // half written, then the update fails
    ASSERT_TRUE(store->Abort().ok());
    auto pin = store->Acquire();
    ASSERT_TRUE(pin.ok());
    EXPECT_EQ(pin->version(), 1u);
    EXPECT_TRUE(Consistent(*pin)) << SwapModeName(mode);
    *pin = VersionedStore::Pin();  // release
    // The staging buffer is reusable for the retry.
    WriteVersion(*store->BeginUpdate(2), 2);
    ASSERT_TRUE(store->Commit().ok());
    EXPECT_TRUE(Consistent(*store->Acquire()));
    EXPECT_EQ(store->stats().aborts, 1u);
  }
}

TEST(VersionedStoreTest, AbortedInPlaceUpdateLeavesNoValidVersion) {
  auto store = MakeStore(SwapMode::kInPlace);
  WriteVersion(*store->BeginUpdate(1), 1);
  ASSERT_TRUE(store->Commit().ok());
  ASSERT_TRUE(store->BeginUpdate(2).ok());
  ASSERT_TRUE(store->Abort().ok());
  auto pin = store->Acquire();
  ASSERT_FALSE(pin.ok());
  EXPECT_NE(pin.status().message().find("aborted"), std::string::npos);
  WriteVersion(*store->BeginUpdate(2), 2);
  ASSERT_TRUE(store->Commit().ok());
  EXPECT_EQ(store->Acquire()->version(), 2u);
}

TEST(VersionedStoreTest, DoubleBufferWaitsForOldReadersBeforeReuse) {
  auto store = MakeStore(SwapMode::kDoubleBuffer, kBytes, std::chrono::milliseconds(200));
  WriteVersion(*store->BeginUpdate(1), 1);
  ASSERT_TRUE(store->Commit().ok());
  auto old_pin = store->Acquire();  // holds version 1
  WriteVersion(*store->BeginUpdate(2), 2);
  ASSERT_TRUE(store->Commit().ok());
  // The pause is the pointer swap inside Commit, nothing more.
  EXPECT_LE(store->stats().last_pause, store->stats().last_commit);
  // Version 3 would overwrite version 1's buffer while it is pinned: refused after the timeout.
  auto blocked = store->BeginUpdate(3);
  EXPECT_EQ(blocked.status().code(), StatusCode::kTimeout);
  EXPECT_TRUE(Consistent(*old_pin));
  *old_pin = VersionedStore::Pin();  // release
  ASSERT_TRUE(store->BeginUpdate(3).ok());
}

TEST(VersionedStoreTest, InPlaceBlocksReadersForTheWholeUpdate) {
  auto store = MakeStore(SwapMode::kInPlace, kBytes, std::chrono::milliseconds(100));
  WriteVersion(*store->BeginUpdate(1), 1);
  ASSERT_TRUE(store->Commit().ok());
  ASSERT_TRUE(store->BeginUpdate(2).ok());
  EXPECT_EQ(store->Acquire().status().code(), StatusCode::kTimeout);
  ASSERT_TRUE(store->Commit().ok());
  EXPECT_GE(store->stats().last_pause, std::chrono::milliseconds(100));
  EXPECT_EQ(store->extra_bytes(), 0u);
}

TEST(VersionedStoreTest, StageCopyKeepsLiveAddress) {
  auto store = MakeStore(SwapMode::kStageThenCopy);
  WriteVersion(*store->BeginUpdate(1), 1);
  ASSERT_TRUE(store->Commit().ok());
  const std::byte* live = store->Acquire()->bytes().data();
  for (uint64_t v = 2; v <= 5; ++v) {
    WriteVersion(*store->BeginUpdate(v), v);
    ASSERT_TRUE(store->Commit().ok());
    EXPECT_EQ(store->Acquire()->bytes().data(), live);
  }
  EXPECT_EQ(store->extra_bytes(), kBytes);
}

// buffers() lists every buffer an update can land in, before any update (to register them ahead).
TEST(VersionedStoreTest, BuffersAreEveryPlaceAnUpdateLands) {
  for (SwapMode mode : {SwapMode::kDoubleBuffer, SwapMode::kStageThenCopy, SwapMode::kInPlace}) {
    auto store = MakeStore(mode);
    const std::vector<std::span<std::byte>> buffers = store->buffers();
    ASSERT_EQ(buffers.size(), mode == SwapMode::kInPlace ? 1u : 2u) << SwapModeName(mode);
    for (uint64_t v = 1; v <= 3; ++v) {
      auto target = store->BeginUpdate(v);
      ASSERT_TRUE(target.ok()) << target.status().ToString();
      EXPECT_EQ(target->size(), kBytes);
      EXPECT_TRUE(std::any_of(
          buffers.begin(), buffers.end(),
          [&](std::span<std::byte> b) { return b.data() == target->data() && b.size() == kBytes; }))
          << SwapModeName(mode) << " version " << v;
      WriteVersion(*target, v);
      ASSERT_TRUE(store->Commit().ok());
    }
  }
}

TEST(VersionedStoreTest, SwapModeNames) {
  for (SwapMode m : {SwapMode::kDoubleBuffer, SwapMode::kStageThenCopy, SwapMode::kInPlace})
    EXPECT_EQ(*ParseSwapMode(SwapModeName(m)), m);
  EXPECT_FALSE(ParseSwapMode("flip").ok());
}

}  // namespace
}  // namespace weightport
