// Helpers shared by the extension module's binding files: Status errors as Python exceptions,
// seconds, secrets.
#pragma once

#include <nanobind/nanobind.h>

#include <chrono>
#include <map>
#include <string>

#include "weightport/control/auth.h"
#include "weightport/core/status.h"

namespace weightport::python {

namespace nb = nanobind;

// Thrown with the GIL released; the module's translator raises the matching Python exception.
struct StatusError {
  StatusCode code;
  std::string message;
};

// The Python exception class of each code, handed over once by weightport/errors.py.
inline std::map<StatusCode, PyObject*>& ExceptionTypes() {
  static std::map<StatusCode, PyObject*> types;
  return types;
}

inline void ThrowIfError(const Status& s) {
  if (!s.ok()) throw StatusError{s.code(), s.message()};
}
template <typename T>
T Take(Result<T> r) {
  ThrowIfError(r.status());
  return std::move(*r);
}

// Seconds as milliseconds; a value no duration means (NaN, infinite, negative, past a year) is
// InvalidArgument here rather than undefined behaviour in the conversion.
inline std::chrono::milliseconds Millis(double seconds) {
  if (!(seconds >= 0 && seconds <= 86400.0 * 366))
    throw StatusError{StatusCode::kInvalidArgument,
                      "a timeout must be finite seconds from 0 to a year, not " + std::to_string(seconds)};
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

inline Secret MakeSecret(nb::bytes secret) {
  auto bytes = std::as_bytes(std::span(static_cast<const char*>(secret.data()), secret.size()));
  return Take(Secret::FromBytes(bytes, "the secret"));
}

// Registers FedServer and FedClient (fed_module.cc).
void BindFederated(nb::module_& m);

}  // namespace weightport::python
