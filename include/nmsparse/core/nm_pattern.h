// N:M sparsity pattern: keep at most n of every m consecutive weights (n = kept, m = group).
//
// This is NVIDIA's, SR-STE's, Bi-Mask's and TSENOR's reading. SparseGPT and Wanda write the number
// of *pruned* weights first; nmsparse never does. Valid patterns: 1 <= n <= m <= 64.
#pragma once

#include <string>
#include <string_view>

namespace nms {

inline constexpr int kMaxGroupSize = 64;

struct NmPattern {
  int n = 2;  // kept per group
  int m = 4;  // group size

  // Throws nms::Error unless 1 <= n <= m <= 64, naming the offending values.
  void validate() const;
  // Validated pattern from "N:M" (kept:group), e.g. "2:4". Rejects anything else with a message
  // that quotes the text.
  static NmPattern parse(std::string_view text);
  // Validated pattern from numbers.
  static NmPattern make(int n, int m);

  double density() const { return static_cast<double>(n) / m; }
  double sparsity() const { return 1.0 - density(); }
  // Bits per stored index: ceil(log2 m); 0 for m == 1.
  int index_bits() const;
  std::string to_string() const { return std::to_string(n) + ":" + std::to_string(m); }

  friend bool operator==(const NmPattern&, const NmPattern&) = default;
};

}  // namespace nms
