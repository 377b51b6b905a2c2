// Runs the weightport binary as a user would and checks exit codes, output and errors.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "weightport/core/sanitizer_build.h"

namespace weightport {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int code;
  std::string out;  // stdout and stderr together
};

CliRun Cli(const std::string& args) {
  const std::string cmd = std::string(WEIGHTPORT_CLI_PATH) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string t = (fs::temp_directory_path() / "wp-cli-XXXXXX").string();
    dir_ = mkdtemp(t.data());
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& s) const { return (fs::path(dir_) / s).string(); }
  std::string dir_;
};

TEST_F(CliTest, HelpAndUsageExitCodes) {
  CliRun r = Cli("--help");
  EXPECT_EQ(r.code, 0);
  for (const char* cmd : {"demo", "gen-model", "inspect", "manifest", "convert", "info", "publish",
                          "subscribe", "serve", "plan", "reshard"})
    EXPECT_NE(r.out.find(cmd), std::string::npos) << cmd;
  EXPECT_EQ(Cli("inspect --help").code, 0);
  EXPECT_EQ(Cli("plan --help").code, 0);
  EXPECT_EQ(Cli("plan --preset small").code, 2);  // neither --src/--dst nor --plan
  EXPECT_EQ(Cli("").code, 2);                     // no command
  EXPECT_EQ(Cli("frobnicate").code, 2);           // unknown command
  EXPECT_EQ(Cli("inspect").code, 2);              // missing argument
  EXPECT_EQ(Cli("gen-model --out x").code, 2);    // neither --preset nor --from
  EXPECT_EQ(Cli("gen-model --preset huge --out x").code, 2);
  EXPECT_EQ(Cli("gen-model --from a --out b").code, 2);  // --from needs --perturb
}

TEST_F(CliTest, GenerateInspectAndManifest) {
  CliRun gen =
      Cli("gen-model --preset tiny --arch moe --layers 1 --hidden 128 --shards 2 -q --out " + Path("m"));
  ASSERT_EQ(gen.code, 0) << gen.out;
  CliRun insp = Cli("inspect --json " + Path("m"));
  ASSERT_EQ(insp.code, 0) << insp.out;
  auto j = nlohmann::json::parse(insp.out);
  EXPECT_EQ(j["files"].size(), 2u);
  EXPECT_GT(j["num_tensors"].get<int>(), 10);
  EXPECT_EQ(j["tensors"][0]["name"], "model.embed_tokens.weight");
  EXPECT_EQ(j["tensors"][0]["dtype"], "bf16");
  EXPECT_EQ(j["tensors"][0]["xxh3"].get<std::string>().size(), 16u);
  CliRun table = Cli("inspect " + Path("m"));
  ASSERT_EQ(table.code, 0);
  EXPECT_NE(table.out.find("model.layers.0.mlp.experts.7.down_proj.weight"), std::string::npos);
  EXPECT_NE(table.out.find("tensors in 2 file(s)"), std::string::npos);

  CliRun pert = Cli("gen-model --from " + Path("m") + " --perturb 0.02 -q --out " + Path("m2"));
  ASSERT_EQ(pert.code, 0) << pert.out;
  CliRun diff = Cli("manifest " + Path("m2") + " --chunk-size 65536 --diff " + Path("m"));
  ASSERT_EQ(diff.code, 0) << diff.out;
  auto d = nlohmann::json::parse(diff.out);
  EXPECT_GT(d["changed_chunks"].get<int>(), 0);
  EXPECT_LT(d["changed_chunks"].get<int>(), d["chunks"].get<int>());
}

TEST_F(CliTest, ConvertReshardsWithoutChangingBytes) {
  ASSERT_EQ(Cli("gen-model --preset tiny --layers 1 --hidden 128 -q --out " + Path("a")).code, 0);
  ASSERT_EQ(Cli("convert -q " + Path("a") + " " + Path("b") + " --shards 3").code, 0);
  auto a = nlohmann::json::parse(Cli("inspect --json " + Path("a")).out);
  auto b = nlohmann::json::parse(Cli("inspect --json " + Path("b")).out);
  EXPECT_EQ(b["files"].size(), 3u);
  ASSERT_EQ(a["tensors"].size(), b["tensors"].size());
  for (size_t i = 0; i < a["tensors"].size(); ++i)
    EXPECT_EQ(a["tensors"][i]["xxh3"], b["tensors"][i]["xxh3"]);
  EXPECT_EQ(a["metadata"], b["metadata"]);
  // Converting into a directory that holds a checkpoint needs --force.
  EXPECT_EQ(Cli("convert -q " + Path("a") + " " + Path("b")).code, 1);
  EXPECT_EQ(Cli("convert -q --force " + Path("a") + " " + Path("b")).code, 0);
}

// Sizes and counts out of range are usage errors (exit 2) caught while parsing, before any work.
TEST_F(CliTest, RefusesBadSizesAndCountsAtParseTime) {
  const std::string out = " -q --out " + Path("g");
  for (const char* args : {"--seed -1", "--layers 0", "--layers -3", "--layers 99999999999", "--hidden 0",
                           "--arch moe --experts 0", "--shards 0", "--perturb-block 5"}) {
    CliRun r = Cli("gen-model --preset tiny " + std::string(args) + out);
    EXPECT_EQ(r.code, 2) << args << ": " << r.out;
  }
  EXPECT_NE(Cli("gen-model --preset tiny --seed -1" + out)
                .out.find("--seed: Value -1 is not an integer in [0, 2^64)"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(Path("g")));
  ASSERT_EQ(Cli("gen-model --preset tiny --layers 1 --hidden 128" + out).code, 0);
  EXPECT_EQ(Cli("manifest " + Path("g") + " --version -1").code, 2);
  EXPECT_EQ(Cli("manifest " + Path("g") + " --chunk-size 0").code, 2);
  EXPECT_EQ(Cli("convert -q " + Path("g") + " " + Path("c") + " --shards -1").code, 2);
}

// One hash per chunk: a chunk size that would make millions of chunks is refused with the size
// that fits, before anything is allocated for them (--chunk-size 1 died of std::bad_alloc).
TEST_F(CliTest, ManifestBoundsTheChunkCount) {
  ASSERT_EQ(Cli("gen-model --preset tiny --layers 1 --hidden 128 -q --out " + Path("g")).code, 0);
  CliRun r = Cli("manifest " + Path("g") + " --chunk-size 1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(Path("g") + ": --chunk-size 1 makes more than 4194304 chunks"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("use --chunk-size 2 or more"), std::string::npos) << r.out;
  EXPECT_EQ(Cli("manifest " + Path("g") + " --chunk-size 1048576 --diff " + Path("g")).code, 0);
}

// gen-model --from honours --shards (it used to keep the source's files silently).
TEST_F(CliTest, PerturbReshardsWhenAskedTo) {
  ASSERT_EQ(Cli("gen-model --preset tiny --layers 1 --hidden 128 -q --out " + Path("a")).code, 0);
  ASSERT_EQ(Cli("gen-model --from " + Path("a") + " --perturb 0.1 --shards 3 -q --out " + Path("b")).code, 0);
  auto b = nlohmann::json::parse(Cli("inspect --json --no-hash " + Path("b")).out);
  EXPECT_EQ(b["files"].size(), 3u);
  EXPECT_EQ(b["metadata"]["weightport.step"], "1");
  ASSERT_EQ(Cli("gen-model --from " + Path("b") + " --perturb 0.1 -q --out " + Path("c")).code, 0);
  EXPECT_EQ(nlohmann::json::parse(Cli("inspect --json --no-hash " + Path("c")).out)["files"].size(), 3u);
}

TEST_F(CliTest, FailuresNameTheFileAndExitOne) {
  CliRun missing = Cli("inspect " + Path("nope.safetensors"));
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.out.find("nope.safetensors"), std::string::npos) << missing.out;
  std::ofstream(Path("bad.safetensors")) << "\x10\x00\x00\x00\x00\x00\x00\x00{\"a\": 1}       ";
  CliRun bad = Cli("inspect " + Path("bad.safetensors"));
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.out.find("bad.safetensors"), std::string::npos) << bad.out;
}

TEST_F(CliTest, DemoRunsAndReportsJson) {
  CliRun demo = Cli("demo --json --preset tiny --subscribers 2 --versions 2");
  ASSERT_EQ(demo.code, 0) << demo.out;
  auto j = nlohmann::json::parse(demo.out.substr(demo.out.find("{\n")));
  EXPECT_GT(j["bytes"].get<uint64_t>(), 40'000'000u);
  ASSERT_EQ(j["versions"].size(), 2u);
  for (const auto& v : j["versions"]) {
    EXPECT_TRUE(v["verified"].get<bool>());
    EXPECT_EQ(v["subscribers_verified"].get<int>(), 2);
    EXPECT_GT(v["gbps"].get<double>(), 0.0);
    // Version 1 moves the model; version 2 (1% of elements changed) only the chunks that changed.
    const uint64_t model = j["bytes"].get<uint64_t>();
    for (const auto& s : v["subscribers"]) {
      if (v["version"] == 1) {
        EXPECT_EQ(s["bytes"].get<uint64_t>(), model);
      } else {
        EXPECT_GT(s["bytes"].get<uint64_t>(), 0u);
        EXPECT_LT(s["bytes"].get<uint64_t>(), model / 5) << "a 1% update moved most of the model";
      }
    }
    EXPECT_EQ(v["fetched_bytes_total"].get<uint64_t>(),
              v["subscribers"][0]["bytes"].get<uint64_t>() + v["subscribers"][1]["bytes"].get<uint64_t>());
  }
  EXPECT_EQ(j["peak_rss"]["subscribers"].size(), 2u);
  if (!kUnderSanitizer) EXPECT_TRUE(j["within_budget"].get<bool>()) << demo.out;
}

TEST_F(CliTest, ReshardDemoVerifiesEveryVersion) {
  CliRun demo = Cli("demo --scenario reshard --json --preset tiny --versions 2");
  ASSERT_EQ(demo.code, 0) << demo.out;
  auto j = nlohmann::json::parse(demo.out.substr(demo.out.find("{\n")));
  EXPECT_EQ(j["sources"].get<int>(), 4);
  EXPECT_EQ(j["destinations"].get<int>(), 4);
  EXPECT_TRUE(j["verified"].get<bool>());
  ASSERT_EQ(j["versions"].size(), 2u);
  for (const auto& v : j["versions"]) {
    EXPECT_TRUE(v["committed"].get<bool>());
    EXPECT_EQ(v["bytes"].get<uint64_t>(), j["bytes_per_version"].get<uint64_t>());
    EXPECT_EQ(v["destinations"].size(), 4u);
  }
}

// Ranks killed, back, replaced and added while versions flow, then a rollback: every version
// commits, the replica that came back and the one that joined late read their first version from
// their peers, and all end on version 3.
TEST_F(CliTest, MembershipDemoSurvivesKillsRejoinsAndARollback) {
  CliRun demo = Cli("demo --scenario membership --json --preset tiny");
  ASSERT_EQ(demo.code, 0) << demo.out;
  auto j = nlohmann::json::parse(demo.out.substr(demo.out.find("{\n")));
  EXPECT_TRUE(j["verified"].get<bool>());
  EXPECT_EQ(j["live_version"].get<int>(), 3);
  ASSERT_EQ(j["versions"].size(), 5u);  // 1-4 and the rollback
  for (const auto& v : j["versions"]) EXPECT_TRUE(v["committed"].get<bool>()) << v.dump();
  EXPECT_EQ(j["versions"][1]["dropped"].size(), 1u) << j["versions"][1].dump();
  EXPECT_EQ(j["versions"][2]["rejoined"].size(), 1u) << j["versions"][2].dump();
  EXPECT_EQ(j["versions"][2]["joined"].size(), 1u) << j["versions"][2].dump();
  EXPECT_EQ(j["versions"][2]["replaced_sources"].size(), 1u) << j["versions"][2].dump();
  EXPECT_EQ(j["versions"][3]["rejoined"].size(), 1u) << j["versions"][3].dump();
  EXPECT_TRUE(j["versions"][4]["rollback"].get<bool>());
  EXPECT_GE(j["newcomer"]["share_from_peers"].get<double>(), 0.9) << j["newcomer"].dump();
  EXPECT_EQ(j["newcomer"]["version"].get<int>(), 3) << j["newcomer"].dump();
  EXPECT_GE(j["returned"]["share_from_peers"].get<double>(), 0.9) << j["returned"].dump();
  // The two replicas that lived, the one started again and the one that joined late.
  ASSERT_EQ(j["ranks"].size(), 4u);
  for (const auto& r : j["ranks"]) {
    EXPECT_EQ(r["live_version"].get<int>(), 3) << r.dump();
    for (const auto& v : r["versions"]) EXPECT_TRUE(v["verified"].get<bool>()) << r.dump();
  }
}

TEST_F(CliTest, InfoReportsTheBuild) {
  CliRun info = Cli("info --json");
  ASSERT_EQ(info.code, 0) << info.out;
  auto j = nlohmann::json::parse(info.out);
  EXPECT_TRUE(j.contains("cuda_build"));
  const auto& types = j["ucx_memory_types"];
  EXPECT_NE(std::find(types.begin(), types.end(), "host"), types.end()) << info.out;
  if (j["gpus"].empty()) {
    EXPECT_TRUE(j.contains("gpu_unavailable_reason"));
  }
}

TEST_F(CliTest, TopologyShowDrawsAndWritesAGraphThatSimReadsBack) {
  CliRun r = Cli("topology show dgx-h100:nodes=2 --json --svg " + Path("t.svg") + " --dot " + Path("t.dot") +
                 " --write " + Path("t.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  auto summary = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(summary["endpoints"], 16);
  for (const char* f : {"t.svg", "t.dot", "t.json"}) EXPECT_GT(fs::file_size(Path(f)), 100u) << f;
  // A plan dumped by `plan` runs on the written graph: 1 source -> 3 replicas.
  std::ofstream(Path("src.json")) << R"({"mesh": [{"axis": "dp", "kind": "replica", "size": 1}]})";
  std::ofstream(Path("dst.json")) << R"({"mesh": [{"axis": "dp", "kind": "replica", "size": 3}]})";
  r = Cli("plan --src " + Path("src.json") + " --dst " + Path("dst.json") + " --preset tiny --dump " +
          Path("p.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  r = Cli("sim --plan " + Path("p.json") + " --topology " + Path("t.json") + " --json --plot " +
          Path("p.svg"));
  ASSERT_EQ(r.code, 0) << r.out;
  auto sim = nlohmann::json::parse(r.out.substr(r.out.find("{\n")));
  EXPECT_GT(sim["sim"]["makespan_s"].get<double>(), 0);
  EXPECT_GE(sim["sim"]["makespan_s"].get<double>(), sim["sim"]["lower_bound_s"].get<double>());
  EXPECT_GT(fs::file_size(Path("p.svg")), 500u);
}

TEST_F(CliTest, SimScenariosAndTheirErrors) {
  CliRun r = Cli("sim --scenario testbed --param receivers=3 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out.substr(r.out.find("{\n")));
  // 1 GiB over 1 Gb/s links, one relay chain: within a few percent of bytes / rate.
  EXPECT_NEAR(j["sim"]["makespan_s"].get<double>(), 8.59, 0.1);
  EXPECT_EQ(Cli("sim --list").code, 0);
  r = Cli("sim --scenario nonesuch");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("unknown scenario 'nonesuch'"), std::string::npos) << r.out;
  r = Cli("sim --scenario testbed --param recievers=3");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("unknown parameter 'recievers'"), std::string::npos) << r.out;
  r = Cli("sim --plan " + Path("missing.json") + " --topology fat-tree");
  EXPECT_EQ(r.code, 2);  // CLI11 checks the file exists
  r = Cli("topology show nonesuch-preset");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("nonesuch-preset"), std::string::npos) << r.out;
  r = Cli("topology route dgx-h100 node0/gpu0 node1/gpu1 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("spine"), std::string::npos) << "rail routing crossed a spine: " << r.out;
}

TEST_F(CliTest, HbdCompareAndSyntheticTraces) {
  CliRun r = Cli("hbd trace --nodes 300 --fault-ratio 0.05 --days 30 --out " + Path("trace.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  r = Cli("hbd compare --gpus 1152 --tp 16 --k 3 --fault-ratio 0,0.05 --samples 5 --trace " +
          Path("trace.json") + " --trace-nodes 300 --gpus-per-trace-node 4 --trace-mappings 2 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  ASSERT_EQ(j["archs"].size(), 4u);
  for (const auto& a : j["archs"]) {
    ASSERT_TRUE(a.contains("trace")) << a.dump();
    const double waste = a["at_fault_ratio"][1]["waste_mean"].get<double>();
    EXPECT_GE(waste, 0);
    EXPECT_LE(waste, 1);
    EXPECT_GT(a["cost_per_gpu"]["hbd_usd"].get<double>(), 0) << a.dump();
    EXPECT_FALSE(a.contains("sim"));
    if (a["arch"] == "dgx") {  // TP 16 does not fit: no DP group, no figure
      EXPECT_TRUE(a["at_fault_ratio"][1]["cross_tor_mean"].is_null()) << a.dump();
      continue;
    }
    const double cross = a["at_fault_ratio"][1]["cross_tor_mean"].get<double>();
    EXPECT_GE(cross, 0);
    EXPECT_LE(cross, 1);
    EXPECT_EQ(a["at_fault_ratio"][0]["cross_tor_mean"].get<double>(), 0) << a.dump();  // no faults
  }
  EXPECT_EQ(j["archs"][0]["at_fault_ratio"][0]["waste_mean"].get<double>(), 0);  // no faults
  EXPECT_GT(j["archs"][2]["trace"]["reconfigurations"].get<double>(), 0);        // tpuv4 cubes lost
  EXPECT_EQ(j["archs"][1]["trace"]["reconfigurations"].get<double>(), 0);        // nvl-72: none
  // 1,152 GPUs hold 288 of the trace's 300 servers of 4 GPUs.
  EXPECT_EQ(j["trace"]["servers"].get<int>(), 300);
  EXPECT_DOUBLE_EQ(j["archs"][0]["trace"]["trace_copies"].get<double>(), 0.96);
  const auto& waste = j["archs"][0]["trace"]["waste"];
  EXPECT_EQ(j["archs"][0]["trace"]["per_mapping"].size(), 2u);
  EXPECT_LE(waste["spread"]["min"].get<double>(), waste["mean"].get<double>());
  EXPECT_GE(waste["spread"]["max"].get<double>(), waste["mean"].get<double>());
  // Without --trace-nodes the trace's coverage is unknown: a usage error.
  r = Cli("hbd compare --trace " + Path("trace.json"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--trace-nodes"), std::string::npos) << r.out;
  // The sync and recovery simulations, on a small model.
  r =
      Cli("hbd compare --gpus 144 --tp 16 --arch infinitehbd,nvl-72,nvl-36 --fault-ratio 0 --samples 1 "
          "--model 50b --layers 2 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  for (int i : {0, 1}) {
    const auto& sim = j["archs"][i]["sim"];
    ASSERT_TRUE(sim.contains("sync_s")) << sim.dump();
    EXPECT_EQ(sim["tp"].get<int>(), 8);  // --sim-tp, whatever --tp is
    EXPECT_EQ(sim["layers"].get<int>(), 2);
    EXPECT_GE(sim["sync_s"].get<double>(), sim["sync_bound_s"].get<double>() * 0.999);
    EXPECT_GT(sim["recovery_with_optimizer_s"].get<double>(), sim["recovery_s"].get<double>());
  }
  EXPECT_TRUE(j["archs"][2]["sim"].contains("skipped"));  // no NVL-36 preset
  r = Cli("hbd compare --gpus 1152 --tp 16 --samples 2 --plot " + Path("w.svg") + " --trace " +
          Path("trace.json") + " --trace-nodes 300 --trace-plot " + Path("wt.svg"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_GT(fs::file_size(Path("w.svg")), 500u);
  EXPECT_GT(fs::file_size(Path("wt.svg")), 500u);
  r = Cli("hbd place --nodes 24 --tp 16 --k 3 --faulty 5,6,12,13,14 --json --svg " + Path("p.svg"));
  ASSERT_EQ(r.code, 0) << r.out;
  auto place = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(place["rings"].size(), 4u);
  EXPECT_EQ(place["segments"], 1);
  EXPECT_GT(fs::file_size(Path("p.svg")), 500u);
  EXPECT_EQ(Cli("hbd place --nodes 8 --faulty 9").code, 1);
  EXPECT_EQ(Cli("hbd compare --arch nvl-99").code, 1);
  EXPECT_EQ(Cli("hbd compare --fault-ratio 1.5").code, 1);
  EXPECT_EQ(Cli("hbd compare --model none --dp-policy random").code, 1);
  EXPECT_EQ(Cli("hbd compare --model 70b").code, 1);
  EXPECT_NE(Cli("hbd compare --model none --cost " + Path("missing.json")).code, 0);
}

// A TP group larger than the cluster is an error; a design none of whose domains fits in the
// cluster cannot place the job (it was reported as 0% waste).
TEST_F(CliTest, HbdImpossibleJobsAreNotZeroWaste) {
  CliRun r = Cli("hbd compare --tp 4096 --gpus 16 --model none");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("--tp 4096 is larger than the cluster (--gpus 16)"), std::string::npos) << r.out;
  r = Cli("hbd compare --tp 8 --gpus 16 --model none --samples 1 --fault-ratio 0.1 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  for (const auto& a : j["archs"]) {
    if (a["arch"] == "nvl-72" || a["arch"] == "tpuv4") {
      EXPECT_EQ(a["cannot_place"].get<std::string>().substr(0, 31),
                "16 GPUs are fewer than one " + a["arch"].get<std::string>().substr(0, 4))
          << a.dump();
      EXPECT_TRUE(a["at_fault_ratio"].empty()) << a.dump();
    } else {
      EXPECT_FALSE(a.contains("cannot_place")) << a.dump();
      EXPECT_EQ(a["at_fault_ratio"].size(), 1u) << a.dump();
    }
  }
  r = Cli("hbd compare --tp 8 --gpus 16 --model none --samples 1 --fault-ratio 0.1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("nvl-72          cannot place: 16 GPUs are fewer than one nvl-72 domain of 72"),
            std::string::npos)
      << r.out;
  // 4M nodes x 100,000 samples ran for hours; the work is counted first.
  r = Cli("hbd compare --gpus 16777216 --samples 100000 --fault-ratio 0.1 --model none");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("--samples 100000 x 1 fault ratios, each placing the 4194304 nodes of infinitehbd"),
            std::string::npos)
      << r.out;
  r = Cli("hbd place --nodes 4 --tp 64");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("--tp 64 is larger than the ring"), std::string::npos) << r.out;
}

// An empty list is an error for every list option, not an empty table (exit 0 before).
TEST_F(CliTest, EmptyListsAreRefused) {
  for (const char* args : {"hbd tor-curve --fault-ratio ''", "hbd mfu --arch ''", "hbd compare --arch ''",
                           "hbd compare --fault-ratio ''", "hbd tor-curve --arch ''"}) {
    CliRun r = Cli(args);
    EXPECT_EQ(r.code, 1) << args << ": " << r.out;
    EXPECT_NE(r.out.find("give at least one"), std::string::npos) << args << ": " << r.out;
  }
}

// hbd mfu reads a trace's mean fault ratio only: it does not sample it, and names no --sample-days.
TEST_F(CliTest, MfuNamesNoOptionItLacks) {
  // A trace so long that compare's default sampling (--sample-days 1) would take too many samples.
  std::ofstream(Path("long.json"))
      << R"([{"node_id": "n0", "event_time": 1, "event_type": "fault_start", "fault_type": "gpu"},)"
      << R"( {"node_id": "n0", "event_time": 1e7, "event_type": "fault_end", "fault_type": "gpu"}])";
  CliRun r = Cli("hbd mfu --gpus 64 --trace " + Path("long.json") + " --trace-nodes 16");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("--sample-days"), std::string::npos) << r.out;
}

// Size and count options refuse values outside their range when parsed (usage errors, exit 2).
TEST_F(CliTest, SizeOptionsAreRangeCheckedWhenParsed) {
  for (const char* args :
       {"hbd trace --days 1e9 --out x.json", "hbd trace --mean-fault-days 1e-9 --out x.json",
        "hbd trace --fault-ratio 1 --out x.json", "hbd trace --days -1 --out x.json",
        "hbd compare --sample-days 0", "hbd compare --gpus 0", "hbd compare --tp -1",
        "sim --scenario testbed --dst-offset -5", "sim --scenario testbed --quantum-us -3",
        "sim --scenario testbed --src-offset 99999999999", "sim --scenario testbed --quantum-us nan",
        "hbd place --fault-ratio nan", "hbd trace --days inf --out x.json", "hbd compare --seed -1",
        "hbd place --seed -5"}) {
    CliRun r = Cli(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.out;
  }
  std::ofstream(Path("dp2.json")) << R"({"mesh": [{"axis": "dp", "kind": "replica", "size": 2}]})";
  const std::string plan = "plan --preset tiny --src " + Path("dp2.json") + " --dst " + Path("dp2.json");
  ASSERT_EQ(Cli(plan).code, 0);
  for (const char* args :
       {" --compressor-gbps nan", " --split-bytes -1", " --split-bytes 99999999999999999999"}) {
    CliRun r = Cli(plan + args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.out;
  }
}

}  // namespace
}  // namespace weightport
