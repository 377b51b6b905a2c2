#include "weightport/sim/hbd/cost_model.h"

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace weightport::sim::hbd {
namespace {

using nlohmann::json;

// Round numbers so every figure below can be checked by hand.
json SmallParams() {
  auto part = [](double usd, double watts) {
    return json{{"usd", usd}, {"watts", watts}, {"source", "test"}};
  };
  return json{
      {"parts",
       {{"gpu", part(1000, 100)},
        {"trx_800g", part(10, 1)},
        {"trx_400g", part(5, 0.5)},
        {"ocs_switch_path", part(2, 0.25)},
        {"fiber", part(1, 0)},
        {"nvlink_switch_tray", part(720, 72)},
        {"nvlink_backplane", part(144, 0)},
        {"nvswitch3_chip", part(16, 4)},
        {"ocs_port", part(3, 0.1)},
        {"nic_400g", part(50, 5)},
        {"switch_port_800g", part(20, 2)}}},
      {"architectures",
       {{"infinitehbd", {{"ocstrx_per_gpu", 4}, {"tbps_per_gpu", 3.2}, {"source", "test"}}},
        {"nvl",
         {{"nvl72_switch_trays", 9},
          {"nvl36_switch_trays", 9},
          {"uplinks_800g_per_gpu", 9},
          {"tbps_per_gpu", 7.2},
          {"source", "test"}}},
        {"tpuv4",
         {{"chips_per_cube", 64}, {"optical_links_per_cube", 96}, {"tbps_per_chip", 2.4}, {"source", "t"}}},
        {"dgx",
         {{"gpus_per_node", 8}, {"nvswitch_chips_per_node", 4}, {"tbps_per_gpu", 3.6}, {"source", "t"}}}}},
      {"dcn",
       {{"per_gpu",
         {{"nic_400g", 1}, {"trx_400g", 1}, {"trx_800g", 1.5}, {"switch_port_800g", 1.5}, {"fiber", 2}}},
        {"source", "test"}}}};
}

CostParams Small() {
  Result<CostParams> p = ParseCostParams(SmallParams());
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : CostParams{};
}

ArchCost Cost(const std::string& name, const CostParams& params, int k = 2) {
  Result<ArchSpec> arch = MakeArch(name, k);
  EXPECT_TRUE(arch.ok()) << arch.status().ToString();
  Result<ArchCost> cost = CostPerGpu(*arch, params);
  EXPECT_TRUE(cost.ok()) << cost.status().ToString();
  return cost.ok() ? *cost : ArchCost{};
}

std::string ErrorOf(const json& j) {
  Result<CostParams> p = ParseCostParams(j);
  EXPECT_FALSE(p.ok());
  return p.ok() ? "" : p.status().message();
}

TEST(CostModel, ShippedFileEqualsBuiltInDefaults) {
  Result<CostParams> file = LoadCostParams(std::string(WEIGHTPORT_SOURCE_DIR) + "/configs/hbd-cost.json");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_TRUE(*file == DefaultCostParams());
  EXPECT_EQ(DefaultCostParams().parts.size(), CostPartNames().size());
  for (const auto& [name, part] : DefaultCostParams().parts) EXPECT_FALSE(part.source.empty()) << name;
}

TEST(CostModel, HandComputedPerGpuFigures) {
  const CostParams p = Small();
  // 4 OCSTrx x ($10 + 2 paths x $2) + 4 x 2 / 2 fibers x $1; 4 x 1 W + 8 x 0.25 W.
  ArchCost ring = Cost("infinitehbd", p, 2);
  EXPECT_DOUBLE_EQ(ring.hbd_usd_per_gpu, 60);
  EXPECT_DOUBLE_EQ(ring.hbd_watts_per_gpu, 6);
  EXPECT_DOUBLE_EQ(ring.hbd_tbps_per_gpu, 3.2);
  ASSERT_EQ(ring.hbd_lines.size(), 3u);
  EXPECT_EQ(ring.hbd_lines[1].part, "ocs_switch_path");
  EXPECT_DOUBLE_EQ(ring.hbd_lines[1].count, 8);
  EXPECT_DOUBLE_EQ(ring.hbd_lines[2].count, 4);  // fibers
  ArchCost ring3 = Cost("infinitehbd", p, 3);    // 40 + 12 x 2 + 6 x 1
  EXPECT_DOUBLE_EQ(ring3.hbd_usd_per_gpu, 70);
  EXPECT_DOUBLE_EQ(ring3.hbd_watts_per_gpu, 7);
  // 9 trays / 72 x $720 + $144 / 72; 0.125 x 72 W.
  ArchCost nvl72 = Cost("nvl-72", p);
  EXPECT_DOUBLE_EQ(nvl72.hbd_usd_per_gpu, 92);
  EXPECT_DOUBLE_EQ(nvl72.hbd_watts_per_gpu, 9);
  ArchCost nvl36 = Cost("nvl-36", p);  // 9 / 36 x 720 + 2
  EXPECT_DOUBLE_EQ(nvl36.hbd_usd_per_gpu, 182);
  EXPECT_DOUBLE_EQ(nvl36.hbd_watts_per_gpu, 18);
  // 3 x 9 / 72 trays x 720 + 18 x $10 optics + 9 fibers + 2; 27 W + 18 W.
  ArchCost nvl576 = Cost("nvl-576", p);
  EXPECT_DOUBLE_EQ(nvl576.hbd_usd_per_gpu, 461);
  EXPECT_DOUBLE_EQ(nvl576.hbd_watts_per_gpu, 45);
  ArchCost tpu = Cost("tpuv4", p);  // 96 / 64 x ($5 + $3 + $1); 1.5 x (0.5 + 0.1) W
  EXPECT_DOUBLE_EQ(tpu.hbd_usd_per_gpu, 13.5);
  EXPECT_NEAR(tpu.hbd_watts_per_gpu, 0.9, 1e-12);
  EXPECT_DOUBLE_EQ(tpu.hbd_tbps_per_gpu, 2.4);
  ArchCost dgx = Cost("dgx", p);  // 4 / 8 x $16
  EXPECT_DOUBLE_EQ(dgx.hbd_usd_per_gpu, 8);
  EXPECT_DOUBLE_EQ(dgx.hbd_watts_per_gpu, 2);
  // DCN, the same for all: 50 + 5 + 1.5 x 10 + 1.5 x 20 + 2 x 1; 5 + 0.5 + 1.5 + 3 W.
  for (const ArchCost& c : {ring, ring3, nvl72, nvl36, nvl576, tpu, dgx}) {
    EXPECT_DOUBLE_EQ(c.dcn_usd_per_gpu, 102);
    EXPECT_DOUBLE_EQ(c.dcn_watts_per_gpu, 10);
    EXPECT_EQ(c.dcn_lines.size(), 5u);
    EXPECT_DOUBLE_EQ(c.gpu_usd, 1000);
    EXPECT_DOUBLE_EQ(c.gpu_watts, 100);
  }
}

TEST(CostModel, InfiniteHbdCostGrowsWithK) {
  for (const CostParams& p : {Small(), DefaultCostParams()}) {
    double last = 0, last_watts = 0;
    for (int k = 1; k <= 4; ++k) {
      ArchCost c = Cost("infinitehbd", p, k);
      EXPECT_GT(c.hbd_usd_per_gpu, last) << k;
      EXPECT_GT(c.hbd_watts_per_gpu, last_watts) << k;
      last = c.hbd_usd_per_gpu, last_watts = c.hbd_watts_per_gpu;
    }
  }
  // The node size does not change the per-GPU count.
  ArchCost g4 = Cost("infinitehbd", Small(), 2);
  Result<ArchSpec> g8 = MakeArch("infinitehbd", 2, 8);
  ASSERT_TRUE(g8.ok());
  EXPECT_DOUBLE_EQ(CostPerGpu(*g8, Small())->hbd_usd_per_gpu, g4.hbd_usd_per_gpu);
}

TEST(CostModel, DefaultsPriceEveryArchitecture) {
  for (const std::string& name : ArchNames()) {
    ArchCost c = Cost(name, DefaultCostParams());
    EXPECT_GT(c.hbd_usd_per_gpu, 0) << name;
    EXPECT_GT(c.hbd_watts_per_gpu, 0) << name;
    EXPECT_GT(c.dcn_usd_per_gpu, 0) << name;
    EXPECT_GT(c.hbd_tbps_per_gpu, 0) << name;
  }
}

TEST(CostModel, NvlDomainSizes) {
  ArchSpec a = *MakeArch("nvl-72");
  a.domain_gpus = 144;  // two racks: the two-tier formula, per GPU the same as 576
  EXPECT_DOUBLE_EQ(CostPerGpu(a, Small())->hbd_usd_per_gpu, 461);
  a.domain_gpus = 100;
  Result<ArchCost> bad = CostPerGpu(a, Small());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("100 GPUs"), std::string::npos) << bad.status().message();
}

TEST(CostModel, ArchitectureMustMatchTheParameters) {
  ArchSpec tpu = *MakeArch("tpuv4");
  tpu.domain_gpus = 32;
  Result<ArchCost> r = CostPerGpu(tpu, Small());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cubes of 64"), std::string::npos) << r.status().message();
  ArchSpec dgx = *MakeArch("dgx");
  dgx.gpus_per_node = 4;
  EXPECT_FALSE(CostPerGpu(dgx, Small()).ok());
  CostParams missing = Small();
  missing.parts.erase("fiber");
  Result<ArchCost> m = CostPerGpu(*MakeArch("tpuv4"), missing);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("'fiber'"), std::string::npos) << m.status().message();
}

TEST(CostModel, FiguresPastAnyRealPartAreRefused) {
  // $1e308 a part printed $-9223372036854775808 and inf%; 1e18 transceivers and 2^63 trays passed.
  json j = SmallParams();
  j["parts"]["trx_800g"]["usd"] = 1e308;
  EXPECT_EQ(ErrorOf(j), "parts.trx_800g.usd: must be a number >= 0 and at most 1e+09 (got 1e+308)");
  // Each of the others: the key, the value, the start of its error.
  const struct {
    const char* a;
    const char* b;
    const char* c;
    double value;
    const char* error;
  } cases[] = {
      {"parts", "nic_400g", "watts", 1e12, "parts.nic_400g.watts: must be a number >= 0 and at most 1e+07"},
      {"architectures", "infinitehbd", "ocstrx_per_gpu", 1e18,
       "ocstrx_per_gpu: must be a number >= 0 and at most 10000"},
      {"architectures", "nvl", "nvl72_switch_trays", 9223372036854775807.0,
       "nvl72_switch_trays: must be a number >= 0 and at most 10000"},
      {"architectures", "dgx", "tbps_per_gpu", 1e300, "dgx.tbps_per_gpu"},
      {"dcn", "per_gpu", "fiber", 1e9, "dcn.per_gpu.fiber: must be a number >= 0 and at most 10000"},
  };
  for (const auto& c : cases) {
    j = SmallParams();
    j[c.a][c.b][c.c] = c.value;
    EXPECT_NE(ErrorOf(j).find(c.error), std::string::npos) << ErrorOf(j);
  }
}

TEST(CostModel, ParseErrorsNameTheKey) {
  json j = SmallParams();
  j["extra"] = 1;
  EXPECT_NE(ErrorOf(j).find("'extra'"), std::string::npos);

  j = SmallParams();
  j["parts"]["laser"] = j["parts"]["fiber"];
  EXPECT_NE(ErrorOf(j).find("'laser'"), std::string::npos);

  j = SmallParams();
  j["parts"].erase("fiber");
  EXPECT_NE(ErrorOf(j).find("'fiber' is missing"), std::string::npos) << ErrorOf(j);

  j = SmallParams();
  j["parts"]["trx_800g"].erase("watts");
  EXPECT_EQ(ErrorOf(j), "parts.trx_800g: field 'watts' is missing");

  j = SmallParams();
  j["parts"]["trx_800g"]["usd"] = -5;
  EXPECT_EQ(ErrorOf(j), "parts.trx_800g.usd: must be a number >= 0 and at most 1e+09 (got -5)");

  j = SmallParams();
  j["parts"]["ocs_port"]["usd"] = "cheap";
  EXPECT_NE(ErrorOf(j).find("parts.ocs_port: field 'usd' must be a number"), std::string::npos) << ErrorOf(j);

  j = SmallParams();
  j["parts"]["gpu"]["source"] = "";
  EXPECT_NE(ErrorOf(j).find("parts.gpu.source"), std::string::npos) << ErrorOf(j);

  j = SmallParams();
  j["parts"]["gpu"]["note"] = "x";
  EXPECT_EQ(ErrorOf(j), "parts.gpu: unknown field 'note'");

  j = SmallParams();
  j["architectures"]["nvl"]["nvl144_switch_trays"] = 9;
  EXPECT_EQ(ErrorOf(j), "architectures.nvl: unknown field 'nvl144_switch_trays'");

  j = SmallParams();
  j["architectures"]["tpuv4"]["chips_per_cube"] = 0;
  EXPECT_EQ(ErrorOf(j), "architectures.tpuv4.chips_per_cube: must be a number > 0 and at most 10000 (got 0)");

  j = SmallParams();
  j["architectures"]["infinitehbd"]["ocstrx_per_gpu"] = -1;
  EXPECT_NE(ErrorOf(j).find("architectures.infinitehbd.ocstrx_per_gpu"), std::string::npos);

  j = SmallParams();
  j["architectures"].erase("dgx");
  EXPECT_NE(ErrorOf(j).find("'dgx' is missing"), std::string::npos) << ErrorOf(j);

  j = SmallParams();
  j["dcn"]["per_gpu"]["router"] = 1;
  EXPECT_EQ(ErrorOf(j), "dcn.per_gpu: unknown part 'router'");

  j = SmallParams();
  j["dcn"]["per_gpu"]["fiber"] = -2;
  EXPECT_EQ(ErrorOf(j), "dcn.per_gpu.fiber: must be a number >= 0 and at most 10000 (got -2)");
}

}  // namespace
}  // namespace weightport::sim::hbd
