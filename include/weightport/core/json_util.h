// Strict, exception-free access to JSON read from outside (files, peers). Every accessor checks the
// type and names the field and its context in the error. Internal to the library.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "weightport/core/slice.h"
#include "weightport/core/status.h"
#include "weightport/core/tensor_meta.h"

namespace weightport::json_util {

using Json = nlohmann::json;

// The deepest nesting of arrays and objects Parse accepts. weightport's own documents nest less
// than ten deep; text nested deeper is refused before it is parsed, so no tree built from outside
// input is deep enough for a recursive walk (dump, compare) to exhaust the stack.
inline constexpr size_t kMaxJsonDepth = 100;
// Parses text; never throws. `what` names the source in errors ("placement.json"), which quote
// the start of the text made printable. Refuses text nested deeper than kMaxJsonDepth and strings
// that are not UTF-8.
Result<Json> Parse(std::string_view text, std::string_view what);
// `j` as one line of JSON; never throws: bytes that are not UTF-8 (text a peer sent) become U+FFFD.
std::string Dump(const Json& j);
// The start of `j` for an error message: at most `max_bytes`, printable ASCII (see Printable).
std::string Excerpt(const Json& j, size_t max_bytes = 200);
// The largest JSON file ParseFile reads by default (parsed, JSON takes several times its text).
inline constexpr uint64_t kMaxJsonFileBytes = uint64_t{256} << 20;
// Reads a file of at most `max_bytes`: a regular file's size is checked before reading, anything
// else (a pipe, a device such as /dev/urandom) is read until it ends or passes the limit. Errors
// name the path, the size and the limit.
Result<std::string> ReadTextFile(const std::string& path, uint64_t max_bytes = kMaxJsonFileBytes);
// Reads (ReadTextFile) and parses a file; errors name the path.
Result<Json> ParseFile(const std::string& path, uint64_t max_bytes = kMaxJsonFileBytes);
// Writes text to a file atomically (temp file + rename); errors name the path.
Status WriteTextFile(const std::string& path, std::string_view text);
// Writes json (indented) to a file atomically.
Status WriteFile(const std::string& path, const Json& json);

Result<const Json*> Field(const Json& obj, std::string_view key, std::string_view ctx);
Result<uint64_t> GetU64(const Json& obj, std::string_view key, std::string_view ctx);
Result<int64_t> GetI64(const Json& obj, std::string_view key, std::string_view ctx);
Result<double> GetDouble(const Json& obj, std::string_view key, std::string_view ctx);
Result<bool> GetBool(const Json& obj, std::string_view key, std::string_view ctx);
Result<std::string> GetString(const Json& obj, std::string_view key, std::string_view ctx);
Result<const Json*> GetArray(const Json& obj, std::string_view key, std::string_view ctx);
Result<const Json*> GetObject(const Json& obj, std::string_view key, std::string_view ctx);

// Element conversions for values already extracted (arrays).
Result<uint64_t> AsU64(const Json& v, std::string_view ctx);
Result<int64_t> AsI64(const Json& v, std::string_view ctx);
Result<std::vector<int64_t>> AsI64Array(const Json& v, std::string_view ctx);
Result<std::vector<uint64_t>> AsU64Array(const Json& v, std::string_view ctx);

// Rejects keys outside `allowed` (typos must not silently drop data); errors name `path`.
Status CheckKeys(const Json& obj, std::initializer_list<std::string_view> allowed, const std::string& path);
// "path[i]".
std::string At(const std::string& path, size_t i);

// A slice as {"flat": [start, length]} or {"start": [..], "length": [..]}, merged into `obj`.
void PutSlice(Json& obj, const Slice& slice);
// Reads the slice keys of `obj` (other keys are the caller's to check); errors name `path`.
Result<Slice> ReadSlice(const Json& obj, const std::string& path);

// A tensor as {"name", "dtype", "shape"}, and back (strict; errors name `path`).
Json TensorToJson(const TensorMeta& tensor);
Result<TensorMeta> ReadTensor(const Json& obj, const std::string& path);

// Hashes travel as 16-digit hex strings (JSON numbers lose precision above 2^53 in many readers).
Result<uint64_t> ParseHexU64(const Json& v, std::string_view ctx);

}  // namespace weightport::json_util
