#include "weightport/format/checkpoint_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <string_view>
#include <system_error>

#include "weightport/format/checkpoint.h"

namespace weightport {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kStagingTag = ".wp-staging-";
constexpr std::string_view kAsideTag = ".wp-old-";

// `dir` made absolute, without a trailing separator (so that it has a name and a parent).
fs::path Normalized(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec).lexically_normal();
  if (ec) p = fs::path(dir).lexically_normal();
  if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();
  return p;
}

fs::path Sibling(const fs::path& dir, std::string_view tag, long pid) {
  return dir.parent_path() / ("." + dir.filename().string() + std::string(tag) + std::to_string(pid));
}

bool IsCheckpointFile(const fs::path& p) {
  return p.extension() == ".safetensors" || p.filename() == kShardIndexFileName;
}

bool ProcessAlive(long pid) { return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM; }

// The pid in "<prefix><digits>", or -1 when `name` is not of that form.
long PidIn(std::string_view name, std::string_view prefix) {
  if (!name.starts_with(prefix) || name.size() == prefix.size() || name.size() - prefix.size() > 9) return -1;
  long pid = 0;
  for (char c : name.substr(prefix.size())) {
    if (c < '0' || c > '9') return -1;
    pid = pid * 10 + (c - '0');
  }
  return pid;
}

Status RemoveAll(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec) return IoError("cannot remove " + p.string() + ": " + ec.message());
  return Status::Ok();
}

Status SyncDir(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open directory " + p.string(), errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoError("cannot fsync directory " + p.string(), err);
  return Status::Ok();
}

// Step 2: leftovers of killed runs for `dir` (of processes that are gone).
Status CleanLeftovers(const fs::path& dir) {
  const std::string stem = "." + dir.filename().string();
  const std::string staging_prefix = stem + std::string(kStagingTag);
  const std::string aside_prefix = stem + std::string(kAsideTag);
  std::error_code ec;
  for (fs::directory_iterator it(dir.parent_path(), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (const long pid = PidIn(name, staging_prefix); pid > 0 && !ProcessAlive(pid)) {
      WP_RETURN_IF_ERROR(RemoveAll(it->path()));
    } else if (const long old = PidIn(name, aside_prefix); old > 0 && !ProcessAlive(old)) {
      std::error_code exists_ec;
      if (!fs::exists(dir, exists_ec) && std::rename(it->path().c_str(), dir.c_str()) == 0) continue;
      WP_RETURN_IF_ERROR(RemoveAll(it->path()));
    }
  }
  if (ec && ec != std::errc::no_such_file_or_directory)
    return IoError("cannot list " + dir.parent_path().string() + ": " + ec.message());
  return Status::Ok();
}

// Step 4: what else the old directory holds comes along (hard links: no copy, the old stays intact).
Status CarryOtherEntries(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  for (fs::directory_iterator it(from, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& src = it->path();
    if (IsCheckpointFile(src) || src.filename().string().ends_with(".safetensors.tmp")) continue;
    const fs::path dst = to / src.filename();
    std::error_code op;
    if (fs::exists(dst, op)) continue;  // the writer wrote it (e.g. the index of a perturbed copy)
    std::error_code type_ec;
    if (it->is_regular_file(type_ec) && !it->is_symlink(type_ec)) fs::create_hard_link(src, dst, op);
    if (op || !fs::exists(dst, type_ec)) {
      op.clear();
      fs::copy(src, dst, fs::copy_options::recursive | fs::copy_options::copy_symlinks, op);
    }
    if (op) return IoError("cannot carry " + src.string() + " into " + to.string() + ": " + op.message());
  }
  if (ec) return IoError("cannot list " + from.string() + ": " + ec.message());
  return Status::Ok();
}

// Step 5.
Status SwapIn(const fs::path& staging, const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    if (std::rename(staging.c_str(), dir.c_str()) != 0)
      return ErrnoError("cannot rename " + staging.string() + " to " + dir.string(), errno);
    return SyncDir(dir.parent_path());
  }
  if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
    WP_RETURN_IF_ERROR(SyncDir(dir.parent_path()));
    return RemoveAll(staging);  // now the old checkpoint
  }
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
    return ErrnoError("cannot swap " + staging.string() + " with " + dir.string(), errno);
  // No atomic exchange here: move the old aside first (put back by the next run if killed between).
  const fs::path aside = Sibling(dir, kAsideTag, ::getpid());
  if (std::rename(dir.c_str(), aside.c_str()) != 0)
    return ErrnoError("cannot rename " + dir.string() + " to " + aside.string(), errno);
  if (std::rename(staging.c_str(), dir.c_str()) != 0) {
    const int err = errno;
    std::rename(aside.c_str(), dir.c_str());
    return ErrnoError("cannot rename " + staging.string() + " to " + dir.string(), err);
  }
  WP_RETURN_IF_ERROR(SyncDir(dir.parent_path()));
  return RemoveAll(aside);
}

}  // namespace

Result<bool> HoldsCheckpoint(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return false;
  if (!fs::is_directory(dir, ec)) return InvalidArgument(dir + " exists and is not a directory");
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (IsCheckpointFile(it->path())) return true;
  if (ec) return IoError("cannot list directory " + dir + ": " + ec.message());
  return false;
}

std::string CheckpointStagingPath(const std::string& dir, long pid) {
  return Sibling(Normalized(dir), kStagingTag, pid).string();
}

Status ReplaceCheckpointDir(const std::string& dir_text, bool overwrite, const CheckpointWriteFn& write) {
  const fs::path dir = Normalized(dir_text);
  WP_RETURN_IF_ERROR(CleanLeftovers(dir));  // first: it may put the old checkpoint back
  WP_ASSIGN_OR_RETURN(bool holds, HoldsCheckpoint(dir.string()));
  if (holds && !overwrite)
    return AlreadyExists(dir_text + " already holds a checkpoint; choose another directory or overwrite");
  std::error_code ec;
  fs::create_directories(dir.parent_path(), ec);
  if (ec) return IoError("cannot create directory " + dir.parent_path().string() + ": " + ec.message());

  const fs::path staging = CheckpointStagingPath(dir.string(), ::getpid());
  WP_RETURN_IF_ERROR(RemoveAll(staging));
  fs::create_directory(staging, ec);
  if (ec) return IoError("cannot create directory " + staging.string() + ": " + ec.message());
  Status s = write(staging.string());
  if (s.ok() && fs::exists(dir, ec)) s = CarryOtherEntries(dir, staging);
  if (s.ok()) s = SyncDir(staging);
  if (s.ok()) s = SwapIn(staging, dir);
  if (!s.ok()) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
  }
  return s;
}

}  // namespace weightport
