// Import/export of compressed-tensors' `sparse-24-bitmask` format (llm-compressor checkpoints).
//
// What the package (compressed-tensors <= 0.14.0, Sparse24BitMaskTensor) stores for a 2-D weight
// `<prefix>.weight` of shape (rows, cols) and dtype D:
//   <prefix>.compressed  D      (rows, cols / 2)  kept values, in row-major order of the dense
//                                                  tensor (flattened, then reshaped)
//   <prefix>.bitmask     uint8  (rows, ceil(cols / 8))  numpy.packbits(mask, axis=-1,
//                                                  bitorder="little"): bit j % 8 of byte j / 8 of
//                                                  row i is element (i, j); padding bits are 0
//   <prefix>.shape       int64  (2, 1)             [[rows], [cols]]
// The kept mask is recomputed from the values: the tensor is viewed as (-1, 4) (groups of 4
// consecutive elements of the *flattened* tensor) and torch.topk(|x|, 2) picks exactly 2 per group
// (NaN beats everything, ties broken the way torch's CPU topk breaks them). With cols % 4 == 0
// these are groups along rows; with cols % 4 == 2 a group may straddle two rows, and a row of
// `compressed` is then not the kept values of that row. Kept zeros are stored as they were
// (a kept -0.0 stays -0.0). docs/format.md has the full mapping.
//
// nmsparse reproduces that bit for bit for fp32 (tests/data/sparse24 holds the package's own
// outputs). The safetensors layer reads/writes the three tensors; this header only converts.
//
// Errors: nms::Error naming the defect (shape, sizes, popcounts, padding bits, over-full group).
// Complexity: O(rows * cols), single-threaded.
#pragma once

#include <cstdint>
#include <vector>

#include "nmsparse/core/aligned_buffer.h"
#include "nmsparse/core/bit_mask.h"
#include "nmsparse/core/matrix_view.h"

namespace nms {

struct Sparse24Bitmask {
  int64_t rows = 0;  // dense shape (the `.shape` tensor)
  int64_t cols = 0;
  std::vector<float> compressed;  // (rows, cols / 2) row-major, as the package stores it
  std::vector<uint8_t> bitmask;   // (rows, bitmask_row_bytes()), packbits(bitorder="little")

  int64_t bitmask_row_bytes() const { return (cols + 7) / 8; }
};

// How sparse24_from_dense treats a group of 4 with more than 2 nonzeros.
enum class Sparse24Mode {
  kRequireSparse,  // throw nms::Error naming the row, group and count (lossless export)
  kPruneTopTwo,    // keep the top-2 |x| like the package does (lossy)
};

// Requirements (as the package's): cols even and rows * cols a multiple of 4; any ld >= cols.
// Result equals the package's Sparse24BitMaskTensor.from_dense for the same fp32 input, bit for
// bit (values are copied, not canonicalised: a kept -0.0 stays -0.0, NaN payloads survive).
Sparse24Bitmask sparse24_from_dense(ConstMatrixViewF dense,
                                    Sparse24Mode mode = Sparse24Mode::kRequireSparse);

// Checks everything sparse24_to_dense relies on: rows, cols >= 0, cols even, rows * cols % 4 ==
// 0, compressed.size() == rows * cols / 2, bitmask.size() == rows * ceil(cols / 8), padding bits
// zero, and exactly 2 set bits in every (flattened) group of 4 (so exactly cols / 2 per row when
// cols % 4 == 0). Stricter than the package, which ignores padding bits and group counts.
void sparse24_validate(const Sparse24Bitmask& s);

// Validates (sparse24_validate) and writes the dense matrix: kept values copied bit-exact in
// row-major order, every other entry +0.0. Equals the package's sparse24_bitmask_decompress.
Matrix sparse24_to_dense(const Sparse24Bitmask& s);

// Validates and returns the kept positions as a (rows x cols) mask, e.g. to re-pack with
// nm_compress_masked(dense, mask, {2, 4}) without recomputing the mask from values.
BitMask sparse24_mask(const Sparse24Bitmask& s);

}  // namespace nms
