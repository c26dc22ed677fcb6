// Bi-Mask: forward / backward masks and the permutation search (see nmsparse/mask/bimask.h).
#include "nmsparse/mask/bimask.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <utility>

#include "core/parallel.h"
#ifdef NMS_HAVE_AVX512_KERNELS
#include "mask/bimask_backward_avx2.h"
#include "mask/bimask_backward_avx512.h"
#endif
#include "mask/bimask_checks.h"
#include "mask/bimask_group.h"
#include "nmsparse/core/aligned_buffer.h"
#include "nmsparse/core/error.h"
#include "nmsparse/core/isa.h"
#include "nmsparse/core/rng.h"
#include "nmsparse/mask/standard.h"

namespace nms {
namespace {

constexpr int kMaxCandidates = 1'000'000;

// (criterion, other criterion): larger is better.
std::pair<int64_t, int64_t> key(const BiMaskScore& s, BiMaskCriterion c) {
  return c == BiMaskCriterion::kKept ? std::pair{s.kept, s.eligible}
                                     : std::pair{s.eligible, s.kept};
}

// Scores every group of `perm`; `rows` is scratch for m pointers.
class Scorer {
 public:
  Scorer(const BitMask& forward, NmPattern p)
      : forward_(forward),
        p_(p),
        fn_(detail::group_score_fn(p)),
        words_(forward.words_per_row()),
        last_valid_(detail::last_word_valid(forward.cols())) {}

  BiMaskScore group(const int64_t* rows_of_group) const {
    const uint64_t* ptr[kMaxGroupSize];
    for (int r = 0; r < p_.m; ++r) ptr[r] = forward_.row_words(rows_of_group[r]);
    return fn_(ptr, p_.n, p_.m, words_, last_valid_);
  }
  BiMaskScore total(const std::vector<int64_t>& perm) const {
    BiMaskScore s;
    for (size_t i = 0; i < perm.size(); i += static_cast<size_t>(p_.m)) {
      const BiMaskScore g = group(perm.data() + i);
      s.kept += g.kept;
      s.eligible += g.eligible;
    }
    return s;
  }

 private:
  const BitMask& forward_;
  NmPattern p_;
  detail::GroupScoreFn fn_;
  int64_t words_;
  uint64_t last_valid_;
};

// Hill climbing (see the header): returns (proposals, accepted).
std::pair<int64_t, int64_t> climb(const BitMask& forward, NmPattern p, BiMaskCriterion crit,
                                  uint64_t seed, int64_t budget, std::vector<int64_t>& perm,
                                  BiMaskScore& score) {
  const int64_t rows = static_cast<int64_t>(perm.size());
  const int64_t groups = rows / p.m;
  if (groups < 2) return {0, 0};
  const Scorer scorer(forward, p);
  std::vector<BiMaskScore> gs(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g) gs[static_cast<size_t>(g)] = scorer.group(&perm[g * p.m]);
  const CounterRng rng(seed, 0);
  int64_t accepted = 0;
  int64_t ga[kMaxGroupSize];
  int64_t gb[kMaxGroupSize];
  PhiloxCounter block{};
  for (int64_t k = 0; k < budget; ++k) {
    if ((k & 1) == 0) block = rng.block(static_cast<uint64_t>(k >> 1));
    const uint64_t u0 = block[2 * (k & 1)];
    const uint64_t u1 = block[2 * (k & 1) + 1];
    const auto a = static_cast<int64_t>((u0 * static_cast<uint64_t>(rows)) >> 32);
    const auto b = static_cast<int64_t>((u1 * static_cast<uint64_t>(rows)) >> 32);
    const int64_t A = a / p.m;
    const int64_t B = b / p.m;
    if (A == B) continue;
    std::copy_n(&perm[A * p.m], p.m, ga);
    std::copy_n(&perm[B * p.m], p.m, gb);
    ga[a - A * p.m] = perm[b];
    gb[b - B * p.m] = perm[a];
    const BiMaskScore na = scorer.group(ga);
    const BiMaskScore nb = scorer.group(gb);
    const BiMaskScore& oa = gs[static_cast<size_t>(A)];
    const BiMaskScore& ob = gs[static_cast<size_t>(B)];
    const BiMaskScore next{score.kept + na.kept + nb.kept - oa.kept - ob.kept,
                           score.eligible + na.eligible + nb.eligible - oa.eligible - ob.eligible};
    if (key(next, crit) > key(score, crit)) {
      std::swap(perm[a], perm[b]);
      gs[static_cast<size_t>(A)] = na;
      gs[static_cast<size_t>(B)] = nb;
      score = next;
      ++accepted;
    }
  }
  return {budget, accepted};
}

}  // namespace

std::string_view criterion_name(BiMaskCriterion c) {
  return c == BiMaskCriterion::kKept ? "kept" : "eligible";
}
std::string_view search_name(BiMaskSearch s) {
  return s == BiMaskSearch::kRandom ? "random" : "improve";
}

std::vector<int64_t> bimask_candidate(int64_t rows, uint64_t seed, int candidate) {
  NMS_CHECK(rows >= 0 && rows < (int64_t{1} << 32), "rows (", rows, ") outside [0, 2^32)");
  NMS_CHECK(candidate >= 0, "negative candidate (", candidate, ")");
  std::vector<int64_t> perm(static_cast<size_t>(rows));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  if (candidate == 0) return perm;
  const CounterRng rng(seed, static_cast<uint64_t>(candidate));
  PhiloxCounter block{};
  uint64_t k = 0;
  for (int64_t i = rows - 1; i >= 1; --i, ++k) {
    if ((k & 3) == 0) block = rng.block(k >> 2);
    const uint64_t u = block[k & 3];
    const auto j = static_cast<int64_t>((u * static_cast<uint64_t>(i + 1)) >> 32);
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
  return perm;
}

BitMask permute_rows(const BitMask& mask, const std::vector<int64_t>& perm) {
  detail::bimask_check_perm(perm, mask.rows());
  BitMask out(mask.rows(), mask.cols());
  for (int64_t i = 0; i < mask.rows(); ++i)
    std::copy_n(mask.row_words(perm[static_cast<size_t>(i)]), mask.words_per_row(),
                out.row_words(i));
  return out;
}

BiMaskScore bimask_score(const BitMask& forward, NmPattern pattern,
                         const std::vector<int64_t>& perm) {
  detail::bimask_check_shape(forward.rows(), forward.cols(), pattern, "bimask_score");
  detail::bimask_check_perm(perm, forward.rows());
  return Scorer(forward, pattern).total(perm);
}

BitMask bimask_backward(ConstMatrixViewF weights, const BitMask& forward, NmPattern pattern,
                        const std::vector<int64_t>& perm) {
  detail::bimask_check_shape(weights.rows(), weights.cols(), pattern, "bimask_backward");
  NMS_CHECK(forward.rows() == weights.rows() && forward.cols() == weights.cols(),
            "forward mask is ", forward.rows(), " x ", forward.cols(), ", weights ", weights.rows(),
            " x ", weights.cols());
  detail::bimask_check_perm(perm, weights.rows());
  const int m = pattern.m;
  const int n = pattern.n;
  const int64_t words = forward.words_per_row();
  BitMask backward(weights.rows(), weights.cols());
#ifdef NMS_HAVE_AVX512_KERNELS
  // The same bits, 16 (AVX-512) or 8 (AVX2) columns per step.
  if (const Isa isa = isa_active(); isa >= Isa::kAvx2 && m <= 16) {
    detail::parallel_for(weights.rows() / m, [&](int64_t g) {
      const int64_t* rows = &perm[static_cast<size_t>(g * m)];
      if (isa == Isa::kAvx512) {
        detail::bimask_backward_group_avx512(weights.data(), weights.ld(), weights.cols(),
                                             forward.row_words(0), backward.row_words(0), words,
                                             rows, n, m);
      } else {
        detail::bimask_backward_group_avx2(weights.data(), weights.ld(), weights.cols(),
                                           forward.row_words(0), backward.row_words(0), words, rows,
                                           n, m);
      }
    });
    return backward;
  }
#endif
  detail::parallel_for(weights.rows() / m, [&](int64_t g) {
    const int64_t* rows = &perm[static_cast<size_t>(g * m)];
    uint64_t c[kMaxGroupSize + 2];
    for (int64_t w = 0; w < words; ++w) {
      for (int t = 1; t <= n + 1; ++t) c[t] = 0;
      for (int r = 0; r < m; ++r) {
        const uint64_t x = forward.row_words(rows[r])[w];
        for (int t = n + 1; t >= 2; --t) c[t] |= c[t - 1] & x;
        c[1] |= x;
      }
      const uint64_t over = c[n + 1];
      for (int r = 0; r < m; ++r)
        backward.row_words(rows[r])[w] = forward.row_words(rows[r])[w] & ~over;
      for (uint64_t bits = over; bits != 0; bits &= bits - 1) {
        const int64_t j = w * 64 + std::countr_zero(bits);
        const uint64_t bit = uint64_t{1} << (j & 63);
        // |w| of the forward-kept entries, -1 for pruned ones (never outrank a kept entry, even a
        // kept zero); rank = entries with larger |w|, or equal |w| and lower permuted index.
        float a[kMaxGroupSize];
        for (int r = 0; r < m; ++r)
          a[r] =
              (forward.row_words(rows[r])[w] & bit) != 0 ? std::fabs(weights(rows[r], j)) : -1.0f;
        for (int r = 0; r < m; ++r) {
          if (a[r] < 0.0f) continue;
          int rank = 0;
          for (int q = 0; q < m; ++q) rank += (a[q] > a[r]) || (a[q] == a[r] && q < r);
          if (rank < n) backward.row_words(rows[r])[w] |= bit;
        }
      }
    }
  });
  return backward;
}

BiMaskResult bimask(ConstMatrixViewF weights, NmPattern pattern, const BiMaskOptions& options) {
  detail::bimask_check_shape(weights.rows(), weights.cols(), pattern, "bimask");
  NMS_CHECK(options.candidates >= 0 && options.candidates <= kMaxCandidates, "candidates (",
            options.candidates, ") outside [0, ", kMaxCandidates, "]");
  NMS_CHECK(options.improve_proposals >= -1, "improve_proposals (", options.improve_proposals,
            ") must be >= 0, or -1 for the default");
  BiMaskResult res;
  res.pattern = pattern;
  res.forward = mask_nm_magnitude(weights, pattern);
  res.forward_kept = res.forward.count();
  const int64_t rows = weights.rows();
  res.column_groups = rows / pattern.m * weights.cols();

  // Random search: candidate 0 is the identity.
  const int total = options.candidates + 1;
  std::vector<BiMaskScore> scores(static_cast<size_t>(total));
  const Scorer scorer(res.forward, pattern);
  detail::parallel_for(total, [&](int64_t c) {
    scores[static_cast<size_t>(c)] =
        scorer.total(bimask_candidate(rows, options.seed, static_cast<int>(c)));
  });
  int best = 0;
  for (int c = 1; c < total; ++c)
    if (key(scores[static_cast<size_t>(c)], options.criterion) >
        key(scores[static_cast<size_t>(best)], options.criterion))
      best = c;
  res.identity = scores[0];
  res.best_random = scores[static_cast<size_t>(best)];
  res.best_candidate = best;
  res.perm = bimask_candidate(rows, options.seed, best);
  res.final_score = res.best_random;

  if (options.search == BiMaskSearch::kImprove) {
    int64_t budget = options.improve_proposals;
    if (budget < 0)
      budget = std::max<int64_t>(1, int64_t{options.candidates} * (rows / pattern.m) / 2);
    const auto [proposals, accepted] = climb(res.forward, pattern, options.criterion, options.seed,
                                             budget, res.perm, res.final_score);
    res.proposals = proposals;
    res.accepted = accepted;
  }
  res.backward = bimask_backward(weights, res.forward, pattern, res.perm);
  NMS_DCHECK(res.backward.count() == res.final_score.kept, "backward mask keeps ",
             res.backward.count(), ", score says ", res.final_score.kept);
  return res;
}

CompressedNm bimask_backward_operand(ConstMatrixViewF weights, const BiMaskResult& result) {
  NMS_CHECK(result.backward.rows() == weights.rows() && result.backward.cols() == weights.cols(),
            "result is for ", result.backward.rows(), " x ", result.backward.cols(),
            ", weights are ", weights.rows(), " x ", weights.cols());
  const BitMask mask = permute_rows(result.backward, result.perm);
  Matrix wp(weights.rows(), weights.cols());
  for (int64_t i = 0; i < weights.rows(); ++i) {
    const float* src = weights.row(result.perm[static_cast<size_t>(i)]);
    for (int64_t j = 0; j < weights.cols(); ++j) wp(i, j) = mask.get(i, j) ? src[j] : 0.0f;
  }
  return nm_compress_masked(wp.view(), mask, result.pattern, NmAxis::kCols);
}

}  // namespace nms
