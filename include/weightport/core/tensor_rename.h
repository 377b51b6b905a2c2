// Renaming tensors: the names one side gives its tensors mapped to the names a plan matches on (a
// trainer wrapped in DDP holds "module.fc.weight", the replica "fc.weight").
//
// A rename is FROM=TO over dot-separated segments, moving whole segments, never part of one (the
// same rules as the Python package's dict form, python/weightport/naming.py):
//   model.decoder=decoder   a prefix: "model.decoder.fc.w" -> "decoder.fc.w"; "model.decoders.w"
//                           and "x.model.decoder.w" stay as they are
//   *._orig_mod=            "*." matches anywhere (the start too), left to right, without overlap:
//                           "_orig_mod.a._orig_mod.b" -> "a.b"
// A trailing "." on either side is optional ("module.=" is "module="); an empty TO removes the
// segments. Several renames apply in order, each to the result of the one before.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weightport/core/placement.h"
#include "weightport/core/status.h"
#include "weightport/core/tensor_meta.h"

namespace weightport {

struct TensorRename {
  std::vector<std::string> from;  // segments, at least one
  std::vector<std::string> to;    // segments; empty: removed
  bool anywhere = false;          // "*." given: at any segment boundary, else only at the start
  std::string text;               // as given, for errors
};

// Parses "FROM=TO" (split at the first '='); the error names `spec`.
Result<TensorRename> ParseTensorRename(std::string_view spec);
// ParseTensorRename of each value.
Result<std::vector<TensorRename>> ParseTensorRenames(std::span<const std::string> specs);

// `name` after every rename in order (it may come out empty: RenameTensors refuses that).
std::string RenameTensor(std::string_view name, std::span<const TensorRename> renames);

// The tensors renamed, in the same order. Errors (InvalidArgument) name the original tensor: a
// name that comes out empty, or two tensors that come out the same (both named).
Result<std::vector<TensorMeta>> RenameTensors(std::vector<TensorMeta> tensors,
                                              std::span<const TensorRename> renames);
// `placement` with its tensors and every shard's tensor renamed; errors as above.
Result<Placement> RenameTensors(const Placement& placement, std::span<const TensorRename> renames);

}  // namespace weightport
