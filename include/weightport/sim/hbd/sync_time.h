// Weight movement per HBD architecture, simulated on its topology preset: a global sync of a 50B
// dense model (one TP group broadcasts to every replica, the weight-publish step) and the refill
// of a replacement node from its data-parallel peers (weights alone, and with fp32 master weights
// and Adam moments).
#pragma once

#include <string>

#include "weightport/core/status.h"
#include "weightport/sim/hbd/architecture.h"

namespace weightport::sim::hbd {

struct SyncTimes {
  std::string preset;  // the topology preset simulated
  int gpus = 0;
  int tp = 0;  // the job's TP, or the largest the architecture's HBD holds (DGX: 8)
  double sync_s = 0, sync_bound_s = 0;
  double recovery_s = 0;            // the replacement node's weights
  double recovery_optimizer_s = 0;  // weights, master copy and moments (7x the bytes)
};

// The topology preset that models an architecture; NotFound for those without one (nvl-36,
// nvl-576: the NVL-72 preset has a fixed rack).
Result<std::string> ArchPreset(const ArchSpec& arch);

// `layers` sizes the model (56: ~50B parameters). gpus is rounded down to a multiple of the TP.
Result<SyncTimes> SimulateSyncAndRecovery(const ArchSpec& arch, int gpus, int tp, int layers = 56);

}  // namespace weightport::sim::hbd
