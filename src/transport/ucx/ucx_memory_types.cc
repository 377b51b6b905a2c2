// UcxMemoryTypes: what memory UCX here can register, from a short-lived context of its own.
#include <ucp/api/ucp.h>
#include <ucs/memory/memory_type.h>

#include <memory>

#include "ucx_internal.h"
#include "ucx_status.h"
#include "weightport/transport/ucx_transport.h"

namespace weightport {

std::vector<std::string> ucx::MemoryTypeNames(uint64_t mask) {
  std::vector<std::string> out;
  for (int t = UCS_MEMORY_TYPE_HOST; t < UCS_MEMORY_TYPE_LAST; ++t)
    if (mask & UCS_BIT(t)) out.emplace_back(ucs_memory_type_names[t]);
  return out;
}

Result<std::vector<std::string>> UcxMemoryTypes() {
  ucp_config_t* raw_config = nullptr;
  if (ucs_status_t s = ucp_config_read(nullptr, nullptr, &raw_config); s != UCS_OK)
    return ucx::UcxStatus(s, "ucx memory types: ucp_config_read");
  std::unique_ptr<ucp_config_t, void (*)(ucp_config_t*)> config(raw_config, ucp_config_release);
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA;
  ucp_context_h raw_context = nullptr;
  if (ucs_status_t s = ucp_init(&params, config.get(), &raw_context); s != UCS_OK)
    return ucx::UcxStatus(s, "ucx memory types: ucp_init");
  std::unique_ptr<std::remove_pointer_t<ucp_context_h>, void (*)(ucp_context_h)> context(raw_context,
                                                                                         ucp_cleanup);
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucs_status_t s = ucp_context_query(context.get(), &attr); s != UCS_OK)
    return ucx::UcxStatus(s, "ucx memory types: ucp_context_query");
  return ucx::MemoryTypeNames(attr.memory_types);
}

Status UcxTakesCudaMemory() {
  WP_ASSIGN_OR_RETURN(std::vector<std::string> types, UcxMemoryTypes());
  std::string names;
  for (const std::string& t : types) {
    if (t == "cuda") return Status::Ok();
    names += (names.empty() ? "" : ", ") + t;
  }
  return FailedPrecondition(
      "this UCX is built without CUDA (memory types: " + names +
      "); scripts/setup --ucx-cuda, then cmake -DWEIGHTPORT_UCX_ROOT=.deps/ucx-cuda/libucx");
}

}  // namespace weightport
