// The one mapping from UCX's ucs_status_t to weightport's Status.
#pragma once

#include <ucs/type/status.h>

#include <string_view>

#include "weightport/core/status.h"

namespace weightport::ucx {

// The StatusCode a UCX status stands for (kOk for UCS_OK; kInternal for UCS_INPROGRESS, which is
// not a result).
StatusCode UcxStatusCode(ucs_status_t status);

// A Status for a failed UCX call: "peer 'P': WHAT: <ucs_status_string> (UCS status N)", without the
// peer part when `peer` is empty. OK for UCS_OK.
Status UcxStatus(ucs_status_t status, std::string_view what, std::string_view peer = {});

// "peer 'P': " (or "" for an empty name): the prefix of every error about a peer.
std::string PeerPrefix(std::string_view peer);

}  // namespace weightport::ucx
