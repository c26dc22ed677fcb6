// PRIVATE header: the per-group gradient pruners, the specification that every optimised path
// reproduces bit for bit (maths in include/nmsparse/grad/prune.h). Host-device code
// (core/host_device.h): the CPU library (group.cpp) and the CUDA backend (src/cuda/mvue.cu) both
// run exactly these float operations, so the GPU's draws and kept values equal the CPU's.
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "nmsparse/core/nm_pattern.h"
#include "nmsparse/grad/prune.h"

namespace nms::detail {

// +0.0 for a zero (also -0.0), the value otherwise.
NMS_HD inline float canonical_zero(float v) {
  return v == 0.0f ? 0.0f : v;
}

// Keeps every nonzero exactly (groups with <= n nonzeros).
NMS_HD inline void group_keep_all(int m, const float* g, float* out) {
  for (int i = 0; i < m; ++i) out[i] = canonical_zero(g[i]);
}

// Index of the element covering t on the magnitudes laid end to end in index order, skipping
// `skip` (-1 for none); -1 when rounding put t at or past the end.
NMS_HD inline int group_covering(const float* a, int m, int skip, float t) {
  float prefix = 0.0f;
  for (int i = 0; i < m; ++i) {
    if (i == skip) continue;
    const float next = prefix + a[i];
    if (prefix <= t && t < next) return i;
    prefix = next;
  }
  return -1;
}

NMS_HD inline int group_last_nonzero(const float* a, int m, int skip) {
  for (int i = m - 1; i >= 0; --i) {
    if (i != skip && a[i] > 0.0f) return i;
  }
  return -1;
}

// Exact inclusion probabilities of the approximate 2:4 MVUE (double), see prune.h.
NMS_HD inline void approx24_probabilities(const double* a, double* p) {
  int nnz = 0;
  double s = 0.0;
  for (int i = 0; i < 4; ++i) {
    nnz += a[i] > 0.0;
    s += a[i];
  }
  for (int i = 0; i < 4; ++i) {
    if (nnz <= 2) {
      p[i] = a[i] > 0.0 ? 1.0 : 0.0;
      continue;
    }
    double q = a[i] / s;
    for (int j = 0; j < 4; ++j) {
      if (j != i) q += (a[j] / s) * a[i] / (s - a[j]);
    }
    p[i] = q;
  }
}

// MVUE: water-filling then systematic sampling with the uniform u. False when the magnitude sum
// overflows fp32.
NMS_HD inline bool mvue_group(int n, int m, const float* g, float u, float* out) {
  float a[kMaxGroupSize];
  int nnz = 0;
  for (int i = 0; i < m; ++i) {
    a[i] = fabsf(g[i]);
    nnz += a[i] > 0.0f;
  }
  if (nnz <= n) {
    group_keep_all(m, g, out);
    return true;
  }
  // Water-filling: cap the largest uncapped magnitude while a_max * n' >= R. With n' = 1 the
  // exact water level never caps (the others are positive); in float a_max >= R only when the
  // others vanish in the sum, and sampling then picks a_max's element anyway.
  uint64_t capped = 0;
  int np = n;
  float r = 0.0f;
  for (;;) {
    r = 0.0f;
    int best = -1;
    float amax = -1.0f;
    for (int i = 0; i < m; ++i) {
      if ((capped >> i) & 1) continue;
      r += a[i];
      if (a[i] > amax) {
        amax = a[i];
        best = i;
      }
    }
    if (!finite_hd(r)) return false;
    if (np >= 2 && amax * static_cast<float>(np) >= r) {
      capped |= uint64_t{1} << best;
      --np;
    } else {
      break;
    }
  }
  // Systematic sampling: points t_j = U * step + j * step, j < n', on the uncapped magnitudes laid
  // end to end; an element is kept when a point falls in [prefix, prefix + a_i).
  const float step = r / static_cast<float>(np);
  float t = u * step;
  int j = 0;
  float prefix = 0.0f;
  for (int i = 0; i < m; ++i) {
    if ((capped >> i) & 1) {
      out[i] = g[i];
      continue;
    }
    const float next = prefix + a[i];
    bool kept = false;
    while (j < np && t < next) {
      kept = true;  // t >= prefix: smaller points were consumed by earlier elements
      t += step;
      ++j;
    }
    out[i] = kept ? copysignf(step, g[i]) : 0.0f;
    prefix = next;
  }
  return true;
}

// Approximate 2:4 MVUE: first index drawn with u0, second with u1, Horvitz-Thompson scaling.
NMS_HD inline bool approx24_group(const float* g, float u0, float u1, float* out) {
  float a[4];
  int nnz = 0;
  for (int i = 0; i < 4; ++i) {
    a[i] = fabsf(g[i]);
    nnz += a[i] > 0.0f;
  }
  if (nnz <= 2) {
    group_keep_all(4, g, out);
    return true;
  }
  const float s = ((a[0] + a[1]) + a[2]) + a[3];
  if (!finite_hd(s)) return false;
  int first = group_covering(a, 4, -1, u0 * s);
  if (first < 0) first = group_last_nonzero(a, 4, -1);
  float rest = 0.0f;
  for (int i = 0; i < 4; ++i) rest += i == first ? 0.0f : a[i];
  int second = group_covering(a, 4, first, u1 * rest);
  if (second < 0) second = group_last_nonzero(a, 4, first);
  double ad[4];
  double p[4];
  for (int i = 0; i < 4; ++i) ad[i] = a[i];
  approx24_probabilities(ad, p);
  for (int i = 0; i < 4; ++i) {
    out[i] =
        (i == first || i == second) ? static_cast<float>(static_cast<double>(g[i]) / p[i]) : 0.0f;
    if (!finite_hd(out[i])) return false;
  }
  return true;
}

// Top-n by magnitude: element i is kept iff fewer than n elements rank above it, ranking by
// descending |g| with ties to the lower index (a total order, so exactly n are kept).
NMS_HD inline void topn_group(int n, int m, const float* g, float* out) {
  for (int i = 0; i < m; ++i) {
    const float ai = fabsf(g[i]);
    int above = 0;
    for (int k = 0; k < m; ++k) {
      const float ak = fabsf(g[k]);
      above += (ak > ai) || (ak == ai && k < i);
    }
    out[i] = above < n ? canonical_zero(g[i]) : 0.0f;
  }
}

// Prunes one group: g[0..m) finite inputs, u0/u1 uniforms in [0, 1), out[0..m) the dense result
// (+0.0 where pruned). Returns false (out unspecified) when the magnitude sum overflows fp32.
NMS_HD inline bool prune_group(GradMethod method, int n, int m, const float* g, float u0, float u1,
                               float* out) {
  switch (method) {
    case GradMethod::kMvue:
      return mvue_group(n, m, g, u0, out);
    case GradMethod::kMvueApprox24:
      return approx24_group(g, u0, u1, out);
    case GradMethod::kTopN:
      topn_group(n, m, g, out);
      return true;
  }
  return true;
}

}  // namespace nms::detail
