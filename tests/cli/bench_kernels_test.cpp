// End-to-end test of `nmsparse bench kernels` (runs the real binary; tiny shapes, one repeat).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

namespace nms {
namespace {

struct CliRun {
  int status = -1;
  std::string out;
};

CliRun run_cli(const std::string& args) {
  const std::string cmd = std::string("'") + NMS_CLI_PATH + "' " + args + " 2>&1";
  CliRun r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t got = 0;
  while ((got = fread(buf, 1, sizeof(buf), pipe)) > 0) r.out.append(buf, got);
  const int raw = pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

bool have_openblas() {
  return run_cli("bench kernels --shape 8x8x8 --repeats 1 -q").out.find("needs OpenBLAS") ==
         std::string::npos;
}

TEST(BenchKernelsCli, JsonReportHasEveryGemmAndSmallErrors) {
  if (!have_openblas()) GTEST_SKIP() << "built without OpenBLAS";
  const CliRun r = run_cli(
      "bench kernels --shape 64x32x48,16x48x32 --nm 2:4,1:4 --repeats 1 "
      "--threads 1 --json -");
  ASSERT_EQ(r.status, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["environment"]["threads"], 1);
  EXPECT_TRUE(j["environment"].contains("isa"));
  EXPECT_TRUE(j["environment"].contains("blas"));
  ASSERT_EQ(j["results"].size(), 2u * 2u * 4u);  // shapes x patterns x gemms
  for (const auto& res : j["results"]) {
    EXPECT_GT(res["dense_ms"].get<double>(), 0.0);
    EXPECT_GT(res["sparse_ms"].get<double>(), 0.0);
    // fp32 sums of at most 48 products against OpenBLAS on the same masked operands.
    EXPECT_LT(res["max_rel_error"].get<double>(), 1e-5) << res.dump();
  }
}

TEST(BenchKernelsCli, BadOptionsAreRefused) {
  if (!have_openblas()) GTEST_SKIP() << "built without OpenBLAS";
  CliRun r = run_cli("bench kernels --shape 64x30x48 --repeats 1 -q");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("must divide"), std::string::npos) << r.out;
  r = run_cli("bench kernels --shape 64x32 -q");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("TOKENSxINxOUT"), std::string::npos) << r.out;
  r = run_cli("bench kernels --shape 64x32x48 --gemms forward,backwards -q");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("'backwards'"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace nms
