// PRIVATE header of the CUDA backend: the kernels on device-resident data, for the host API
// (mask.cu, mvue.cu) and the benchmark (bench/cuda). Shapes are validated by the callers; these
// only launch (on the default stream) and do not wait.
#pragma once

#include <cstdint>

#include "cuda/kernel_bodies.h"
#include "nmsparse/core/nm_pattern.h"
#include "nmsparse/grad/prune.h"
#include "nmsparse/mask/transposable.h"

namespace nms::cuda::detail {

// Transposable mask of the rows x cols scores (row stride ld) into `words` (rows x words_per_row
// 64-bit words, BitMask layout); tile_bits is scratch of rows * (cols / m) words.
void launch_transposable(const float* scores, int64_t rows, int64_t cols, int64_t ld,
                         NmPattern pattern, TileSolver solver, uint64_t* tile_bits, uint64_t* words,
                         TileCounters* counters);

// ORs the tile rows of tile_bits (launch_transposable's layout) into the BitMask words.
void launch_assemble_words(const uint64_t* tile_bits, int64_t rows, int64_t cols, int m,
                           uint64_t* words);

// Counters of the entropic tile kernel (device memory, zeroed by run_entropic).
struct EntropicCounters {
  unsigned long long nontrivial;  // tiles that ran the sweeps (not all-zero, n < m)
  unsigned long long unfinished;  // tiles still short after the local search (host repair)
  unsigned long long swaps;       // local-search swaps
};
struct EntropicRun {
  double sweep_ms = 0.0;   // device time of the sweeps and the rounding
  double finish_ms = 0.0;  // wall time of the host repair (gather, augmenting paths, scatter)
                           // and the word assembly
  int64_t nontrivial = 0;
  int64_t swaps = 0;       // local-search swaps on the device
  int64_t unfinished = 0;  // tiles repaired on the host
  int64_t augmentations = 0;
};
// m a power of two in 2..32 (one warp lane per tile row).
bool entropic_gpu_supports(NmPattern pattern);
// The entropic solver (src/cuda/entropic.cu) on device scores into `words` (BitMask layout);
// tile_bits is scratch of rows * (cols / m) words. Waits for the device; with options.repair the
// host repairs the tiles that the rounding and local search left short. The caller validated the
// input and the pattern.
EntropicRun run_entropic(const float* scores, int64_t rows, int64_t cols, int64_t ld,
                         NmPattern pattern, const EntropicOptions& options, uint64_t* tile_bits,
                         uint64_t* words);

// Row-wise top-n-of-m mask (mask_nm_rows) into `words`; *bad (zeroed by the caller) becomes
// nonzero when a score is negative or NaN.
void launch_nm_rows(const float* scores, int64_t rows, int64_t cols, int64_t ld, NmPattern pattern,
                    uint64_t* words, unsigned* bad);

// Bi-Mask backward mask into `words` (every word written): w [rows, cols], fwd the forward
// mask's words, perm the row permutation.
void launch_bimask_backward(const float* w, int64_t rows, int64_t cols, int64_t ld,
                            const uint64_t* fwd, const int64_t* perm, NmPattern pattern,
                            uint64_t* words);

// Gradient pruning (grad_prune_into) of g into out; *bad (zeroed by the caller) becomes nonzero
// for a non-finite input or an fp32 overflow of a group's magnitudes.
void launch_grad_prune(const float* g, int64_t rows, int64_t cols, int64_t ld,
                       const GradPruneOptions& options, float* out, int64_t ld_out, unsigned* bad);

}  // namespace nms::cuda::detail
