#include "weightport/format/checkpoint_dir.h"

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "weightport/format/checkpoint.h"
#include "weightport/format/model_files.h"

namespace weightport {
namespace {

namespace fs = std::filesystem;

std::string Read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A pid that no process holds (a child that has exited and been reaped).
long DeadPid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

class CheckpointDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/wp_ckdir_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    dir_ = root_ / "ckpt";
  }
  void TearDown() override { fs::remove_all(root_); }

  // A write function that puts `files` (name -> content) into the staging directory.
  static CheckpointWriteFn Files(std::map<std::string, std::string> files) {
    return [files](const std::string& staging) {
      for (const auto& [name, content] : files) std::ofstream(fs::path(staging) / name) << content;
      return Status::Ok();
    };
  }
  // Everything beside dir_ (staging or leftovers), by name.
  std::vector<std::string> Siblings() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(root_))
      if (e.path() != dir_) out.push_back(e.path().filename().string());
    return out;
  }

  fs::path root_, dir_;
};

TEST_F(CheckpointDirTest, WritesANewDirectoryAndLeavesNothingBeside) {
  ASSERT_TRUE(ReplaceCheckpointDir(dir_.string() + "/", false, Files({{"model.safetensors", "new"}})).ok());
  EXPECT_EQ(Read(dir_ / "model.safetensors"), "new");
  EXPECT_TRUE(Siblings().empty());
  EXPECT_EQ(CheckpointStagingPath(dir_.string(), 42),
            (root_ / ".ckpt.wp-staging-42").lexically_normal().string());
}

TEST_F(CheckpointDirTest, RefusesToReplaceWithoutOverwrite) {
  ASSERT_TRUE(ReplaceCheckpointDir(dir_, false, Files({{"model.safetensors", "old"}})).ok());
  Status s = ReplaceCheckpointDir(dir_, false, Files({{"model.safetensors", "new"}}));
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(s.message().find(dir_.string()), std::string::npos) << s.message();
  EXPECT_EQ(Read(dir_ / "model.safetensors"), "old");
  EXPECT_TRUE(Siblings().empty());
  // A directory with other files but no checkpoint is fine, and the files stay.
  fs::path other = root_ / "other";
  fs::create_directories(other / "sub");
  std::ofstream(other / "config.json") << "{}";
  std::ofstream(other / "sub" / "x") << "x";
  ASSERT_TRUE(ReplaceCheckpointDir(other, false, Files({{"model.safetensors", "m"}})).ok());
  EXPECT_EQ(Read(other / "config.json"), "{}");
  EXPECT_EQ(Read(other / "sub" / "x"), "x");
  EXPECT_EQ(Read(other / "model.safetensors"), "m");
}

TEST_F(CheckpointDirTest, ReplacesTheOldCheckpointWholeAndKeepsOtherFiles) {
  ASSERT_TRUE(ReplaceCheckpointDir(dir_, false,
                                   Files({{ShardFileName(1, 2), "o1"},
                                          {ShardFileName(2, 2), "o2"},
                                          {std::string(kShardIndexFileName), "{}"}}))
                  .ok());
  std::ofstream(dir_ / "config.json") << "cfg";
  std::ofstream(dir_ / "model.safetensors.tmp") << "a killed writer's temporary";
  ASSERT_TRUE(ReplaceCheckpointDir(dir_, true, Files({{"model.safetensors", "new"}})).ok());
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"config.json", "model.safetensors"}));
  EXPECT_EQ(Read(dir_ / "config.json"), "cfg");
  EXPECT_TRUE(Siblings().empty());
}

TEST_F(CheckpointDirTest, AFailedWriteLeavesTheOldCheckpointAsItWas) {
  ASSERT_TRUE(ReplaceCheckpointDir(dir_, false, Files({{"model.safetensors", "old"}})).ok());
  Status s = ReplaceCheckpointDir(dir_, true, [](const std::string& staging) {
    std::ofstream(fs::path(staging) / "model-00001-of-00002.safetensors") << "half";
    return IoError("disk full");
  });
  EXPECT_EQ(s.message(), "disk full");
  EXPECT_EQ(Read(dir_ / "model.safetensors"), "old");
  EXPECT_FALSE(fs::exists(dir_ / "model-00001-of-00002.safetensors"));
  EXPECT_TRUE(Siblings().empty());
}

TEST_F(CheckpointDirTest, CleansWhatAKilledRunLeft) {
  ASSERT_TRUE(ReplaceCheckpointDir(dir_, false, Files({{"model.safetensors", "old"}})).ok());
  // A killed run's staging directory is removed; a live process's is left alone.
  const fs::path dead = CheckpointStagingPath(dir_.string(), DeadPid());
  const fs::path live = CheckpointStagingPath(dir_.string(), ::getppid());
  fs::create_directories(dead);
  std::ofstream(dead / "model-00001-of-00004.safetensors") << "partial";
  fs::create_directories(live);
  ASSERT_TRUE(ReplaceCheckpointDir(dir_, true, Files({{"model.safetensors", "new"}})).ok());
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_EQ(Read(dir_ / "model.safetensors"), "new");
  fs::remove_all(live);

  // Killed between moving the old aside and moving the new in (file systems without an atomic
  // exchange): the old checkpoint is put back.
  const fs::path aside = root_ / (".ckpt.wp-old-" + std::to_string(DeadPid()));
  fs::rename(dir_, aside);
  Status s = ReplaceCheckpointDir(dir_, false, Files({{"model.safetensors", "newer"}}));
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists) << s.ToString();
  EXPECT_EQ(Read(dir_ / "model.safetensors"), "new");
  EXPECT_TRUE(Siblings().empty());
}

TEST_F(CheckpointDirTest, RefusesAFileInPlaceOfTheDirectory) {
  std::ofstream(dir_) << "not a directory";
  Status s = ReplaceCheckpointDir(dir_, true, Files({{"model.safetensors", "new"}}));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not a directory"), std::string::npos) << s.message();
  EXPECT_EQ(Read(dir_), "not a directory");
}

// The writers of whole checkpoints go through it: a failure half-way leaves the old one readable.
TEST_F(CheckpointDirTest, AShardedWriteThatFailsKeepsTheOldCheckpoint) {
  std::vector<TensorMeta> tensors;
  for (int i = 0; i < 4; ++i) tensors.push_back(*TensorMeta::Make("t" + std::to_string(i), DType::kU8, {4}));
  const std::string bytes = "abcd";
  const std::span<const std::byte> span(reinterpret_cast<const std::byte*>(bytes.data()), 4);
  auto all = [&](const TensorMeta&) -> Result<std::span<const std::byte>> { return span; };
  ASSERT_TRUE(model_files::WriteShardedCheckpoint(dir_, false, tensors, 2, {}, all, {}).ok());
  int calls = 0;
  auto fails = [&](const TensorMeta& meta) -> Result<std::span<const std::byte>> {
    if (++calls == 3) return IoError("source lost at " + meta.name);
    return span;
  };
  Status s = model_files::WriteShardedCheckpoint(dir_, true, tensors, 4, {}, fails, {});
  EXPECT_EQ(s.message(), "source lost at t2");
  auto c = Checkpoint::Open(dir_.string());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->files().size(), 2u);
  EXPECT_EQ(c->tensors().size(), 4u);
  EXPECT_TRUE(Siblings().empty());
}

}  // namespace
}  // namespace weightport
