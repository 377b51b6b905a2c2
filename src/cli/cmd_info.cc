// weightport info: the build and the devices this process can use.
#include <iostream>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/cli_common.h"
#include "weightport/cuda/device_query.h"
#include "weightport/transport/ucx_transport.h"

namespace weightport::cli {

Command AddInfoCommand(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  auto* sub =
      app.add_subcommand("info", "Show the build (version, optional parts) and the devices available");
  sub->add_flag("--json", *json, "Print machine-readable JSON");
  return {sub, [json] {
            auto devices = CudaDevices();
            // Device memory goes to UCX directly only where UCX lists "cuda"; else it is staged.
            auto memory_types = UcxMemoryTypes();
            std::string types_text;
            if (memory_types.ok()) {
              for (const std::string& t : *memory_types) types_text += (types_text.empty() ? "" : ", ") + t;
            } else {
              types_text = "unknown (" + memory_types.status().message() + ")";
            }
            nlohmann::ordered_json j;
            j["version"] = WEIGHTPORT_VERSION;
            j["cpu_threads"] = std::thread::hardware_concurrency();
            j["cuda_build"] = CudaBuildEnabled();
            j["ucx_memory_types"] = memory_types.ok() ? *memory_types : std::vector<std::string>{};
            j["gpus"] = nlohmann::ordered_json::array();
            if (devices.ok()) {
              for (const auto& d : *devices)
                j["gpus"].push_back({{"index", d.index},
                                     {"name", d.name},
                                     {"compute_capability", std::to_string(d.compute_major) + "." +
                                                                std::to_string(d.compute_minor)},
                                     {"memory_bytes", d.total_memory}});
            } else {
              j["gpu_unavailable_reason"] = devices.status().message();
            }
            if (*json) {
              std::cout << j.dump(2) << "\n";
              return kExitOk;
            }
            std::cout << "weightport " << WEIGHTPORT_VERSION << "\n"
                      << "  CPU threads: " << std::thread::hardware_concurrency() << "\n"
                      << "  CUDA support compiled in: " << (CudaBuildEnabled() ? "yes" : "no") << "\n"
                      << "  UCX memory types: " << types_text << "\n";
            if (devices.ok()) {
              for (const auto& d : *devices)
                std::cout << "  GPU " << d.index << ": " << d.name << " (sm_" << d.compute_major
                          << d.compute_minor << ", " << HumanBytes(d.total_memory) << ")\n";
            } else {
              std::cout << "  GPUs: none (" << devices.status().message() << ")\n";
            }
            return kExitOk;
          }};
}

}  // namespace weightport::cli
