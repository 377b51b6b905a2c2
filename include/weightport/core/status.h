// Status and Result<T>: the one error type of weightport.
//
// A Status is cheap when OK (one null pointer) and carries a code plus a message that names what
// failed (file, tensor, rank, peer). Result<T> holds either a value or a non-OK Status. Both are
// [[nodiscard]]: an ignored error is a compile warning. No exceptions cross an API boundary.
//
// Thread-safety: immutable after construction; copies may be used from any thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace weightport {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,  // bad input from the caller or a file: malformed, out of range
  kNotFound,         // a named thing (file, tensor, peer) does not exist
  kAlreadyExists,
  kOutOfRange,
  kFailedPrecondition,  // the system is not in a state for this call
  kDataLoss,            // corrupt data: bad hash, truncated file
  kIoError,             // the operating system refused (open, read, mmap, socket)
  kTimeout,
  kUnavailable,        // a peer is gone or unreachable; retry may help
  kPermissionDenied,   // authentication or authorisation failed
  kResourceExhausted,  // memory, in-flight window, file descriptors
  kCancelled,
  kUnimplemented,
  kInternal,  // a bug in weightport
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  static Status Ok() { return Status(); }

  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  const std::string& message() const;
  // "InvalidArgument: model.safetensors: tensor 'w': shape [2,3] x F32 is 24 bytes, offsets hold 20"
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context` and ": ". OK stays OK.
  Status WithContext(std::string_view context) const;

  // Explicitly discards a status where ignoring it is the intent (e.g. best-effort cleanup).
  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code() == b.code() && a.message() == b.message();
  }

 private:
  struct State {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const State> state_;
};

// Constructors named after the codes, for brevity at call sites.
Status InvalidArgument(std::string message);
Status NotFound(std::string message);
Status AlreadyExists(std::string message);
Status OutOfRange(std::string message);
Status FailedPrecondition(std::string message);
Status DataLoss(std::string message);
Status IoError(std::string message);
Status Timeout(std::string message);
Status Unavailable(std::string message);
Status PermissionDenied(std::string message);
Status ResourceExhausted(std::string message);
Status Cancelled(std::string message);
Status Unimplemented(std::string message);
Status Internal(std::string message);
// IoError whose message ends with strerror(errnum).
Status ErrnoError(std::string what, int errnum);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).ok()) v_ = Status(StatusCode::kInternal, "Result built from OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace weightport

#define WP_CONCAT_INNER_(a, b) a##b
#define WP_CONCAT_(a, b) WP_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function if `expr` is not OK.
#define WP_RETURN_IF_ERROR(expr)              \
  do {                                        \
    ::weightport::Status wp_status_ = (expr); \
    if (!wp_status_.ok()) return wp_status_;  \
  } while (0)

// `lhs = value of expr`, or returns its status from the enclosing function.
#define WP_ASSIGN_OR_RETURN(lhs, expr) WP_ASSIGN_OR_RETURN_IMPL_(WP_CONCAT_(wp_result_, __LINE__), lhs, expr)
#define WP_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
