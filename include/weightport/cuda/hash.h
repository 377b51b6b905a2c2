// Chunk hashes of device memory on the GPU, bit-identical to ChunkHashes (xxh3-64 of each chunk),
// so that a rank whose weights live on the GPU can publish and verify chunk hashes without first
// copying every byte to the host.
//
// Works in every build: without CUDA compiled in it returns Unavailable saying so.
// Thread-safety: as the CUDA runtime's: any thread, any stream.
#pragma once

#include <cstddef>
#include <cstdint>

#include "weightport/core/status.h"

namespace weightport {

// xxh3-64 of each `chunk_bytes` chunk of [src, src + bytes) (the last may be shorter) into
// hashes[0 .. ceil(bytes / chunk_bytes)), device pointers (src at any alignment, hashes 8-byte
// aligned). Enqueued on `stream` (a cudaStream_t; nullptr: the default stream); returns without
// waiting. `scratch`: CudaChunkHashScratchBytes of device memory the call may use until the stream
// passes it; nullptr: allocated and freed on the stream. InvalidArgument for chunk_bytes 0 or
// misaligned hashes.
Status CudaChunkHashes(const void* src, size_t bytes, uint64_t chunk_bytes, uint64_t* hashes,
                       void* stream = nullptr, void* scratch = nullptr);
// The scratch CudaChunkHashes needs: 64 bytes per 1 KiB block of each chunk over 240 bytes (1/16).
size_t CudaChunkHashScratchBytes(size_t bytes, uint64_t chunk_bytes);

}  // namespace weightport
