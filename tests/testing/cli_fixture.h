// Test fixture for end-to-end CLI tests: a scratch directory per test and helpers that run the
// real `nmsparse` binary (NMS_CLI_PATH) in it, capturing exit status, stdout and stderr.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#ifndef NMS_CLI_PATH
#error "define NMS_CLI_PATH (the nmsparse binary) for tests that include testing/cli_fixture.h"
#endif

namespace nms::testing {

struct CliResult {
  int status = -1;
  std::string out;
  std::string err;

  // stdout followed by stderr, for checks that do not care which stream a message went to.
  std::string text() const { return out + err; }
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class CliFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("nmsparse_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" +
            std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs `nmsparse args` in dir_; `env` (e.g. "NAME=value"), when given, is put before the
  // command. The files that capture stdout and stderr are removed again, so a run leaves in dir_
  // only what the command itself wrote.
  CliResult run(const std::string& args, const std::string& env = "") const {
    const std::filesystem::path out = dir_ / ".stdout";
    const std::filesystem::path err = dir_ / ".stderr";
    const std::string cmd = std::string("cd '") + dir_.string() + "' && " +
                            (env.empty() ? "" : env + " ") + "'" NMS_CLI_PATH "' " + args + " > '" +
                            out.string() + "' 2> '" + err.string() + "'";
    const int raw = std::system(cmd.c_str());
    CliResult r;
    r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    std::filesystem::remove(out);
    std::filesystem::remove(err);
    return r;
  }
  CliResult ok(const std::string& args) const {
    CliResult r = run(args);
    EXPECT_EQ(r.status, 0) << args << "\nstdout: " << r.out << "\nstderr: " << r.err;
    return r;
  }
  // Exit status 2 (bad input) with `fragment` in the message.
  void bad(const std::string& args, const std::string& fragment) const {
    const CliResult r = run(args);
    EXPECT_EQ(r.status, 2) << args << "\nstderr: " << r.err;
    EXPECT_NE(r.err.find(fragment), std::string::npos) << args << "\nstderr: " << r.err;
  }
  std::filesystem::path path(const std::string& name) const { return dir_ / name; }

  std::filesystem::path dir_;
};

}  // namespace nms::testing
