// End-to-end tests of `nmsparse mask --method bimask`: the files it writes (forward mask,
// backward mask, permutation), their invariants, the report, determinism and the errors.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "nmsparse/core/bit_mask.h"
#include "nmsparse/io/safetensors.h"
#include "nmsparse/mask/bimask.h"
#include "nmsparse/mask/standard.h"
#include "nmsparse/mask/verify.h"
#include "testing/cli_fixture.h"

namespace fs = std::filesystem;

namespace nms {
namespace {

using testing::slurp;

class BiMaskCli : public testing::CliFixture {
 protected:
  // Exit status 2, `fragment` in the output (stdout or stderr), and no o.safetensors written.
  void fails(const std::string& args, const std::string& fragment) {
    const testing::CliResult r = run(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.text();
    EXPECT_NE(r.text().find(fragment), std::string::npos) << args << "\n" << r.text();
    EXPECT_FALSE(fs::exists(dir_ / "o.safetensors")) << args;
  }
};

BitMask bool_mask(const SafetensorsFile& f, const TensorInfo& t) {
  EXPECT_EQ(t.dtype, DType::kBool);
  EXPECT_EQ(t.shape.size(), 2u);
  BitMask m(t.shape[0], t.shape[1]);
  const auto bytes = f.raw(t);
  for (int64_t i = 0; i < t.shape[0]; ++i)
    for (int64_t j = 0; j < t.shape[1]; ++j)
      if (bytes[static_cast<size_t>(i * t.shape[1] + j)] != std::byte{0}) m.set(i, j);
  return m;
}

TEST_F(BiMaskCli, WritesMasksAndPermutationWithInvariants) {
  ok("generate m.safetensors --layers 1 --hidden 64 --intermediate 128 --vocab 96 -q");
  const std::string text =
      ok("mask --method bimask --nm 2:4 --candidates 10 --search improve --criterion kept "
         "--seed 3 m.safetensors o.safetensors --json r.json")
          .text();
  for (const char* col : {"identity", "best random", "improved", "backward keeps"})
    EXPECT_NE(text.find(col), std::string::npos) << col << "\n" << text;
  const auto report = nlohmann::json::parse(slurp(path("r.json")));
  EXPECT_EQ(report["method"], "bimask");
  EXPECT_EQ(report["search"], "improve");
  EXPECT_LE(report["identity_fraction"].get<double>(),
            report["best_random_fraction"].get<double>());
  EXPECT_LE(report["best_random_fraction"].get<double>(),
            report["improved_fraction"].get<double>());
  const SafetensorsFile in = SafetensorsFile::open(path("m.safetensors"));
  const SafetensorsFile out = SafetensorsFile::open(path("o.safetensors"));
  const NmPattern p = NmPattern::make(2, 4);
  int checked = 0;
  for (const auto& layer : report["layers"]) {
    if (layer["status"] != "masked" || layer["layout"] != "matrix") continue;
    const std::string name = layer["name"];
    const TensorInfo& w = in.at(name);
    const BitMask fwd = bool_mask(out, out.at(name + ".mask_fwd"));
    const BitMask bwd = bool_mask(out, out.at(name + ".mask_bwd"));
    const TensorInfo& pt = out.at(name + ".perm");
    ASSERT_EQ(pt.dtype, DType::kI64);
    ASSERT_EQ(pt.shape, std::vector<int64_t>{w.shape[0]});
    std::vector<int64_t> perm(static_cast<size_t>(w.shape[0]));
    std::memcpy(perm.data(), out.raw(pt).data(), perm.size() * sizeof(int64_t));
    std::set<int64_t> distinct(perm.begin(), perm.end());
    ASSERT_EQ(distinct.size(), perm.size());
    ASSERT_EQ(*distinct.begin(), 0);
    ASSERT_EQ(*distinct.rbegin(), w.shape[0] - 1);
    // Forward = row-wise 2:4 magnitude mask of the weight; backward ⊆ forward and 2:4 along the
    // permuted output rows; the counts match the report.
    const std::vector<float> x = in.read_f32(w);
    const BitMask expect_fwd = mask_nm_magnitude({x.data(), w.shape[0], w.shape[1]}, p);
    EXPECT_TRUE(fwd == expect_fwd) << name;
    for (int64_t i = 0; i < fwd.rows(); ++i)
      for (int64_t j = 0; j < fwd.cols(); ++j) ASSERT_TRUE(!bwd.get(i, j) || fwd.get(i, j)) << name;
    EXPECT_TRUE(verify_nm(permute_rows(bwd, perm), p).cols_valid()) << name;
    EXPECT_EQ(bwd.count(), layer["final"]["kept"].get<int64_t>());
    EXPECT_EQ(fwd.count(), layer["forward_kept"].get<int64_t>());
    EXPECT_NEAR(layer["retained_fraction"].get<double>(),
                static_cast<double>(bwd.count()) / static_cast<double>(fwd.count()), 1e-12);
    ++checked;
  }
  EXPECT_GT(checked, 3);
}

TEST_F(BiMaskCli, DeterministicForSeedAndThreads) {
  ok("generate m.safetensors --layers 1 --hidden 64 --intermediate 128 --vocab 96 -q");
  const std::string args =
      "mask --method bimask --nm 2:4 --candidates 8 --seed 5 -q m.safetensors ";
  ok(args + "a.safetensors --threads 1");
  ok(args + "b.safetensors --threads 2");
  EXPECT_EQ(slurp(path("a.safetensors")), slurp(path("b.safetensors")));
  ok("mask --method bimask --nm 2:4 --candidates 8 --seed 6 -q m.safetensors c.safetensors");
  EXPECT_NE(slurp(path("a.safetensors")), slurp(path("c.safetensors")));
  // Random search with the eligible criterion: no improved column, the JSON says so.
  const std::string text =
      ok("mask --method bimask --nm 4:8 --search random --criterion eligible m.safetensors "
         "d.safetensors -q --json -")
          .text();
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["criterion"], "eligible");
  EXPECT_FALSE(j.contains("improved_fraction"));
  EXPECT_LE(j["identity_fraction"].get<double>(), 1.0);
}

TEST_F(BiMaskCli, RejectsBadOptions) {
  ok("generate m.safetensors --layers 1 --hidden 64 --intermediate 128 --vocab 96 -q");
  const std::string base = "mask --method bimask --nm 2:4 m.safetensors o.safetensors ";
  fails(base + "--search anneal", "unknown --search 'anneal'");
  fails(base + "--criterion mass", "unknown --criterion 'mass'");
  fails(base + "--candidates -1", "--candidates (-1)");
  fails(base + "--transposable", "drop --transposable");
  fails("mask --method bimsak --nm 2:4 --transposable m.safetensors o.safetensors",
        "unknown --method 'bimsak'");
}

}  // namespace
}  // namespace nms
