// SafetensorsWriter and write_file_atomic: validation, atomicity and failure behaviour.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include "io_test_util.h"
#include "nmsparse/core/error.h"
#include "nmsparse/io/atomic_file.h"
#include "nmsparse/io/safetensors.h"

namespace nms {
namespace {

using testing_io::contains;
using testing_io::error_of;
using testing_io::ScratchDir;
using testing_io::to_bytes;

TEST(SafetensorsWriter, TempFileIsNamedAfterTheDestinationAndRemovedWithoutCommit) {
  ScratchDir dir;
  const auto path = dir / "out.safetensors";
  {
    SafetensorsWriter writer(path, {{"a", DType::kF32, {2}}, {"b", DType::kU8, {1}}});
    const auto temp = writer.temp_path();
    EXPECT_EQ(temp.parent_path(), dir.path());
    EXPECT_EQ(temp.filename().string().rfind(".out.safetensors.tmp", 0), 0u) << temp;
    EXPECT_TRUE(std::filesystem::exists(temp));
    EXPECT_FALSE(std::filesystem::exists(path));
    writer.write_f32("a", std::vector<float>{1, 2});
    // destroyed without commit
  }
  EXPECT_TRUE(dir.listing().empty());
}

TEST(SafetensorsWriter, ExceptionBeforeCommitLeavesNothing) {
  ScratchDir dir;
  const auto path = dir / "out.safetensors";
  try {
    SafetensorsWriter writer(path, {{"a", DType::kF32, {2}}});
    writer.write_f32("a", std::vector<float>{1, 2, 3});  // wrong size: throws
    writer.commit();
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "'a' [2] has 2 elements, got 3 values")) << e.what();
  }
  EXPECT_TRUE(dir.listing().empty());
}

TEST(SafetensorsWriter, ExistingFileReplacedOnlyOnCommit) {
  ScratchDir dir;
  const auto path = dir / "model.safetensors";
  write_safetensors(path, {{{"old", DType::kU8, {1}}, to_bytes<uint8_t>({1})}});
  {
    SafetensorsWriter writer(path, {{"new", DType::kU8, {1}}});
    writer.write("new", to_bytes<uint8_t>({2}));
    // Not committed yet: the old file is intact.
    EXPECT_NE(SafetensorsFile::open(path).find("old"), nullptr);
  }
  EXPECT_NE(SafetensorsFile::open(path).find("old"), nullptr);  // abandoned writer changed nothing
  {
    SafetensorsWriter writer(path, {{"new", DType::kU8, {1}}});
    writer.write("new", to_bytes<uint8_t>({2}));
    writer.commit();
    EXPECT_TRUE(writer.temp_path().empty());
  }
  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.find("old"), nullptr);
  EXPECT_NE(file.find("new"), nullptr);
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"model.safetensors"});
}

TEST(SafetensorsWriter, CommitRequiresEveryTensorExactlyOnce) {
  ScratchDir dir;
  SafetensorsWriter writer(dir / "x.safetensors",
                           {{"a", DType::kI32, {1}}, {"b", DType::kI32, {1}}});
  writer.write("a", to_bytes<int32_t>({1}));
  EXPECT_TRUE(contains(error_of([&] { writer.write("a", to_bytes<int32_t>({1})); }),
                       "'a' was already written"));
  EXPECT_TRUE(contains(error_of([&] { writer.commit(); }), "1 tensor(s) not written: 'b'"));
  EXPECT_TRUE(contains(error_of([&] { writer.write("c", to_bytes<int32_t>({1})); }),
                       "no tensor named 'c'"));
  EXPECT_TRUE(contains(error_of([&] { writer.write("b", to_bytes<int16_t>({1})); }),
                       "'b' (I32 [1]) needs 4 bytes, got 2"));
  EXPECT_TRUE(contains(error_of([&] { writer.write_f32("b", std::vector<float>{1}); }),
                       "has dtype I32; write_f32 needs F64/F32/F16/BF16"));
  writer.write("b", to_bytes<int32_t>({2}));
  writer.commit();
  EXPECT_TRUE(contains(error_of([&] { writer.write("a", to_bytes<int32_t>({1})); }),
                       "write after commit()"));
  EXPECT_TRUE(contains(error_of([&] { writer.commit(); }), "commit() called twice"));
}

TEST(SafetensorsWriter, RejectsBadSpecs) {
  ScratchDir dir;
  const auto path = dir / "x.safetensors";
  auto make = [&](std::vector<TensorSpec> specs) {
    return error_of([&] { SafetensorsWriter writer(path, std::move(specs)); });
  };
  EXPECT_TRUE(contains(make({{"", DType::kF32, {1}}}), "empty tensor name"));
  EXPECT_TRUE(contains(make({{"__metadata__", DType::kF32, {1}}}), "is reserved"));
  EXPECT_TRUE(contains(make({{"a", DType::kF32, {1}}, {"a", DType::kF32, {2}}}),
                       "duplicate tensor name 'a'"));
  EXPECT_TRUE(contains(make({{"a", DType::kF32, {-1}}}), "negative dimension"));
  EXPECT_TRUE(contains(make({{"a", DType::kF32, {int64_t{1} << 40, int64_t{1} << 40}}}),
                       "overflows int64"));
  EXPECT_TRUE(contains(make({{"a", DType::kF64, {int64_t{1} << 61}}}), "overflows"));
  EXPECT_TRUE(contains(make({{"bad\xff", DType::kF32, {1}}}), "valid UTF-8"));
  EXPECT_TRUE(dir.listing().empty());
}

TEST(SafetensorsWriter, PathErrorsNameThePathAndReason) {
  ScratchDir dir;
  // Destination is a directory.
  std::filesystem::create_directory(dir / "sub");
  std::string what = error_of([&] { SafetensorsWriter writer(dir / "sub", {}); });
  EXPECT_TRUE(contains(what, (dir / "sub").string() + ": is a directory")) << what;
  // Directory does not exist.
  what = error_of([&] { SafetensorsWriter writer(dir / "missing" / "x.safetensors", {}); });
  EXPECT_TRUE(contains(what, "missing")) << what;
  EXPECT_TRUE(contains(what, "No such file or directory")) << what;
}

// Runs `check` as an unprivileged user: directly, or as root in a forked child that drops to
// uid/gid 65534 (root ignores directory permissions). Returns check()'s verdict.
bool run_unprivileged(const std::function<bool()>& check) {
  if (::geteuid() != 0) return check();
  const pid_t pid = ::fork();
  if (pid == 0) {
    const bool dropped = ::setgid(65534) == 0 && ::setuid(65534) == 0;
    ::_exit(dropped && check() ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

TEST(SafetensorsWriter, UnwritableDirectoryThrows) {
  ScratchDir dir;
  const auto locked = dir / "locked";
  std::filesystem::create_directory(locked);
  ::chmod(dir.path().c_str(), 0755);
  ::chmod(locked.c_str(), 0555);
  const bool ok = run_unprivileged([&] {
    const std::string what =
        error_of([&] { SafetensorsWriter writer(locked / "x.safetensors", {}); });
    const std::string what_atomic = error_of([&] { write_file_atomic(locked / "x.json", "{}"); });
    return contains(what, "Permission denied") && contains(what, locked.string()) &&
           contains(what_atomic, "Permission denied");
  });
  ::chmod(locked.c_str(), 0755);
  EXPECT_TRUE(ok);
  EXPECT_TRUE(std::filesystem::is_empty(locked));
}

TEST(SafetensorsWriter, CommitFailureThrowsAndCleansUp) {
  // The destination becomes a non-empty directory after construction: rename() must fail.
  ScratchDir dir;
  const auto path = dir / "out.safetensors";
  SafetensorsWriter writer(path, {{"a", DType::kU8, {1}}});
  writer.write("a", to_bytes<uint8_t>({5}));
  std::filesystem::create_directories(path / "blocker");
  const std::string what = error_of([&] { writer.commit(); });
  EXPECT_TRUE(contains(what, "cannot rename the temporary file over the destination")) << what;
  EXPECT_TRUE(contains(what, path.string())) << what;
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"out.safetensors"});  // just the directory
  EXPECT_TRUE(std::filesystem::is_directory(path));
}

TEST(SafetensorsWriter, MovedWriterStillOwnsItsFile) {
  ScratchDir dir;
  const auto path = dir / "m.safetensors";
  SafetensorsWriter a(path, {{"x", DType::kU8, {1}}});
  SafetensorsWriter b = std::move(a);
  b.write("x", to_bytes<uint8_t>({3}));
  b.commit();
  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.raw(file.at("x")).size(), 1u);
}

TEST(WriteFileAtomic, WritesReplacesAndRefusesDirectories) {
  ScratchDir dir;
  const auto path = dir / "a.json";
  write_file_atomic(path, "first");
  write_file_atomic(path, "second, longer");
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "second, longer");
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"a.json"});
  EXPECT_TRUE(contains(error_of([&] { write_file_atomic(dir.path(), "x"); }), "is a directory"));
  EXPECT_TRUE(contains(error_of([&] { write_file_atomic(dir / "no" / "a.json", "x"); }),
                       "No such file or directory"));
  // Permissions follow the umask like an ordinary file, not mkstemp's 0600.
  const mode_t mask = ::umask(022);
  ::umask(mask);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u & ~mask);
}

}  // namespace
}  // namespace nms
