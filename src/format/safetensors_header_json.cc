#include "safetensors_header_json.h"

#include <unordered_set>
#include <utility>
#include <vector>

namespace weightport {
namespace {

using Json = nlohmann::json;

// Builds values as nlohmann's own SAX DOM builder does (a stack of the open containers, O(1) work
// per event), except that top-level entries go to the sink instead of into one big object; plus
// duplicate detection and the depth limit.
class HeaderSax {
 public:
  HeaderSax(HeaderJson& out, size_t max_depth, const HeaderEntrySink& sink)
      : out_(out), max_depth_(max_depth), sink_(sink) {}

  bool null() { return Put(nullptr); }
  bool boolean(bool v) { return Put(v); }
  bool number_integer(Json::number_integer_t v) { return Put(v); }
  bool number_unsigned(Json::number_unsigned_t v) { return Put(v); }
  bool number_float(Json::number_float_t v, const Json::string_t& /*text*/) { return Put(v); }
  bool string(Json::string_t& v) { return Put(std::move(v)); }
  bool binary(Json::binary_t& v) { return Put(Json::binary(std::move(v))); }
  bool start_object(std::size_t /*len*/) { return Open(Json::value_t::object); }
  bool start_array(std::size_t /*len*/) { return Open(Json::value_t::array); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }

  bool key(Json::string_t& k) {
    if (AtTopLevelOfObjectRoot()) {
      if (!top_keys_.insert(k).second) NoteDuplicate(k, "");
      entry_key_ = std::move(k);
      entry_ = Json();
      slot_ = &entry_;
      return true;
    }
    auto& members = stack_.back()->get_ref<Json::object_t&>();
    auto [it, inserted] = members.try_emplace(k);
    if (!inserted) NoteDuplicate(k, entry_key_);
    slot_ = &it->second;
    return true;
  }

  template <class Exception>
  bool parse_error(std::size_t /*position*/, const std::string& /*token*/, const Exception& /*error*/) {
    return false;
  }

 private:
  bool AtTopLevelOfObjectRoot() const {
    return stack_.size() == 1 && stack_.back() == &root_ && root_.is_object();
  }

  void NoteDuplicate(const std::string& key, const std::string& in) {
    if (!out_.duplicate.empty()) return;
    out_.duplicate = key;
    out_.duplicate_in = in;
  }

  // Stores a value where the parser is: the root, the end of the open array, or the slot of the
  // last key of the open object. Pointers to open containers stay valid: a container is only open
  // while it is the last element of its parent, and std::map nodes never move.
  Json* Store(Json&& v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      out_.root_type = root_.type_name();
      return &root_;
    }
    Json& parent = *stack_.back();
    if (parent.is_array()) {
      auto& elements = parent.get_ref<Json::array_t&>();
      elements.push_back(std::move(v));
      return &elements.back();
    }
    *slot_ = std::move(v);
    return slot_;
  }

  bool Put(Json&& v) {
    Store(std::move(v));
    if (AtTopLevelOfObjectRoot()) EmitEntry();
    return true;
  }

  bool Open(Json::value_t type) {
    if (stack_.size() >= max_depth_) {
      out_.too_deep = true;
      return false;  // stops the parser: nothing deeper gets built
    }
    stack_.push_back(Store(Json(type)));
    return true;
  }

  bool Close() {
    stack_.pop_back();
    if (AtTopLevelOfObjectRoot()) EmitEntry();
    return true;
  }

  void EmitEntry() { sink_(std::move(entry_key_), std::move(entry_)); }

  HeaderJson& out_;
  const size_t max_depth_;
  const HeaderEntrySink& sink_;
  Json root_;                 // the top-level value; an object root stays empty
  std::vector<Json*> stack_;  // the open containers, innermost last
  Json* slot_ = nullptr;      // value slot of the last key read
  std::string entry_key_;     // top-level key of the entry being built
  Json entry_;                // the entry being built
  std::unordered_set<std::string> top_keys_;
};

}  // namespace

HeaderJson ParseHeaderJson(std::string_view text, size_t max_depth, const HeaderEntrySink& sink) {
  HeaderJson out;
  HeaderSax sax(out, max_depth, sink);
  const bool ok = Json::sax_parse(text.begin(), text.end(), &sax, Json::input_format_t::json,
                                  /*strict=*/true, /*ignore_comments=*/false);
  out.valid = ok && !out.too_deep;
  return out;
}

}  // namespace weightport
