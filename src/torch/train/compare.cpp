// `train --compare`: one run per (weights, grads) entry, a joint report and plot; gnuplot plots.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "nmsparse/core/error.h"
#include "nmsparse/io/atomic_file.h"
#include "nmsparse/torch/train.h"

namespace nms {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string gnuplot_string(const std::string& s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') q += '\\';
    q += c;
  }
  return q + "\"";
}

bool is_dense(const CompareEntry& e) {
  return e.weights == WeightMode::kDense && e.grads == GradMode::kDense;
}

}  // namespace

std::vector<CompareEntry> parse_compare_list(std::string_view list) {
  std::vector<CompareEntry> entries;
  std::set<std::string> seen;
  size_t pos = 0;
  while (pos <= list.size()) {
    const size_t comma = std::min(list.find(',', pos), list.size());
    const std::string item(list.substr(pos, comma - pos));
    pos = comma + 1;
    NMS_CHECK(!item.empty(), "empty entry in the comparison list '", list, "'");
    CompareEntry e;
    e.name = item;
    const size_t plus = item.find('+');
    const std::string w = item.substr(0, plus);
    const auto weights = weight_mode_from_name(w);
    NMS_CHECK(weights.has_value(), "comparison entry '", item, "': unknown weight mode '", w,
              "' (expected dense, nm, transposable or bimask)");
    e.weights = *weights;
    if (plus != std::string::npos) {
      const std::string g = item.substr(plus + 1);
      const auto grads = grad_mode_from_name(g);
      NMS_CHECK(grads.has_value(), "comparison entry '", item, "': unknown gradient mode '", g,
                "' (expected dense, mvue, mvue-approx24 or topn)");
      e.grads = *grads;
    }
    NMS_CHECK(seen.insert(item).second, "comparison entry '", item, "' is listed twice");
    entries.push_back(e);
    if (comma == list.size()) break;
  }
  return entries;
}

std::string CompareReport::to_json() const {
  double dense_ms = 0;
  for (size_t i = 0; i < entries.size() && i < runs.size(); ++i) {
    if (is_dense(entries[i])) dense_ms = runs[i].mean_step_ms;
  }
  json list = json::array();
  for (size_t i = 0; i < entries.size() && i < runs.size(); ++i) {
    const TrainReport& r = runs[i];
    const bool charlm = json::parse(r.config_json).at("model").at("kind") == "charlm";
    json e = {
        {"name", entries[i].name},
        {"weights", std::string(weight_mode_name(entries[i].weights))},
        {"grads", std::string(grad_mode_name(entries[i].grads))},
        {"status", r.status},
        {"mean_step_ms", r.mean_step_ms},
        {"speedup_vs_dense",
         dense_ms > 0 && r.mean_step_ms > 0 ? json(dense_ms / r.mean_step_ms) : json(nullptr)},
        {"seconds", r.seconds},
        {"out_dir", r.out_dir.string()}};
    if (charlm) {
      e["val_loss"] = std::isfinite(r.final_test_loss) ? json(r.final_test_loss) : json(nullptr);
    } else {
      e["test_accuracy"] =
          std::isfinite(r.final_test_accuracy) ? json(r.final_test_accuracy) : json(nullptr);
      e["test_loss"] = std::isfinite(r.final_test_loss) ? json(r.final_test_loss) : json(nullptr);
    }
    list.push_back(e);
  }
  json j = {{"command", "train --compare"},
            {"config", runs.empty() ? json(nullptr) : json::parse(runs.front().config_json)},
            {"runs", list}};
  if (!plot_warning.empty()) j["plot_warning"] = plot_warning;
  return j.dump(2) + "\n";
}

CompareReport train_compare(const TrainOptions& options, const std::vector<CompareEntry>& entries,
                            const TrainData& data, const TrainCallbacks& callbacks,
                            const std::function<void(size_t)>& on_run) {
  NMS_CHECK(!entries.empty(), "the comparison list is empty");
  NMS_CHECK(options.resume_dir.empty(),
            "--resume applies to one run; resume a comparison entry from its own directory");
  options.validate();
  CompareReport report;
  report.entries = entries;
  fs::create_directories(options.out_dir);
  std::vector<std::pair<std::string, std::vector<EpochMetrics>>> curves;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (on_run) on_run(i);
    TrainOptions o = options;
    o.recipe.defaults.weights = entries[i].weights;
    o.recipe.defaults.grads = entries[i].grads;
    o.out_dir = options.out_dir / entries[i].name;
    report.runs.push_back(train(o, data, callbacks));
    curves.emplace_back(entries[i].name, report.runs.back().history);
    write_file_atomic(options.out_dir / "compare.json", report.to_json());
  }
  if (options.plot) {
    const bool charlm = options.model.kind == ModelKind::kCharLm;
    report.plot_warning = plot_histories(curves, charlm, options.out_dir / "compare.png");
  }
  write_file_atomic(options.out_dir / "compare.json", report.to_json());
  return report;
}

std::string plot_histories(
    const std::vector<std::pair<std::string, std::vector<EpochMetrics>>>& runs, bool charlm,
    const fs::path& png) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    return "gnuplot not found (apt-get install gnuplot-nox): no plot drawn";
  }
  fs::path data = png;
  data.replace_extension(".dat");
  fs::path script = png;
  script.replace_extension(".gp");
  std::string table = "# epoch train_loss test_loss test_accuracy (one block per run)\n";
  for (const auto& [name, history] : runs) {
    table += "# " + (name.empty() ? std::string("run") : name) + "\n";
    for (const EpochMetrics& m : history) {
      char line[160];
      std::snprintf(line, sizeof line, "%lld %.6g %.6g %.6g\n", static_cast<long long>(m.epoch),
                    m.train_loss, m.test_loss, charlm ? 0.0 : 100.0 * m.test_accuracy);
      table += line;
    }
    table += "\n\n";
  }
  write_file_atomic(data, table);

  auto plot_cmd = [&](int column, bool with_train) {
    std::string cmd = "plot ";
    for (size_t i = 0; i < runs.size(); ++i) {
      const std::string label = runs[i].first.empty() ? "" : runs[i].first + " ";
      const std::string src = gnuplot_string(data.string()) + " index " + std::to_string(i);
      if (i) cmd += ", ";
      if (with_train) {
        cmd += src + " using 1:2 with linespoints lc " + std::to_string(i + 1) + " dt 2 title " +
               gnuplot_string(label + "train") + ", ";
      }
      cmd += src + " using 1:" + std::to_string(column) + " with linespoints lc " +
             std::to_string(i + 1) + " title " + gnuplot_string(label + (charlm ? "val" : "test"));
    }
    return cmd + "\n";
  };
  std::string body = "set output " + gnuplot_string(png.string()) + "\n";
  if (!charlm) body += "set multiplot layout 1,2\n";
  body +=
      "set grid\nset key outside bottom center horizontal\nset xlabel 'epoch'\n"
      "set ylabel 'cross-entropy'\nset title 'loss (dashed: train)'\n" +
      plot_cmd(3, true);
  if (!charlm) {
    body += "set ylabel 'test accuracy (%)'\nset title 'test accuracy'\n" + plot_cmd(4, false) +
            "unset multiplot\n";
  }
  const std::string size = runs.size() > 1 ? "1400,600" : "1200,480";
  for (const char* terminal : {"pngcairo", "png"}) {
    write_file_atomic(script,
                      std::string("set terminal ") + terminal + " size " + size + "\n" + body);
    const std::string cmd = "gnuplot " + shell_quote(script.string()) + " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0 && fs::exists(png)) return {};
  }
  return "gnuplot failed on " + script.string() + ": no plot drawn";
}

}  // namespace nms
