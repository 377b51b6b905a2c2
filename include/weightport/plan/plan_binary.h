// A compact binary form of a Plan: what the coordinator of a plan session sends each rank (its part,
// rank_plan.h) and what Plan::Digest hashes. Varints and length-prefixed strings, no field names:
// a step takes about 30 bytes where its JSON takes about 500, and nothing is parsed twice.
//
// The estimate is not written (it is derived; DecodePlanBinary leaves it empty, as a part's would
// mean nothing). The decoder bounds every count by the bytes left, so garbage fails with an error
// that names the field rather than allocating what a count says, and the result is Validate()d.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "weightport/core/status.h"
#include "weightport/plan/plan.h"

namespace weightport {

// Appends `plan` to `out`.
void EncodePlanBinary(const Plan& plan, std::string& out);
std::string EncodePlanBinary(const Plan& plan);

// Reads one plan from the front of `in` and advances it past the plan.
Result<Plan> DecodePlanBinary(std::string_view& in);

// Little-endian varints and strings, for the formats built on this one.
namespace plan_binary {
void PutVarint(std::string& out, uint64_t v);
void PutSigned(std::string& out, int64_t v);  // zigzag
void PutString(std::string& out, std::string_view s);
void PutDouble(std::string& out, double v);
Result<uint64_t> GetVarint(std::string_view& in, const char* what);
Result<int64_t> GetSigned(std::string_view& in, const char* what);
Result<std::string> GetString(std::string_view& in, const char* what);
Result<double> GetDouble(std::string_view& in, const char* what);
// A count of items of at least `min_item_bytes` each: an error when the input cannot hold them.
Result<size_t> GetCount(std::string_view& in, size_t min_item_bytes, const char* what);
}  // namespace plan_binary

}  // namespace weightport
