// `nmsparse bench kernels`: the three training GEMMs of an N:M layer and the whole layer step
// against OpenBLAS cblas_sgemm on the masked dense matrices, timed alternately in one process at
// the same thread count, each result checked against the dense product.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli_common.h"
#include "commands.h"
#include "nmsparse/core/error.h"
#include "nmsparse/core/half.h"
#include "nmsparse/core/isa.h"
#include "nmsparse/core/rng.h"
#include "nmsparse/core/threading.h"
#include "nmsparse/format/compressed_nm.h"
#include "nmsparse/grad/prune.h"
#include "nmsparse/kernels/nm_gemm.h"
#include "nmsparse/kernels/nm_gemm_bf16.h"
#include "nmsparse/kernels/nm_wgrad.h"
#include "nmsparse/kernels/nm_wgrad_bf16.h"
#include "nmsparse/kernels/transpose.h"
#include "nmsparse/mask/standard.h"
#include "nmsparse/mask/transposable.h"
#include "nmsparse/mask/vectorwise.h"
#include "report.h"

#if defined(NMS_HAVE_OPENBLAS)
#include <cblas.h>
#endif

namespace nms::cli {
namespace {

constexpr const char* kGemmNames =
    "forward, backward_data, weight_grad, layer_step, forward_bf16, backward_data_bf16, "
    "weight_grad_bf16, layer_step_bf16";

struct KernelBenchOptions {
  CommonOptions common;
  std::string nm = "2:4";
  std::vector<std::string> shapes;  // TxINxOUT
  std::string gemms = "forward,backward_data,weight_grad,layer_step";
  bool llama3_8b_block = false;
  int64_t vectorwise = 0;  // > 0: W gets a vector-wise mask with blocks of this many rows
  int repeats = 5;
};

struct LayerShape {
  std::string name;
  int64_t tokens, in, out;
};

LayerShape parse_layer_shape(const std::string& text) {
  LayerShape s{text, 0, 0, 0};
  long long t = 0, i = 0, o = 0;
  char tail = 0;
  NMS_CHECK(std::sscanf(text.c_str(), "%lldx%lldx%lld%c", &t, &i, &o, &tail) == 3 && t > 0 &&
                i > 0 && o > 0 && t * i <= (int64_t{1} << 30) && t * o <= (int64_t{1} << 30) &&
                i * o <= (int64_t{1} << 30),
            "--shape ", text,
            " is not TOKENSxINxOUT with positive sizes (each matrix at most 2^30 "
            "elements)");
  s.tokens = t;
  s.in = i;
  s.out = o;
  return s;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

Matrix uniform_matrix(int64_t rows, int64_t cols, uint64_t stream) {
  Matrix a(rows, cols);
  const CounterRng rng(12345, stream);
  for (int64_t k = 0; k < a.size(); ++k) a.data()[k] = 2.0f * rng.uniform(k) - 1.0f;
  return a;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// max |got - ref| / max |ref| (the JSON's max_rel_error).
double max_rel_error(ConstMatrixViewF got, ConstMatrixViewF ref) {
  double err = 0.0;
  double scale = 0.0;
  for (int64_t r = 0; r < ref.rows(); ++r) {
    for (int64_t c = 0; c < ref.cols(); ++c) {
      err = std::max(err, std::fabs(double{got(r, c)} - ref(r, c)));
      scale = std::max(scale, std::fabs(double{ref(r, c)}));
    }
  }
  return err / std::max(scale, 1e-300);
}

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return "unknown";
}

std::string scientific(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1e", v);
  return buf;
}

#if defined(NMS_HAVE_OPENBLAS)

// Row-major C [m, n] = op(A) op(B).
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
           const float* b, int64_t ldb, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), 0.0f,
              c, static_cast<int>(ldc));
}

// One layer, one pattern: the data, the dense and sparse versions of each GEMM, and the step.
struct LayerBench {
  LayerShape s;
  NmPattern p;
  Matrix w;              // [out, in], transposable N:M: N:M along in and along out
  Matrix x;              // [T, in]
  Matrix dy;             // [T, out]
  Matrix dy_pruned;      // MVUE-pruned dY (dense, for the dense weight-gradient baseline)
  BitMask mask, mask_t;  // W's mask and its transpose (held by a training layer between refreshes)
  NmGemmOperand w_fwd, w_bwd;
  NmWgradWorkspace ws;
  Matrix y_dense, y_sparse, dx_dense, dx_sparse, dw_dense, dw_sparse;
  GradPruneOptions mvue;
  bool forward_only = false;

  LayerBench(const LayerShape& shape, NmPattern pattern, int64_t vectorwise)
      : s(shape),
        p(pattern),
        w(uniform_matrix(shape.out, shape.in, 1)),
        x(uniform_matrix(shape.tokens, shape.in, 2)),
        dy(uniform_matrix(shape.tokens, shape.out, 3)),
        y_dense(shape.tokens, shape.out),
        y_sparse(shape.tokens, shape.out),
        dx_dense(shape.tokens, shape.in),
        dx_sparse(shape.tokens, shape.in),
        dw_dense(shape.out, shape.in),
        dw_sparse(shape.out, shape.in),
        mvue{GradMethod::kMvue, pattern, NmAxis::kCols, 7, tensor_stream_id("dY")},
        forward_only(vectorwise > 0) {
    Matrix scores(shape.out, shape.in);
    for (int64_t k = 0; k < w.size(); ++k) scores.data()[k] = std::fabs(w.data()[k]);
    mask = vectorwise > 0 ? mask_nm_vectorwise(scores.view(), p, vectorwise)
                          : mask_transposable_exact(scores.view(), p).mask;
    apply_mask(w.view(), mask);
    mask_t = transpose_mask(mask);
    compress_weights();
    dy_pruned = grad_prune(dy.view(), mvue);
  }

  // Per step, as the training layer (SparseLinear) does it: W and Wᵀ packed for the kernels
  // straight from the dense W and the held masks (Wᵀ through register-transposed blocks of W);
  // after the first call the values only (the masks are those the lanes were packed from).
  void compress_weights() {
    nm_gemm_pack_masked_into(w.view(), mask, p, w_fwd);
    if (!forward_only) {  // a vector-wise W is N:M along in only
      nm_gemm_pack_masked_transposed_into(w.view(), {}, mask_t, p, w_bwd);
    }
  }

  void dense_forward() {
    sgemm(false, true, s.tokens, s.out, s.in, x.data(), s.in, w.data(), s.in, y_dense.data(),
          s.out);
  }
  void dense_backward_data() {
    sgemm(false, false, s.tokens, s.in, s.out, dy.data(), s.out, w.data(), s.in, dx_dense.data(),
          s.in);
  }
  void dense_weight_grad() {
    sgemm(true, false, s.out, s.in, s.tokens, dy_pruned.data(), s.out, x.data(), s.in,
          dw_dense.data(), s.in);
  }
  void dense_layer_step() {
    dense_forward();
    dense_backward_data();
    dense_weight_grad();
  }
  // The largest of the three GEMMs' errors after a layer step.
  double layer_step_error() const {
    return std::max({max_rel_error(y_sparse.view(), y_dense.view()),
                     max_rel_error(dx_sparse.view(), dx_dense.view()),
                     max_rel_error(dw_sparse.view(), dw_dense.view())});
  }
  void sparse_forward() { nm_gemm(x.view(), w_fwd, y_sparse.view()); }
  void sparse_backward_data() { nm_gemm(dy.view(), w_bwd, dx_sparse.view()); }
  // MVUE pruning of dY along tokens and the kernel (nm_wgrad_pruned: the pruning writes the
  // kernel's operand where the route allows, else compresses dY for nm_wgrad).
  void sparse_weight_grad() { nm_wgrad_pruned(dy.view(), mvue, x.view(), dw_sparse.view(), &ws); }

  // bf16 inputs (nm_gemm_bf16): X, dY and W rounded to bf16, prepared on first use; the results
  // go to y_sparse / dx_sparse and are checked against the fp32 dense products.
  std::vector<uint16_t> x16, dy16;
  NmGemmBf16Operand w_fwd16, w_bwd16;
  void prepare_bf16() {
    if (!x16.empty()) return;
    x16.resize(static_cast<size_t>(x.size()));
    dy16.resize(static_cast<size_t>(dy.size()));
    f32_to_bf16(std::span<const float>(x.data(), x16.size()), x16);
    f32_to_bf16(std::span<const float>(dy.data(), dy16.size()), dy16);
    w_fwd16 = nm_gemm_bf16_pack(nm_compress_masked(w.view(), mask, p, NmAxis::kRows));
    if (!forward_only) w_bwd16 = nm_gemm_bf16_pack(nm_compress(w.view(), p, NmAxis::kCols));
  }
  void sparse_forward_bf16() {
    nm_gemm_bf16({x16.data(), s.tokens, s.in}, w_fwd16, y_sparse.view());
  }
  void sparse_backward_data_bf16() {
    nm_gemm_bf16({dy16.data(), s.tokens, s.out}, w_bwd16, dx_sparse.view());
  }
  // MVUE pruning of dY and nm_wgrad_bf16 (the pruned dY and X rounded to bf16 inside).
  NmWgradBf16Workspace ws16;
  void sparse_weight_grad_bf16() {
    nm_wgrad_bf16_pruned(dy.view(), mvue, x.view(), dw_sparse.view(), &ws16);
  }
  // The training layer's step with bf16 inputs: W and Wᵀ packed from the dense W and its masks,
  // fp32 X and dY rounded inside the kernels, and the bf16 weight gradient.
  void sparse_layer_step_bf16() {
    nm_gemm_bf16_pack_masked_into(w.view(), mask, p, w_fwd16);
    nm_gemm_bf16_pack_masked_transposed_into(w.view(), {}, mask_t, p, w_bwd16);
    nm_gemm_bf16(x.view(), w_fwd16, y_sparse.view());
    nm_gemm_bf16(dy.view(), w_bwd16, dx_sparse.view());
    sparse_weight_grad_bf16();
  }
};

struct Result {
  std::string gemm;
  double dense_s = 0.0;
  double sparse_s = 0.0;
  double error = 0.0;
};

// With more than one thread and OPENBLAS_THREAD_TIMEOUT unset (the runtime re-execution was opted
// out of), a pause before each timed call, so that neither side is timed while OpenBLAS's idle
// workers still spin (about 100 ms after each call). bench/bench_util.h has the measurements, and
// why the pause is skipped otherwise.
void settle(int threads) {
  static const bool blas_spins = std::getenv("OPENBLAS_THREAD_TIMEOUT") == nullptr;
  if (threads > 1 && blas_spins) std::this_thread::sleep_for(std::chrono::milliseconds(150));
}

// The runtime settings this process started with (main re-executes `bench` with
// nms::reexec_with_thread_runtime_env): null where unset.
nlohmann::json thread_runtime_env() {
  nlohmann::json env = nlohmann::json::object();
  for (const char* name : {"OPENBLAS_THREAD_TIMEOUT", "GOMP_SPINCOUNT", "OMP_WAIT_POLICY"}) {
    const char* value = std::getenv(name);
    env[name] = value != nullptr ? nlohmann::json(value) : nlohmann::json(nullptr);
  }
  return env;
}

template <class Dense, class Sparse>
Result time_pair(const std::string& name, int repeats, Dense dense, Sparse sparse) {
  using clock = std::chrono::steady_clock;
  const int threads = max_threads();
  dense();  // warm: buffers touched, libraries initialised
  sparse();
  std::vector<double> td;
  std::vector<double> ts;
  for (int r = 0; r < repeats; ++r) {
    settle(threads);
    const auto t0 = clock::now();
    dense();
    const auto t1 = clock::now();
    settle(threads);
    const auto t2 = clock::now();
    sparse();
    const auto t3 = clock::now();
    td.push_back(std::chrono::duration<double>(t1 - t0).count());
    ts.push_back(std::chrono::duration<double>(t3 - t2).count());
  }
  return {name, median(td), median(ts), 0.0};
}

int run_bench_kernels(const KernelBenchOptions& o) {
  NMS_CHECK(o.repeats >= 1, "--repeats ", o.repeats, " must be >= 1");
  o.common.apply_threads();
  const int threads = max_threads();
  openblas_set_num_threads(threads);
  std::vector<LayerShape> shapes;
  for (const std::string& text : o.shapes) {
    for (const std::string& item : split_commas(text)) shapes.push_back(parse_layer_shape(item));
  }
  if (o.llama3_8b_block) {
    for (const LayerShape& l :
         {LayerShape{"q", 2048, 4096, 4096}, LayerShape{"k", 2048, 4096, 1024},
          LayerShape{"v", 2048, 4096, 1024}, LayerShape{"o", 2048, 4096, 4096},
          LayerShape{"gate", 2048, 4096, 14336}, LayerShape{"up", 2048, 4096, 14336},
          LayerShape{"down", 2048, 14336, 4096}}) {
      shapes.push_back(l);
    }
  }
  if (shapes.empty()) {
    shapes = {{"S1", 8192, 768, 3072}, {"S2", 8192, 3072, 768}, {"square", 2048, 2048, 2048}};
  }
  std::vector<NmPattern> patterns;
  for (const std::string& t : split_commas(o.nm)) patterns.push_back(NmPattern::parse(t));
  NMS_CHECK(!patterns.empty(), "--nm lists no pattern");
  const std::vector<std::string> gemms = split_commas(o.gemms);
  NMS_CHECK(o.vectorwise >= 0, "--vectorwise ", o.vectorwise, " must be >= 0");
  NMS_CHECK(o.vectorwise == 0 || (gemms.size() == 1 && gemms[0] == "forward"),
            "--vectorwise masks W along in only: use it with --gemms forward");
  bool bf16 = false;
  for (const std::string& g : gemms) {
    NMS_CHECK(g == "forward" || g == "backward_data" || g == "weight_grad" || g == "layer_step" ||
                  g == "forward_bf16" || g == "backward_data_bf16" || g == "weight_grad_bf16" ||
                  g == "layer_step_bf16",
              "--gemms: '", g, "' is not one of ", kGemmNames);
    bf16 = bf16 || g.ends_with("_bf16");
  }
  if (bf16) {
    NMS_CHECK(nm_gemm_bf16_kernel_active(),
              "--gemms *_bf16 needs a CPU with AVX512_BF16 at the avx512 level (this one would "
              "time nm_gemm_bf16's scalar path); drop the bf16 GEMMs");
    for (NmPattern p : patterns) {
      NMS_CHECK(nm_gemm_bf16_supports(p), "--gemms *_bf16: pattern ", p.to_string(),
                " is not supported by nm_gemm_bf16 (m must divide 32)");
    }
  }
  for (const LayerShape& s : shapes) {
    for (NmPattern p : patterns) {
      NMS_CHECK(s.in % p.m == 0 && s.out % p.m == 0 && s.tokens % p.m == 0, "shape ", s.tokens, "x",
                s.in, "x", s.out, ": m = ", p.m, " must divide tokens, in and out");
    }
  }
  const bool human = !o.common.quiet && o.common.json_path != "-";
  nlohmann::json results = nlohmann::json::array();
  Table table(
      {"gemm", "pattern", "tokens x in -> out", "dense ms", "sparse ms", "speedup", "rel. error"});
  Progress progress(static_cast<int64_t>(shapes.size() * patterns.size()), o.common.quiet);
  for (const LayerShape& s : shapes) {
    for (NmPattern p : patterns) {
      progress.step(s.name + " " + p.to_string());
      LayerBench b(s, p, o.vectorwise);
      std::vector<Result> rs;
      for (const std::string& g : gemms) {
        Result r;
        if (g == "forward") {
          r = time_pair(
              g, o.repeats, [&] { b.dense_forward(); }, [&] { b.sparse_forward(); });
          r.error = max_rel_error(b.y_sparse.view(), b.y_dense.view());
        } else if (g == "backward_data") {
          r = time_pair(
              g, o.repeats, [&] { b.dense_backward_data(); }, [&] { b.sparse_backward_data(); });
          r.error = max_rel_error(b.dx_sparse.view(), b.dx_dense.view());
        } else if (g == "forward_bf16") {
          b.prepare_bf16();
          r = time_pair(
              g, o.repeats, [&] { b.dense_forward(); }, [&] { b.sparse_forward_bf16(); });
          r.error = max_rel_error(b.y_sparse.view(), b.y_dense.view());
        } else if (g == "backward_data_bf16") {
          b.prepare_bf16();
          r = time_pair(
              g, o.repeats, [&] { b.dense_backward_data(); },
              [&] { b.sparse_backward_data_bf16(); });
          r.error = max_rel_error(b.dx_sparse.view(), b.dx_dense.view());
        } else if (g == "weight_grad_bf16") {
          r = time_pair(
              g, o.repeats, [&] { b.dense_weight_grad(); }, [&] { b.sparse_weight_grad_bf16(); });
          r.error = max_rel_error(b.dw_sparse.view(), b.dw_dense.view());
        } else if (g == "layer_step_bf16") {
          r = time_pair(
              g, o.repeats, [&] { b.dense_layer_step(); }, [&] { b.sparse_layer_step_bf16(); });
          r.error = b.layer_step_error();
        } else if (g == "weight_grad") {
          r = time_pair(
              g, o.repeats, [&] { b.dense_weight_grad(); }, [&] { b.sparse_weight_grad(); });
          r.error = max_rel_error(b.dw_sparse.view(), b.dw_dense.view());
        } else {
          r = time_pair(
              g, o.repeats, [&] { b.dense_layer_step(); },
              [&] {
                b.compress_weights();
                b.sparse_forward();
                b.sparse_backward_data();
                b.sparse_weight_grad();
              });
          r.error = b.layer_step_error();
        }
        rs.push_back(r);
      }
      for (const Result& r : rs) {
        const double speedup = r.dense_s / r.sparse_s;
        table.add_row({r.gemm, p.to_string(),
                       std::to_string(s.tokens) + " x " + std::to_string(s.in) + " -> " +
                           std::to_string(s.out),
                       format_fixed(r.dense_s * 1e3, 1), format_fixed(r.sparse_s * 1e3, 1),
                       format_fixed(speedup, 2) + "x", scientific(r.error)});
        results.push_back(
            {{"gemm", r.gemm},
             {"layer", s.name},
             {"pattern", p.to_string()},
             {"mask", o.vectorwise > 0 ? "vectorwise(" + std::to_string(o.vectorwise) + " rows)"
                                       : std::string("transposable")},
             {"tokens", s.tokens},
             {"in", s.in},
             {"out", s.out},
             {"threads", threads},
             {"dense_ms", r.dense_s * 1e3},
             {"sparse_ms", r.sparse_s * 1e3},
             {"speedup", speedup},
             {"max_rel_error", r.error}});
      }
    }
  }
  const nlohmann::json environment = {
      {"cpu", cpu_name()},
      {"isa", std::string(isa_name(isa_active()))},
      {"nm_gemm_kernel", std::string(nm_gemm_kernel_name(nm_gemm_kernel_in_use()))},
      {"threads", threads},
#ifdef __VERSION__
      {"compiler", std::string("g++ ") + __VERSION__},
#endif
      {"blas", std::string("OpenBLAS ") + openblas_get_config()},
      {"thread_runtime", thread_runtime_env()}};
  if (human) {
    std::printf(
        "nmsparse kernels vs OpenBLAS sgemm on the masked dense matrices; %d thread%s, "
        "isa %s, nm_gemm kernel %s; medians of %d alternated runs; weight_grad includes MVUE "
        "pruning and compression of dY; layer_step adds packing W and Wᵀ from W and its held "
        "masks (the values only, as a transposable layer between mask refreshes); "
        "*_bf16: the same with bf16 inputs (nm_gemm_bf16, nm_wgrad_bf16), fp32 accumulation, "
        "against the same fp32 sgemm\n\n",
        threads, threads == 1 ? "" : "s", std::string(isa_name(isa_active())).c_str(),
        std::string(nm_gemm_kernel_name(nm_gemm_kernel_in_use())).c_str(), o.repeats);
    table.print(stdout);
  }
  write_json_report(
      o.common.json_path,
      {{"command", "bench kernels"}, {"environment", environment}, {"results", results}});
  return kExitOk;
}

#else

int run_bench_kernels(const KernelBenchOptions&) {
  NMS_CHECK(false,
            "bench kernels needs OpenBLAS for its dense baseline; this build has none "
            "(apt install libopenblas-dev, then reconfigure)");
  return kExitBadInput;
}

#endif

}  // namespace

void add_bench_kernels_subcommand(CLI::App& bench, int& exit_code) {
  auto o = std::make_shared<KernelBenchOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "kernels",
      "Time the sparse training GEMMs of an N:M layer against OpenBLAS sgemm on the masked dense "
      "matrices (alternately, same thread count; each result checked against the dense "
      "product): forward Y = X Wᵀ, backward_data dX = dY W (W with a transposable N:M mask), "
      "weight_grad dW = dYᵀ X with dY MVUE-pruned along tokens (the pruning and compression "
      "timed with the sparse kernel), and layer_step: the three GEMMs plus packing W and Wᵀ "
      "from the dense W and its held masks, as the training layer does between refreshes of a "
      "transposable mask (the values only: the lane indices stand), against three sgemm "
      "calls. forward_bf16, backward_data_bf16, weight_grad_bf16 and layer_step_bf16 time the "
      "same with bf16 inputs and fp32 accumulation (nm_gemm_bf16, nm_wgrad_bf16; CPUs with "
      "AVX512_BF16) against the same fp32 sgemm.");
  cmd->add_option("--nm", o->nm, "Comma list of patterns N:M")->capture_default_str();
  cmd->add_option("--shape", o->shapes,
                  "Layer TOKENSxINxOUT; repeatable or a comma list (default: 8192x768x3072, "
                  "8192x3072x768, 2048x2048x2048)");
  cmd->add_flag("--llama3-8b-block", o->llama3_8b_block,
                "Add the 7 linear layers of a LLaMA-3-8B block at 2048 tokens (q, k, v, o, gate, "
                "up, down)");
  cmd->add_option("--vectorwise", o->vectorwise,
                  "Give W a vector-wise N:M mask (mask_nm_vectorwise) with blocks of this many "
                  "rows instead of a transposable one; with --gemms forward only. Blocks of a "
                  "multiple of 6 rows let nm_gemm reuse each loaded panel row for 6 rows");
  cmd->add_option("--gemms", o->gemms, std::string("Comma list of: ") + kGemmNames)
      ->capture_default_str();
  cmd->add_option("--repeats", o->repeats, "Timed runs of each pair (median reported)")
      ->capture_default_str();
  cmd->add_option("--json", o->common.json_path,
                  "Also write {environment, results} as JSON to FILE ('-' = stdout)");
  cmd->add_flag("-q,--quiet", o->common.quiet, "No tables or progress; errors only");
  cmd->add_option("--threads", o->common.threads, "Threads for both sides (default: all cores)")
      ->check(CLI::Range(1, 1024));
  cmd->callback([o, &exit_code] { exit_code = run_bench_kernels(*o); });
}

}  // namespace nms::cli
