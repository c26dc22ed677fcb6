// End-to-end tests of the `nmsparse` tool: each runs the real binary in a scratch directory and
// checks its exit status, its messages, and the files it leaves behind (or does not).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "nmsparse/core/rng.h"
#include "nmsparse/io/safetensors.h"
#include "nmsparse/io/sharded.h"
#include "nmsparse/mask/verify.h"
#include "testing/cli_fixture.h"

namespace fs = std::filesystem;

namespace nms {
namespace {

using testing::CliResult;
using testing::slurp;

class Cli : public testing::CliFixture {
 protected:
  // Runs a command that must fail with `status` (2: bad input; 1: verify violation), a message
  // (stderr or stdout) containing `fragment`, and no file left in the scratch directory except
  // those present before.
  void fails(const std::string& args, const std::string& fragment, int status = 2) {
    std::set<fs::path> before;
    for (const auto& e : fs::recursive_directory_iterator(dir_)) before.insert(e.path());
    const CliResult r = run(args);
    EXPECT_EQ(r.status, status) << args << "\nstderr: " << r.err;
    EXPECT_NE((r.err + r.out).find(fragment), std::string::npos)
        << args << "\nstderr: " << r.err << "\nstdout: " << r.out << "\nexpected: " << fragment;
    for (const auto& e : fs::recursive_directory_iterator(dir_)) {
      EXPECT_TRUE(before.count(e.path())) << "left behind: " << e.path() << " by " << args;
    }
  }

  void small_model(const std::string& name, const std::string& extra = "", int vocab = 96) {
    ok("generate " + name + " --layers 1 --hidden 64 --intermediate 128 -q --vocab " +
       std::to_string(vocab) + " " + extra);
  }
};

TEST_F(Cli, HelpAndVersion) {
  const CliResult r = ok("--help");
  for (const char* sub : {"info", "mask", "verify", "pack", "unpack", "generate", "bench"}) {
    EXPECT_NE(r.out.find(sub), std::string::npos) << sub;
  }
  EXPECT_NE(ok("mask --help").out.find("--write-masks"), std::string::npos);
  EXPECT_NE(ok("bench masks --help").out.find("--llama3-8b-block"), std::string::npos);
  EXPECT_NE(ok("--version").out.find("nmsparse"), std::string::npos);
  EXPECT_EQ(run("").status, 2);
  EXPECT_EQ(run("frobnicate").status, 2);
}

TEST_F(Cli, InfoDiversity) {
  const auto j = nlohmann::json::parse(ok("info --diversity --nm 4:8 --json -").out);
  EXPECT_EQ(j["diversity"]["transposable"]["exact"], "116963796250");
  EXPECT_EQ(j["diversity"]["rowwise"]["exact"], "576480100000000");
  const CliResult big = ok("info --diversity --nm 16:32");
  EXPECT_NE(big.out.find("not computed (m > 16)"), std::string::npos) << big.out;
}

TEST_F(Cli, GenerateIsDeterministic) {
  small_model("a.safetensors");
  small_model("b.safetensors");
  EXPECT_EQ(slurp(path("a.safetensors")), slurp(path("b.safetensors")));
  small_model("c.safetensors", "--seed 1");
  EXPECT_NE(slurp(path("a.safetensors")), slurp(path("c.safetensors")));
}

TEST_F(Cli, InfoListsEligibility) {
  small_model("m.safetensors");
  const CliResult r = ok("info m.safetensors --nm 2:4 --json info.json");
  EXPECT_NE(r.out.find("model.layers.0.mlp.up_proj.weight"), std::string::npos);
  EXPECT_NE(r.out.find("1-D tensor"), std::string::npos);
  const auto j = nlohmann::json::parse(slurp(path("info.json")));
  bool stem_skipped = false;
  for (const auto& t : j["tensors"]) {
    if (t["name"] == "vision.stem.weight") {
      stem_skipped = !t["eligible"].get<bool>();
      EXPECT_EQ(t["matrix"], nlohmann::json({64, 147}));
      EXPECT_EQ(t["layout"], "conv-nhwc");
    }
  }
  EXPECT_TRUE(stem_skipped);
  EXPECT_NE(ok("info --system").out.find("threads"), std::string::npos);
}

TEST_F(Cli, MaskThenVerify) {
  small_model("m.safetensors");
  fails("verify --nm 2:4 m.safetensors", "FAIL", 1);
  const CliResult r = ok("mask --nm 2:4 m.safetensors out.safetensors --json r.json");
  EXPECT_NE(r.out.find("density 0.5000 / sparsity 0.5000"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("skipping 'vision.stem.weight'"), std::string::npos) << r.err;
  const CliResult v = ok("verify --nm 2:4 out.safetensors --dense m.safetensors");
  EXPECT_NE(v.out.find("PASS"), std::string::npos);
  // Every input tensor is in the output; skipped ones byte-identical, masked ones 2:4 and a
  // subset of the input.
  const SafetensorsFile in = SafetensorsFile::open(path("m.safetensors"));
  const SafetensorsFile out = SafetensorsFile::open(path("out.safetensors"));
  ASSERT_EQ(in.tensors().size(), out.tensors().size());
  const auto report = nlohmann::json::parse(slurp(path("r.json")));
  EXPECT_EQ(report["pattern"], "2:4");
  EXPECT_NEAR(report["density"].get<double>(), 0.5, 1e-12);
  for (const auto& layer : report["layers"]) {
    const std::string name = layer["name"];
    const TensorInfo& a = in.at(name);
    const TensorInfo& b = out.at(name);
    EXPECT_EQ(a.dtype, b.dtype);
    EXPECT_EQ(a.shape, b.shape);
    if (layer["status"] != "masked") {
      EXPECT_TRUE(std::equal(in.raw(a).begin(), in.raw(a).end(), out.raw(b).begin())) << name;
      continue;
    }
    const auto x = in.read_f32(a);
    const auto y = out.read_f32(b);
    for (size_t k = 0; k < x.size(); ++k) ASSERT_TRUE(y[k] == 0.0f || y[k] == x[k]) << name;
  }
  fails("verify --nm 2:4 --transposable out.safetensors --include q_proj", "FAIL: column", 1);
  // 8:16 --transposable: the 128-row conv is checked, a 104-row embedding is skipped, not failed.
  small_model("m104.safetensors", "", 104);
  ok("mask --nm 8:16 m104.safetensors o816.safetensors -q");
  const CliResult t =
      run("verify --nm 8:16 --transposable o816.safetensors --include 'embed|conv' --json -");
  EXPECT_EQ(t.status, 1);
  const auto tj = nlohmann::json::parse(t.out);
  EXPECT_EQ(tj["skipped"], 2);  // the embedding and the 1-D conv bias
  EXPECT_EQ(tj["failed"], 1);
}

TEST_F(Cli, TransposableMask) {
  small_model("m.safetensors");
  std::map<std::string, double> objective;
  for (const std::string method : {"exact", "greedy", "entropic"}) {
    const std::string out = "t_" + method + ".safetensors";
    ok("mask --nm 4:8 --transposable --method " + method + " m.safetensors " + out +
       " --include proj --compare exact -q --json r.json");
    ok("verify --nm 4:8 --transposable " + out + " --include proj -q");
    const auto j = nlohmann::json::parse(slurp(path("r.json")));
    EXPECT_EQ(j["transposable"], true);
    double sum = 0.0;
    for (const auto& layer : j["layers"]) {
      if (layer["status"] != "masked") continue;
      sum += layer["objective"].get<double>();
      EXPECT_GE(layer["gap_to_exact"].get<double>(), -1e-12) << method;
      EXPECT_LE(layer["retained_vs_rowwise"].get<double>(), 1.0 + 1e-12) << method;
    }
    objective[method] = sum;
  }
  EXPECT_GE(objective["exact"], objective["entropic"] * (1 - 1e-12));
  EXPECT_GE(objective["exact"], objective["greedy"] * (1 - 1e-12));
  EXPECT_GE(objective["greedy"], 0.5 * objective["exact"]);
  fails("mask --nm 2:4 --method exact m.safetensors o.safetensors", "add --transposable");
  fails("mask --nm 2:4 --transposable --method simplex m.safetensors o.safetensors",
        "unknown --method 'simplex'");
}

// --scores ranks by the given tensors, not |W|: scores that favour positions (i, j) with
// (j - i) mod 4 in {0, 1} (2 per row and per column of every 4 x 4 tile, so transposable too)
// must keep exactly those, although |W| would choose others.
TEST_F(Cli, ScoresFromFile) {
  auto favoured = [](int k) { return ((k % 8 - k / 8) % 4 + 4) % 4 < 2; };
  std::vector<float> w(8 * 8);
  std::vector<float> score(8 * 8);
  for (int k = 0; k < 64; ++k) {
    w[k] = static_cast<float>(k % 7) + 1.0f;  // nonzero everywhere
    score[k] = favoured(k) ? 2.0f : 1.0f;
  }
  auto bytes = [](const std::vector<float>& v) {
    std::vector<std::byte> b(v.size() * sizeof(float));
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  write_safetensors(path("w.safetensors"), {{{"layer.weight", DType::kF32, {8, 8}}, bytes(w)}});
  write_safetensors(path("s.safetensors"), {{{"layer.weight", DType::kF32, {8, 8}}, bytes(score)}});
  write_safetensors(path("other.safetensors"), {{{"x", DType::kF32, {8, 8}}, bytes(score)}});
  for (const std::string extra : {"", " --transposable"}) {
    ok("mask --nm 2:4 w.safetensors o.safetensors --scores s.safetensors -q" + extra);
    const SafetensorsFile f = SafetensorsFile::open(path("o.safetensors"));
    const auto out = f.read_f32(f.at("layer.weight"));
    for (int k = 0; k < 64; ++k) {
      EXPECT_EQ(out[k], favoured(k) ? w[k] : 0.0f) << k << extra;
    }
    fs::remove(path("o.safetensors"));
  }
  fails("mask --nm 2:4 w.safetensors o.safetensors --scores other.safetensors",
        "has no tensor 'layer.weight'");
}

TEST_F(Cli, WriteMasks) {
  small_model("m.safetensors");
  ok("mask --nm 1:4 m.safetensors masks.safetensors --write-masks --include mlp");
  const SafetensorsFile f = SafetensorsFile::open(path("masks.safetensors"));
  ASSERT_EQ(f.tensors().size(), 3u);
  for (const auto& t : f.tensors()) {
    EXPECT_EQ(t.dtype, DType::kBool);
    int64_t kept = 0;
    for (std::byte b : f.raw(t)) kept += static_cast<int>(b);
    EXPECT_EQ(kept * 4, t.numel) << t.name;
  }
}

TEST_F(Cli, PackUnpackRoundTrip) {
  small_model("m.safetensors", "--dtype BF16");
  ok("mask --nm 3:8 m.safetensors masked.safetensors -q");
  fails("pack --nm 3:8 m.safetensors p.safetensors", "Mask it first");
  const CliResult p = ok("pack --nm 3:8 masked.safetensors packed.safetensors");
  EXPECT_NE(p.out.find("packed"), std::string::npos);
  ok("verify --nm 3:8 packed.safetensors");
  ok("info packed.safetensors");
  ok("unpack packed.safetensors unpacked.safetensors");
  const SafetensorsFile a = SafetensorsFile::open(path("masked.safetensors"));
  const SafetensorsFile b = SafetensorsFile::open(path("unpacked.safetensors"));
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (const auto& t : a.tensors()) {
    const TensorInfo& u = b.at(t.name);
    EXPECT_EQ(t.dtype, u.dtype) << t.name;
    EXPECT_EQ(t.shape, u.shape) << t.name;
    EXPECT_TRUE(std::equal(a.raw(t).begin(), a.raw(t).end(), b.raw(u).begin())) << t.name;
  }
  // Along columns too (the transposed operand).
  ok("mask --nm 2:4 m.safetensors m24.safetensors -q");
  fails("pack --nm 2:4 --axis cols m24.safetensors c.safetensors", "Mask it first");
}

TEST_F(Cli, Sparse24BitmaskRoundTrip) {
  small_model("m.safetensors");
  ok("mask --nm 2:4 m.safetensors masked.safetensors -q");
  fails("pack --nm 1:4 --format sparse-24-bitmask masked.safetensors p.safetensors", "2:4 only");
  ok("pack --nm 2:4 --format sparse-24-bitmask masked.safetensors s24.safetensors");
  const SafetensorsFile s = SafetensorsFile::open(path("s24.safetensors"));
  EXPECT_NE(s.find("model.layers.0.mlp.up_proj.weight.bitmask"), nullptr);
  EXPECT_NE(s.find("model.layers.0.mlp.up_proj.weight.compressed"), nullptr);
  ok("verify --nm 2:4 s24.safetensors");
  ok("unpack s24.safetensors back.safetensors");
  const SafetensorsFile a = SafetensorsFile::open(path("masked.safetensors"));
  const SafetensorsFile b = SafetensorsFile::open(path("back.safetensors"));
  for (const auto& t : a.tensors()) {
    const TensorInfo& u = b.at(t.name);
    EXPECT_TRUE(std::equal(a.raw(t).begin(), a.raw(t).end(), b.raw(u).begin())) << t.name;
  }
}

TEST_F(Cli, ShardedModels) {
  small_model("sharded", "--shards 3");
  ASSERT_TRUE(fs::exists(path("sharded/model.safetensors.index.json")));
  ok("info sharded");
  ok("mask --nm 2:4 sharded/model.safetensors.index.json masked -q");
  ASSERT_TRUE(fs::exists(path("masked/model.safetensors.index.json")));
  ok("verify --nm 2:4 masked");
  ok("pack --nm 2:4 masked packed -q");
  ok("unpack packed/model.safetensors.index.json unpacked -q");
  const SafetensorsModel a = SafetensorsModel::open(path("masked"));
  const SafetensorsModel b = SafetensorsModel::open(path("unpacked"));
  EXPECT_EQ(b.shard_count(), 3u);
  EXPECT_EQ(a.entries().size(), b.entries().size());
  fails("mask --nm 2:4 sharded sharded", "is the input");
  fails("mask --nm 2:4 sharded/model.safetensors.index.json sharded", "holds the input model");
}

TEST_F(Cli, SelectionAndSkips) {
  small_model("m.safetensors");
  const CliResult r =
      ok("mask --nm 2:4 m.safetensors o.safetensors --include 'q_proj|k_proj' "
         "--exclude k_proj --json -");
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["masked"], 1);
  fails("mask --nm 2:4 m.safetensors o2.safetensors --include '('", "invalid regex for --include");
  fails("mask --nm 2:4 m.safetensors o2.safetensors --include nothing-matches",
        "no tensor of 'm.safetensors' can be masked");
}

TEST_F(Cli, BadPatterns) {
  small_model("m.safetensors");
  fails("mask --nm 4:2 m.safetensors o.safetensors", "kept count n (4) exceeds group size m (2)");
  fails("mask --nm 0:4 m.safetensors o.safetensors", "must be at least 1");
  fails("mask --nm 2:128 m.safetensors o.safetensors", "group size m (128) must be in [1, 64]");
  fails("mask --nm two:four m.safetensors o.safetensors", "malformed pattern 'two:four'");
  fails("mask m.safetensors o.safetensors", "--nm is required");
}

TEST_F(Cli, BadPaths) {
  small_model("m.safetensors");
  fails("mask --nm 2:4 missing.safetensors o.safetensors", "missing.safetensors");
  fails("mask --nm 2:4 m.safetensors m.safetensors", "is the input");
  fails("mask --nm 2:4 m.safetensors ./m.safetensors", "is the input");
  fails("mask --nm 2:4 m.safetensors no/such/dir/o.safetensors", "does not exist");
  // /proc refuses new files even to root (CI runs as root, so a chmod'ed directory would not do).
  fails("mask --nm 2:4 m.safetensors /proc/nmsparse-test.safetensors",
        "/proc/nmsparse-test.safetensors");
  fs::create_directories(path("dir"));
  fails("mask --nm 2:4 m.safetensors dir", "is a directory");
}

// A run stopped by a signal while writing leaves neither its output nor its temporary file. The
// signal is sent once the temporary file exists (an event, not a delay), while `generate` is
// still producing ~200 MB of weights.
TEST_F(Cli, InterruptLeavesNothingBehind) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (::chdir(dir_.c_str()) != 0) ::_exit(126);
    std::freopen("/dev/null", "w", stdout);
    std::freopen("/dev/null", "w", stderr);
    ::execl(NMS_CLI_PATH, "nmsparse", "generate", "big.safetensors", "--layers", "2", "--hidden",
            "1024", "--intermediate", "4096", "--vocab", "8192", "-q", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  bool seen = false;
  for (int k = 0; k < 6000 && !seen; ++k) {  // at most 60 s
    for (const auto& e : fs::directory_iterator(dir_)) {
      seen |= e.path().filename().string().rfind(".big.safetensors.tmp", 0) == 0;
    }
    if (!seen) ::usleep(10000);
  }
  ASSERT_TRUE(seen) << "no temporary file appeared";
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  for (const auto& e : fs::directory_iterator(dir_)) ADD_FAILURE() << "left behind: " << e.path();
}

// Writes a tiny model whose weight holds one non-finite value.
void write_nonfinite(const fs::path& p, float bad) {
  std::vector<float> w(8 * 8, 0.5f);
  w[3 * 8 + 5] = bad;
  std::vector<std::byte> bytes(w.size() * sizeof(float));
  std::memcpy(bytes.data(), w.data(), bytes.size());
  write_safetensors(p, {{{"layer.weight", DType::kF32, {8, 8}}, bytes}});
}

TEST_F(Cli, NonFiniteWeights) {
  write_nonfinite(path("nan.safetensors"), std::nanf(""));
  write_nonfinite(path("inf.safetensors"), std::numeric_limits<float>::infinity());
  fails("mask --nm 2:4 nan.safetensors o.safetensors",
        "tensor 'layer.weight' has a non-finite value (nan) at index [3, 5]");
  fails("mask --nm 2:4 inf.safetensors o.safetensors", "at index [3, 5]");
  fails("pack --nm 2:4 nan.safetensors o.safetensors", "--allow-nonfinite");
  ok("mask --nm 2:4 nan.safetensors o.safetensors --allow-nonfinite -q");
  ok("mask --nm 2:4 inf.safetensors i.safetensors --allow-nonfinite -q");
  const SafetensorsFile f = SafetensorsFile::open(path("i.safetensors"));
  EXPECT_TRUE(std::isinf(f.read_f32(f.at("layer.weight"))[3 * 8 + 5]));  // +-Inf is kept
  const SafetensorsFile g = SafetensorsFile::open(path("o.safetensors"));
  EXPECT_EQ(g.read_f32(g.at("layer.weight"))[3 * 8 + 5], 0.0f);  // NaN scores 0: pruned
}

// Every file of the corrupt corpus is refused by every command with a clear message.
TEST_F(Cli, CorruptInputsAreRefused) {
  const fs::path corpus = fs::path(NMS_TEST_DATA_DIR) / "safetensors" / "corrupt";
  ASSERT_TRUE(fs::is_directory(corpus));
  int files = 0;
  for (const auto& e : fs::directory_iterator(corpus)) {
    if (e.path().extension() != ".safetensors") continue;
    ++files;
    const std::string in = std::string("'").append(e.path().string()).append("'");
    for (const std::string& cmd :
         {"info " + in, "mask --nm 2:4 " + in + " o.safetensors", "verify --nm 2:4 " + in}) {
      const CliResult r = run(cmd);
      EXPECT_EQ(r.status, 2) << cmd << "\n" << r.err;
      EXPECT_NE(r.err.find("nmsparse: error:"), std::string::npos) << cmd << "\n" << r.err;
      EXPECT_FALSE(fs::exists(path("o.safetensors")));
    }
  }
  EXPECT_GE(files, 8);
}

// `bench masks` on small shapes: the report's fields, the methods' objectives against each other
// (row-wise >= exact >= greedy: the transposable masks are restrictions of the row-wise one), and
// exact == LEMON when LEMON is compiled in.
const nlohmann::json* find_result(const nlohmann::json& report, const std::string& shape,
                                  const std::string& pattern, const std::string& method) {
  for (const auto& r : report["results"]) {
    if (r["shape"] == shape && r["pattern"] == pattern && r["method"] == method) return &r;
  }
  return nullptr;
}

TEST_F(Cli, BenchMasksReport) {
  ok("bench masks --shape 64x64,32x96 --nm 4:8,16:32 --repeats 2 --threads 2 "
     "--warmup 1 --methods exact,greedy,entropic,rowwise --json r.json -q");
  const auto j = nlohmann::json::parse(slurp(path("r.json")));
  EXPECT_EQ(j["command"], "bench masks");
  EXPECT_EQ(j["repeats"], 2);
  EXPECT_EQ(j["warmup"], 1);
  EXPECT_EQ(j["threads"], 2);
  EXPECT_EQ(j["dist"], "laplace");
  EXPECT_EQ(j["order"], "round-robin");
  EXPECT_TRUE(j["objective_match"].is_null());  // no lemon run
  EXPECT_TRUE(j["failures"].empty());
  ASSERT_EQ(j["shapes"].size(), 2u);
  ASSERT_EQ(j["results"].size(), 2u * 2u * 4u);
  for (const auto& r : j["results"]) {
    ASSERT_EQ(r["seconds"].size(), 2u) << r;
    EXPECT_GT(r["median_s"].get<double>(), 0.0) << r;
    EXPECT_LE(r["min_s"].get<double>(), r["median_s"].get<double>()) << r;
    EXPECT_GT(r["weights_per_s"].get<double>(), 0.0) << r;
    EXPECT_TRUE(r["checked"].get<bool>()) << r;
    EXPECT_TRUE(r["vs_lemon"].is_null()) << r;
    EXPECT_GT(r["vs_exact"].get<double>(), 0.0) << r;
    EXPECT_GT(r["objective"].get<int64_t>(), 0) << r;
  }
  for (const char* shape : {"64x64", "32x96"}) {
    for (const char* pattern : {"4:8", "16:32"}) {
      const auto* exact = find_result(j, shape, pattern, "exact");
      const auto* greedy = find_result(j, shape, pattern, "greedy");
      const auto* entropic = find_result(j, shape, pattern, "entropic");
      const auto* rowwise = find_result(j, shape, pattern, "rowwise");
      ASSERT_TRUE(exact && greedy && entropic && rowwise) << shape << " " << pattern;
      const auto e = (*exact)["objective"].get<int64_t>();
      EXPECT_DOUBLE_EQ((*exact)["vs_exact"].get<double>(), 1.0);
      EXPECT_GE((*rowwise)["objective"].get<int64_t>(), e) << shape << " " << pattern;
      EXPECT_LE((*greedy)["objective"].get<int64_t>(), e) << shape << " " << pattern;
      EXPECT_LE((*entropic)["objective"].get<int64_t>(), e) << shape << " " << pattern;
      // 16:32 on 32 columns: a tile is a whole 32x32 block; the ratio is the inverse time ratio.
      EXPECT_NEAR((*greedy)["vs_exact"].get<double>(),
                  (*exact)["median_s"].get<double>() / (*greedy)["median_s"].get<double>(), 1e-9);
    }
  }
  // Same seed, same scores: the objectives are reproducible; another seed changes them.
  const auto again = nlohmann::json::parse(
      ok("bench masks --shape 64x64 --nm 4:8 --repeats 1 --methods exact --json -").out);
  EXPECT_EQ(again["results"][0]["objective"],
            (*find_result(j, "64x64", "4:8", "exact"))["objective"]);
  const auto other = nlohmann::json::parse(
      ok("bench masks --shape 64x64 --nm 4:8 --repeats 1 --methods exact --seed 7 --dist gauss "
         "--json -")
          .out);
  EXPECT_NE(other["results"][0]["objective"], again["results"][0]["objective"]);
  // Human output: a table per shape with the documented columns.
  const CliResult human =
      ok("bench masks --shape 64x64 --nm 4:8 --repeats 1 --methods exact,rowwise");
  for (const char* col : {"pattern", "method", "median ms", "Mweights/s", "vs lemon", "vs exact",
                          "objective", "rowwise"}) {
    EXPECT_NE(human.out.find(col), std::string::npos) << col << "\n" << human.out;
  }
}

TEST_F(Cli, BenchMasksExactMatchesLemon) {
  const auto probe = nlohmann::json::parse(
      ok("bench masks --shape 32x32 --nm 4:8 --repeats 1 --methods exact --json -").out);
  if (!probe["lemon_available"].get<bool>()) {
    fails("bench masks --shape 32x32 --methods lemon", "liblemon-dev");
    GTEST_SKIP() << "nmsparse built without LEMON";
  }
  for (const char* threads : {"1", "2"}) {
    const auto j = nlohmann::json::parse(
        ok(std::string("bench masks --shape 64x64 --nm 2:4,4:8,8:16,16:32 --repeats 2 --threads ") +
           threads + " --methods lemon,exact,rowwise --json -")
            .out);
    EXPECT_EQ(j["objective_match"], true);
    EXPECT_TRUE(j["failures"].empty());
    for (const char* pattern : {"2:4", "4:8", "8:16", "16:32"}) {
      const auto* exact = find_result(j, "64x64", pattern, "exact");
      const auto* lemon = find_result(j, "64x64", pattern, "lemon");
      ASSERT_TRUE(exact && lemon) << pattern;
      EXPECT_EQ((*exact)["objective_match"], true) << pattern;
      EXPECT_EQ((*exact)["lemon_objective"], (*lemon)["objective"]) << pattern;
      EXPECT_EQ((*exact)["objective"], (*lemon)["objective"]) << pattern;
      EXPECT_DOUBLE_EQ((*lemon)["vs_lemon"].get<double>(), 1.0);
      EXPECT_NEAR((*exact)["vs_lemon"].get<double>(),
                  (*lemon)["median_s"].get<double>() / (*exact)["median_s"].get<double>(), 1e-9);
      EXPECT_GE((*find_result(j, "64x64", pattern, "rowwise"))["objective"].get<int64_t>(),
                (*exact)["objective"].get<int64_t>());
    }
  }
  const CliResult human =
      ok("bench masks --shape 32x32 --nm 4:8 --repeats 1");  // exact,lemon default
  EXPECT_NE(human.out.find("exact objective == LEMON optimum"), std::string::npos) << human.out;
}

TEST_F(Cli, BenchMasksBadInputs) {
  fails("bench masks --nm 4:x", "'4:x'");
  fails("bench masks --nm 9:8", "n (9) exceeds group size m (8)");
  fails("bench masks --shape 100x64 --nm 4:8", "shape 100x64");
  fails("bench masks --shape 64x64,64x60 --nm 4:8", "shape 64x60");
  fails("bench masks --shape 64by64", "'64by64'");
  fails("bench masks --llama3-8b-block --nm 3:6", "q_proj (4096x4096)");
  fails("bench masks --shape 64x64 --llama3-8b-block", "not both");
  fails("bench masks --methods exact,simplex", "unknown method 'simplex'");
  fails("bench masks --methods exact,exact", "exact twice");
  fails("bench masks --repeats 0", "--repeats must be at least 1 (got 0)");
  fails("bench masks --dist cauchy", "'cauchy'");
  fails("bench masks --warmup -1", "--warmup must be at least 0 (got -1)");
  fails("bench masks --shape 32768x16384", "2^28");
  fails("bench", "A subcommand is required");
}

}  // namespace
}  // namespace nms
