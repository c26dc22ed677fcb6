// End-to-end tests of `nmsparse gradprune` (runs the real binary in a scratch directory).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "nmsparse/io/safetensors.h"
#include "testing/cli_fixture.h"

namespace fs = std::filesystem;

namespace nms {
namespace {

using testing::CliResult;
using testing::slurp;

class GradPruneCli : public testing::CliFixture {
 protected:
  void SetUp() override {
    CliFixture::SetUp();
    ok("generate g.safetensors --layers 1 --hidden 64 --intermediate 128 --vocab 96 -q");
  }
};

TEST_F(GradPruneCli, MvueIsDeterministicPerSeedAndValidNm) {
  const CliResult r = ok("gradprune --method mvue --nm 2:4 --seed 3 g.safetensors a.safetensors");
  EXPECT_NE(r.out.find("pruned"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("1-D"), std::string::npos) << r.err;  // norms skipped with a warning
  ok("gradprune --method mvue --nm 2:4 --seed 3 g.safetensors b.safetensors --threads 1");
  ok("gradprune --method mvue --nm 2:4 --seed 4 g.safetensors c.safetensors");
  EXPECT_EQ(slurp(path("a.safetensors")), slurp(path("b.safetensors")));
  EXPECT_NE(slurp(path("a.safetensors")), slurp(path("c.safetensors")));
  ok("verify --nm 2:4 a.safetensors");
}

TEST_F(GradPruneCli, CompressedEqualsDenseAndJsonReport) {
  for (const char* axis : {"rows", "cols"}) {
    const std::string common =
        std::string("gradprune --nm 2:4 --seed 9 --axis ") + axis + " g.safetensors ";
    ok(common + "dense.safetensors --include mlp --json r.json");
    ok(common + "packed.safetensors --compressed -q --include mlp");
    ok("unpack packed.safetensors unpacked.safetensors -q");
    const SafetensorsFile d = SafetensorsFile::open(path("dense.safetensors"));
    const SafetensorsFile u = SafetensorsFile::open(path("unpacked.safetensors"));
    int compared = 0;
    for (const TensorInfo& t : d.tensors()) {
      if (t.name.find("mlp") == std::string::npos) continue;
      EXPECT_EQ(d.read_f32(t), u.read_f32(u.at(t.name))) << t.name << " " << axis;
      ++compared;
    }
    EXPECT_GT(compared, 0);
    const auto j = nlohmann::json::parse(slurp(path("r.json")));
    EXPECT_EQ(j["command"], "gradprune");
    EXPECT_EQ(j["axis"], axis);
    bool any = false;
    for (const auto& l : j["layers"]) {
      if (l["status"] == "pruned") {
        any = true;
        EXPECT_LE(l["density"].get<double>(), 0.5);
      }
    }
    EXPECT_TRUE(any);
    fs::remove(path("dense.safetensors"));
    fs::remove(path("packed.safetensors"));
    fs::remove(path("unpacked.safetensors"));
  }
}

TEST_F(GradPruneCli, MethodsAndErrors) {
  ok("gradprune --method topn --nm 2:4 g.safetensors t.safetensors -q");
  ok("gradprune --method mvue-approx24 --nm 2:4 g.safetensors x.safetensors -q");
  ok("gradprune --method mvue --nm 8:16 g.safetensors y.safetensors -q");
  CliResult r = run("gradprune --method mvue-approx24 --nm 4:8 g.safetensors z.safetensors");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("2:4 only"), std::string::npos) << r.err;
  r = run("gradprune --method magic g.safetensors z.safetensors");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("unknown --method"), std::string::npos) << r.err;
  r = run("gradprune --axis diag g.safetensors z.safetensors");
  EXPECT_EQ(r.status, 2);
  EXPECT_FALSE(fs::exists(path("z.safetensors")));
  r = run("gradprune g.safetensors g.safetensors");
  EXPECT_EQ(r.status, 2);
}

}  // namespace
}  // namespace nms
