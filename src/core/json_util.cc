#include "weightport/core/json_util.h"

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "weightport/core/printable.h"

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

// True when `text` opens more than `limit` arrays or objects inside one another. Brackets inside
// strings do not count; the scan stops at the first excess, so it is linear and cheap.
bool NestedDeeperThan(std::string_view text, size_t limit) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, whatever it is
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

}  // namespace

Result<Json> Parse(std::string_view text, std::string_view what) {
  if (NestedDeeperThan(text, kMaxJsonDepth)) {
    return InvalidArgument(std::string(what) + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                           " levels: " + Printable(text, 80));
  }
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return InvalidArgument(std::string(what) + ": not valid JSON: " + Printable(text, 80));
  return j;
}

Result<std::string> ReadTextFile(const std::string& path, uint64_t max_bytes) {
  const auto too_large = [&](const std::string& size) {
    return InvalidArgument(path + ": " + size + " bytes, over the limit of " + std::to_string(max_bytes) +
                           " bytes for an input file");
  };
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) {
    const uintmax_t size = std::filesystem::file_size(path, ec);
    if (!ec && size > max_bytes) return too_large(std::to_string(size));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoError("cannot open " + path, errno);
  std::string text;
  std::vector<char> buffer(size_t{1} << 16);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    text.append(buffer.data(), static_cast<size_t>(in.gcount()));
    if (text.size() > max_bytes) return too_large("more than " + std::to_string(max_bytes));
  }
  if (in.bad()) return ErrnoError("cannot read " + path, errno);
  return text;
}

Result<Json> ParseFile(const std::string& path, uint64_t max_bytes) {
  WP_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path, max_bytes));
  return Parse(text, path);
}

Status WriteFile(const std::string& path, const Json& json) {
  return WriteTextFile(path, json.dump(2) + "\n");
}

Status WriteTextFile(const std::string& path, std::string_view text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return ErrnoError("cannot create " + tmp, errno);
    out << text;
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

Status CheckKeys(const Json& obj, std::initializer_list<std::string_view> allowed, const std::string& path) {
  if (!obj.is_object()) return InvalidArgument(path + ": expected a JSON object");
  for (const auto& [key, value] : obj.items()) {
    bool known = false;
    for (std::string_view a : allowed) known |= key == a;
    if (!known) return InvalidArgument(path + ": unknown field '" + key + "'");
  }
  return Status::Ok();
}

std::string At(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

void PutSlice(Json& obj, const Slice& slice) {
  if (slice.is_flat()) {
    obj["flat"] = {slice.flat().start, slice.flat().length};
  } else {
    obj["start"] = slice.box().start;
    obj["length"] = slice.box().length;
  }
}

Result<Slice> ReadSlice(const Json& j, const std::string& path) {
  const bool flat = j.contains("flat"), box = j.contains("start") || j.contains("length");
  if (flat == box) return InvalidArgument(path + ": needs either 'flat' or 'start' and 'length'");
  if (flat) {
    WP_ASSIGN_OR_RETURN(const Json* flat_json, Field(j, "flat", path));
    WP_ASSIGN_OR_RETURN(std::vector<int64_t> f, AsI64Array(*flat_json, path + ".flat"));
    if (f.size() != 2) return InvalidArgument(path + ".flat must be [start, length]");
    return Slice::MakeFlat(f[0], f[1]);
  }
  WP_ASSIGN_OR_RETURN(const Json* start_json, Field(j, "start", path));
  WP_ASSIGN_OR_RETURN(const Json* length_json, Field(j, "length", path));
  WP_ASSIGN_OR_RETURN(std::vector<int64_t> start, AsI64Array(*start_json, path + ".start"));
  WP_ASSIGN_OR_RETURN(std::vector<int64_t> length, AsI64Array(*length_json, path + ".length"));
  if (start.size() != length.size())
    return InvalidArgument(path + ": start has " + std::to_string(start.size()) + " entries, length has " +
                           std::to_string(length.size()));
  return Slice::MakeBox(std::move(start), std::move(length));
}

Json TensorToJson(const TensorMeta& t) {
  return {{"name", t.name}, {"dtype", std::string(DTypeName(t.dtype))}, {"shape", t.shape}};
}

Result<TensorMeta> ReadTensor(const Json& tj, const std::string& path) {
  WP_RETURN_IF_ERROR(CheckKeys(tj, {"name", "dtype", "shape"}, path));
  WP_ASSIGN_OR_RETURN(std::string name, GetString(tj, "name", path));
  WP_ASSIGN_OR_RETURN(std::string dtype_name, GetString(tj, "dtype", path));
  auto dtype = ParseDTypeName(dtype_name);
  if (!dtype.ok()) return dtype.status().WithContext(path + ".dtype");
  WP_ASSIGN_OR_RETURN(const Json* shape_json, Field(tj, "shape", path));
  WP_ASSIGN_OR_RETURN(Shape shape, AsI64Array(*shape_json, path + ".shape"));
  auto meta = TensorMeta::Make(std::move(name), *dtype, std::move(shape));
  if (!meta.ok()) return meta.status().WithContext(path);
  return meta;
}

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string Excerpt(const Json& j, size_t max_bytes) { return Printable(Dump(j), max_bytes); }

}  // namespace weightport::json_util
