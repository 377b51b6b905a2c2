// The JSON text of a safetensors header, parsed in one linear pass with nlohmann's SAX interface.
// Each top-level entry is handed over as soon as it is complete (so only one entry is ever built
// at a time); the parse also finds the first duplicate key at any depth and enforces a nesting
// limit before anything deeper is built. Internal to the format layer.
//
// (nlohmann's parse-with-callback, used before, rescans the parent object after every nested
// object closes: quadratic in the tensor count, 101 s for a 70,886-tensor header.)
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace weightport {

struct HeaderJson {
  std::string root_type = "null";  // nlohmann's type_name() of the top-level value
  std::string duplicate;           // first key repeated within one object ("" when none)
  std::string duplicate_in;        // top-level key it was found under ("" at the top level)
  bool too_deep = false;           // nesting passed the limit: parsing stopped there
  bool valid = false;              // well-formed JSON, nothing after it, not too deep
};

// Called with each top-level key and its value, in text order, when the top-level value is an
// object (also for a repeated key, and before the parse knows whether the rest of the text is valid).
using HeaderEntrySink = std::function<void(std::string&& key, nlohmann::json&& value)>;

// Containers may nest `max_depth` deep (the top-level object counts as one).
HeaderJson ParseHeaderJson(std::string_view text, size_t max_depth, const HeaderEntrySink& sink);

}  // namespace weightport
