// Replacing a checkpoint directory whole, so that no reader (and no killed writer) ever leaves a
// partial checkpoint under its name: the new checkpoint is written into a temporary sibling
// directory and swapped in by rename once it is complete; the old one is removed only then.
#pragma once

#include <functional>
#include <string>

#include "weightport/core/status.h"

namespace weightport {

// Fills `staging`, an empty directory on the same file system as the destination, with a checkpoint.
using CheckpointWriteFn = std::function<Status(const std::string& staging)>;

// Whether `dir` holds checkpoint files (*.safetensors or the shard index). False when `dir` does
// not exist; an error when it cannot be listed or is not a directory.
Result<bool> HoldsCheckpoint(const std::string& dir);

// Writes a checkpoint to `dir` through `write`:
//  1. refuses (AlreadyExists) when `dir` holds a checkpoint and not `overwrite`; writes nothing then;
//  2. deals with what killed runs left beside `dir`: a staging directory is removed; an old
//     checkpoint moved aside (only on file systems without an atomic exchange) is put back when
//     `dir` is missing, removed otherwise;
//  3. creates the staging directory CheckpointStagingPath(dir, getpid()) and calls `write` with it;
//     when `write` fails the staging directory is removed and `dir` is left as it was;
//  4. links (or copies) every other entry of the old `dir` (not checkpoint files, not a writer's
//     *.tmp) into the staging directory, so files such as config.json stay;
//  5. swaps the staging directory with `dir` in one rename (renameat2 RENAME_EXCHANGE; a plain
//     rename when `dir` does not exist), then removes the old checkpoint.
// A reader of `dir` finds the old checkpoint or the new one, never a mix or a part. Errors name the
// path at fault.
Status ReplaceCheckpointDir(const std::string& dir, bool overwrite, const CheckpointWriteFn& write);

// "<parent>/.<name>.wp-staging-<pid>": where ReplaceCheckpointDir writes the checkpoint for `dir`.
std::string CheckpointStagingPath(const std::string& dir, long pid);

}  // namespace weightport
