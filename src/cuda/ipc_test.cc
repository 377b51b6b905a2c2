// CUDA IPC: the handle's text form (everywhere), and a second process that maps a buffer of this
// one, reads it and writes it (skipped, with the reason, without CUDA or a GPU).
#include "weightport/cuda/ipc.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "weightport/core/hash.h"

namespace weightport {
namespace {

TEST(CudaIpcHandle, RoundTripsThroughText) {
  CudaIpcHandle h;
  for (size_t i = 0; i < h.handle.size(); ++i) h.handle[i] = static_cast<uint8_t>(i * 37 + 5);
  h.bytes = (3ull << 33) + 7;
  h.device = 5;
  const std::string text = h.ToHex();
  EXPECT_EQ(text.size(), 152u);
  auto back = CudaIpcHandle::FromHex(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->handle, h.handle);
  EXPECT_EQ(back->bytes, h.bytes);
  EXPECT_EQ(back->device, h.device);
}

TEST(CudaIpcHandle, RefusesWhatToHexDidNotMake) {
  const std::string good = CudaIpcHandle{}.ToHex();
  auto shorter = CudaIpcHandle::FromHex(good.substr(1));
  EXPECT_EQ(shorter.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(shorter.status().message().find("151 characters"), std::string::npos)
      << shorter.status().message();
  std::string typo = good;
  typo[20] = 'g';
  auto bad = CudaIpcHandle::FromHex(typo);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("character 20 ('g')"), std::string::npos) << bad.status().message();
  std::string negative = good;
  negative.replace(144, 8, "ffffffff");
  EXPECT_FALSE(CudaIpcHandle::FromHex(negative).ok());
}

// Runs the peer process with `args`: what it printed (stdout and stderr), its exit status in `rc`.
std::string RunPeer(const std::string& args, int& rc) {
#ifdef WEIGHTPORT_CUDA_IPC_PEER
  FILE* p = popen(("'" + std::string(WEIGHTPORT_CUDA_IPC_PEER) + "' " + args + " 2>&1").c_str(), "r");
  std::string out;
  char buf[256];
  while (p != nullptr && std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  rc = p == nullptr ? -1 : pclose(p);
  return out;
#else
  rc = -1;
  return "no peer program in this build to run with " + args;
#endif
}

TEST(CudaIpc, AnotherProcessReadsAndWritesTheBuffer) {
  if (const std::string why = cuda_test::NoGpuReason(); !why.empty()) GTEST_SKIP() << why;
  constexpr size_t kBytes = (16 << 20) + 4097;
  std::vector<std::byte> host(kBytes);
  std::mt19937_64 rng(7);
  for (auto& b : host) b = std::byte(rng());
  auto dev = DeviceBuffer::Allocate(kBytes);
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  ASSERT_TRUE(dev->CopyFrom(host).ok());
  auto handle = ExportCudaIpc(*dev);
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  EXPECT_EQ(handle->bytes, kBytes);

  int rc = 0;
  const std::string hashed = RunPeer(handle->ToHex() + " hash", rc);
  ASSERT_EQ(rc, 0) << hashed;
  // The last line: a driver may say something on stderr first.
  EXPECT_TRUE(hashed.ends_with(HashToHex(Xxh3(host)) + "\n"))
      << "the peer read other bytes than these: " << hashed;

  const std::string filled = RunPeer(handle->ToHex() + " fill 90", rc);
  ASSERT_EQ(rc, 0) << filled;
  std::vector<std::byte> back(kBytes);
  ASSERT_TRUE(dev->CopyTo(back).ok());
  EXPECT_EQ(std::count(back.begin(), back.end(), std::byte{90}), static_cast<ptrdiff_t>(kBytes))
      << "the peer's writes did not land in this process's buffer";
}

TEST(CudaIpc, WithoutAGpuExportAndOpenSayWhy) {
  if (cuda_test::NoGpuReason().empty()) GTEST_SKIP() << "a GPU is present";
  EXPECT_FALSE(CudaIpcMapping::Open(CudaIpcHandle{}).ok());
}

}  // namespace
}  // namespace weightport
