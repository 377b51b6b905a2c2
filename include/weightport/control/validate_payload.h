// A payload of any message type checked against its type's strict decoder.
//
// Thread-safety: a pure function.
#pragma once

#include "weightport/control/protocol.h"
#include "weightport/core/status.h"

namespace weightport {

// Decodes `payload` as the payload of `type`, discarding the value: InvalidArgument if malformed.
Status ValidatePayload(MessageType type, ByteView payload);

}  // namespace weightport
