#include "weightport/sim/hbd/cost_model.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "weightport/core/json_util.h"

namespace weightport::sim::hbd {
namespace {

using json_util::Json;

// configs/hbd-cost.json, verbatim (a test checks that the two parse to the same values).
constexpr const char kDefaultCostJson[] = R"json(
{
  "about": "Cost (USD per unit) and typical power (W per unit) of the parts of each HBD architecture and of the shared DCN, for weightport's per-GPU cost model (include/weightport/sim/hbd/cost_model.h; the same values are built in). A source starting 'assumption:' is not a published figure and says how it was derived.",
  "parts": {
    "gpu": {"usd": 30000, "watts": 700, "source": "Hugging Face hardware pages (huggingface.co/hardware/h100 and /h200): H100 SXM 700 W, MSRP $30k; H200 700 W, $32k. TechSpot (2023, citing Raymond James via Barron's): an H100 sells for $25,000-30,000. Context only: not in the HBD or DCN sums."},
    "trx_800g": {"usd": 1250, "watts": 16, "source": "LuxOptx blog '800G Optical Module Cost Analysis: TCO Optimization for AI Data Centers' (luxoptx.com): 800G OSFP-DR8 $1,100-1,400 at volume (1000+ units), midpoint. Watts: NVIDIA MMS4X00-NS (800G twin-port OSFP DR8) specifications: 16 W typical, 17 W max (the multimode MMA4Z00-NS: 15 W)."},
    "trx_400g": {"usd": 700, "watts": 8, "source": "LuxOptx (same page): 400G QSFP-DD $600-800, midpoint. Watts: NVIDIA MMA4Z00-NS400 (400G single-port OSFP) specifications: 8 W typical, 9 W max at 400G."},
    "ocs_switch_path": {"usd": 150, "watts": 0.5, "source": "assumption: InfiniteHBD (SIGCOMM 2025) embeds a silicon-photonic optical circuit switch in each 800G transceiver (OCSTrx); no price or power is public. An OCSTrx is modelled as a trx_800g plus this adder per path its switch selects (K paths for K hops): +$150 (12% of trx_800g) for PIC area, drivers and yield; +0.5 W for thermo-optic MZI phase shifters (tens of mW each over 16 lanes) and control. At K = 2 an OCSTrx is $1,550 and 17 W."},
    "fiber": {"usd": 100, "watts": 0, "source": "LuxOptx (same page): MPO-16 trunk cables $50-150 per cable, midpoint. Passive."},
    "nvlink_switch_tray": {"usd": 28000, "watts": 1100, "source": "assumption (price; no public figure): residual of a GB200 NVL72 rack budget. The rack sells for ~$3.1M (fetchlogic.net, 'Memory now costs more than the processor in AI chips'); 72 GPUs at the gpu part's $30k are $2.16M; CPUs, compute-tray boards, NICs, power and cooling taken as ~$0.65M; the ~$0.29M left buys 9 trays and the copper backplane (9 x $28k + $40k). Watts derived from SemiAnalysis 'GB200 Hardware Architecture - Component Supply Chain & BOM' (2024) as summarised at reportify.cc: compute tray max TDP 6.3 kW, NVL72 total 123.6 kW, so (123.6 - 18 x 6.3) / 9 = 1.13 kW per switch tray (an upper bound: it includes the management switches)."},
    "nvlink_backplane": {"usd": 40000, "watts": 0, "source": "assumption (price): the passive copper NVLink cable cartridges of one 72-GPU rack (NVIDIA DGX GB200 User Guide: 'NVLink passive copper cable cartridge backplane'; chips.sanjay920.com 'Layer 06 scale-up': 5,184 NVLink cables per NVL72). No public price: ~$7.7 per assembled cable including cartridges, the rest of the rack-budget residual (see nvlink_switch_tray). Passive: 0 W."},
    "nvswitch3_chip": {"usd": 6000, "watts": 240, "source": "assumption: no public price or power for the third-generation NVSwitch (64 NVLink4 ports, 12.8 Tb/s each way). Scaled from nvlink_switch_tray: half a tray per NVLink5 switch chip (28.8 Tb/s each way), times 12.8 / 28.8: $14,000 x 0.44 = $6,200 and 550 W x 0.44 = 244 W, rounded down."},
    "ocs_port": {"usd": 600, "watts": 0.75, "source": "assumption: one port of a 136-port MEMS optical circuit switch (Google Palomar, used by TPU v4). No public price: ~$80k per switch, ~$600 per port. Power ~100 W per switch (drive and control electronics; the mirrors hold their state), 0.75 W per port. Consistent with Jouppi et al., 'TPU v4: An Optically Reconfigurable Supercomputer' (ISCA 2023): OCSes and the underlying optical components are <5% of system cost and <3% of system power."},
    "nic_400g": {"usd": 1900, "watts": 25, "source": "FS.com US (fs.com/c/nvidia-ethernet-nics-4014) lists the ConnectX-7 400G OSFP 1-port at $2,188 and NADDOD (naddod.com/collections/nvidia-networking/infiniband-adapters) the MCX75310AAS-NEAT at $1,599 (both as quoted in a public 2026 pricing note, not checked first-hand); about the midpoint. Watts: assumption, ~25 W for a PCIe Gen5 x16 400G adapter without its optic (the optic is trx_400g)."},
    "switch_port_800g": {"usd": 2350, "watts": 14.3, "source": "LuxOptx (same page as trx_800g): a 64-port 800G switch costs $150,000-250,000; low end / 64 ports. Watts: UfiSpace S9321-64E (Tomahawk 5, 64 x 800G) draws 913 W typical without transceivers (IP Infusion Tomahawk 5 platform page), / 64."}
  },
  "architectures": {
    "infinitehbd": {"ocstrx_per_gpu": 8, "tbps_per_gpu": 6.4, "source": "assumption: 8 x 800G OCSTrx per GPU (6.4 Tb/s each way, 4 per ring direction), the even count nearest NVLink5's 7.2 Tb/s so NVL-72 is compared at similar bandwidth. GPU j of a node links to GPU j of the nodes within K hops on each side (as the infinitehbd topology preset); each OCSTrx switches among K fibers, one per hop distance, so a GPU has ocstrx_per_gpu x K switch paths and ocstrx_per_gpu x K / 2 fibers (a fiber joins two OCSTrx). Transceivers carry the active ring bandwidth only: their count grows with neither K nor g."},
    "nvl": {"nvl72_switch_trays": 9, "nvl36_switch_trays": 9, "uplinks_800g_per_gpu": 9, "tbps_per_gpu": 7.2, "source": "NVIDIA GB200 NVL Multi-Node Tuning Guide: 72x1 = 18 compute trays of 4 GPUs + 9 NVLink switch trays; 36x2 = per rack 9 compute trays + 9 NVL36 switch trays. NVLink5: 900 GB/s per direction per GPU = 7.2 Tb/s. assumption for domains above 72 (NVL-576): a non-blocking two-tier NVLink Clos of NVL-72 racks (GB200 generation): first-tier trays double (half their ports go up), a second tier adds 9 trays per 72 GPUs, and each GPU's 7.2 Tb/s leaves the rack on 9 x 800G optical links (a transceiver at each end, one fiber each). Backplane per GPU = nvlink_backplane / 72 at every size (same cables per GPU)."},
    "tpuv4": {"chips_per_cube": 64, "optical_links_per_cube": 96, "tbps_per_chip": 2.4, "source": "Jouppi et al., ISCA 2023: 4x4x4 cubes of 64 chips joined by 48 OCSes (4,096 chips); a cube's 6 faces x 16 = 96 links go to the OCSes. assumption: each optical link end is one 400G-class transceiver, one fiber and one OCS port (circulators make each fiber bidirectional); the intra-cube ICI (board traces, short copper) is not priced. 2.4 Tb/s = 6 ICI links x 400 Gb/s, the tpuv4 topology preset's assumption."},
    "dgx": {"gpus_per_node": 8, "nvswitch_chips_per_node": 4, "tbps_per_gpu": 3.6, "source": "HGX/DGX H100: four third-generation NVSwitch chips on the 8-GPU baseboard (ServeTheHome, Computex 2024: four in the H100 generation, two in B200). NVLink4: 450 GB/s per direction per GPU = 3.6 Tb/s. Baseboard traces are not priced."}
  },
  "dcn": {"per_gpu": {"nic_400g": 1, "trx_400g": 1, "trx_800g": 1.5, "switch_port_800g": 1.5, "fiber": 2}, "source": "assumption: the same rail-optimised, non-blocking two-tier Clos for every architecture, one 400G ConnectX-7 per GPU (as on DGX/HGX and the topology presets). Per GPU: the NIC and its 400G optic; on the leaf half a twin-port 800G optic and half an 800G port for the downlink; the leaf uplink and its spine port add half an 800G optic and half a port at each end (1.5 of each in all); two fibers (NIC-leaf, leaf-spine)."}
}
)json";

std::string ShortNumber(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// Upper bounds, far above any real part, that keep every product and sum of the model finite and
// its dollar figures within what a 64-bit integer prints ($1e308 printed $-9223372036854775808).
constexpr double kMaxUsd = 1e9;    // per unit of a part
constexpr double kMaxWatts = 1e7;  // per unit of a part
constexpr double kMaxCount = 1e4;  // units per GPU, node or cube
constexpr double kMaxTbps = 1e4;   // per GPU or chip

// A finite number >= 0 (or > 0 when `positive`) and at most `hi` at obj[key]; errors name path.key.
Result<double> Number(const Json& obj, std::string_view key, const std::string& path, double hi,
                      bool positive = false) {
  WP_ASSIGN_OR_RETURN(double v, json_util::GetDouble(obj, key, path));
  if (!std::isfinite(v) || v < 0 || (positive && v == 0) || v > hi) {
    return InvalidArgument(path + "." + std::string(key) + ": must be a number " +
                           (positive ? "> 0" : ">= 0") + " and at most " + ShortNumber(hi) + " (got " +
                           ShortNumber(v) + ")");
  }
  return v;
}

Result<std::string> Source(const Json& obj, const std::string& path) {
  WP_ASSIGN_OR_RETURN(std::string s, json_util::GetString(obj, "source", path));
  if (s.empty()) return InvalidArgument(path + ".source: must name where the figures come from");
  return s;
}

Result<CostPart> ParsePart(const Json& obj, const std::string& name) {
  const std::string path = "parts." + name;
  WP_RETURN_IF_ERROR(json_util::CheckKeys(obj, {"usd", "watts", "source"}, path));
  CostPart p;
  p.name = name;
  WP_ASSIGN_OR_RETURN(p.usd, Number(obj, "usd", path, kMaxUsd));
  WP_ASSIGN_OR_RETURN(p.watts, Number(obj, "watts", path, kMaxWatts));
  WP_ASSIGN_OR_RETURN(p.source, Source(obj, path));
  return p;
}

Status ParseArchitectures(const Json& a, CostParams& c) {
  WP_RETURN_IF_ERROR(json_util::CheckKeys(a, {"infinitehbd", "nvl", "tpuv4", "dgx"}, "architectures"));
  std::string path = "architectures.infinitehbd";
  WP_ASSIGN_OR_RETURN(const Json* j, json_util::GetObject(a, "infinitehbd", "architectures"));
  WP_RETURN_IF_ERROR(json_util::CheckKeys(*j, {"ocstrx_per_gpu", "tbps_per_gpu", "source"}, path));
  WP_ASSIGN_OR_RETURN(c.infinitehbd.ocstrx_per_gpu, Number(*j, "ocstrx_per_gpu", path, kMaxCount));
  WP_ASSIGN_OR_RETURN(c.infinitehbd.tbps_per_gpu, Number(*j, "tbps_per_gpu", path, kMaxTbps, true));
  WP_ASSIGN_OR_RETURN(c.infinitehbd.source, Source(*j, path));

  path = "architectures.nvl";
  WP_ASSIGN_OR_RETURN(j, json_util::GetObject(a, "nvl", "architectures"));
  WP_RETURN_IF_ERROR(json_util::CheckKeys(
      *j, {"nvl72_switch_trays", "nvl36_switch_trays", "uplinks_800g_per_gpu", "tbps_per_gpu", "source"},
      path));
  WP_ASSIGN_OR_RETURN(c.nvl.nvl72_switch_trays, Number(*j, "nvl72_switch_trays", path, kMaxCount));
  WP_ASSIGN_OR_RETURN(c.nvl.nvl36_switch_trays, Number(*j, "nvl36_switch_trays", path, kMaxCount));
  WP_ASSIGN_OR_RETURN(c.nvl.uplinks_800g_per_gpu, Number(*j, "uplinks_800g_per_gpu", path, kMaxCount));
  WP_ASSIGN_OR_RETURN(c.nvl.tbps_per_gpu, Number(*j, "tbps_per_gpu", path, kMaxTbps, true));
  WP_ASSIGN_OR_RETURN(c.nvl.source, Source(*j, path));

  path = "architectures.tpuv4";
  WP_ASSIGN_OR_RETURN(j, json_util::GetObject(a, "tpuv4", "architectures"));
  WP_RETURN_IF_ERROR(json_util::CheckKeys(
      *j, {"chips_per_cube", "optical_links_per_cube", "tbps_per_chip", "source"}, path));
  WP_ASSIGN_OR_RETURN(c.tpuv4.chips_per_cube, Number(*j, "chips_per_cube", path, kMaxCount, true));
  WP_ASSIGN_OR_RETURN(c.tpuv4.optical_links_per_cube, Number(*j, "optical_links_per_cube", path, kMaxCount));
  WP_ASSIGN_OR_RETURN(c.tpuv4.tbps_per_chip, Number(*j, "tbps_per_chip", path, kMaxTbps, true));
  WP_ASSIGN_OR_RETURN(c.tpuv4.source, Source(*j, path));

  path = "architectures.dgx";
  WP_ASSIGN_OR_RETURN(j, json_util::GetObject(a, "dgx", "architectures"));
  WP_RETURN_IF_ERROR(
      json_util::CheckKeys(*j, {"gpus_per_node", "nvswitch_chips_per_node", "tbps_per_gpu", "source"}, path));
  WP_ASSIGN_OR_RETURN(c.dgx.gpus_per_node, Number(*j, "gpus_per_node", path, kMaxCount, true));
  WP_ASSIGN_OR_RETURN(c.dgx.nvswitch_chips_per_node, Number(*j, "nvswitch_chips_per_node", path, kMaxCount));
  WP_ASSIGN_OR_RETURN(c.dgx.tbps_per_gpu, Number(*j, "tbps_per_gpu", path, kMaxTbps, true));
  WP_ASSIGN_OR_RETURN(c.dgx.source, Source(*j, path));
  return Status::Ok();
}

bool KnownPart(std::string_view name) {
  for (const std::string& n : CostPartNames())
    if (n == name) return true;
  return false;
}

// Adds `count` of `part` to `lines`, `usd` and `watts`; a part missing from hand-built params is
// an error.
Status Add(const CostParams& params, std::string_view part, double count, std::vector<CostLine>& lines,
           double& usd, double& watts) {
  auto it = params.parts.find(part);
  if (it == params.parts.end())
    return InvalidArgument("hbd cost: part '" + std::string(part) + "' is missing");
  const CostLine line{std::string(part), count, count * it->second.usd, count * it->second.watts};
  usd += line.usd;
  watts += line.watts;
  lines.push_back(line);
  return Status::Ok();
}

}  // namespace

std::vector<std::string> CostPartNames() {
  return {"gpu",      "trx_800g",           "trx_400g",         "ocs_switch_path",
          "fiber",    "nvlink_switch_tray", "nvlink_backplane", "nvswitch3_chip",
          "ocs_port", "nic_400g",           "switch_port_800g"};
}

Result<CostParams> ParseCostParams(const nlohmann::json& json) {
  WP_RETURN_IF_ERROR(json_util::CheckKeys(json, {"about", "parts", "architectures", "dcn"}, "hbd cost"));
  if (json.contains("about") && !json["about"].is_string()) return InvalidArgument("about: must be a string");
  CostParams c;
  WP_ASSIGN_OR_RETURN(const Json* parts, json_util::GetObject(json, "parts", "hbd cost"));
  for (const auto& [name, value] : parts->items()) {
    if (!KnownPart(name)) return InvalidArgument("parts: unknown part '" + name + "'");
  }
  for (const std::string& name : CostPartNames()) {
    WP_ASSIGN_OR_RETURN(const Json* p, json_util::GetObject(*parts, name, "parts"));
    WP_ASSIGN_OR_RETURN(CostPart part, ParsePart(*p, name));
    c.parts.emplace(name, std::move(part));
  }
  WP_ASSIGN_OR_RETURN(const Json* arch, json_util::GetObject(json, "architectures", "hbd cost"));
  WP_RETURN_IF_ERROR(ParseArchitectures(*arch, c));

  WP_ASSIGN_OR_RETURN(const Json* dcn, json_util::GetObject(json, "dcn", "hbd cost"));
  WP_RETURN_IF_ERROR(json_util::CheckKeys(*dcn, {"per_gpu", "source"}, "dcn"));
  WP_ASSIGN_OR_RETURN(const Json* per_gpu, json_util::GetObject(*dcn, "per_gpu", "dcn"));
  for (const auto& [name, value] : per_gpu->items()) {
    if (!KnownPart(name)) return InvalidArgument("dcn.per_gpu: unknown part '" + name + "'");
    WP_ASSIGN_OR_RETURN(double count, Number(*per_gpu, name, "dcn.per_gpu", kMaxCount));
    c.dcn.per_gpu.emplace(name, count);
  }
  WP_ASSIGN_OR_RETURN(c.dcn.source, Source(*dcn, "dcn"));
  return c;
}

Result<CostParams> LoadCostParams(const std::string& path) {
  WP_ASSIGN_OR_RETURN(Json json, json_util::ParseFile(path));
  Result<CostParams> params = ParseCostParams(json);
  if (!params.ok()) return params.status().WithContext(path);
  return params;
}

const CostParams& DefaultCostParams() {
  static const CostParams kDefaults = [] {
    Result<Json> json = json_util::Parse(kDefaultCostJson, "built-in hbd cost parameters");
    Result<CostParams> params = json.ok() ? ParseCostParams(*json) : Result<CostParams>(json.status());
    if (!params.ok()) {  // a bug in the embedded text; the shipped-file test catches it first
      std::fprintf(stderr, "weightport: %s\n", params.status().ToString().c_str());
      std::abort();
    }
    return std::move(params).value();
  }();
  return kDefaults;
}

Result<ArchCost> CostPerGpu(const ArchSpec& arch, const CostParams& params) {
  ArchCost r;
  double& usd = r.hbd_usd_per_gpu;
  double& watts = r.hbd_watts_per_gpu;
  std::vector<CostLine>& lines = r.hbd_lines;
  switch (arch.kind) {
    case ArchKind::kInfiniteHbd: {
      if (arch.k < 1)
        return InvalidArgument(arch.name + ": k must be >= 1 (got " + std::to_string(arch.k) + ")");
      if (arch.gpus_per_node < 1) return InvalidArgument(arch.name + ": GPUs per node must be >= 1");
      const double trx = params.infinitehbd.ocstrx_per_gpu;
      WP_RETURN_IF_ERROR(Add(params, "trx_800g", trx, lines, usd, watts));
      WP_RETURN_IF_ERROR(Add(params, "ocs_switch_path", trx * arch.k, lines, usd, watts));
      WP_RETURN_IF_ERROR(Add(params, "fiber", trx * arch.k / 2, lines, usd, watts));
      r.hbd_tbps_per_gpu = params.infinitehbd.tbps_per_gpu;
      break;
    }
    case ArchKind::kNvl: {
      const int n = arch.domain_gpus;
      const CostParams::Nvl& p = params.nvl;
      if (n == 36 || n == 72) {
        const double trays = (n == 36 ? p.nvl36_switch_trays : p.nvl72_switch_trays) / n;
        WP_RETURN_IF_ERROR(Add(params, "nvlink_switch_tray", trays, lines, usd, watts));
      } else if (n > 72 && n % 72 == 0) {
        WP_RETURN_IF_ERROR(
            Add(params, "nvlink_switch_tray", 3 * p.nvl72_switch_trays / 72, lines, usd, watts));
        WP_RETURN_IF_ERROR(Add(params, "trx_800g", 2 * p.uplinks_800g_per_gpu, lines, usd, watts));
        WP_RETURN_IF_ERROR(Add(params, "fiber", p.uplinks_800g_per_gpu, lines, usd, watts));
      } else {
        return InvalidArgument(arch.name + ": no cost model for an NVLink domain of " + std::to_string(n) +
                               " GPUs (36, 72, or a multiple of 72 above it)");
      }
      WP_RETURN_IF_ERROR(Add(params, "nvlink_backplane", 1.0 / 72, lines, usd, watts));
      r.hbd_tbps_per_gpu = p.tbps_per_gpu;
      break;
    }
    case ArchKind::kTpuV4: {
      const CostParams::TpuV4& p = params.tpuv4;
      if (arch.domain_gpus != p.chips_per_cube) {
        return InvalidArgument(arch.name + ": cube of " + std::to_string(arch.domain_gpus) +
                               " chips, but the cost parameters describe cubes of " +
                               ShortNumber(p.chips_per_cube));
      }
      const double links = p.optical_links_per_cube / p.chips_per_cube;
      for (const char* part : {"trx_400g", "ocs_port", "fiber"})
        WP_RETURN_IF_ERROR(Add(params, part, links, lines, usd, watts));
      r.hbd_tbps_per_gpu = p.tbps_per_chip;
      break;
    }
    case ArchKind::kDgx: {
      const CostParams::Dgx& p = params.dgx;
      if (arch.gpus_per_node != p.gpus_per_node) {
        return InvalidArgument(arch.name + ": nodes of " + std::to_string(arch.gpus_per_node) +
                               " GPUs, but the cost parameters describe nodes of " +
                               ShortNumber(p.gpus_per_node));
      }
      WP_RETURN_IF_ERROR(
          Add(params, "nvswitch3_chip", p.nvswitch_chips_per_node / p.gpus_per_node, lines, usd, watts));
      r.hbd_tbps_per_gpu = p.tbps_per_gpu;
      break;
    }
  }
  for (const auto& [part, count] : params.dcn.per_gpu)
    WP_RETURN_IF_ERROR(Add(params, part, count, r.dcn_lines, r.dcn_usd_per_gpu, r.dcn_watts_per_gpu));
  auto gpu = params.parts.find("gpu");
  if (gpu != params.parts.end()) r.gpu_usd = gpu->second.usd, r.gpu_watts = gpu->second.watts;
  return r;
}

}  // namespace weightport::sim::hbd
