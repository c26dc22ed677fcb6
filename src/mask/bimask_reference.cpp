#include "mask/bimask_reference.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "mask/standard_reference.h"
#include "nmsparse/core/aligned_buffer.h"
#include "nmsparse/core/rng.h"

namespace nms::reference {
namespace {

bool better(const BiMaskScore& a, const BiMaskScore& b, BiMaskCriterion c) {
  if (c == BiMaskCriterion::kKept) {
    if (a.kept != b.kept) return a.kept > b.kept;
    return a.eligible > b.eligible;
  }
  if (a.eligible != b.eligible) return a.eligible > b.eligible;
  return a.kept > b.kept;
}

}  // namespace

BitMask bimask_backward(ConstMatrixViewF weights, const BitMask& forward, NmPattern pattern,
                        const std::vector<int64_t>& perm) {
  BitMask out(weights.rows(), weights.cols());
  for (int64_t g = 0; g < weights.rows() / pattern.m; ++g) {
    for (int64_t j = 0; j < weights.cols(); ++j) {
      std::vector<std::pair<float, int64_t>> kept;  // (|w|, permuted index)
      for (int64_t i = g * pattern.m; i < (g + 1) * pattern.m; ++i) {
        const int64_t r = perm[static_cast<size_t>(i)];
        if (forward.get(r, j)) kept.emplace_back(std::fabs(weights(r, j)), i);
      }
      std::stable_sort(kept.begin(), kept.end(),
                       [](const auto& a, const auto& b) { return a.first > b.first; });
      for (size_t k = 0; k < kept.size() && k < static_cast<size_t>(pattern.n); ++k)
        out.set(perm[static_cast<size_t>(kept[k].second)], j);
    }
  }
  return out;
}

BiMaskScore bimask_score(ConstMatrixViewF weights, const BitMask& forward, NmPattern pattern,
                         const std::vector<int64_t>& perm) {
  BiMaskScore s;
  s.kept = reference::bimask_backward(weights, forward, pattern, perm).count();
  for (int64_t g = 0; g < weights.rows() / pattern.m; ++g) {
    for (int64_t j = 0; j < weights.cols(); ++j) {
      int count = 0;
      for (int64_t i = g * pattern.m; i < (g + 1) * pattern.m; ++i)
        count += forward.get(perm[static_cast<size_t>(i)], j);
      s.eligible += count <= pattern.n;
    }
  }
  return s;
}

BiMaskResult bimask(ConstMatrixViewF weights, NmPattern pattern, const BiMaskOptions& options) {
  BiMaskResult res;
  res.pattern = pattern;
  Matrix scores(weights.rows(), weights.cols());
  for (int64_t i = 0; i < weights.rows(); ++i)
    for (int64_t j = 0; j < weights.cols(); ++j) scores(i, j) = std::fabs(weights(i, j));
  res.forward = reference::mask_nm_rows(scores.view(), pattern);
  res.forward_kept = res.forward.count();
  const int64_t rows = weights.rows();
  res.column_groups = rows / pattern.m * weights.cols();
  for (int c = 0; c <= options.candidates; ++c) {
    const std::vector<int64_t> perm = bimask_candidate(rows, options.seed, c);
    const BiMaskScore s = reference::bimask_score(weights, res.forward, pattern, perm);
    if (c == 0) res.identity = s;
    if (c == 0 || better(s, res.best_random, options.criterion)) {
      res.best_random = s;
      res.best_candidate = c;
      res.perm = perm;
    }
  }
  res.final_score = res.best_random;
  if (options.search == BiMaskSearch::kImprove && rows / pattern.m >= 2) {
    int64_t budget = options.improve_proposals;
    if (budget < 0)
      budget = std::max<int64_t>(1, int64_t{options.candidates} * (rows / pattern.m) / 2);
    const CounterRng rng(options.seed, 0);
    for (int64_t k = 0; k < budget; ++k) {
      const PhiloxCounter block = rng.block(static_cast<uint64_t>(k / 2));
      const uint64_t u0 = block[static_cast<size_t>(2 * (k % 2))];
      const uint64_t u1 = block[static_cast<size_t>(2 * (k % 2) + 1)];
      const auto a = static_cast<int64_t>((u0 * static_cast<uint64_t>(rows)) >> 32);
      const auto b = static_cast<int64_t>((u1 * static_cast<uint64_t>(rows)) >> 32);
      ++res.proposals;
      if (a / pattern.m == b / pattern.m) continue;
      std::vector<int64_t> next = res.perm;
      std::swap(next[static_cast<size_t>(a)], next[static_cast<size_t>(b)]);
      const BiMaskScore s = reference::bimask_score(weights, res.forward, pattern, next);
      if (better(s, res.final_score, options.criterion)) {
        res.perm = std::move(next);
        res.final_score = s;
        ++res.accepted;
      }
    }
  }
  res.backward = reference::bimask_backward(weights, res.forward, pattern, res.perm);
  return res;
}

}  // namespace nms::reference
