#include "json_util.h"

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace weightport::json_util {
namespace {

std::string Ctx(std::string_view ctx, std::string_view key) {
  std::string s(ctx);
  if (!s.empty()) s += ": ";
  s += "field '";
  s += key;
  s += "'";
  return s;
}

}  // namespace

Result<Json> Parse(std::string_view text, std::string_view what) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument(std::string(what) + ": not valid JSON");
  return j;
}

Result<Json> ParseFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoError("cannot open " + path, errno);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return ErrnoError("cannot read " + path, errno);
  return Parse(ss.str(), path);
}

Status WriteFile(const std::string& path, const Json& json) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return ErrnoError("cannot create " + tmp, errno);
    out << json.dump(2) << "\n";
    out.flush();
    if (!out) return ErrnoError("cannot write " + tmp, errno);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return ErrnoError("cannot rename " + tmp + " to " + path, errno);
  return Status::Ok();
}

Result<const Json*> Field(const Json& obj, std::string_view key, std::string_view ctx) {
  if (!obj.is_object()) return InvalidArgument(std::string(ctx) + ": expected a JSON object");
  auto it = obj.find(key);
  if (it == obj.end()) return InvalidArgument(Ctx(ctx, key) + " is missing");
  return &*it;
}

Result<uint64_t> AsU64(const Json& v, std::string_view ctx) {
  // Parsed JSON stores non-negative integers as unsigned, but values built in code may be signed.
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) {
    if (v.get<int64_t>() < 0) return InvalidArgument(std::string(ctx) + " is negative");
    return static_cast<uint64_t>(v.get<int64_t>());
  }
  return InvalidArgument(std::string(ctx) + " must be a non-negative integer");
}

Result<int64_t> AsI64(const Json& v, std::string_view ctx) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return InvalidArgument(std::string(ctx) + " is too large");
    return static_cast<int64_t>(u);
  }
  if (!v.is_number_integer()) return InvalidArgument(std::string(ctx) + " must be an integer");
  return v.get<int64_t>();
}

Result<std::vector<int64_t>> AsI64Array(const Json& v, std::string_view ctx) {
  if (!v.is_array()) return InvalidArgument(std::string(ctx) + " must be an array of integers");
  std::vector<int64_t> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    auto x = AsI64(v[i], std::string(ctx) + "[" + std::to_string(i) + "]");
    if (!x.ok()) return x.status();
    out.push_back(*x);
  }
  return out;
}

Result<std::vector<uint64_t>> AsU64Array(const Json& v, std::string_view ctx) {
  if (!v.is_array()) return InvalidArgument(std::string(ctx) + " must be an array of integers");
  std::vector<uint64_t> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    auto x = AsU64(v[i], std::string(ctx) + "[" + std::to_string(i) + "]");
    if (!x.ok()) return x.status();
    out.push_back(*x);
  }
  return out;
}

Result<uint64_t> GetU64(const Json& obj, std::string_view key, std::string_view ctx) {
  WP_ASSIGN_OR_RETURN(const Json* v, Field(obj, key, ctx));
  return AsU64(*v, Ctx(ctx, key));
}

Result<int64_t> GetI64(const Json& obj, std::string_view key, std::string_view ctx) {
  WP_ASSIGN_OR_RETURN(const Json* v, Field(obj, key, ctx));
  return AsI64(*v, Ctx(ctx, key));
}

Result<double> GetDouble(const Json& obj, std::string_view key, std::string_view ctx) {
  WP_ASSIGN_OR_RETURN(const Json* v, Field(obj, key, ctx));
  if (!v->is_number()) return InvalidArgument(Ctx(ctx, key) + " must be a number");
  return v->get<double>();
}

Result<bool> GetBool(const Json& obj, std::string_view key, std::string_view ctx) {
  WP_ASSIGN_OR_RETURN(const Json* v, Field(obj, key, ctx));
  if (!v->is_boolean()) return InvalidArgument(Ctx(ctx, key) + " must be true or false");
  return v->get<bool>();
}

Result<std::string> GetString(const Json& obj, std::string_view key, std::string_view ctx) {
  WP_ASSIGN_OR_RETURN(const Json* v, Field(obj, key, ctx));
  if (!v->is_string()) return InvalidArgument(Ctx(ctx, key) + " must be a string");
  return v->get<std::string>();
}

Result<const Json*> GetArray(const Json& obj, std::string_view key, std::string_view ctx) {
  WP_ASSIGN_OR_RETURN(const Json* v, Field(obj, key, ctx));
  if (!v->is_array()) return InvalidArgument(Ctx(ctx, key) + " must be an array");
  return v;
}

Result<const Json*> GetObject(const Json& obj, std::string_view key, std::string_view ctx) {
  WP_ASSIGN_OR_RETURN(const Json* v, Field(obj, key, ctx));
  if (!v->is_object()) return InvalidArgument(Ctx(ctx, key) + " must be an object");
  return v;
}

Result<uint64_t> ParseHexU64(const Json& v, std::string_view ctx) {
  if (!v.is_string()) return InvalidArgument(std::string(ctx) + " must be a 16-digit hex string");
  const auto& s = v.get_ref<const std::string&>();
  if (s.size() != 16) return InvalidArgument(std::string(ctx) + " must be a 16-digit hex string");
  uint64_t x = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return InvalidArgument(std::string(ctx) + " has a non-hex digit");
    x = (x << 4) | static_cast<uint64_t>(d);
  }
  return x;
}

}  // namespace weightport::json_util
