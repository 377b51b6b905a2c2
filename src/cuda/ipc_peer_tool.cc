// cuda_ipc_peer: the other process of the CUDA IPC test. Opens the handle it is given and either
// prints the xxh3-64 of the mapped bytes (read through IPC, then copied to the host) or fills them
// with one byte value (written through IPC). Exit 0 on success, 1 with the error on stderr.
//
//   cuda_ipc_peer HANDLE hash
//   cuda_ipc_peer HANDLE fill BYTE
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "weightport/core/hash.h"
#include "weightport/cuda/device_buffer.h"
#include "weightport/cuda/ipc.h"

int main(int argc, char** argv) {
  using namespace weightport;
  const std::string what = argc >= 3 ? argv[2] : "";
  if (!(argc == 3 && what == "hash") && !(argc == 4 && what == "fill")) {
    std::fprintf(stderr, "usage: cuda_ipc_peer HANDLE hash | cuda_ipc_peer HANDLE fill BYTE\n");
    return 2;
  }
  auto handle = CudaIpcHandle::FromHex(argv[1]);
  if (!handle.ok()) return std::fprintf(stderr, "%s\n", handle.status().ToString().c_str()), 1;
  auto mapping = CudaIpcMapping::Open(*handle);
  if (!mapping.ok()) return std::fprintf(stderr, "%s\n", mapping.status().ToString().c_str()), 1;
  if (what == "fill") {
    const cudaError_t err = cudaMemset(mapping->data(), std::atoi(argv[3]), mapping->size());
    const Status synced = CudaSynchronize();
    if (err != cudaSuccess || !synced.ok())
      return std::fprintf(stderr, "fill: %s %s\n", cudaGetErrorString(err), synced.ToString().c_str()), 1;
    return 0;
  }
  std::vector<std::byte> host(mapping->size());
  if (cudaError_t err = cudaMemcpy(host.data(), mapping->data(), host.size(), cudaMemcpyDeviceToHost);
      err != cudaSuccess)
    return std::fprintf(stderr, "copy: %s\n", cudaGetErrorString(err)), 1;
  std::printf("%s\n", HashToHex(Xxh3(host)).c_str());
  return 0;
}
