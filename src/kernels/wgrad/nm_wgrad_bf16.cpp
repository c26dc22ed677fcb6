// nm_wgrad_bf16 (nmsparse/kernels/nm_wgrad_bf16.h): dWᵀ = X̂ᵀ · D̂ on nm_gemm_bf16's kernel with
// its tiles written transposed into dW, and the scalar path with the same additions.
#include "nmsparse/kernels/nm_wgrad_bf16.h"

#include <algorithm>

#include "core/parallel.h"
#include "grad/prune_lanes.h"
#include "kernels/nm_gemm_bf16_layout.h"
#include "kernels/nm_gemm_bf16_scalar.h"
#include "kernels/wgrad/wgrad_kernels.h"
#include "kernels/wgrad/wgrad_validate.h"
#include "nmsparse/core/error.h"
#include "nmsparse/core/half.h"
#include "nmsparse/core/threading.h"

namespace nms {
namespace {

using detail::kBf16Chunk;
using detail::kBf16Rows;
using detail::NmGemmBf16Layout;

// In features per work item of X's transposed rounding: each reads 1 KB runs of 16 rows of X at a
// time. 64 took twice as long for tall X (4.2 against 2.4 ms at T 8192 x 768, one thread, Zen 4).
constexpr int64_t kRoundBlock = 256;

// The chain's start for dW(o, i): λ · W(o, i) where the decay's mask drops it, else 0; a denormal
// start flushed to signed 0 (the kernel's load_transposed).
float start_term(const NmWgradDecay* decay, int64_t o, int64_t i) {
  if (decay == nullptr || decay->keep[o * decay->keep_ld + i] != 0) return 0.0f;
  return detail::flush_denormal(decay->lambda * decay->w(o, i));
}

void validate(const CompressedNm& dy, ConstMatrixViewF x, MatrixViewF dw,
              const NmWgradDecay* decay) {
  detail::check_bf16_pattern(dy.pattern, "nm_wgrad_bf16");
  const std::string error = nm_wgrad_check(dy, x, dw, decay);
  NMS_CHECK(error.empty(), error);
}

// X̂ᵀ [in, T] (row stride ld) from X [T, in].
void round_transposed(ConstMatrixViewF x, uint16_t* xt, int64_t ld, bool avx512) {
  const int64_t tokens = x.rows();
  const int64_t in = x.cols();
  // Blocks of kRoundBlock in features (each a strip of X̂ᵀ written by one thread).
  const int64_t blocks = (in + kRoundBlock - 1) / kRoundBlock;
  detail::parallel_for(blocks, [&](int64_t blk) {
    const int64_t i0 = kRoundBlock * blk;
    const int64_t i1 = std::min(in, i0 + kRoundBlock);
    if (avx512) {
      detail::round_transposed_to_bf16_avx512(x.data() + i0, x.ld(), tokens, i1 - i0, xt + i0 * ld,
                                              ld);
      return;
    }
    for (int64_t i = i0; i < i1; ++i) {
      for (int64_t t = 0; t < tokens; ++t) xt[i * ld + t] = detail::round_operand_bf16(x(t, i));
    }
  });
}

}  // namespace

std::string nm_wgrad_bf16_check(const CompressedNm& dy, ConstMatrixViewF x, MatrixViewF dw,
                                const NmWgradDecay* decay) {
  try {
    validate(dy, x, dw, decay);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

namespace {

// dW = D̂ᵀ X̂ (+ decay) for D̂ᵀ packed in w.dy_t (out rows, T deep); shapes checked.
void run_packed(ConstMatrixViewF x, MatrixViewF dw, NmWgradBf16Workspace& w,
                const NmWgradDecay* decay) {
  const NmGemmBf16Operand& a = w.dy_t;
  const int64_t out = a.rows;
  const int64_t tokens = a.depth;
  const int64_t in = x.cols();
  // X̂ᵀ rows padded to a multiple of 32 plus 32 (64 bytes): no power-of-two stride between the 8
  // rows a tile loads per chunk.
  const int64_t ld = (tokens + kBf16Chunk - 1) / kBf16Chunk * kBf16Chunk + kBf16Chunk;
  const int64_t need = detail::mul_checked(in, ld, "nm_wgrad_bf16 X̂ᵀ");
  if (w.x_t.size() < need) w.x_t.resize_for_overwrite(need);
  const bool kernel = nm_gemm_bf16_kernel_active();
  round_transposed(x, w.x_t.data(), ld, kernel);
  const NmGemmBf16Layout lay(out, tokens, a.pattern.n, a.pattern.m);

  if (!kernel) {
    detail::parallel_for(out, [&](int64_t o) {
      for (int64_t i = 0; i < in; ++i) {
        dw(o, i) =
            detail::bf16_row_chain(w.x_t.data() + i * ld, a, lay, o, start_term(decay, o, i));
      }
    });
    return;
  }
  detail::NmGemmBf16Args args{};
  args.values = a.values.data();
  args.index = a.index.data();
  args.rows = out;
  args.depth = tokens;
  args.n = a.pattern.n;
  args.m = a.pattern.m;
  args.ldx = ld;
  args.ldy = dw.ld();
  args.y_transposed = true;
  // dW of kWgradStreamBytes or more (and T within one K block) is written in whole lines with
  // streaming stores, skipping the read for ownership of every line: 4096 x 4096, T 512, with the
  // decay, one thread, alternately in one process: 78.4 against 84.0 and 84.6 against 88.0 ms
  // (two runs); two threads 51.5 against 56.1 ms. Where the caches keep dW the lines would only
  // be evicted early.
  args.y_stream = dw.size() * int64_t{4} >= detail::kWgradStreamBytes &&
                  reinterpret_cast<uintptr_t>(dw.data()) % 64 == 0 && dw.ld() % 16 == 0;
  if (decay != nullptr) {
    args.start_ldw = decay->w.ld();
    args.start_ldkeep = decay->keep_ld;
    args.start_lambda = decay->lambda;
  }
  // nm_gemm_bf16's items, its tokens being the in features.
  detail::nm_gemm_bf16_for_items(
      in, lay.blocks, [&](int64_t i0, int64_t i1, int64_t b0, int64_t b1) {
        detail::NmGemmBf16Args item = args;  // in features [i0, i1) as tokens [0, i1 - i0)
        item.x = w.x_t.data() + i0 * ld;
        item.y = dw.data() + i0;
        if (decay != nullptr) {
          item.start_w = decay->w.data() + i0;
          item.start_keep = decay->keep + i0;
        }
        detail::nm_gemm_bf16_avx512(item, 0, i1 - i0, b0, b1);
      });
}

// dW = start term everywhere (T = 0).
void fill_start(MatrixViewF dw, const NmWgradDecay* decay) {
  for (int64_t o = 0; o < dw.rows(); ++o) {
    for (int64_t i = 0; i < dw.cols(); ++i) dw(o, i) = start_term(decay, o, i);
  }
}

}  // namespace

void nm_wgrad_bf16(const CompressedNm& dy, ConstMatrixViewF x, MatrixViewF dw,
                   NmWgradBf16Workspace* ws, const NmWgradDecay* decay) {
  validate(dy, x, dw, decay);
  if (dw.size() == 0) return;
  if (dy.rows == 0) return fill_start(dw, decay);
  NmWgradBf16Workspace local;
  NmWgradBf16Workspace& w = ws != nullptr ? *ws : local;
  detail::nm_gemm_bf16_pack_compressed(dy, w.dy_t);  // A = D̂ᵀ [out, T]
  run_packed(x, dw, w, decay);
}

void nm_wgrad_bf16_pruned(ConstMatrixViewF dy, const GradPruneOptions& prune, ConstMatrixViewF x,
                          MatrixViewF dw, NmWgradBf16Workspace* ws, const NmWgradDecay* decay) {
  NMS_CHECK(prune.axis == NmAxis::kCols,
            "nm_wgrad_bf16_pruned: dY must be pruned along tokens (axis cols), got axis ",
            axis_name(prune.axis));
  detail::check_bf16_pattern(prune.pattern, "nm_wgrad_bf16");
  NmWgradBf16Workspace local;
  NmWgradBf16Workspace& w = ws != nullptr ? *ws : local;
  if (nm_gemm_bf16_kernel_active() && dy.rows() > 0 && dy.cols() > 0 && x.cols() > 0 &&
      detail::grad_prune_lanes24_applies(dy, prune)) {
    // 2:4 MVUE writes D̂ᵀ in the kernel's pair form directly: no compressed dY written, read back
    // and packed (the header has the measurement).
    detail::validate_wgrad_operands(dy.rows(), dy.cols(), x, dw, decay);
    const NmGemmBf16Layout lay =
        detail::nm_gemm_bf16_prepare(dy.cols(), dy.rows(), prune.pattern, w.dy_t);
    NMS_ASSERT(lay.pairs_per_chunk == 8 && lay.total() == dy.cols() / 32 * lay.chunks * 8 * 64);
    detail::grad_prune_pairs24_bf16(dy, prune, w.dy_t.values.data(), w.dy_t.index.data());
    run_packed(x, dw, w, decay);
    return;
  }
  grad_prune_compressed_into(dy, prune, w.pruned_dy);
  nm_wgrad_bf16(w.pruned_dy, x, dw, &w, decay);
}

}  // namespace nms
