#include "transport/ucx/ucx_status.h"

#include <string>

namespace weightport::ucx {

StatusCode UcxStatusCode(ucs_status_t status) {
  if (UCS_IS_LINK_ERROR(status) || UCS_IS_ENDPOINT_ERROR(status)) return StatusCode::kUnavailable;
  switch (status) {
    case UCS_OK:
      return StatusCode::kOk;
    case UCS_ERR_CANCELED:
      return StatusCode::kCancelled;
    case UCS_ERR_TIMED_OUT:
      return StatusCode::kTimeout;
    // The peer is gone or cannot be reached: retrying (after reconnecting) may help.
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_REJECTED:
    case UCS_ERR_SOME_CONNECTS_FAILED:
    case UCS_ERR_BUSY:
      return StatusCode::kUnavailable;
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT:
      return StatusCode::kResourceExhausted;
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
    case UCS_ERR_MESSAGE_TRUNCATED:
      return StatusCode::kInvalidArgument;
    case UCS_ERR_OUT_OF_RANGE:
    case UCS_ERR_BUFFER_TOO_SMALL:
      return StatusCode::kOutOfRange;
    case UCS_ERR_NO_ELEM:
    case UCS_ERR_NO_MESSAGE:
    case UCS_ERR_NO_DEVICE:
      return StatusCode::kNotFound;
    case UCS_ERR_ALREADY_EXISTS:
      return StatusCode::kAlreadyExists;
    case UCS_ERR_UNSUPPORTED:
    case UCS_ERR_NOT_IMPLEMENTED:
      return StatusCode::kUnimplemented;
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_SHMEM_SEGMENT:
      return StatusCode::kIoError;
    default:  // UCS_INPROGRESS, UCS_ERR_NO_PROGRESS, unknown codes
      return StatusCode::kInternal;
  }
}

std::string PeerPrefix(std::string_view peer) {
  if (peer.empty()) return {};
  return "peer '" + std::string(peer) + "': ";
}

Status UcxStatus(ucs_status_t status, std::string_view what, std::string_view peer) {
  if (status == UCS_OK) return Status::Ok();
  std::string message = PeerPrefix(peer);
  message += what;
  message += ": ";
  message += ucs_status_string(status);
  message += " (UCS status " + std::to_string(static_cast<int>(status)) + ")";
  return Status(UcxStatusCode(status), std::move(message));
}

}  // namespace weightport::ucx
