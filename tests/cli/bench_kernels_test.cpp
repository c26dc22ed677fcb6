// End-to-end test of `nmsparse bench kernels` (runs the real binary in a scratch directory; tiny
// shapes, one repeat).
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "testing/cli_fixture.h"

namespace nms {
namespace {

using testing::CliResult;

class BenchKernelsCli : public testing::CliFixture {
 protected:
  bool have_openblas() const {
    return run("bench kernels --shape 8x8x8 --repeats 1 -q").text().find("needs OpenBLAS") ==
           std::string::npos;
  }
};

TEST_F(BenchKernelsCli, JsonReportHasEveryGemmAndSmallErrors) {
  if (!have_openblas()) GTEST_SKIP() << "built without OpenBLAS";
  const CliResult r =
      run("bench kernels --shape 64x32x48,16x48x32 --nm 2:4,1:4 --repeats 1 "
          "--threads 1 --json -");
  ASSERT_EQ(r.status, 0) << r.text();
  const nlohmann::json j = nlohmann::json::parse(r.text());
  EXPECT_EQ(j["environment"]["threads"], 1);
  EXPECT_TRUE(j["environment"].contains("isa"));
  EXPECT_TRUE(j["environment"].contains("nm_gemm_kernel"));
  EXPECT_TRUE(j["environment"].contains("blas"));
  // `bench` starts with the thread-runtime settings (nms::reexec_with_thread_runtime_env) unless
  // the caller chose its own.
  if (std::getenv("NMSPARSE_RUNTIME_ENV") == nullptr &&
      std::getenv("OPENBLAS_THREAD_TIMEOUT") == nullptr) {
    EXPECT_EQ(j["environment"]["thread_runtime"]["OPENBLAS_THREAD_TIMEOUT"], "4") << j.dump();
  }
  ASSERT_EQ(j["results"].size(), 2u * 2u * 4u);  // shapes x patterns x gemms
  for (const auto& res : j["results"]) {
    EXPECT_GT(res["dense_ms"].get<double>(), 0.0);
    EXPECT_GT(res["sparse_ms"].get<double>(), 0.0);
    // fp32 sums of at most 48 products against OpenBLAS on the same masked operands.
    EXPECT_LT(res["max_rel_error"].get<double>(), 1e-5) << res.dump();
  }
}

TEST_F(BenchKernelsCli, Bf16GemmsOrAClearRefusal) {
  if (!have_openblas()) GTEST_SKIP() << "built without OpenBLAS";
  const CliResult r =
      run("bench kernels --shape 64x32x48 --nm 2:4 --gemms "
          "forward_bf16,backward_data_bf16,weight_grad_bf16,layer_step_bf16 --repeats 1 "
          "--threads 1 --json -");
  if (r.text().find("needs a CPU with AVX512_BF16") != std::string::npos) {
    EXPECT_EQ(r.status, 2);
    GTEST_SKIP() << "this CPU has no AVX512_BF16";
  }
  ASSERT_EQ(r.status, 0) << r.text();
  const nlohmann::json j = nlohmann::json::parse(r.text());
  ASSERT_EQ(j["results"].size(), 4u);
  for (const auto& res : j["results"]) {
    EXPECT_GT(res["sparse_ms"].get<double>(), 0.0);
    // Against fp32 sgemm: each input rounded to bf16 (relative 2^-9 each), so each product is
    // off by at most ~2^-8 of itself; sums of <= 48 products of entries in [-1, 1] (weight
    // gradient: 32 pruned tokens, MVUE values up to 2x) stay within a few percent of the largest
    // output. A wrong column or token would be off by whole products.
    EXPECT_LT(res["max_rel_error"].get<double>(), 0.05) << res.dump();
    EXPECT_GT(res["max_rel_error"].get<double>(), 0.0) << "bf16 rounding left no trace";
  }
}

TEST_F(BenchKernelsCli, BadOptionsAreRefused) {
  if (!have_openblas()) GTEST_SKIP() << "built without OpenBLAS";
  CliResult r = run("bench kernels --shape 64x30x48 --repeats 1 -q");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.text().find("must divide"), std::string::npos) << r.text();
  r = run("bench kernels --shape 64x32 -q");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.text().find("TOKENSxINxOUT"), std::string::npos) << r.text();
  r = run("bench kernels --shape 64x32x48 --gemms forward,backwards -q");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.text().find("'backwards'"), std::string::npos) << r.text();
}

}  // namespace
}  // namespace nms
