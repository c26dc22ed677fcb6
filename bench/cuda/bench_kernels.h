// Device-side inputs and checks for nmsparse_cuda_bench: data is generated where it is used (an
// 8B model's scores would take minutes to make on the host and copy).
#pragma once

#include <cstdint>

namespace nms::cuda::bench {

// |Laplace| scores (-log(1 - u), u from CounterRng(seed, 0)): continuous, so the exact
// transposable optimum is unique and the GPU and CPU masks must be equal.
void fill_scores(float* data, int64_t count, uint64_t seed);
// Gradient-like values: the centred sum of four 32-bit uniforms, CounterRng(seed, 1).
void fill_gradient(float* data, int64_t count, uint64_t seed);
// bf16 values uniform in [-1, 1), CounterRng(seed, 2).
void fill_bf16(uint16_t* data, int64_t count, uint64_t seed);
// Keeps the 2 largest |x| of every 4 consecutive elements along rows (along_rows) or down
// columns of a row-major bf16 matrix; the others become +0.
void prune24_bf16(uint16_t* data, int64_t rows, int64_t cols, bool along_rows);
// max |a - b| and max |b| over `count` bf16 elements (waits for the result).
void max_abs_diff_bf16(const uint16_t* a, const uint16_t* b, int64_t count, double* max_diff,
                       double* max_ref);

// Sum of the scores (rows x cols, ld = cols) at the set bits of a BitMask's words, in double
// (waits for the result; summation order varies, ~1e-15 relative).
double mask_score(const float* scores, int64_t rows, int64_t cols, const uint64_t* words);

}  // namespace nms::cuda::bench
