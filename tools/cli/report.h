// Human and machine output of the subcommands: aligned tables on stdout, warnings and a TTY
// progress bar on stderr, JSON reports written atomically.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace nms::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> headers);
  void add_row(std::vector<std::string> cells);
  void print(std::FILE* out) const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// A one-line progress bar on stderr, shown only when stderr is a terminal and not --quiet.
class Progress {
 public:
  Progress(int64_t total, bool quiet);
  ~Progress();
  void step(const std::string& label);  // call before working on item `label`

 private:
  int64_t total_;
  int64_t done_ = 0;
  bool enabled_;
};

// Writes `report` to `path` atomically ("-" = stdout). No-op for an empty path.
void write_json_report(const std::string& path, const nlohmann::json& report);

std::string format_fixed(double value, int digits);
std::string format_ms(double seconds);

class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace nms::cli
