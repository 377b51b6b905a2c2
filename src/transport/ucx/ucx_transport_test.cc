// UCX-specific tests: status mapping, wire formats, rkey packing, transport (lane) selection, and
// behaviour the conformance suite does not reach (owner-free puts, peer death, message reordering).
#include "weightport/transport/ucx_transport.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>

#include "transport/conformance/transport_conformance.h"
#include "transport/ucx/ucx_status.h"
#include "transport/ucx/ucx_wire.h"

namespace weightport {
namespace {

using conformance::FillPattern;
using conformance::HasPattern;
using conformance::IsOk;
using conformance::Tally;
using conformance::TestPeer;
using conformance::TransportConformanceParam;

const std::vector<std::string> kShm = {"posix", "sysv", "cma", "self"};
const std::vector<std::string> kTcp = {"tcp"};

UcxOptions Options(const std::string& name, std::vector<std::string> transports) {
  UcxOptions options;
  options.name = name;
  options.transports = std::move(transports);
  options.keepalive_interval = std::chrono::milliseconds(200);
  return options;
}

TransportConformanceParam Param(std::vector<std::string> transports, size_t max_message_bytes = 1 << 20) {
  TransportConformanceParam param;
  param.name = "ucx";
  param.factory = [=](const std::string& name) {
    UcxOptions options = Options(name, transports);
    options.max_message_bytes = max_message_bytes;
    return MakeUcxTransport(options);
  };
  return param;
}

TEST(UcxStatus, MapsCodesAndNamesPeerAndCall) {
  EXPECT_TRUE(ucx::UcxStatus(UCS_OK, "put", "b").ok());
  const std::pair<ucs_status_t, StatusCode> cases[] = {
      {UCS_ERR_CANCELED, StatusCode::kCancelled},
      {UCS_ERR_TIMED_OUT, StatusCode::kTimeout},
      {UCS_ERR_UNREACHABLE, StatusCode::kUnavailable},
      {UCS_ERR_CONNECTION_RESET, StatusCode::kUnavailable},
      {UCS_ERR_ENDPOINT_TIMEOUT, StatusCode::kUnavailable},
      {static_cast<ucs_status_t>(UCS_ERR_FIRST_LINK_FAILURE - 1), StatusCode::kUnavailable},
      {UCS_ERR_NO_MEMORY, StatusCode::kResourceExhausted},
      {UCS_ERR_EXCEEDS_LIMIT, StatusCode::kResourceExhausted},
      {UCS_ERR_INVALID_PARAM, StatusCode::kInvalidArgument},
      {UCS_ERR_OUT_OF_RANGE, StatusCode::kOutOfRange},
      {UCS_ERR_NO_DEVICE, StatusCode::kNotFound},
      {UCS_ERR_UNSUPPORTED, StatusCode::kUnimplemented},
      {UCS_ERR_IO_ERROR, StatusCode::kIoError},
      {UCS_ERR_NO_PROGRESS, StatusCode::kInternal},
  };
  for (auto [ucs, code] : cases) {
    const Status s = ucx::UcxStatus(ucs, "ucp_put_nbx", "rank7");
    EXPECT_EQ(s.code(), code) << s.ToString();
    EXPECT_NE(s.message().find("peer 'rank7': ucp_put_nbx: "), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(ucs_status_string(ucs)), std::string::npos) << s.ToString();
  }
  EXPECT_EQ(ucx::UcxStatus(UCS_ERR_NO_MEMORY, "ucp_init").message().rfind("ucp_init: ", 0), 0u);
}

TEST(UcxWire, RoundTripsAndRejectsGarbage) {
  ucx::WireAddress a;
  a.transport_id = 42;
  a.liveness_address = 0x1000;
  a.liveness_rkey = Bytes(7, std::byte{1});
  a.worker_address = Bytes(30, std::byte{2});
  const Bytes encoded = ucx::EncodeAddress(a);
  auto decoded = ucx::DecodeAddress(encoded);
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(decoded->transport_id, 42u);
  EXPECT_EQ(decoded->liveness_rkey, a.liveness_rkey);
  EXPECT_EQ(decoded->worker_address, a.worker_address);
  EXPECT_FALSE(ucx::DecodeAddress(std::span(encoded).first(30)).has_value());
  EXPECT_FALSE(ucx::DecodeAddress(Bytes(64, std::byte{0})).has_value());

  const Bytes key = ucx::EncodeKey(5, 9, Bytes(3, std::byte{7}));
  auto k = ucx::DecodeKey(key);
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ(k->owner_id, 5u);
  EXPECT_EQ(k->region_id, 9u);
  EXPECT_EQ(k->ucp_rkey.size(), 3u);
  EXPECT_FALSE(ucx::DecodeKey(std::span(key).first(20)).has_value());

  const Bytes header = ucx::EncodeHeader("sender", 11, 12);
  auto h = ucx::DecodeHeader(header);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->from, "sender");
  EXPECT_EQ(h->stream, 11u);
  EXPECT_EQ(h->seq, 12u);
  EXPECT_FALSE(ucx::DecodeHeader(std::span(header).first(header.size() - 1)).has_value());
}

TEST(UcxTransport, MemoryTypesListHostMemory) {
  auto types = UcxMemoryTypes();
  ASSERT_TRUE(types.ok()) << types.status().ToString();
  EXPECT_NE(std::find(types->begin(), types->end(), "host"), types->end());
  for (const std::string& t : *types) EXPECT_FALSE(t.empty());
  // Whether device memory may go to this UCX follows from the list; without "cuda" the refusal
  // names what there is and how to get a CUDA-aware UCX.
  const Status cuda = UcxTakesCudaMemory();
  if (std::find(types->begin(), types->end(), "cuda") != types->end()) {
    EXPECT_TRUE(cuda.ok()) << cuda.ToString();
  } else {
    EXPECT_EQ(cuda.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(cuda.message().find("memory types: host"), std::string::npos) << cuda.ToString();
    EXPECT_NE(cuda.message().find("--ucx-cuda"), std::string::npos) << cuda.ToString();
  }
}

// A transport takes what its own context registers: host memory always, and with no transports
// named every memory type this UCX lists.
TEST(UcxTransport, TakesTheMemoryItsContextRegisters) {
  auto shm = MakeUcxTransport(Options("shm", kShm));
  ASSERT_TRUE(shm.ok()) << shm.status().ToString();
  EXPECT_TRUE((*shm)->TakesMemory("host"));
  EXPECT_FALSE((*shm)->TakesMemory("no such memory"));
  auto all = MakeUcxTransport(Options("all", {}));
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  auto types = UcxMemoryTypes();
  ASSERT_TRUE(types.ok()) << types.status().ToString();
  for (const std::string& t : *types) EXPECT_TRUE((*all)->TakesMemory(t)) << t;
}

TEST(UcxTransport, RejectsBadOptions) {
  EXPECT_EQ(MakeUcxTransport(Options("", kShm)).status().code(), StatusCode::kInvalidArgument);
  UcxOptions zero = Options("a", kShm);
  zero.max_message_bytes = 0;
  EXPECT_EQ(MakeUcxTransport(zero).status().code(), StatusCode::kInvalidArgument);
  UcxOptions bad_setting = Options("a", kShm);
  bad_setting.config = {{"RNDV_THRESH", "not-a-size"}};
  const Status s = MakeUcxTransport(bad_setting).status();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("RNDV_THRESH"), std::string::npos) << s.ToString();
}

TEST(UcxTransport, RegisterPacksAKeyThatNamesItsOwner) {
  auto t = MakeUcxTransport(Options("owner", kShm));
  ASSERT_TRUE(IsOk(t.status()));
  std::vector<std::byte> memory(8192);
  auto r1 = (*t)->Register(memory.data(), 4096);
  auto r2 = (*t)->Register(memory.data() + 4096, 4096);
  auto empty = (*t)->Register(nullptr, 0);
  ASSERT_TRUE(IsOk(r1.status()));
  ASSERT_TRUE(IsOk(r2.status()));
  ASSERT_TRUE(IsOk(empty.status()));
  const RemoteKey& key = (*r1)->remote_key();
  EXPECT_EQ(key.address, reinterpret_cast<uintptr_t>(memory.data()));
  EXPECT_EQ(key.length, 4096u);
  auto k1 = ucx::DecodeKey(key.packed);
  auto k2 = ucx::DecodeKey((*r2)->remote_key().packed);
  ASSERT_TRUE(k1 && k2);
  EXPECT_EQ(k1->owner_id, k2->owner_id);
  EXPECT_NE(k1->region_id, k2->region_id);
  EXPECT_FALSE(k1->ucp_rkey.empty());
  auto round = RemoteKey::Deserialize(key.Serialize(), "test");
  ASSERT_TRUE(IsOk(round.status()));
  EXPECT_EQ(*round, key);
}

// Which UCX lanes a connection uses, for shm and for TCP; printed for the record.
std::string LanesOf(const std::vector<std::string>& transports, size_t* lanes) {
  auto a = TestPeer::Create(Param(transports), "a");
  auto b = TestPeer::Create(Param(transports), "b");
  if (!a.ok() || !b.ok()) return "cannot create transports";
  auto conn = (*a)->Connect(**b);
  if (!conn.ok()) return conn.status().ToString();
  std::string info = (*a)->loop().Call([&](Transport&) { return UcxDescribeConnection(**conn); });
  EXPECT_FALSE((*a)->loop().Call([](Transport& t) { return UcxDescribeTransport(t); }).empty());
  *lanes = 0;
  for (size_t at = info.find("lane["); at != std::string::npos; at = info.find("lane[", at + 1)) ++*lanes;
  std::cout << info;
  return info;
}

TEST(UcxTransport, ShmConfigurationUsesSharedMemoryLanesOnly) {
  size_t lanes = 0;
  const std::string info = LanesOf(kShm, &lanes);
  EXPECT_GT(lanes, 0u) << info;
  EXPECT_TRUE(info.find("sysv/") != std::string::npos || info.find("posix/") != std::string::npos) << info;
  EXPECT_EQ(info.find("tcp/"), std::string::npos) << info;
}

TEST(UcxTransport, TcpConfigurationUsesTcpLanesOnly) {
  size_t lanes = 0;
  const std::string info = LanesOf(kTcp, &lanes);
  EXPECT_GT(lanes, 0u) << info;
  EXPECT_NE(info.find("tcp/"), std::string::npos) << info;
  EXPECT_EQ(info.find("posix/"), std::string::npos) << info;
  EXPECT_EQ(info.find("sysv/"), std::string::npos) << info;
}

// A region that UCX allocated is mapped by a same-host peer: Put and Flush complete although the
// owner never runs Progress() (registered memory would wait for the owner to copy the data in).
TEST(UcxTransport, PutIntoAllocatedRegionNeedsNoWorkByTheOwner) {
  auto owner = MakeUcxTransport(Options("owner", kShm));
  ASSERT_TRUE(IsOk(owner.status()));
  auto region = UcxAllocate(**owner, 1 << 20);
  ASSERT_TRUE(IsOk(region.status()));
  FillPattern((*region)->data(), 1 << 20, 1);
  auto writer = TestPeer::Create(Param(kShm), "writer");
  ASSERT_TRUE(IsOk(writer.status()));
  auto src = (*writer)->Allocate(1 << 20);
  ASSERT_TRUE(IsOk(src.status()));
  FillPattern((*src)->data(), 1 << 20, 2);
  auto conn = (*writer)->Connect((*owner)->address(), "owner");
  ASSERT_TRUE(IsOk(conn.status()));
  Tally done(2);
  (*writer)->loop().Post([done, c = *conn, s = *src, key = (*region)->remote_key()](Transport&) {
    c->Put(*s->region, 0, key, 0, 1 << 20, done.callback(0));
    c->Flush(done.callback(1));
  });
  ASSERT_TRUE(IsOk(done.Wait(0)));
  ASSERT_TRUE(IsOk(done.Wait(1)));
  EXPECT_TRUE(HasPattern((*region)->data(), 1 << 20, 2));
  (*writer)->Destroy();
}

// A same-host peer's UCX-allocated region is mapped here and read in place, one mapping per region
// for the connection's life; a peer reached over TCP maps nothing.
TEST(UcxTransport, MapsASameHostPeersAllocatedRegionAndNothingOverTcp) {
  for (const auto& transports : {kShm, kTcp}) {
    const bool shm = transports == kShm;
    auto owner = MakeUcxTransport(Options("owner", transports));
    ASSERT_TRUE(IsOk(owner.status()));
    auto region = UcxAllocate(**owner, 4 << 20);
    ASSERT_TRUE(IsOk(region.status()));
    FillPattern((*region)->data(), 4 << 20, 3);
    auto reader = TestPeer::Create(Param(transports), "reader");
    ASSERT_TRUE(IsOk(reader.status()));
    auto conn = (*reader)->Connect((*owner)->address(), "owner");
    ASSERT_TRUE(IsOk(conn.status()));
    (*reader)->loop().Call([&, key = (*region)->remote_key()](Transport&) {
      std::shared_ptr<const MappedPeerRegion> mapped = (*conn)->Map(key);
      if (!shm) {
        EXPECT_EQ(mapped, nullptr);
        return;
      }
      ASSERT_NE(mapped, nullptr);
      EXPECT_EQ(mapped->size(), uint64_t{4} << 20);
      mapped->Prepare(1 << 20, 2 << 20);
      EXPECT_TRUE(HasPattern(mapped->data(), 4 << 20, 3));
      EXPECT_EQ((*conn)->Map(key), mapped);  // the same mapping, not a new one
      RemoteKey foreign = key;
      foreign.packed.assign(foreign.packed.size(), std::byte{0});
      EXPECT_EQ((*conn)->Map(foreign), nullptr);
      (*conn)->Close();
      EXPECT_EQ((*conn)->Map(key), nullptr);                // closed: nothing new is mapped
      EXPECT_TRUE(HasPattern(mapped->data(), 4 << 20, 3));  // the one held stays readable
    });
    (*reader)->Destroy();
  }
}

TEST(UcxTransport, RefusesForeignKeysRegionsAndAddresses) {
  auto a = TestPeer::Create(Param(kShm), "a");
  auto b = TestPeer::Create(Param(kShm), "b");
  auto c = TestPeer::Create(Param(kShm), "c");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  auto local = (*a)->Allocate(64);
  auto of_c = (*c)->Allocate(64);
  ASSERT_TRUE(local.ok() && of_c.ok());
  auto conn = (*a)->Connect(**b);
  ASSERT_TRUE(IsOk(conn.status()));
  Tally t(2);
  (*a)->loop().Post([t, to_b = *conn, mine = (*local)->region.get(), theirs = (*of_c)->region.get(),
                     key = (*of_c)->key](Transport&) {
    to_b->Put(*mine, 0, key, 0, 8, t.callback(0));    // c's key on the way to b
    to_b->Get(*theirs, 0, key, 0, 8, t.callback(1));  // c's region as a's
  });
  ASSERT_TRUE(t.WaitAll());
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(t.status(i).code(), StatusCode::kInvalidArgument) << t.status(i).ToString();
    EXPECT_NE(t.status(i).message().find("'b'"), std::string::npos) << t.status(i).ToString();
  }
  auto garbage = (*a)->Connect(Bytes(40, std::byte{3}), "nobody");
  EXPECT_EQ(garbage.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(garbage.status().message().find("nobody"), std::string::npos);
}

TEST(UcxTransport, ConnectToAClosedTransportFails) {
  auto a = TestPeer::Create(Param(kShm), "a");
  auto b = TestPeer::Create(Param(kShm), "closed-b");
  ASSERT_TRUE(a.ok() && b.ok());
  (*b)->loop().Call([](Transport& t) { t.Close(); });
  auto conn = (*a)->Connect(**b);
  EXPECT_EQ(conn.status().code(), StatusCode::kUnavailable) << conn.status().ToString();
  EXPECT_NE(conn.status().message().find("closed-b"), std::string::npos);
}

}  // namespace
}  // namespace weightport
