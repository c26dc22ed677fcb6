// Gradient pruning (MVUE, approximate 2:4 MVUE, top-n) on the GPU: four groups per thread where
// the shape allows (grad_prune_quad_thread: m <= 8, 16-byte rows), else one thread per group, runs
// detail::prune_group (src/grad/group_kernel.h) with the uniforms of detail::grad_uniform, so
// every kept value equals the CPU's bit for bit (same Philox words, same float operations,
// -fmad=false). Groups along columns (the token axis of dY) put consecutive columns in
// consecutive threads: every load and store of a warp is one contiguous line per row of the group
// (512 bytes with four groups per thread). H200, 16384^2, along tokens: 2:4 3.27 TB/s (68 % of
// the 4.81 TB/s peak, 78 % of a device copy), 8:16 2.42 TB/s; ncu: bound by instructions (SM 85 %,
// DRAM 69 %), branch efficiency 60 % from the water-filling loop.
#include <cuda_runtime.h>

#include <chrono>

#include "cuda/cuda_support.h"
#include "cuda/launch.h"
#include "nmsparse/cuda/cuda.h"

namespace nms::cuda {
namespace detail {
namespace {

constexpr int kThreads = 256;

// Calls f(std::integral_constant<GradMethod, method>{}): the kernels take the method as a template
// argument, so only its branch is compiled. That took the MVUE 2:4 four-group kernel from 84 to
// 42 registers (ptxas -v, sm_90) and from 1.19 to 0.65 ms on the H200 (16384^2).
template <typename F>
void with_method(GradMethod method, F&& f) {
  switch (method) {
    case GradMethod::kMvue:
      return f(std::integral_constant<GradMethod, GradMethod::kMvue>{});
    case GradMethod::kMvueApprox24:
      return f(std::integral_constant<GradMethod, GradMethod::kMvueApprox24>{});
    case GradMethod::kTopN:
      return f(std::integral_constant<GradMethod, GradMethod::kTopN>{});
  }
}

template <int kM, GradMethod kMethod>
__global__ void grad_prune_groups(const float* g, int64_t rows, int64_t cols, int64_t ld, int n,
                                  int m, bool rows_axis, CounterRng rng, float* out, int64_t ld_out,
                                  unsigned* bad) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < rows * cols / m) {
    grad_prune_thread<kM>(t, g, rows, cols, ld, kMethod, n, m, rows_axis, rng, out, ld_out, bad);
  }
}

template <int kM, GradMethod kMethod>
__global__ void grad_prune_quads(const float* g, int64_t quads, int64_t cols, int64_t ld, int n,
                                 bool rows_axis, CounterRng rng, float* out, int64_t ld_out,
                                 unsigned* bad) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < quads) {
    grad_prune_quad_thread<kM>(t, g, cols, ld, kMethod, n, rows_axis, rng, out, ld_out, bad);
  }
}

}  // namespace

void launch_grad_prune(const float* g, int64_t rows, int64_t cols, int64_t ld,
                       const GradPruneOptions& o, float* out, int64_t ld_out, unsigned* bad) {
  const int64_t groups = rows * cols / o.pattern.m;
  if (groups == 0) return;
  const bool rows_axis = o.axis == NmAxis::kRows;
  const CounterRng rng(o.seed, o.stream);
  const int n = o.pattern.n;
  const int m = o.pattern.m;
  if (grad_prune_quads_fit(cols, ld, ld_out, m, rows_axis, g, out)) {
    const int64_t quads = groups / 4;
    with_method(o.method, [&](auto method) {
      constexpr GradMethod kMethod = decltype(method)::value;
      const unsigned blocks = blocks_for(quads, kThreads);
      if (m == 2) {
        grad_prune_quads<2, kMethod>
            <<<blocks, kThreads>>>(g, quads, cols, ld, n, rows_axis, rng, out, ld_out, bad);
      } else if (m == 4) {
        grad_prune_quads<4, kMethod>
            <<<blocks, kThreads>>>(g, quads, cols, ld, n, rows_axis, rng, out, ld_out, bad);
      } else {
        grad_prune_quads<8, kMethod>
            <<<blocks, kThreads>>>(g, quads, cols, ld, n, rows_axis, rng, out, ld_out, bad);
      }
    });
    return;
  }
  // The common group sizes get a kernel each, with the group in registers, not local memory.
  with_method(o.method, [&](auto method) {
    with_group_size(m, [&](auto k) {
      grad_prune_groups<decltype(k)::value, decltype(method)::value>
          <<<blocks_for(groups, kThreads), kThreads>>>(g, rows, cols, ld, n, m, rows_axis, rng, out,
                                                       ld_out, bad);
    });
  });
}

}  // namespace detail

void grad_prune_gpu_into(ConstMatrixViewF g, const GradPruneOptions& o, MatrixViewF out,
                         GpuTiming* timing) {
  const auto t0 = std::chrono::steady_clock::now();
  detail::require_device("grad_prune_gpu_into");
  o.pattern.validate();
  const bool rows_axis = o.axis == NmAxis::kRows;
  const int64_t len = rows_axis ? g.cols() : g.rows();
  NMS_CHECK(len % o.pattern.m == 0, "m (", o.pattern.m,
            ") does not divide the grouped axis: ", rows_axis ? "cols (" : "rows (", len, ")");
  NMS_CHECK(o.method != GradMethod::kMvueApprox24 || (o.pattern == NmPattern{2, 4}),
            "mvue-approx24 is defined for 2:4 only, not ", o.pattern.to_string());
  NMS_CHECK(out.rows() == g.rows() && out.cols() == g.cols(), "output is ", out.rows(), " x ",
            out.cols(), ", gradient ", g.rows(), " x ", g.cols());
  const int64_t rows = g.rows();
  const int64_t cols = g.cols();
  const size_t count = static_cast<size_t>(rows * cols);
  detail::DeviceBuffer<float> d_g(count);
  detail::DeviceBuffer<float> d_out(count);
  detail::DeviceBuffer<unsigned> d_bad(1);
  d_bad.zero();
  if (count > 0) {
    NMS_CUDA_CHECK(cudaMemcpy2D(d_g.get(), cols * sizeof(float), g.data(), g.ld() * sizeof(float),
                                cols * sizeof(float), rows, cudaMemcpyHostToDevice));
  }
  detail::EventTimer timer;
  timer.start();
  detail::launch_grad_prune(d_g.get(), rows, cols, cols, o, d_out.get(), cols, d_bad.get());
  detail::sync_checked("grad_prune_gpu_into");
  const double kernel_ms = timer.stop();
  unsigned bad = 0;
  d_bad.download(&bad, 1);
  if (bad != 0) grad_prune_into(g, o, out);  // throws the CPU's message naming the element
  NMS_ASSERT(bad == 0, "the GPU flagged a gradient the CPU accepts");
  if (count > 0) {
    NMS_CUDA_CHECK(cudaMemcpy2D(out.data(), out.ld() * sizeof(float), d_out.get(),
                                cols * sizeof(float), cols * sizeof(float), rows,
                                cudaMemcpyDeviceToHost));
  }
  if (timing != nullptr) *timing = {kernel_ms, detail::elapsed_ms(t0)};
}

}  // namespace nms::cuda
