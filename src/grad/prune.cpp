// grad_prune: drivers over rows / column strips, the SSE2 2:4 MVUE kernel, dense and compressed
// sinks. The per-group specification is detail::prune_group (group.cpp); the 2:4 kernel performs
// the same float operations in the same order, four groups per vector.
#include "nmsparse/grad/prune.h"

#include <emmintrin.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/parallel.h"
#include "grad/code24.h"
#include "grad/group.h"
#include "grad/mvue_avx2.h"
#include "grad/mvue_avx512.h"
#include "grad/prune_lanes.h"
#include "nmsparse/core/error.h"
#include "nmsparse/core/isa.h"
#include "nmsparse/core/threading.h"

namespace nms {
namespace {

// ---------------------------------------------------------------------------------------------
// Philox4x32-10 on four blocks at once (SSE2). Same bijection and key/counter mapping as
// CounterRng (core/rng.h): key = {seed lo, seed hi}, counter = {block lo, block hi, stream lo,
// stream hi}. Output u[s] holds the four words of block block0 + s.

inline void mulhilo(__m128i a, __m128i mul, __m128i& hi, __m128i& lo) {
  const __m128i even = _mm_mul_epu32(a, mul);                           // [lo0 hi0 lo2 hi2]
  const __m128i odd = _mm_mul_epu32(_mm_srli_epi64(a, 32), mul);        // [lo1 hi1 lo3 hi3]
  const __m128i es = _mm_shuffle_epi32(even, _MM_SHUFFLE(3, 1, 2, 0));  // [lo0 lo2 hi0 hi2]
  const __m128i os = _mm_shuffle_epi32(odd, _MM_SHUFFLE(3, 1, 2, 0));   // [lo1 lo3 hi1 hi3]
  lo = _mm_unpacklo_epi32(es, os);
  hi = _mm_unpackhi_epi32(es, os);
}

struct PhiloxSse {
  uint32_t key0, key1, stream_lo, stream_hi;

  PhiloxSse(uint64_t seed, uint64_t stream)
      : key0(static_cast<uint32_t>(seed)),
        key1(static_cast<uint32_t>(seed >> 32)),
        stream_lo(static_cast<uint32_t>(stream)),
        stream_hi(static_cast<uint32_t>(stream >> 32)) {}

  void blocks(uint64_t block0, __m128i u[4]) const {
    alignas(16) uint32_t lo[4];
    alignas(16) uint32_t hi[4];
    for (int l = 0; l < 4; ++l) {
      lo[l] = static_cast<uint32_t>(block0 + static_cast<uint64_t>(l));
      hi[l] = static_cast<uint32_t>((block0 + static_cast<uint64_t>(l)) >> 32);
    }
    __m128i c0 = _mm_load_si128(reinterpret_cast<const __m128i*>(lo));
    __m128i c1 = _mm_load_si128(reinterpret_cast<const __m128i*>(hi));
    __m128i c2 = _mm_set1_epi32(static_cast<int>(stream_lo));
    __m128i c3 = _mm_set1_epi32(static_cast<int>(stream_hi));
    __m128i k0 = _mm_set1_epi32(static_cast<int>(key0));
    __m128i k1 = _mm_set1_epi32(static_cast<int>(key1));
    const __m128i mul0 = _mm_set1_epi32(static_cast<int>(0xD2511F53u));
    const __m128i mul1 = _mm_set1_epi32(static_cast<int>(0xCD9E8D57u));
    const __m128i weyl0 = _mm_set1_epi32(static_cast<int>(0x9E3779B9u));
    const __m128i weyl1 = _mm_set1_epi32(static_cast<int>(0xBB67AE85u));
    for (int round = 0; round < 10; ++round) {
      if (round > 0) {
        k0 = _mm_add_epi32(k0, weyl0);
        k1 = _mm_add_epi32(k1, weyl1);
      }
      __m128i hi0, lo0, hi1, lo1;
      mulhilo(c0, mul0, hi0, lo0);
      mulhilo(c2, mul1, hi1, lo1);
      c0 = _mm_xor_si128(_mm_xor_si128(hi1, c1), k0);
      c1 = lo1;
      c2 = _mm_xor_si128(_mm_xor_si128(hi0, c3), k1);
      c3 = lo0;
    }
    // Transpose: lanes are blocks, registers are words -> registers are blocks.
    __m128 w0 = _mm_castsi128_ps(c0);
    __m128 w1 = _mm_castsi128_ps(c1);
    __m128 w2 = _mm_castsi128_ps(c2);
    __m128 w3 = _mm_castsi128_ps(c3);
    _MM_TRANSPOSE4_PS(w0, w1, w2, w3);
    u[0] = _mm_castps_si128(w0);
    u[1] = _mm_castps_si128(w1);
    u[2] = _mm_castps_si128(w2);
    u[3] = _mm_castps_si128(w3);
  }
};

// ---------------------------------------------------------------------------------------------
// MVUE 2:4 on four groups: x[i] holds element i of groups 0..3 (one group per lane); uw the
// groups' random words. Writes out[i] (dense results) and ORs non-finite inputs / overflowing
// sums into `bad`. Mirrors mvue_group (group.cpp) operation for operation.
inline void mvue24_x4(const __m128 x[4], __m128i uw, __m128 out[4], __m128i& bad) {
  const __m128 abs_mask = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
  const __m128 sign_mask = _mm_castsi128_ps(_mm_set1_epi32(static_cast<int>(0x80000000u)));
  const __m128i exp_mask = _mm_set1_epi32(0x7f800000);
  const __m128 zero = _mm_setzero_ps();
  __m128 a[4];
  __m128i neg_nnz = _mm_setzero_si128();
  for (int i = 0; i < 4; ++i) {
    a[i] = _mm_and_ps(x[i], abs_mask);
    const __m128i e = _mm_and_si128(_mm_castps_si128(x[i]), exp_mask);
    bad = _mm_or_si128(bad, _mm_cmpeq_epi32(e, exp_mask));
    neg_nnz = _mm_add_epi32(neg_nnz, _mm_castps_si128(_mm_cmpgt_ps(a[i], zero)));
  }
  const __m128 small = _mm_castsi128_ps(_mm_cmpgt_epi32(neg_nnz, _mm_set1_epi32(-3)));
  const __m128 s = _mm_add_ps(_mm_add_ps(_mm_add_ps(a[0], a[1]), a[2]), a[3]);
  const __m128 overflow = _mm_cmpeq_ps(s, _mm_set1_ps(INFINITY));
  bad = _mm_or_si128(bad, _mm_castps_si128(_mm_andnot_ps(small, overflow)));
  const __m128 amax = _mm_max_ps(_mm_max_ps(a[0], a[1]), _mm_max_ps(a[2], a[3]));
  const __m128 case_c = _mm_cmpge_ps(_mm_mul_ps(amax, _mm_set1_ps(2.0f)), s);
  __m128 seen = zero;
  __m128 cap[4];
  __m128 ap[4];
  for (int i = 0; i < 4; ++i) {
    const __m128 is_max = _mm_andnot_ps(seen, _mm_cmpeq_ps(a[i], amax));
    seen = _mm_or_ps(seen, is_max);
    cap[i] = _mm_and_ps(case_c, is_max);
    ap[i] = _mm_andnot_ps(cap[i], a[i]);
  }
  __m128 prefix[5];
  prefix[0] = zero;
  for (int i = 0; i < 4; ++i) prefix[i + 1] = _mm_add_ps(prefix[i], ap[i]);
  const __m128 total = prefix[4];
  const __m128 step = _mm_or_ps(_mm_and_ps(case_c, total),
                                _mm_andnot_ps(case_c, _mm_mul_ps(total, _mm_set1_ps(0.5f))));
  const __m128 u =
      _mm_mul_ps(_mm_cvtepi32_ps(_mm_srli_epi32(uw, 8)), _mm_set1_ps(1.0f / 16777216.0f));
  const __m128 t0 = _mm_mul_ps(u, step);
  const __m128 t1 = _mm_add_ps(t0, step);
  // A point t lies in [prefix[i], prefix[i+1]) when t < prefix[i+1] and not t < prefix[i] (t <
  // prefix[0] = 0 never holds): 8 comparisons instead of 16, the same answer without NaN (which
  // `bad` reports).
  __m128 below0_prev = zero;
  __m128 below1_prev = zero;
  for (int i = 0; i < 4; ++i) {
    const __m128 below0 = _mm_cmplt_ps(t0, prefix[i + 1]);
    const __m128 below1 = _mm_cmplt_ps(t1, prefix[i + 1]);
    const __m128 in0 = _mm_andnot_ps(below0_prev, below0);
    const __m128 in1 = _mm_andnot_ps(below1_prev, below1);
    below0_prev = below0;
    below1_prev = below1;
    __m128 sel = _mm_or_ps(cap[i], _mm_or_ps(in0, in1));
    __m128 val = _mm_or_ps(_mm_and_ps(cap[i], x[i]),
                           _mm_andnot_ps(cap[i], _mm_or_ps(_mm_and_ps(x[i], sign_mask), step)));
    const __m128 nz = _mm_cmpgt_ps(a[i], zero);
    sel = _mm_or_ps(_mm_and_ps(small, nz), _mm_andnot_ps(small, sel));
    val = _mm_or_ps(_mm_and_ps(small, x[i]), _mm_andnot_ps(small, val));
    out[i] = _mm_and_ps(sel, val);
  }
}

// ---------------------------------------------------------------------------------------------
// Where results go.
struct Sink {
  bool dense = true;
  MatrixViewF out;          // dense
  float* values = nullptr;  // compressed
  uint8_t* indices = nullptr;
  int64_t value_cols = 0;
  int64_t index_row_bytes = 0;
  int bits = 0;
};

struct Job {
  ConstMatrixViewF g;
  GradPruneOptions o;
  int n = 0;
  int m = 0;
  CounterRng rng{0, 0};
  PhiloxSse philox{0, 0};
  Sink sink;
  bool fast24 = false;          // 2:4 MVUE through a vector kernel (SSE2, or AVX-512 when avx512)
  bool avx512 = false;          // isa_active() == avx512 and the kernels are built
  bool avx2 = false;            // 2:4 MVUE, kCols, at the AVX2 level: mvue24_cols_avx2
  bool avx2_generic = false;    // another MVUE pattern, kCols, at AVX2: mvue_cols_avx2
  bool avx512_generic = false;  // MVUE of another pattern, kCols, through mvue_cols_avx512
  detail::Mvue24Key key{};
};

inline void put_index(uint8_t* row, int64_t bit_pos, int index, int bits) {
  for (int b = 0; b < bits; ++b) {
    if ((index >> b) & 1) {
      const int64_t p = bit_pos + b;
      row[p >> 3] = static_cast<uint8_t>(row[p >> 3] | (1u << (p & 7)));
    }
  }
}

// Writes one group's dense result res[0..m) (group k of value row vr; first element (r0, c0)).
void emit(const Job& j, int64_t r0, int64_t c0, int64_t vr, int64_t k, const float* res) {
  const int m = j.m;
  if (j.sink.dense) {
    for (int i = 0; i < m; ++i) {
      if (j.o.axis == NmAxis::kRows) {
        j.sink.out(r0, c0 + i) = res[i];
      } else {
        j.sink.out(r0 + i, c0) = res[i];
      }
    }
    return;
  }
  uint64_t keep = 0;
  int count = 0;
  for (int i = 0; i < m; ++i) {
    if (res[i] != 0.0f) {
      keep |= uint64_t{1} << i;
      ++count;
    }
  }
  for (int i = 0; i < m && count < j.n; ++i) {
    if (!((keep >> i) & 1)) {
      keep |= uint64_t{1} << i;
      ++count;
    }
  }
  float* v = j.sink.values + vr * j.sink.value_cols + k * j.n;
  uint8_t* idx = j.sink.indices + vr * j.sink.index_row_bytes;
  int slot = 0;
  for (int i = 0; i < m; ++i) {
    if (!((keep >> i) & 1)) continue;
    v[slot] = res[i];
    put_index(idx, (k * j.n + slot) * j.sink.bits, i, j.sink.bits);
    ++slot;
  }
}

// One group through the scalar specification. Returns false on bad input (non-finite or
// overflow); nothing is written then.
bool scalar_group(const Job& j, int64_t r0, int64_t c0, int64_t vr, int64_t k) {
  float in[kMaxGroupSize];
  float res[kMaxGroupSize];
  const bool rows_axis = j.o.axis == NmAxis::kRows;
  for (int i = 0; i < j.m; ++i) {
    in[i] = rows_axis ? j.g(r0, c0 + i) : j.g(r0 + i, c0);
    if (!std::isfinite(in[i])) return false;
  }
  const uint64_t gid = detail::grad_group_id(j.o.axis, r0, c0, j.g.rows(), j.g.cols(), j.m);
  if (!detail::prune_group(j.o.method, j.n, j.m, in,
                           detail::grad_uniform(j.rng, j.o.method, gid, 0),
                           detail::grad_uniform(j.rng, j.o.method, gid, 1), res)) {
    return false;
  }
  emit(j, r0, c0, vr, k, res);
  return true;
}

// Compressed output of four 2:4 groups: out[i] lane l = element i of group l; group l is group
// k0 + l of value row vr0 (kRows: vr_step 0, k_step 1) or group k0 of value row vr0 + l (kCols).
inline void emit24_compressed(const Job& j, const __m128 out[4], int64_t vr0, int64_t k0,
                              bool rows_axis) {
  alignas(16) float tmp[4][4];
  int bits[4];
  for (int i = 0; i < 4; ++i) {
    _mm_store_ps(tmp[i], out[i]);
    bits[i] = _mm_movemask_ps(_mm_cmpneq_ps(out[i], _mm_setzero_ps()));
  }
  for (int l = 0; l < 4; ++l) {
    const int mask = ((bits[0] >> l) & 1) | (((bits[1] >> l) & 1) << 1) |
                     (((bits[2] >> l) & 1) << 2) | (((bits[3] >> l) & 1) << 3);
    const int code = detail::kCode24[mask];
    const int64_t vr = rows_axis ? vr0 : vr0 + l;
    const int64_t k = rows_axis ? k0 + l : k0;
    float* v = j.sink.values + vr * j.sink.value_cols + 2 * k;
    v[0] = tmp[code & 3][l];
    v[1] = tmp[code >> 2][l];
    uint8_t* byte = j.sink.indices + vr * j.sink.index_row_bytes + (k >> 1);
    *byte = static_cast<uint8_t>(*byte | (code << (4 * (k & 1))));
  }
}

// Row r (kRows): groups k in [0, cols/m).
bool run_row(const Job& j, int64_t r) {
  const int64_t gpr = j.g.cols() / j.m;
  if (!j.sink.dense && j.sink.index_row_bytes > 0) {
    std::memset(j.sink.indices + r * j.sink.index_row_bytes, 0,
                static_cast<size_t>(j.sink.index_row_bytes));
  }
  __m128i bad = _mm_setzero_si128();
  int64_t k = 0;
  if (j.avx512 && gpr % 4 == 0) {  // every row starts on a Philox block: gid0 % 4 == 0
    k = gpr / 16 * 16;
    const auto gid0 = static_cast<uint64_t>(r * gpr);
    const bool ok = j.sink.dense
                        ? detail::mvue24_rows_avx512(j.g.row(r), k, gid0, j.key, j.sink.out.row(r),
                                                     nullptr, nullptr)
                        : detail::mvue24_rows_avx512(j.g.row(r), k, gid0, j.key, nullptr,
                                                     j.sink.values + r * j.sink.value_cols,
                                                     j.sink.indices + r * j.sink.index_row_bytes);
    if (!ok) return false;
  }
  while (k < gpr) {
    const uint64_t gid = static_cast<uint64_t>(r * gpr + k);
    if (j.fast24 && (gid & 3) == 0 && k + 16 <= gpr) {
      __m128i uw[4];
      j.philox.blocks(gid >> 2, uw);
      const float* src = j.g.row(r) + 4 * k;
      for (int s = 0; s < 4; ++s) {
        __m128 x0 = _mm_loadu_ps(src + 16 * s);
        __m128 x1 = _mm_loadu_ps(src + 16 * s + 4);
        __m128 x2 = _mm_loadu_ps(src + 16 * s + 8);
        __m128 x3 = _mm_loadu_ps(src + 16 * s + 12);
        _MM_TRANSPOSE4_PS(x0, x1, x2, x3);
        const __m128 x[4] = {x0, x1, x2, x3};
        __m128 out[4];
        mvue24_x4(x, uw[s], out, bad);
        if (j.sink.dense) {
          _MM_TRANSPOSE4_PS(out[0], out[1], out[2], out[3]);
          float* dst = j.sink.out.row(r) + 4 * k + 16 * s;
          for (int l = 0; l < 4; ++l) _mm_storeu_ps(dst + 4 * l, out[l]);
        } else {
          emit24_compressed(j, out, r, k + 4 * s, true);
        }
      }
      k += 16;
    } else {
      if (!scalar_group(j, r, k * j.m, r, k)) return false;
      ++k;
    }
  }
  return _mm_movemask_epi8(bad) == 0;
}

// Columns per kCols work item. The AVX-512 kernel reads each input row across the whole strip
// (512 columns: 2 KB runs the prefetcher follows); the SSE2 loop scatters its compressed output
// across one value row per column and is fastest with 64 (0.52 GB/s against 0.40 with 512).
constexpr int64_t kStripAvx512 = 16 * detail::kColsMaxBlocks;
constexpr int64_t kStripSse2 = 64;
constexpr int64_t kStripAvx2 = 32 * detail::kColsMaxUnitsAvx2;

// Row parts per 512-column strip for the AVX-512 2:4 column kernels, `units` the indivisible
// row units. Strips alone balance threads poorly at layer widths: 192 columns make one strip, 576
// a full strip and one of 64. So unless the strips are full and divide among the threads, each
// thread takes a row part of every strip (items go row part by row part, so static scheduling
// hands each thread a part of each strip). Every group's draw depends on its id alone: the split
// does not change the result. dY 6400 x 192 / 576 / 768, 2 threads, ms: 0.72 / 1.99 / 2.01 ->
// 0.38 / 1.15 / 1.55 (one thread 0.72 / 2.24 / 3.01; one run, Zen 4). With 6 full strips (3072
// columns) splitting measured 7.35 against 7.00 ms.
int64_t avx512_row_parts(int64_t cols, int64_t units) {
  const int64_t strips = (cols + kStripAvx512 - 1) / kStripAvx512;
  const int64_t threads = max_threads();
  if (threads == 1 || (strips % threads == 0 && cols % kStripAvx512 == 0)) return 1;
  return std::max<int64_t>(1, std::min(threads, units));
}

// Columns [c0, c1) (kCols), group rows [kk0, kk1): every group down those columns in those rows.
// Only the AVX-512 2:4 kernel takes part of the rows (kk0 % 8 == 0, kk1 % 8 == 0 or the last
// group row: 2:4 index bytes hold two groups, so row parts share none); the others take all.
bool run_strip(const Job& j, int64_t c0, int64_t c1, int64_t kk0, int64_t kk1) {
  const int64_t cols = j.g.cols();
  const int64_t all_groups = j.g.rows() / j.m;
  NMS_ASSERT((j.avx512 && cols % 4 == 0) || (kk0 == 0 && kk1 == all_groups));
  if (!j.sink.dense && j.sink.index_row_bytes > 0) {
    if (kk0 == 0 && kk1 == all_groups) {
      std::memset(j.sink.indices + c0 * j.sink.index_row_bytes, 0,
                  static_cast<size_t>((c1 - c0) * j.sink.index_row_bytes));
    } else {
      for (int64_t c = c0; c < c1; ++c) {
        std::memset(j.sink.indices + c * j.sink.index_row_bytes + kk0 / 2, 0,
                    static_cast<size_t>((kk1 + 1) / 2 - kk0 / 2));
      }
    }
  }
  __m128i bad = _mm_setzero_si128();
  const int64_t groups = all_groups;
  if (j.avx512_generic && cols % 4 == 0) {  // any n:m, blocks of 16 columns, then the rest
    const int64_t blocks = (c1 - c0) / 16;
    const int64_t c_end = c0 + 16 * blocks;
    const bool ok = j.sink.dense
                        ? detail::mvue_cols_avx512(j.g.data() + c0, j.g.ld(), j.n, j.m, groups,
                                                   blocks, cols, c0, j.key, j.sink.out.data() + c0,
                                                   j.sink.out.ld(), nullptr, 0, nullptr, 0, 0)
                        : detail::mvue_cols_avx512(
                              j.g.data() + c0, j.g.ld(), j.n, j.m, groups, blocks, cols, c0, j.key,
                              nullptr, 0, j.sink.values + c0 * j.sink.value_cols, j.sink.value_cols,
                              j.sink.indices + c0 * j.sink.index_row_bytes, j.sink.index_row_bytes,
                              j.sink.bits);
    if (!ok) return false;
    for (int64_t kk = 0; kk < groups; ++kk) {
      for (int64_t c = c_end; c < c1; ++c) {
        if (!scalar_group(j, kk * j.m, c, c, kk)) return false;
      }
    }
    return true;
  }
  if ((j.avx2 || j.avx2_generic) && cols % 4 == 0) {  // units of 32 columns, then the rest
    const int64_t units = (c1 - c0) / 32;
    const int64_t c_end = c0 + 32 * units;
    float* const dense = j.sink.dense ? j.sink.out.data() + c0 : nullptr;
    const int64_t dense_ld = j.sink.dense ? j.sink.out.ld() : 0;
    float* const values = j.sink.dense ? nullptr : j.sink.values + c0 * j.sink.value_cols;
    uint8_t* const indices = j.sink.dense ? nullptr : j.sink.indices + c0 * j.sink.index_row_bytes;
    const float* const src = j.g.data() + c0;
    const bool ok = j.avx2_generic
                        ? detail::mvue_cols_avx2(src, j.g.ld(), j.n, j.m, groups, units, cols, c0,
                                                 j.key, dense, dense_ld, values, j.sink.value_cols,
                                                 indices, j.sink.index_row_bytes, j.sink.bits)
                        : detail::mvue24_cols_avx2(src, j.g.ld(), groups, units, cols, c0, j.key,
                                                   dense, dense_ld, values, j.sink.value_cols,
                                                   indices, j.sink.index_row_bytes);
    if (!ok) return false;
    for (int64_t kk = 0; kk < groups; ++kk) {
      for (int64_t c = c_end; c < c1; ++c) {
        if (!scalar_group(j, kk * j.m, c, c, kk)) return false;
      }
    }
    return true;
  }
  if (j.avx512 && cols % 4 == 0) {  // blocks of 16 columns (c0 % 64 == 0), then the rest
    const int64_t blocks = (c1 - c0) / 16;
    const int64_t c_end = c0 + 16 * blocks;
    const float* src = j.g.row(4 * kk0) + c0;
    const bool ok =
        j.sink.dense
            ? detail::mvue24_cols_avx512(src, j.g.ld(), kk1 - kk0, blocks, cols, kk0, c0, j.key,
                                         j.sink.out.row(4 * kk0) + c0, j.sink.out.ld(), nullptr, 0,
                                         nullptr, 0)
            : detail::mvue24_cols_avx512(
                  src, j.g.ld(), kk1 - kk0, blocks, cols, kk0, c0, j.key, nullptr, 0,
                  j.sink.values + c0 * j.sink.value_cols + 2 * kk0, j.sink.value_cols,
                  j.sink.indices + c0 * j.sink.index_row_bytes + kk0 / 2, j.sink.index_row_bytes);
    if (!ok) return false;
    for (int64_t kk = kk0; kk < kk1; ++kk) {
      for (int64_t c = c_end; c < c1; ++c) {
        if (!scalar_group(j, kk * j.m, c, c, kk)) return false;
      }
    }
    return true;
  }
  for (int64_t kk = 0; kk < groups; ++kk) {
    const int64_t r0 = kk * j.m;
    int64_t c = c0;
    while (c < c1) {
      const uint64_t gid = static_cast<uint64_t>(kk * cols + c);
      if (j.fast24 && (gid & 3) == 0 && c + 16 <= c1) {
        __m128i uw[4];
        j.philox.blocks(gid >> 2, uw);
        for (int s = 0; s < 4; ++s) {
          const int64_t cs = c + 4 * s;
          const __m128 x[4] = {_mm_loadu_ps(j.g.row(r0) + cs), _mm_loadu_ps(j.g.row(r0 + 1) + cs),
                               _mm_loadu_ps(j.g.row(r0 + 2) + cs),
                               _mm_loadu_ps(j.g.row(r0 + 3) + cs)};
          __m128 out[4];
          mvue24_x4(x, uw[s], out, bad);
          if (j.sink.dense) {
            for (int i = 0; i < 4; ++i) _mm_storeu_ps(j.sink.out.row(r0 + i) + cs, out[i]);
          } else {
            emit24_compressed(j, out, cs, kk, false);
          }
        }
        c += 16;
      } else {
        if (!scalar_group(j, r0, c, c, kk)) return false;
        ++c;
      }
    }
  }
  return _mm_movemask_epi8(bad) == 0;
}

Job make_job(ConstMatrixViewF g, const GradPruneOptions& o) {
  o.pattern.validate();
  const int m = o.pattern.m;
  const bool rows_axis = o.axis == NmAxis::kRows;
  const int64_t len = rows_axis ? g.cols() : g.rows();
  NMS_CHECK(len % m == 0, "m (", m,
            ") does not divide the grouped axis: ", rows_axis ? "cols (" : "rows (", len,
            ") with groups along ", axis_name(o.axis));
  NMS_CHECK(o.method != GradMethod::kMvueApprox24 || (o.pattern == NmPattern{2, 4}),
            "mvue-approx24 is defined for 2:4 only, not ", o.pattern.to_string());
  Job j;
  j.g = g;
  j.o = o;
  j.n = o.pattern.n;
  j.m = m;
  j.rng = CounterRng(o.seed, o.stream);
  j.philox = PhiloxSse(o.seed, o.stream);
  const Isa isa = isa_active();
  j.fast24 = o.method == GradMethod::kMvue && (o.pattern == NmPattern{2, 4}) && isa != Isa::kScalar;
#if defined(NMS_HAVE_AVX512_KERNELS)
  j.avx512 = j.fast24 && isa == Isa::kAvx512;
  j.avx2 = j.fast24 && isa == Isa::kAvx2 && o.axis == NmAxis::kCols;
  j.avx2_generic =
      o.method == GradMethod::kMvue && !j.fast24 && isa == Isa::kAvx2 && o.axis == NmAxis::kCols;
  j.avx512_generic =
      o.method == GradMethod::kMvue && !j.fast24 && isa == Isa::kAvx512 && o.axis == NmAxis::kCols;
#endif
  j.key = {static_cast<uint32_t>(o.seed), static_cast<uint32_t>(o.seed >> 32),
           static_cast<uint32_t>(o.stream), static_cast<uint32_t>(o.stream >> 32)};
  return j;
}

// After a failed run: throws for the first non-finite element in row-major order, else for the
// first group (in value-row order) whose magnitude sum overflows.
[[noreturn]] void throw_bad_input(const Job& j) {
  for (int64_t r = 0; r < j.g.rows(); ++r) {
    for (int64_t c = 0; c < j.g.cols(); ++c) {
      const float v = j.g(r, c);
      NMS_CHECK(std::isfinite(v), "non-finite gradient ", v, " at (row ", r, ", col ", c, ")");
    }
  }
  std::array<float, kMaxGroupSize> scratch{};
  const bool rows_axis = j.o.axis == NmAxis::kRows;
  const int64_t outer = rows_axis ? j.g.rows() : j.g.cols();
  const int64_t inner = (rows_axis ? j.g.cols() : j.g.rows()) / j.m;
  for (int64_t a = 0; a < outer; ++a) {
    for (int64_t k = 0; k < inner; ++k) {
      const int64_t r0 = rows_axis ? a : k * j.m;
      const int64_t c0 = rows_axis ? k * j.m : a;
      float in[kMaxGroupSize];
      for (int i = 0; i < j.m; ++i) in[i] = rows_axis ? j.g(r0, c0 + i) : j.g(r0 + i, c0);
      NMS_CHECK(detail::prune_group(j.o.method, j.n, j.m, in, 0.5f, 0.5f, scratch.data()),
                "the magnitudes of the group at (row ", r0, ", col ", c0,
                ") sum past the fp32 range; scale the gradient down");
    }
  }
  NMS_ASSERT(false, "a failed pruning run found no bad input");
  std::abort();
}

void run(const Job& j) {
  std::atomic<bool> failed{false};
  if (j.o.axis == NmAxis::kRows) {
    detail::parallel_for(j.g.rows(), [&](int64_t r) {
      if (!run_row(j, r)) failed.store(true, std::memory_order_relaxed);
    });
  } else {
    const int64_t strip = j.avx512 || j.avx512_generic ? kStripAvx512
                          : j.avx2 || j.avx2_generic   ? kStripAvx2
                                                       : kStripSse2;
    const int64_t strips = (j.g.cols() + strip - 1) / strip;
    // The AVX-512 2:4 kernel also splits the group rows, in units of its 8-row tiles.
    const int64_t groups = j.g.rows() / j.m;
    const int64_t units = (groups + 7) / 8;
    const int64_t row_parts =
        j.avx512 && j.g.cols() % 4 == 0 ? avx512_row_parts(j.g.cols(), units) : 1;
    detail::parallel_for(strips * row_parts, [&](int64_t i) {
      const int64_t s = i % strips;
      const int64_t part = i / strips;
      const int64_t c0 = s * strip;
      const int64_t c1 = std::min(j.g.cols(), c0 + strip);
      const int64_t kk0 = 8 * (units * part / row_parts);
      const int64_t kk1 = std::min(groups, 8 * (units * (part + 1) / row_parts));
      if (!run_strip(j, c0, c1, kk0, kk1)) failed.store(true, std::memory_order_relaxed);
    });
  }
  if (failed.load()) throw_bad_input(j);
}

}  // namespace

void grad_prune_into(ConstMatrixViewF g, const GradPruneOptions& options, MatrixViewF out) {
  Job j = make_job(g, options);
  NMS_CHECK(out.rows() == g.rows() && out.cols() == g.cols(), "output is ", out.rows(), " x ",
            out.cols(), ", the gradient ", g.rows(), " x ", g.cols());
  j.sink.dense = true;
  j.sink.out = out;
  run(j);
}

Matrix grad_prune(ConstMatrixViewF g, const GradPruneOptions& options) {
  Matrix out(g.rows(), g.cols());
  grad_prune_into(g, options, out.view());
  return out;
}

void grad_prune_compressed_into(ConstMatrixViewF g, const GradPruneOptions& options,
                                CompressedNm& dst) {
  Job j = make_job(g, options);
  dst.rows = g.rows();
  dst.cols = g.cols();
  dst.pattern = options.pattern;
  dst.axis = options.axis;
  const int64_t nvalues = detail::mul_checked(dst.value_rows(), dst.value_cols(), "values");
  if (dst.values.size() != nvalues) dst.values.resize_for_overwrite(nvalues);
  if (dst.indices.size() != dst.index_bytes()) dst.indices.resize_for_overwrite(dst.index_bytes());
  j.sink.dense = false;
  j.sink.values = dst.values.data();
  j.sink.indices = dst.indices.data();
  j.sink.value_cols = dst.value_cols();
  j.sink.index_row_bytes = dst.index_row_bytes();
  j.sink.bits = options.pattern.index_bits();
  run(j);
}

namespace detail {

bool grad_prune_lanes24_applies(ConstMatrixViewF g, const GradPruneOptions& options) {
  return options.pattern == NmPattern{2, 4} && grad_prune_lanes_applies(g, options);
}

bool grad_prune_lanes_applies(ConstMatrixViewF g, const GradPruneOptions& options) {
#if defined(NMS_HAVE_AVX512_KERNELS)
  return options.method == GradMethod::kMvue && 16 % options.pattern.m == 0 &&
         options.axis == NmAxis::kCols && isa_active() == Isa::kAvx512 && g.rows() % 16 == 0 &&
         g.cols() % 32 == 0;
#else
  (void)g, (void)options;
  return false;
#endif
}

namespace {

// The driver of the fused column kernels: 512-column strips x row parts of whole 16-token chunks,
// kernel(src, group_rows, blocks, row0, col0, key) per item (row0 and group_rows in group rows).
template <class Kernel>
void prune_chunks(ConstMatrixViewF g, const GradPruneOptions& options, bool applies,
                  const char* what, Kernel&& kernel) {
  NMS_CHECK(applies, what,
            ": needs MVUE along columns at the AVX-512 level (2:4, or for grad_prune_lanes an m "
            "dividing 16), rows % 16 == 0 and cols % 32 == 0; got ",
            options.pattern.to_string(), " ", g.rows(), " x ", g.cols());
#if defined(NMS_HAVE_AVX512_KERNELS)
  const Job j = make_job(g, options);
  const int64_t chunks = g.rows() / 16;
  const int64_t per_chunk = 16 / j.m;  // group rows
  const int64_t strips = (g.cols() + kStripAvx512 - 1) / kStripAvx512;
  const int64_t row_parts = avx512_row_parts(g.cols(), chunks);  // whole 16-token chunks
  std::atomic<bool> failed{false};
  detail::parallel_for(strips * row_parts, [&](int64_t i) {
    const int64_t c0 = i % strips * kStripAvx512;
    const int64_t c1 = std::min(g.cols(), c0 + kStripAvx512);
    const int64_t part = i / strips;
    const int64_t kk0 = per_chunk * (chunks * part / row_parts);
    const int64_t kk1 = per_chunk * (chunks * (part + 1) / row_parts);
    if (kk1 == kk0) return;
    if (!kernel(g.row(j.m * kk0) + c0, kk1 - kk0, (c1 - c0) / 16, kk0, c0, j.key)) {
      failed.store(true, std::memory_order_relaxed);
    }
  });
  if (failed.load()) throw_bad_input(j);
#else
  (void)kernel;
#endif
}

}  // namespace

void grad_prune_lanes24(ConstMatrixViewF g, const GradPruneOptions& options, float* values,
                        int32_t* lanes) {
  const int64_t chunks = g.rows() / 16;
  prune_chunks(g, options, grad_prune_lanes24_applies(g, options), "grad_prune_lanes24",
               [&](const float* src, int64_t group_rows, int64_t blocks, int64_t row0, int64_t col0,
                   const Mvue24Key& key) {
                 return mvue24_lanes_avx512(src, g.ld(), group_rows, blocks, g.cols(), row0, col0,
                                            key, chunks, values, lanes);
               });
}

void grad_prune_lanes(ConstMatrixViewF g, const GradPruneOptions& options, float* values,
                      int32_t* lanes) {
  const int64_t chunks = g.rows() / 16;
  prune_chunks(g, options, grad_prune_lanes_applies(g, options), "grad_prune_lanes",
               [&](const float* src, int64_t group_rows, int64_t blocks, int64_t row0, int64_t col0,
                   const Mvue24Key& key) {
                 return mvue_lanes_avx512(src, g.ld(), options.pattern.n, options.pattern.m,
                                          group_rows, blocks, g.cols(), row0, col0, key, chunks,
                                          values, lanes);
               });
}

void grad_prune_pairs24_bf16(ConstMatrixViewF g, const GradPruneOptions& options, uint16_t* values,
                             uint16_t* index) {
  const int64_t chunks32 = (g.rows() + 31) / 32;
  prune_chunks(g, options, grad_prune_lanes24_applies(g, options), "grad_prune_pairs24_bf16",
               [&](const float* src, int64_t group_rows, int64_t blocks, int64_t row0, int64_t col0,
                   const Mvue24Key& key) {
                 return mvue24_pairs_bf16_avx512(src, g.ld(), group_rows, blocks, g.cols(), row0,
                                                 col0, key, chunks32, values, index);
               });
}

}  // namespace detail

CompressedNm grad_prune_compressed(ConstMatrixViewF g, const GradPruneOptions& options) {
  CompressedNm c;
  grad_prune_compressed_into(g, options, c);
  return c;
}

}  // namespace nms
