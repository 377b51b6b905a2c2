// The UCX case of bench_cuda: GPU memory registered with a CUDA-aware UCX and moved by UCX itself.
#pragma once

#include <nlohmann/json.hpp>

#include "weightport/core/status.h"
#include "weightport/cuda/device_buffer.h"

namespace weightport::bench {

// Two UCX transports in this process (UCX's default transports: cuda_copy and cuda_ipc where UCX has
// CUDA), `src` registered with one and `dst` (at least as large) with the other: times a Put of all
// of `src` and its Flush, alternating with a device copy of the same bytes; {"put_gbps",
// "copy_gbps", "ratio"} (bytes read plus written per second, GB = 1e9, medians of `runs`).
// FailedPrecondition naming UCX's memory types when this UCX cannot take device memory.
Result<nlohmann::json> MeasureUcxPut(const DeviceBuffer& src, const DeviceBuffer& dst, int runs);

}  // namespace weightport::bench
