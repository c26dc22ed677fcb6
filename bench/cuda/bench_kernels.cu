// Device-side inputs and checks for nmsparse_cuda_bench (see bench_kernels.h).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "bench_kernels.h"
#include "cuda/cuda_support.h"
#include "nmsparse/core/rng.h"

namespace nms::cuda::bench {
namespace {

constexpr int kThreads = 256;

__device__ inline float bf16_value(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

__global__ void scores_kernel(float* data, int64_t count, CounterRng rng) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < count) data[t] = -logf(1.0f - rng.uniform(static_cast<uint64_t>(t)));
}

__global__ void gradient_kernel(float* data, int64_t count, CounterRng rng) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= count) return;
  const PhiloxCounter b = rng.block(static_cast<uint64_t>(t));
  const float scale = 1.0f / 4294967296.0f;
  data[t] = ((b[0] * scale + b[1] * scale) + (b[2] * scale + b[3] * scale)) - 2.0f;
}

__global__ void bf16_kernel(uint16_t* data, int64_t count, CounterRng rng) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= count) return;
  const float v = 2.0f * rng.uniform(static_cast<uint64_t>(t)) - 1.0f;
  data[t] = static_cast<uint16_t>(__float_as_uint(v) >> 16);  // exact: 24-bit uniforms truncate
}

__global__ void prune24_kernel(uint16_t* data, int64_t rows, int64_t cols, bool along_rows) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= rows * cols / 4) return;
  int64_t first;
  int64_t step;
  if (along_rows) {
    first = (t / (cols / 4)) * cols + (t % (cols / 4)) * 4;
    step = 1;
  } else {
    first = (t / cols) * 4 * cols + t % cols;
    step = cols;
  }
  float a[4];
  for (int i = 0; i < 4; ++i) a[i] = fabsf(bf16_value(data[first + i * step]));
  for (int i = 0; i < 4; ++i) {
    int above = 0;
    for (int k = 0; k < 4; ++k) above += a[k] > a[i] || (a[k] == a[i] && k < i);
    if (above >= 2) data[first + i * step] = 0;
  }
}

__global__ void diff_kernel(const uint16_t* a, const uint16_t* b, int64_t count,
                            unsigned* max_diff_bits, unsigned* max_ref_bits) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= count) return;
  const float ref = bf16_value(b[t]);
  const float diff = fabsf(bf16_value(a[t]) - ref);
  // Non-negative floats order like their bit patterns; NaN (0x7fc...) wins, as it should.
  atomicMax(max_diff_bits, diff != diff ? 0x7fc00000u : __float_as_uint(diff));
  atomicMax(max_ref_bits, __float_as_uint(fabsf(ref)));
}

__global__ void mask_score_kernel(const float* scores, int64_t cols, int64_t words,
                                  int64_t words_per_row, const uint64_t* mask, double* sum) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  double part = 0.0;
  if (t < words) {
    const float* row = scores + (t / words_per_row) * cols + (t % words_per_row) * 64;
    for (uint64_t w = mask[t]; w != 0; w &= w - 1)
      part += row[__ffsll(static_cast<long long>(w)) - 1];
  }
  for (int off = 16; off > 0; off /= 2) part += __shfl_xor_sync(0xffffffffu, part, off);
  if ((threadIdx.x & 31) == 0) atomicAdd(sum, part);
}

unsigned blocks(int64_t count) {
  return static_cast<unsigned>((count + kThreads - 1) / kThreads);
}

}  // namespace

double mask_score(const float* scores, int64_t rows, int64_t cols, const uint64_t* words) {
  detail::DeviceBuffer<double> sum(1);
  sum.zero();
  const int64_t words_per_row = (cols + 63) / 64;
  const int64_t count = rows * words_per_row;
  if (count > 0) {
    mask_score_kernel<<<blocks(count), kThreads>>>(scores, cols, count, words_per_row, words,
                                                   sum.get());
  }
  detail::sync_checked("mask_score");
  double host = 0.0;
  sum.download(&host, 1);
  return host;
}

void fill_scores(float* data, int64_t count, uint64_t seed) {
  if (count > 0) scores_kernel<<<blocks(count), kThreads>>>(data, count, CounterRng(seed, 0));
}

void fill_gradient(float* data, int64_t count, uint64_t seed) {
  if (count > 0) gradient_kernel<<<blocks(count), kThreads>>>(data, count, CounterRng(seed, 1));
}

void fill_bf16(uint16_t* data, int64_t count, uint64_t seed) {
  if (count > 0) bf16_kernel<<<blocks(count), kThreads>>>(data, count, CounterRng(seed, 2));
}

void prune24_bf16(uint16_t* data, int64_t rows, int64_t cols, bool along_rows) {
  const int64_t groups = rows * cols / 4;
  if (groups > 0) prune24_kernel<<<blocks(groups), kThreads>>>(data, rows, cols, along_rows);
}

void max_abs_diff_bf16(const uint16_t* a, const uint16_t* b, int64_t count, double* max_diff,
                       double* max_ref) {
  detail::DeviceBuffer<unsigned> bits(2);
  bits.zero();
  if (count > 0) diff_kernel<<<blocks(count), kThreads>>>(a, b, count, bits.get(), bits.get() + 1);
  detail::sync_checked("max_abs_diff_bf16");
  unsigned host[2];
  bits.download(host, 2);
  float f[2];
  static_assert(sizeof(f) == sizeof(host));
  __builtin_memcpy(f, host, sizeof(f));
  *max_diff = f[0];
  *max_ref = f[1];
}

}  // namespace nms::cuda::bench
