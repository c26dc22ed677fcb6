// nmsparse verify: is every selected tensor N:M along its rows (and, with --transposable, along
// its columns too)? Exit status 1 when any selected tensor violates.
#include <memory>
#include <set>

#include "cli_common.h"
#include "commands.h"
#include "nmsparse/core/error.h"
#include "nmsparse/io/nm_tensors.h"
#include "nmsparse/mask/verify.h"
#include "report.h"

namespace nms::cli {
namespace {

struct VerifyOptions {
  CommonOptions common;
  std::string nm;
  std::string input;
  std::string dense;
  bool transposable = false;
};

struct Checked {
  std::string name;
  std::vector<int64_t> shape;
  std::string kind;  // "dense", "packed", "sparse-24-bitmask"
  Matrix matrix;
};

std::string group_cell(bool applicable, int64_t violations, int64_t groups) {
  if (!applicable) return "n/a";
  return violations == 0 ? "ok"
                         : std::to_string(violations) + "/" + std::to_string(groups) + " bad";
}

int run_verify(const VerifyOptions& o) {
  const NmPattern pattern = NmPattern::parse(o.nm);
  o.common.apply_threads();
  const SafetensorsModel model = SafetensorsModel::open(o.input);
  std::optional<SafetensorsModel> dense;
  if (!o.dense.empty()) dense = SafetensorsModel::open(o.dense);
  const TensorSelector selector(o.common);

  std::vector<std::string> headers = {"tensor", "shape", "kind", "density", "rows"};
  if (o.transposable) headers.push_back("cols");
  if (dense) headers.push_back("kept |W|");
  headers.push_back("result");
  Table table(headers);
  nlohmann::json layers = nlohmann::json::array();
  int64_t checked = 0;
  int64_t failed = 0;
  int64_t skipped = 0;

  auto check = [&](Checked t) {
    const NmVerifyReport r = verify_nm(t.matrix.view(), pattern);
    if (o.transposable && !r.cols_applicable) {  // like a non-divisible dim: skipped, listed
      const std::string reason = "rows (" + std::to_string(r.rows) + ") not a multiple of m (" +
                                 std::to_string(pattern.m) + ") for --transposable";
      if (!o.common.quiet) {
        std::fprintf(stderr, "warning: skipping '%s': %s\n", t.name.c_str(), reason.c_str());
      }
      ++skipped;
      layers.push_back({{"name", t.name}, {"status", "skipped"}, {"reason", reason}});
      return;
    }
    const bool ok = r.rows_valid() && (!o.transposable || r.cols_valid());
    std::string why;
    if (!r.rows_valid() && r.rows_applicable) {
      why = "row " + std::to_string(r.first_row_violation.row) + " keeps " +
            std::to_string(r.first_row_violation.kept) + " in the group at column " +
            std::to_string(r.first_row_violation.col);
    } else if (o.transposable && !r.cols_valid() && r.cols_applicable) {
      why = "column " + std::to_string(r.first_col_violation.col) + " keeps " +
            std::to_string(r.first_col_violation.kept) + " in the group at row " +
            std::to_string(r.first_col_violation.row);
    }
    double mass = -1.0;
    if (dense) {
      const auto entry = dense->find(t.name);
      NMS_CHECK(entry.has_value(), "tensor '", t.name, "' is not in the dense model '", o.dense,
                "'");
      const TensorInfo* info = entry->info;
      NMS_CHECK(info->shape == t.shape, "tensor '", t.name, "' has shape ", shape_string(t.shape),
                " but ", shape_string(info->shape), " in the dense model");
      Candidate dc;
      dc.shard = entry->shard;
      dc.info = info;
      const auto ms = tensor_matrix_shape(info->shape);
      dc.layout = ms->layout;
      dc.rows = ms->rows;
      dc.cols = ms->cols;
      const Matrix d = read_matrix(*dense, dc, o.common.allow_nonfinite);
      mass = kept_mass_fraction(d.view(), nonzero_mask(t.matrix.view()));
    }
    ++checked;
    failed += !ok;
    std::vector<std::string> row = {t.name, shape_string(t.shape), t.kind,
                                    format_fixed(r.density(), 4),
                                    group_cell(r.rows_applicable, r.row_violations, r.row_groups)};
    if (o.transposable)
      row.push_back(group_cell(r.cols_applicable, r.col_violations, r.col_groups));
    if (dense) row.push_back(format_fixed(mass, 4));
    row.push_back(ok ? "PASS" : "FAIL: " + why);
    table.add_row(row);
    nlohmann::json j = {{"name", t.name},
                        {"shape", t.shape},
                        {"kind", t.kind},
                        {"status", ok ? "pass" : "fail"},
                        {"density", r.density()},
                        {"sparsity", r.sparsity()},
                        {"row_groups", r.row_groups},
                        {"row_violations", r.row_violations},
                        {"row_groups_full", r.row_groups_full}};
    if (o.transposable) {
      j["col_groups"] = r.col_groups;
      j["col_violations"] = r.col_violations;
      j["tiles"] = r.tiles;
      j["tile_violations"] = r.tile_violations;
    }
    if (!ok) j["reason"] = why;
    if (mass >= 0) j["kept_mass_fraction"] = mass;
    layers.push_back(j);
  };

  // Tensors that are parts of a packed tensor are checked through it, not on their own.
  std::vector<std::set<std::string>> parts_by_shard(model.shard_count());
  for (size_t s = 0; s < model.shard_count(); ++s) {
    const SafetensorsFile& file = model.shard(s);
    std::set<std::string>& parts = parts_by_shard[s];
    for (const auto& e : find_packed_nm(file)) {
      parts.insert(e.values->name);
      parts.insert(e.indices->name);
      if (!selector.selected(e.name)) continue;
      check({e.name, e.meta.tensor_shape, "packed " + e.meta.pattern.to_string(),
             nm_decompress(read_packed_nm(file, e))});
      file.release(*e.values);
      file.release(*e.indices);
    }
    for (const auto& e : find_sparse24(file)) {
      parts.insert(e.compressed->name);
      parts.insert(e.bitmask->name);
      parts.insert(e.shape->name);
      if (!selector.selected(e.name)) continue;
      const Sparse24Bitmask sb = read_sparse24(file, e);
      file.release(*e.compressed);
      file.release(*e.bitmask);
      check({e.name, {sb.rows, sb.cols}, "sparse-24-bitmask", sparse24_to_dense(sb)});
    }
  }
  std::vector<Candidate> cands = classify(model, selector, pattern);
  for (Candidate& c : cands) {
    if (parts_by_shard[c.shard].count(c.info->name)) c.selected = false;
  }
  warn_skipped(cands, o.common.quiet);
  Progress progress(static_cast<int64_t>(cands.size()), o.common.quiet);
  for (const Candidate& c : cands) {
    progress.step(c.info->name);
    if (!c.selected) continue;
    if (!c.eligible) {
      ++skipped;
      layers.push_back({{"name", c.info->name}, {"status", "skipped"}, {"reason", c.skip_reason}});
      continue;
    }
    check({c.info->name, c.info->shape, "dense", read_matrix(model, c, o.common.allow_nonfinite)});
  }
  NMS_CHECK(checked > 0, "no tensor of '", o.input, "' could be checked for ", pattern.to_string(),
            " (see the warnings; check --include/--exclude and the pattern)");

  if (!o.common.quiet && o.common.json_path != "-") {
    table.print(stdout);
    std::printf("\n%s: %lld of %lld tensors %s %s%s (kept:group, density <= %.4f); %lld skipped\n",
                failed ? "FAIL" : "PASS", static_cast<long long>(checked - failed),
                static_cast<long long>(checked), failed ? "are" : "are",
                pattern.to_string().c_str(),
                o.transposable ? " in both directions (transposable)" : " along rows",
                pattern.density(), static_cast<long long>(skipped));
  }
  write_json_report(o.common.json_path, {{"command", "verify"},
                                         {"input", o.input},
                                         {"pattern", pattern.to_string()},
                                         {"transposable", o.transposable},
                                         {"valid", failed == 0},
                                         {"checked", checked},
                                         {"failed", failed},
                                         {"skipped", skipped},
                                         {"layers", layers}});
  return failed ? kExitViolation : kExitOk;
}

}  // namespace

void add_verify_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<VerifyOptions>();
  CLI::App* cmd = app.add_subcommand(
      "verify",
      "Check that tensors are N:M (at most N nonzeros in every M along the input dim; with "
      "--transposable also along the output dim, i.e. every MxM tile). Reads dense, packed "
      "(nmsparse) and sparse-24-bitmask tensors. Exit status 1 when any selected tensor "
      "violates.");
  cmd->add_option("--nm", o->nm, "Pattern N:M = keep at most N of every M (e.g. 2:4)")->required();
  cmd->add_flag("--transposable", o->transposable,
                "Also require N:M along columns (both W and W^T N:M)");
  cmd->add_option("--dense", o->dense,
                  "The dense model before pruning: report the fraction of |W| kept");
  cmd->add_option("input", o->input, "Model to check")->required();
  o->common.add_to(*cmd);
  cmd->callback([o, &exit_code] { exit_code = run_verify(*o); });
}

}  // namespace nms::cli
