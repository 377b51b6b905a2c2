// For the GPU benchmarks: the time of one call, counted until its work on the device is done.
#pragma once

#include "bench_util.h"
#include "weightport/core/status.h"
#include "weightport/cuda/device_buffer.h"

namespace weightport::bench {

// Seconds of one call, after it finished on the device.
template <typename F>
Result<double> Timed(F&& call) {
  const auto t0 = Clock::now();
  WP_RETURN_IF_ERROR(call());
  WP_RETURN_IF_ERROR(CudaSynchronize());
  return Seconds(Clock::now() - t0);
}

}  // namespace weightport::bench
