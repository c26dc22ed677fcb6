#include "report.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "nmsparse/io/atomic_file.h"

namespace nms::cli {

Table::Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

void Table::print(std::FILE* out) const {
  std::vector<size_t> width(headers_.size());
  for (size_t k = 0; k < headers_.size(); ++k) width[k] = headers_[k].size();
  for (const auto& r : rows_)
    for (size_t k = 0; k < r.size(); ++k) width[k] = std::max(width[k], r[k].size());
  // Numeric columns are right-aligned, text columns (names, shapes, reasons) left-aligned.
  std::vector<bool> numeric(headers_.size(), true);
  for (const auto& r : rows_) {
    for (size_t k = 0; k < r.size(); ++k) {
      const std::string& c = r[k];
      numeric[k] =
          numeric[k] && (c.empty() || c.find_first_not_of("0123456789.-+e%") == std::string::npos);
    }
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (size_t k = 0; k < cells.size(); ++k) {
      const size_t pad = width[k] - cells[k].size();
      if (!numeric[k]) {
        s += (k ? "  " : "") + cells[k] + std::string(pad, ' ');
      } else if (k == 0) {
        s += cells[k] + std::string(pad, ' ');
      } else {
        s += "  " + std::string(pad, ' ') + cells[k];
      }
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    std::fprintf(out, "%s\n", s.c_str());
  };
  line(headers_);
  size_t total = 0;
  for (size_t w : width) total += w + 2;
  std::fprintf(out, "%s\n", std::string(total - 2, '-').c_str());
  for (const auto& r : rows_) line(r);
}

Progress::Progress(int64_t total, bool quiet)
    : total_(total), enabled_(!quiet && total > 0 && isatty(STDERR_FILENO) == 1) {}

Progress::~Progress() {
  if (enabled_) std::fprintf(stderr, "\r\033[K");
}

void Progress::step(const std::string& label) {
  if (!enabled_) return;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * done_ / total_);
  std::string shown = label.size() > 48 ? "..." + label.substr(label.size() - 45) : label;
  std::fprintf(stderr, "\r\033[K[%s%s] %lld/%lld %s", std::string(filled, '#').c_str(),
               std::string(kWidth - filled, '.').c_str(), static_cast<long long>(done_) + 1,
               static_cast<long long>(total_), shown.c_str());
  std::fflush(stderr);
  ++done_;
}

void write_json_report(const std::string& path, const nlohmann::json& report) {
  if (path.empty()) return;
  const std::string text = report.dump(2) + "\n";
  if (path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return;
  }
  write_file_atomic(path, text);
}

std::string format_fixed(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}

std::string format_ms(double seconds) {
  return format_fixed(seconds * 1e3, 1);
}

}  // namespace nms::cli
