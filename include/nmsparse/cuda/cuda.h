// The CUDA backend (optional target nmsparse_cuda, CMake -DNMSPARSE_CUDA=ON): the mask solvers and
// the gradient pruners of the CPU library on the GPU, with the same inputs, conventions and
// results, and the 2:4 training GEMMs on sparse tensor cores (nmsparse/cuda/sparse_gemm.h).
//
// Every function takes and returns host data, like its CPU counterpart, validates its input on
// the host with the CPU library's checks (so errors read the same), and does the work on device 0.
// The per-tile and per-group arithmetic is the CPU's own host-device code (src/mask/
// transposable_tile.h, src/grad/group_kernel.h) compiled for the GPU with -fmad=false:
//   mask_transposable_gpu  exact 2:4: the CPU masks bit for bit (the same 90-pattern search and
//                          ties); exact n:m (m <= 64): an optimum of the "= n" problem by
//                          successive shortest paths, one tile per thread. It equals the CPU mask
//                          whenever the optimum is unique (continuous scores); among tied optima it
//                          may pick another one with the same kept score. greedy (m <= 32): the
//                          CPU masks bit for bit, both orders. entropic: see
//                          mask_transposable_entropic_gpu.
//   mask_nm_rows_gpu       the CPU's mask_nm_rows bit for bit.
//   bimask_backward_gpu    the CPU's bimask_backward bit for bit.
//   grad_prune_gpu_into    the CPU's grad_prune_into bit for bit: the same Philox draws keyed by
//                          (seed, stream, group id) and the same float operations.
// Statistics (objective, tiles keeping exactly n) are recomputed on the host from the mask.
//
// Without a usable device every call throws nms::Error saying why; device_available() asks first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nmsparse/core/bit_mask.h"
#include "nmsparse/core/matrix_view.h"
#include "nmsparse/core/nm_pattern.h"
#include "nmsparse/grad/prune.h"
#include "nmsparse/mask/transposable.h"

namespace nms::cuda {

// True when a CUDA device can run nmsparse's kernels; otherwise false with the reason in *why
// ("no CUDA device: cudaGetDeviceCount: ..." or the driver's error).
bool device_available(std::string* why = nullptr);

struct DeviceInfo {
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  int multiprocessors = 0;
  int64_t memory_bytes = 0;
  double peak_bandwidth_gbs = 0.0;  // from the memory clock and bus width; 0 when unknown
  std::string runtime_version;      // "13.0"
  std::string driver_version;
};
DeviceInfo device_info();

// Device time of the last call's kernels (CUDA events around them) and its wall time including
// the host <-> device copies and the host-side checks.
struct GpuTiming {
  double kernel_ms = 0.0;
  double total_ms = 0.0;
};

TransposableResult mask_transposable_gpu(ConstMatrixViewF scores, NmPattern pattern,
                                         TransposableSolver solver, GpuTiming* timing = nullptr);
// Entropic (TSENOR-style, the CPU's maths and defaults): the log-domain Dykstra sweeps and the
// greedy rounding on the GPU, one warp lane per tile row (m a power of two, 2..32); the tiles the
// rounding leaves short are finished on the host by the CPU's local search and repair, so every
// tile keeps exactly n (repair on). Not bit-identical to mask_transposable_entropic (fast exp /
// log on the GPU); timing->kernel_ms is the sweeps' device time.
TransposableResult mask_transposable_entropic_gpu(ConstMatrixViewF scores, NmPattern pattern,
                                                  const EntropicOptions& options = {},
                                                  GpuTiming* timing = nullptr);

// Greedy in the given order (mask_transposable_gpu uses kKeepHeavyFirst).
TransposableResult mask_transposable_greedy_gpu(ConstMatrixViewF scores, NmPattern pattern,
                                                GreedyOrder order, GpuTiming* timing = nullptr);

BitMask mask_nm_rows_gpu(ConstMatrixViewF scores, NmPattern pattern, GpuTiming* timing = nullptr);

BitMask bimask_backward_gpu(ConstMatrixViewF weights, const BitMask& forward, NmPattern pattern,
                            const std::vector<int64_t>& perm, GpuTiming* timing = nullptr);

void grad_prune_gpu_into(ConstMatrixViewF g, const GradPruneOptions& options, MatrixViewF out,
                         GpuTiming* timing = nullptr);

}  // namespace nms::cuda
