// Arenas: the few large registered buffers a process keeps its weights in, so that a model of
// thousands of tensors costs one memory registration, not one per tensor. Tensors sit in an arena
// at their Manifest offsets (the version's flat byte space), so a publisher's and a subscriber's
// arenas have the same layout and a chunk has the same offset on both sides.
//
// Thread-safety: AllocateArena and RegisterArena call the transport, so they run on the transport's
// loop thread (ProgressLoop::Call). The region they return may be read and written from any thread.
#pragma once

#include <cstddef>
#include <memory>

#include "weightport/core/status.h"
#include "weightport/transport/transport.h"

namespace weightport {

// Allocates `size` bytes (zero-filled) that peers may access, registered once with `transport`.
// With a UCX transport the memory comes from UcxAllocate, so a same-host peer maps it and moves
// data with one memcpy; with any other transport it is an anonymous mapping that is then
// registered. The region owns the memory. `what` names the arena in errors.
Result<std::unique_ptr<MemoryRegion>> AllocateArena(Transport& transport, size_t size, const char* what);

// Registers existing memory [data, data + size) once (e.g. a VersionedStore buffer), for use as the
// local side of Gets. The memory must outlive the region.
Result<std::unique_ptr<MemoryRegion>> RegisterArena(Transport& transport, void* data, size_t size,
                                                    const char* what);

}  // namespace weightport
