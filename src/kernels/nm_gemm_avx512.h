// PRIVATE header: the SIMD kernels of nm_gemm (nm_gemm_avx512.cpp and nm_gemm_avx2.cpp, each the
// only unit built with its flags; called after the isa_active() check). Plain types only.
#pragma once

#include <cstdint>

namespace nms::detail {

struct NmGemmArgs {
  const float* x;  // [tokens, depth], row stride ldx
  int64_t ldx;
  const float* packed;    // nm_gemm_layout.h
  const uint8_t* shared;  // per (depth block, tile): the rows keep the same columns (nm_gemm.h)
  int64_t rows, depth;
  int n, m;
  int64_t depth_block = 0;  // the operand's (nm_gemm_layout.h)
  float* y;                 // [tokens, rows], row stride ldy
  int64_t ldy;
  const float* bias = nullptr;  // rows floats added by the driver (nm_gemm_bias.h); not transposed
  // The weight-gradient form (nm_wgrad): x is given as [depth, tokens] (x(t, k) at
  // x[k · ldx + t]) and y as [rows, tokens] (y(t, r) at y[r · ldy + t]), and when start_w is set
  // each output's chain starts from start_lambda · start_w(r, t) where start_keep(r, t) == 0 (the
  // SR-STE decay term; row strides start_ldw, start_ldkeep) instead of from 0.
  bool transposed = false;
  const float* start_w = nullptr;
  const uint8_t* start_keep = nullptr;
  int64_t start_ldw = 0;
  int64_t start_ldkeep = 0;
  float start_lambda = 0.0f;
  // The AVX-512 broadcast kernel takes token panels in pairs (micro_tile_wide: 3 rows x 128
  // tokens, 8 FMAs per broadcast) or one at a time (micro_tile: 6 rows x 64 tokens, 4 per
  // broadcast): nm_gemm_panel_pairs().
  bool panel_pairs = true;
};

// Whether the AVX-512 broadcast kernel pairs its token panels here. Pairs fed the Xeon's two
// 64-byte load ports better (3.4 -> 3.8 G zmm FMAs/s, nm_gemm.h); on Zen 4 single panels are
// 7-15 % faster (nm_gemm_lanes.cpp), so the default is by CPU, as for the kernel itself.
// NMSPARSE_NM_GEMM_PANELS=1|2 overrides it, and set_nm_gemm_panel_pairs_override (tests; -1
// clears it, 0 single panels, 1 pairs) overrides both.
bool nm_gemm_panel_pairs();
void set_nm_gemm_panel_pairs_override(int pairs);

// The blocked, threaded driver of the SIMD levels (nm_gemm.cpp): Y for `tokens` rows of X at the
// AVX-512 level (avx512) or the AVX2 one.
void nm_gemm_simd(const NmGemmArgs& a, int64_t tokens, bool avx512);

// Packs Xᵀ for tokens [t0, t0 + width), width <= kNmGemmPanel (one panel): xt[b][k][t] =
// x[t0 + t][b · kc + k] for every depth block b, zero for t >= width.
// `xt`: 64-byte aligned, NmGemmLayout::panel_floats() floats.
void nm_gemm_avx512_pack_x(const NmGemmArgs& a, int64_t t0, int64_t width, float* xt);

// Y[t0 .. t0 + tokens)[rows of tiles tile0 .. tile1) (the rows below a.rows) from the packed Xᵀ
// panels of those tokens (`xt`: ceil(tokens / 64) consecutive panels of panel_floats(); t0 a
// multiple of kNmGemmPanel): per depth block, per panel, per tile, so each (block, tile) run of
// entries is loaded from memory once for all the panels. Every output element is the fused
// multiply-add chain over its kept slots in order from 0, bitwise the scalar path's result.
// `scratch`: 64-byte aligned, ceil(tokens / 64) · nm_gemm_out_rows(tile1 - tile0) · 64 floats.
void nm_gemm_avx512_block(const NmGemmArgs& a, int64_t tile0, int64_t tile1, int64_t t0,
                          int64_t tokens, const float* xt, float* scratch);

// The same with AVX2 + FMA (nm_gemm_avx2.cpp; called after isa_active() >= Isa::kAvx2).
void nm_gemm_avx2_pack_x(const NmGemmArgs& a, int64_t t0, int64_t width, float* xt);
void nm_gemm_avx2_block(const NmGemmArgs& a, int64_t tile0, int64_t tile1, int64_t t0,
                        int64_t tokens, const float* xt, float* scratch);

}  // namespace nms::detail
