#include <memory>
#include <string>

#include "transport/ucx/ucx_internal.h"
#include "transport/ucx/ucx_status.h"

namespace weightport::ucx {

Result<std::unique_ptr<UcxRegion>> UcxRegion::Map(std::shared_ptr<Context> context, void* data, size_t size,
                                                  uint64_t region_id, bool allocate) {
  ucp_mem_h memh = nullptr;
  if (size > 0) {
    ucp_mem_map_params_t params{};
    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    params.length = size;
    if (allocate) {
      params.field_mask |= UCP_MEM_MAP_PARAM_FIELD_FLAGS;
      params.flags = UCP_MEM_MAP_ALLOCATE;
    } else {
      params.field_mask |= UCP_MEM_MAP_PARAM_FIELD_ADDRESS;
      params.address = data;
    }
    const ucs_status_t status = ucp_mem_map(context->handle, &params, &memh);
    if (status != UCS_OK)
      return UcxStatus(status, std::string(allocate ? "allocate" : "register") + " (ucp_mem_map of " +
                                   std::to_string(size) + " bytes)");
    if (allocate) {
      ucp_mem_attr_t attr{};
      attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
      const ucs_status_t query = ucp_mem_query(memh, &attr);
      if (query != UCS_OK) {
        ucp_mem_unmap(context->handle, memh);
        return UcxStatus(query, "allocate (ucp_mem_query)");
      }
      data = attr.address;
    }
  }
  // From here the region owns memh, and unmaps it on any error below.
  std::unique_ptr<UcxRegion> region(
      new UcxRegion(context, static_cast<std::byte*>(data), size, memh, allocate));
  Bytes ucp_rkey;
  if (memh != nullptr) {
    void* packed = nullptr;
    size_t packed_size = 0;
    const ucs_status_t status = ucp_rkey_pack(context->handle, memh, &packed, &packed_size);
    if (status != UCS_OK) return UcxStatus(status, "register (ucp_rkey_pack)");
    const auto* bytes = static_cast<const std::byte*>(packed);
    ucp_rkey.assign(bytes, bytes + packed_size);
    ucp_rkey_buffer_release(packed);
  }
  region->key_.address = reinterpret_cast<uintptr_t>(region->data_);
  region->key_.length = size;
  region->key_.packed = EncodeKey(context->transport_id, region_id, ucp_rkey);
  return region;
}

UcxRegion::~UcxRegion() {
  // Deregisters (and, for UcxAllocate, frees: once the worker is gone, see Context::Retire). Peers
  // that mapped a shm segment keep their mapping until they destroy their rkey; the memory is
  // returned to the system after that. Registered memory the caller owns is deregistered at once:
  // the caller frees it next.
  if (memh_ == nullptr) return;
  if (allocated_) {
    context_->Retire(memh_);
  } else {
    ucp_mem_unmap(context_->handle, memh_);
  }
}

}  // namespace weightport::ucx
