// nmsparse bench masks: times the mask solvers on synthetic trained-like scores, running the
// methods alternately (round-robin) in one process, and reports medians and ratios, for the
// performance figures of issue notes. Timing and reporting only; every solver lives in the library
// (LEMON, the off-the-shelf baseline, is the tests' tile oracle, testing/lemon_tile.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numbers>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli_common.h"
#include "commands.h"
#include "nmsparse/core/aligned_buffer.h"
#include "nmsparse/core/error.h"
#include "nmsparse/core/rng.h"
#include "nmsparse/core/threading.h"
#include "nmsparse/mask/standard.h"
#include "nmsparse/mask/transposable.h"
#include "nmsparse/mask/verify.h"
#include "report.h"

#if NMS_HAVE_LEMON
#include "testing/lemon_tile.h"
#endif

namespace nms::cli {
namespace {

#if NMS_HAVE_LEMON
constexpr bool kHaveLemon = true;
constexpr const char* kDefaultMethods = "exact,lemon";
#else
constexpr bool kHaveLemon = false;
constexpr const char* kDefaultMethods = "exact,greedy,entropic";
#endif

constexpr const char* kAllMethods[] = {"exact", "greedy", "entropic", "lemon", "rowwise"};

struct BenchOptions {
  CommonOptions common;  // --json, --quiet, --threads (no tensor selection here)
  std::string nm = "4:8,8:16,16:32";
  std::string methods = kDefaultMethods;
  std::vector<std::string> shapes;
  bool llama3_8b_block = false;
  std::string dist = "laplace";
  int repeats = 5;
  int warmup = 0;  // untimed round-robin rounds before the timed ones
  uint64_t seed = 1;
};

struct Shape {
  std::string name;  // "1024x1024", or the LLaMA layer ("q_proj")
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t numel() const { return rows * cols; }
  std::string dims() const { return std::to_string(rows) + "x" + std::to_string(cols); }
};

// The 7 linear layers of one LLaMA-3-8B decoder block, W as [out, in] (hidden 4096, 8 KV heads of
// 128, intermediate 14336). The model has 32 such blocks.
const std::vector<Shape>& llama3_8b_block() {
  static const std::vector<Shape> block = {{"q_proj", 4096, 4096},     {"k_proj", 1024, 4096},
                                           {"v_proj", 1024, 4096},     {"o_proj", 4096, 4096},
                                           {"gate_proj", 14336, 4096}, {"up_proj", 14336, 4096},
                                           {"down_proj", 4096, 14336}};
  return block;
}
constexpr int kLlama3_8bBlocks = 32;

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream s(text);
  std::string item;
  while (std::getline(s, item, ',')) items.push_back(item);
  if (!text.empty() && text.back() == ',') items.emplace_back();
  return items;
}

std::vector<NmPattern> parse_patterns(const std::string& text) {
  std::vector<NmPattern> patterns;
  for (const std::string& item : split_list(text)) {
    NMS_CHECK(!item.empty(), "--nm '", text, "' has an empty entry (expected e.g. 4:8,8:16)");
    NmPattern p;
    try {
      p = NmPattern::parse(item);
    } catch (const Error& e) {
      NMS_THROW("bad --nm entry '", item, "': ", e.what());
    }
    NMS_CHECK(std::find(patterns.begin(), patterns.end(), p) == patterns.end(), "--nm lists ", item,
              " twice");
    patterns.push_back(p);
  }
  NMS_CHECK(!patterns.empty(), "--nm is empty (expected e.g. 4:8,8:16,16:32)");
  return patterns;
}

std::vector<std::string> parse_methods(const std::string& text) {
  std::vector<std::string> methods;
  for (const std::string& item : split_list(text)) {
    NMS_CHECK(
        std::find(std::begin(kAllMethods), std::end(kAllMethods), item) != std::end(kAllMethods),
        "unknown method '", item, "' in --methods (expected exact, greedy, entropic, lemon ",
        "or rowwise)");
    NMS_CHECK(std::find(methods.begin(), methods.end(), item) == methods.end(), "--methods lists ",
              item, " twice");
    NMS_CHECK(item != "lemon" || kHaveLemon,
              "method 'lemon' needs LEMON, which this build of nmsparse does not have: install "
              "liblemon-dev (apt-get install liblemon-dev) and rebuild (re-run cmake)");
    methods.push_back(item);
  }
  NMS_CHECK(!methods.empty(), "--methods is empty");
  return methods;
}

Shape parse_shape(const std::string& text) {
  const size_t x = text.find('x');
  auto number = [&](const std::string& part) -> int64_t {
    NMS_CHECK(!part.empty() && part.size() <= 9 &&
                  part.find_first_not_of("0123456789") == std::string::npos,
              "bad --shape '", text, "' (expected ROWSxCOLS, e.g. 1024x1024)");
    const int64_t v = std::stoll(part);
    NMS_CHECK(v > 0, "bad --shape '", text, "': rows and cols must be positive");
    return v;
  };
  NMS_CHECK(x != std::string::npos, "bad --shape '", text,
            "' (expected ROWSxCOLS, e.g. 1024x1024)");
  Shape s;
  s.rows = number(text.substr(0, x));
  s.cols = number(text.substr(x + 1));
  s.name = s.dims();
  return s;
}

std::vector<Shape> parse_shapes(const BenchOptions& o) {
  if (o.llama3_8b_block) {
    NMS_CHECK(o.shapes.empty(), "give either --shape or --llama3-8b-block, not both");
    return llama3_8b_block();
  }
  std::vector<Shape> shapes;
  for (const std::string& arg : o.shapes) {
    for (const std::string& item : split_list(arg)) shapes.push_back(parse_shape(item));
  }
  if (shapes.empty()) shapes.push_back(parse_shape("1024x1024"));
  return shapes;
}

// Synthetic trained-like scores: float(floor(2^20 * |X|)), element k from CounterRng(seed,
// stream).uniform, with X ~ Laplace(0, 1) (|X| = Exponential(1) by inverse CDF; the heavy-ish tail
// of trained weights), N(0, 1) (Box-Muller) or U(0, 1).
//
// Why integers: every score is an integer-valued float, so the objective of a mask (sum of kept
// scores, accumulated in double) is EXACT -- each partial sum is an integer below 2^53 (scores are
// below 2^25, shapes at most 2^28 elements) -- whatever the summation order. LEMON gets int64 costs
// equal to the same integers and returns an exact int64 optimum. So the exact solver and LEMON can
// be compared with ==, not with a tolerance that could hide a wrong tile. (A uniform of 24 bits
// gives |X| < 16.7, so scores are < 2^24.1; above 2^24 a float holds even integers only, which
// are still integers, and LEMON reads the stored float, so both sides see identical values.)
Matrix make_scores(const Shape& shape, const std::string& dist, uint64_t seed, uint64_t stream) {
  Matrix a(shape.rows, shape.cols);
  const CounterRng rng(seed, stream);
  const int64_t size = a.size();
  float* out = a.data();
  constexpr double kScale = 1048576.0;  // 2^20
  const int kind = dist == "laplace" ? 0 : dist == "gauss" ? 1 : 2;
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < size; ++k) {
    double x = 0.0;
    if (kind == 0) {
      x = -std::log1p(-static_cast<double>(rng.uniform(static_cast<uint64_t>(k))));
    } else if (kind == 1) {
      const double u1 = rng.uniform(2 * static_cast<uint64_t>(k));
      const double u2 = rng.uniform(2 * static_cast<uint64_t>(k) + 1);
      x = std::fabs(std::sqrt(-2.0 * std::log1p(-u1)) * std::cos(2.0 * std::numbers::pi * u2));
    } else {
      x = rng.uniform(static_cast<uint64_t>(k));
    }
    out[k] = static_cast<float>(std::floor(kScale * x));
  }
  return a;
}

// One timed run of a method; the mask (or LEMON's per-tile optima) is kept for the checks.
struct Run {
  double seconds = 0.0;
  std::optional<TransposableResult> transposable;
  BitMask rowwise;
  std::vector<int64_t> lemon_tiles;  // per tile optimum, tile-row-major
  bool lemon_ok = true;
};

Run run_method(const std::string& method, const Matrix& scores, NmPattern p) {
  Run run;
  const Stopwatch watch;
  if (method == "exact") {
    run.transposable = mask_transposable_exact(scores.view(), p);
  } else if (method == "greedy") {
    run.transposable = mask_transposable_greedy(scores.view(), p, GreedyOrder::kKeepHeavyFirst);
  } else if (method == "entropic") {
    run.transposable = mask_transposable_entropic(scores.view(), p);
  } else if (method == "rowwise") {
    run.rowwise = mask_nm_rows(scores.view(), p);
  } else {
#if NMS_HAVE_LEMON
    // LEMON's NetworkSimplex on every m x m tile, as the baseline runs it: one tile graph
    // and solver per thread, built once, only the costs changed per tile (LemonTileSolver). One
    // solve is single-threaded; tile-rows run in parallel on the same threads as the other
    // methods, so the comparison is like for like.
    const int m = p.m;
    const int64_t tile_rows = scores.rows() / m;
    const int64_t tile_cols = scores.cols() / m;
    run.lemon_tiles.assign(static_cast<size_t>(tile_rows * tile_cols), 0);
    int64_t failed = 0;
#pragma omp parallel reduction(+ : failed)
    {
      testing::LemonTileSolver solver(p.n, m);
      std::vector<int64_t> tile(static_cast<size_t>(m) * m);
#pragma omp for schedule(dynamic, 1)
      for (int64_t ti = 0; ti < tile_rows; ++ti) {
        for (int64_t tj = 0; tj < tile_cols; ++tj) {
          for (int r = 0; r < m; ++r) {
            const float* row = scores.data() + (ti * m + r) * scores.cols() + tj * m;
            for (int c = 0; c < m; ++c) {
              tile[static_cast<size_t>(r) * m + c] = static_cast<int64_t>(row[c]);
            }
          }
          const int64_t best = solver.optimum(tile.data());
          failed += best < 0;
          run.lemon_tiles[static_cast<size_t>(ti * tile_cols + tj)] = best;
        }
      }
    }
    run.lemon_ok = failed == 0;
#else
    NMS_ASSERT(false, "lemon requested in a build without LEMON");
#endif
  }
  run.seconds = watch.seconds();
  return run;
}

// Checks a first-repeat result outside the timed region and returns its objective; throws
// nms::Error describing what is wrong.
double check_run(const std::string& method, const Run& run, const Matrix& scores, NmPattern p) {
  if (method == "lemon") {
    NMS_CHECK(run.lemon_ok, "LEMON did not report OPTIMAL on some tile");
    int64_t sum = 0;
    for (int64_t v : run.lemon_tiles) sum += v;
    return static_cast<double>(sum);
  }
  if (method == "rowwise") {
    const NmVerifyReport v = verify_nm(run.rowwise, p);
    NMS_CHECK(v.rows_valid() && v.row_groups_full == v.row_groups, "row-wise mask keeps other ",
              "than ", p.n, " in some group (", v.row_violations, " over, ",
              v.row_groups - v.row_groups_full, " not full)");
    return mask_score(scores.view(), run.rowwise);
  }
  const TransposableResult& r = *run.transposable;
  check_transposable_result(scores.view(), p, r, /*require_exactly_n=*/method != "greedy");
  NMS_CHECK(method != "exact" || r.stats.status == SolveStatus::kOptimal,
            "exact solver did not report kOptimal");
  return mask_score(scores.view(), r.mask);
}

// The first tile where the exact mask's kept score differs from LEMON's optimum, for the message.
std::string first_tile_difference(const Matrix& scores, NmPattern p, const BitMask& mask,
                                  const std::vector<int64_t>& lemon) {
  const int m = p.m;
  const int64_t tile_cols = scores.cols() / m;
  for (size_t t = 0; t < lemon.size(); ++t) {
    const int64_t i0 = static_cast<int64_t>(t) / tile_cols * m;
    const int64_t j0 = static_cast<int64_t>(t) % tile_cols * m;
    int64_t kept = 0;
    for (int r = 0; r < m; ++r)
      for (int c = 0; c < m; ++c)
        if (mask.get(i0 + r, j0 + c)) kept += static_cast<int64_t>(scores(i0 + r, j0 + c));
    if (kept != lemon[t]) {
      return "first differing tile at rows " + std::to_string(i0) + ", cols " + std::to_string(j0) +
             ": exact keeps " + std::to_string(kept) + ", LEMON optimum " +
             std::to_string(lemon[t]);
    }
  }
  return "no single tile differs (the totals do)";
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t k = v.size() / 2;
  return v.size() % 2 ? v[k] : 0.5 * (v[k - 1] + v[k]);
}

std::string objective_string(double v) {
  return format_fixed(v, 0);
}

struct Cell {  // one (shape, pattern, method)
  std::vector<double> seconds;
  double median = 0.0;
  double objective = 0.0;
  std::string check_error;  // empty when the first-repeat check passed
  nlohmann::json stats;     // solver figures of the first repeat (transposable methods)
};

// Milliseconds with 3 significant digits or more ("0.0412", "3.21", "1234.5").
std::string ms_string(double seconds) {
  const double ms = seconds * 1e3;
  return format_fixed(ms, ms < 1.0 ? 4 : ms < 10.0 ? 3 : ms < 100.0 ? 2 : 1);
}

// "2.31" (weights/s of `method` relative to the reference), "-" without the reference.
std::string ratio_string(const std::optional<double>& r) {
  return r ? format_fixed(*r, 2) : std::string("-");
}

int run_bench_masks(const BenchOptions& o) {
  const std::vector<NmPattern> patterns = parse_patterns(o.nm);
  const std::vector<std::string> methods = parse_methods(o.methods);
  const std::vector<Shape> shapes = parse_shapes(o);
  NMS_CHECK(o.dist == "laplace" || o.dist == "gauss" || o.dist == "uniform", "unknown --dist '",
            o.dist, "' (expected laplace, gauss or uniform)");
  NMS_CHECK(o.repeats >= 1, "--repeats must be at least 1 (got ", o.repeats, ")");
  NMS_CHECK(o.warmup >= 0, "--warmup must be at least 0 (got ", o.warmup, ")");
  for (const Shape& s : shapes) {
    NMS_CHECK(s.numel() <= (int64_t{1} << 28), "shape ", s.dims(), " has ", s.numel(),
              " elements; at most 2^28 keep the objectives exact (see --help)");
    for (const NmPattern& p : patterns) {
      NMS_CHECK(s.rows % p.m == 0 && s.cols % p.m == 0, "shape ", s.name,
                s.name == s.dims() ? "" : " (" + s.dims() + ")",
                ": rows and cols must be multiples of m = ", p.m, " for ", p.to_string(),
                " (transposable masks use m x m tiles)");
    }
  }
  o.common.apply_threads();
  const int threads = max_threads();
  const bool human = !o.common.quiet && o.common.json_path != "-";
  auto index_of = [&](const std::string& m) -> std::optional<size_t> {
    const auto it = std::find(methods.begin(), methods.end(), m);
    if (it == methods.end()) return std::nullopt;
    return static_cast<size_t>(it - methods.begin());
  };
  const std::optional<size_t> exact_i = index_of("exact");
  const std::optional<size_t> lemon_i = index_of("lemon");
  const bool compare_lemon = exact_i && lemon_i;

  if (human) {
    std::printf(
        "bench masks: %s scores (integer-valued), %d repeat(s) round-robin (+%d warmup), %d "
        "thread(s), seed %llu\nvs X = weights/s relative to method X (> 1 = faster); objective = "
        "sum of kept scores\n",
        o.dist.c_str(), o.repeats, o.warmup, threads, static_cast<unsigned long long>(o.seed));
  }
  nlohmann::json results = nlohmann::json::array();
  nlohmann::json shapes_json = nlohmann::json::array();
  std::vector<std::string> failures;    // check failures and objective mismatches
  std::optional<bool> objective_match;  // all (shape, pattern): exact == LEMON; unset if not run
  // block_seconds[pattern][method]: sum of the shapes' medians (one LLaMA block).
  std::vector<std::vector<double>> block_seconds(patterns.size(),
                                                 std::vector<double>(methods.size(), 0.0));
  for (size_t si = 0; si < shapes.size(); ++si) {
    const Shape& shape = shapes[si];
    const uint64_t stream = si;
    shapes_json.push_back({{"name", shape.name},
                           {"rows", shape.rows},
                           {"cols", shape.cols},
                           {"weights", shape.numel()},
                           {"stream", stream}});
    const Matrix scores = make_scores(shape, o.dist, o.seed, stream);
    std::vector<std::vector<Cell>> cells(patterns.size(), std::vector<Cell>(methods.size()));
    std::vector<std::optional<bool>> match(patterns.size());
    {
      Progress progress(
          static_cast<int64_t>(patterns.size() * methods.size()) * (o.warmup + o.repeats),
          o.common.quiet);
      for (size_t pi = 0; pi < patterns.size(); ++pi) {
        const NmPattern p = patterns[pi];
        const std::string where = shape.name + " " + p.to_string();
        // Round-robin: every repeat runs each method once, in the order given, so drift (clock,
        // thermal, the neighbours' load) hits all methods alike.
        for (int rep = -o.warmup; rep < o.repeats; ++rep) {
          BitMask exact_mask;                // first repeat only, for the LEMON comparison
          std::vector<int64_t> lemon_tiles;  // idem
          for (size_t mi = 0; mi < methods.size(); ++mi) {
            const std::string& method = methods[mi];
            progress.step(
                std::to_string(si + 1) + "/" + std::to_string(shapes.size()) + " " + where + " " +
                method + " " +
                (rep < 0 ? "warmup" : std::to_string(rep + 1) + "/" + std::to_string(o.repeats)));
            Cell& cell = cells[pi][mi];
            Run run = run_method(method, scores, p);
            if (rep < 0) continue;  // warmup: untimed
            cell.seconds.push_back(run.seconds);
            if (rep != 0) continue;
            // Checks run once, outside the timed region.
            try {
              cell.objective = check_run(method, run, scores, p);
            } catch (const Error& e) {
              cell.check_error = e.what();
              failures.push_back(where + " " + method +
                                 ": result failed its check: " + cell.check_error);
            }
            if (run.transposable) {
              const TransposableStats& st = run.transposable->stats;
              cell.stats = {{"tiles", st.tiles},
                            {"tiles_exactly_n", st.tiles_exactly_n},
                            {"iterations", st.iterations}};
              if (method == "exact") exact_mask = std::move(run.transposable->mask);
            }
            if (method == "lemon") lemon_tiles = std::move(run.lemon_tiles);
          }
          if (rep == 0 && compare_lemon) {
            const Cell& e = cells[pi][*exact_i];
            const Cell& l = cells[pi][*lemon_i];
            match[pi] =
                e.check_error.empty() && l.check_error.empty() && e.objective == l.objective;
            objective_match = objective_match.value_or(true) && *match[pi];
            if (!*match[pi] && e.check_error.empty() && l.check_error.empty()) {
              failures.push_back(where + ": exact objective " + objective_string(e.objective) +
                                 " != LEMON optimum " + objective_string(l.objective) + " (" +
                                 first_tile_difference(scores, p, exact_mask, lemon_tiles) + ")");
            }
          }
        }
      }
    }

    Table table({"pattern", "method", "median ms", "min ms", "Mweights/s", "vs lemon", "vs exact",
                 "objective"});
    for (size_t pi = 0; pi < patterns.size(); ++pi) {
      for (size_t mi = 0; mi < methods.size(); ++mi) {
        Cell& c = cells[pi][mi];
        c.median = median(c.seconds);
        block_seconds[pi][mi] += c.median;
      }
      for (size_t mi = 0; mi < methods.size(); ++mi) {
        const Cell& c = cells[pi][mi];
        const double min_s = *std::min_element(c.seconds.begin(), c.seconds.end());
        const double wps = static_cast<double>(shape.numel()) / c.median;
        auto vs = [&](const std::optional<size_t>& ref) -> std::optional<double> {
          if (!ref) return std::nullopt;
          return cells[pi][*ref].median / c.median;
        };
        const std::optional<double> vs_lemon = vs(lemon_i);
        const std::optional<double> vs_exact = vs(exact_i);
        table.add_row({patterns[pi].to_string(), methods[mi], ms_string(c.median), ms_string(min_s),
                       format_fixed(wps / 1e6, 2), ratio_string(vs_lemon), ratio_string(vs_exact),
                       c.check_error.empty() ? objective_string(c.objective) : "CHECK FAILED"});
        nlohmann::json r = {{"shape", shape.name},
                            {"rows", shape.rows},
                            {"cols", shape.cols},
                            {"pattern", patterns[pi].to_string()},
                            {"n", patterns[pi].n},
                            {"m", patterns[pi].m},
                            {"method", methods[mi]},
                            {"seconds", c.seconds},
                            {"median_s", c.median},
                            {"min_s", min_s},
                            {"weights_per_s", wps},
                            {"vs_lemon", vs_lemon ? nlohmann::json(*vs_lemon) : nullptr},
                            {"vs_exact", vs_exact ? nlohmann::json(*vs_exact) : nullptr},
                            {"checked", c.check_error.empty()}};
        if (c.check_error.empty()) {
          r["objective"] = static_cast<int64_t>(c.objective);
        } else {
          r["objective"] = nullptr;
          r["check_error"] = c.check_error;
        }
        if (methods[mi] == "exact" && match[pi]) {
          r["lemon_objective"] = static_cast<int64_t>(cells[pi][*lemon_i].objective);
          r["objective_match"] = *match[pi];
        }
        if (!c.stats.is_null()) r["stats"] = c.stats;
        results.push_back(r);
      }
    }
    if (human) {
      std::printf("\n%s%s: %lld weights\n", shape.name.c_str(),
                  shape.name == shape.dims() ? "" : (" " + shape.dims()).c_str(),
                  static_cast<long long>(shape.numel()));
      table.print(stdout);
      for (size_t pi = 0; pi < patterns.size(); ++pi) {
        if (match[pi]) {
          std::printf("%s: exact objective %s LEMON optimum\n", patterns[pi].to_string().c_str(),
                      *match[pi] ? "==" : "!=");
        }
      }
    }
  }

  nlohmann::json report = {
      {"command", "bench masks"}, {"version", "0.1.0"},
      {"threads", threads},       {"seed", o.seed},
      {"dist", o.dist},           {"scores", "float(floor(2^20 * |X|)), integer-valued"},
      {"repeats", o.repeats},     {"warmup", o.warmup},
      {"order", "round-robin"},   {"lemon_available", kHaveLemon},
      {"methods", methods},       {"patterns", nlohmann::json::array()},
      {"shapes", shapes_json},    {"results", results}};
  for (const NmPattern& p : patterns) report["patterns"].push_back(p.to_string());
  report["objective_match"] = objective_match ? nlohmann::json(*objective_match) : nullptr;
  if (o.llama3_8b_block) {
    int64_t block_weights = 0;
    for (const Shape& s : shapes) block_weights += s.numel();
    Table table(
        {"pattern", "method", "block s", "model s (x32)", "Mweights/s", "vs lemon", "vs exact"});
    nlohmann::json totals = nlohmann::json::array();
    for (size_t pi = 0; pi < patterns.size(); ++pi) {
      for (size_t mi = 0; mi < methods.size(); ++mi) {
        const double block = block_seconds[pi][mi];
        auto vs = [&](const std::optional<size_t>& ref) -> std::optional<double> {
          if (!ref) return std::nullopt;
          return block_seconds[pi][*ref] / block;
        };
        const std::optional<double> vs_lemon = vs(lemon_i);
        const std::optional<double> vs_exact = vs(exact_i);
        const double wps = static_cast<double>(block_weights) / block;
        table.add_row({patterns[pi].to_string(), methods[mi], format_fixed(block, 3),
                       format_fixed(block * kLlama3_8bBlocks, 1), format_fixed(wps / 1e6, 2),
                       ratio_string(vs_lemon), ratio_string(vs_exact)});
        totals.push_back({{"pattern", patterns[pi].to_string()},
                          {"method", methods[mi]},
                          {"block_s", block},
                          {"model_s", block * kLlama3_8bBlocks},
                          {"weights_per_s", wps},
                          {"vs_lemon", vs_lemon ? nlohmann::json(*vs_lemon) : nullptr},
                          {"vs_exact", vs_exact ? nlohmann::json(*vs_exact) : nullptr}});
      }
    }
    report["llama3_8b_block"] = {{"layers", shapes.size()},
                                 {"block_weights", block_weights},
                                 {"blocks", kLlama3_8bBlocks},
                                 {"totals", totals}};
    if (human) {
      std::printf(
          "\nLLaMA-3-8B: one block = 7 linear layers, %lld weights (sum of the medians); "
          "model = %d blocks\n",
          static_cast<long long>(block_weights), kLlama3_8bBlocks);
      table.print(stdout);
    }
  }
  report["failures"] = failures;
  write_json_report(o.common.json_path, report);
  for (const std::string& f : failures) std::fprintf(stderr, "nmsparse: error: %s\n", f.c_str());
  return failures.empty() ? kExitOk : kExitViolation;
}

}  // namespace

void add_bench_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* bench =
      app.add_subcommand("bench",
                         "Benchmarks: 'bench masks' (mask solvers), 'bench kernels' (the "
                         "sparse training GEMMs against OpenBLAS)");
  bench->require_subcommand(1);
  add_bench_kernels_subcommand(*bench, exit_code);
  CLI::App* cmd = bench->add_subcommand(
      "masks",
      "Time mask solvers on synthetic trained-like scores. Methods run round-robin in one "
      "process (every repeat runs each method once, in the order of --methods); the report gives "
      "per shape, pattern and method the median and minimum time, weights/s, the ratio of "
      "weights/s to lemon and to exact, and the objective (sum of kept scores). Every result is "
      "checked once, outside the timed region (transposable validity, exactly N per tile row and "
      "column for exact/entropic, N per group for rowwise). With exact and lemon both run, the "
      "exact objective must EQUAL LEMON's optimum: scores are integer-valued floats, so both "
      "sums are exact. Exit status 1 if a check fails or the objectives differ.");
  cmd->add_option("--nm", o->nm, "Comma list of patterns N:M = keep N of every M")
      ->capture_default_str();
  cmd->add_option(
         "--methods", o->methods,
         "Comma list from: exact (optimal min-cost flow per tile), greedy (2-approximation, "
         "heavy-first), entropic (TSENOR-style), lemon (LEMON NetworkSimplex per MxM tile, one "
         "tile graph per thread with only the costs changed per tile; needs a build with "
         "liblemon-dev; one solve is single-threaded, so tile-rows run in parallel with OpenMP on "
         "--threads threads, like the other methods), rowwise (standard row-wise N:M, "
         "not transposable: a speed reference). Default: exact,lemon in a build with LEMON, "
         "else exact,greedy,entropic")
      ->capture_default_str();
  cmd->add_option("--shape", o->shapes,
                  "Matrix ROWSxCOLS; repeatable or a comma list (default 1024x1024). Rows and cols "
                  "must be multiples of every M; at most 2^28 elements");
  cmd->add_flag("--llama3-8b-block", o->llama3_8b_block,
                "Instead of --shape: the 7 linear layers of one LLaMA-3-8B block (q 4096x4096, k "
                "and v 1024x4096, o 4096x4096, gate and up 14336x4096, down 4096x14336), plus the "
                "block total and its x32 extrapolation to the whole model. Minutes per repeat for "
                "exact and lemon");
  cmd->add_option("--dist", o->dist,
                  "Score distribution: float(floor(2^20 |X|)) with X ~ laplace (0, 1), gauss "
                  "N(0, 1) or uniform U(0, 1); shape number k (from 0) uses Philox stream k")
      ->capture_default_str();
  cmd->add_option("--repeats", o->repeats, "Timed runs of every method (>= 1)")
      ->capture_default_str();
  cmd->add_option("--warmup", o->warmup,
                  "Untimed round-robin rounds before the timed ones (the median already shrugs off "
                  "one cold run; use 1 for tiny shapes, where a first call's start-up shows)")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the scores")->capture_default_str();
  cmd->add_option("--json", o->common.json_path,
                  "Also write a machine-readable JSON report to FILE ('-' = stdout)");
  cmd->add_flag("-q,--quiet", o->common.quiet, "No tables or progress; errors only");
  cmd->add_option("--threads", o->common.threads, "Worker threads (default: all cores)")
      ->check(CLI::Range(1, 1024));
  cmd->callback([o, &exit_code] { exit_code = run_bench_masks(*o); });
}

}  // namespace nms::cli
