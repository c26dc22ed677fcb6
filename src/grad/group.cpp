// The per-group pruners (scalar, any n:m), method names, stream ids and analytic probabilities.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "grad/group.h"
#include "nmsparse/core/error.h"

namespace nms {

std::string_view grad_method_name(GradMethod method) {
  switch (method) {
    case GradMethod::kMvue:
      return "mvue";
    case GradMethod::kMvueApprox24:
      return "mvue-approx24";
    case GradMethod::kTopN:
      return "topn";
  }
  return "?";
}

std::optional<GradMethod> grad_method_from_name(std::string_view name) {
  for (GradMethod m : {GradMethod::kMvue, GradMethod::kMvueApprox24, GradMethod::kTopN}) {
    if (grad_method_name(m) == name) return m;
  }
  return std::nullopt;
}

uint64_t tensor_stream_id(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char ch : name) {
    h ^= static_cast<uint8_t>(ch);
    h *= 0x100000001b3ull;
  }
  return h;
}

void mvue_probabilities(const double* a, int m, int n, double* p) {
  NMS_CHECK(m >= 1 && m <= kMaxGroupSize && n >= 1 && n <= m, "bad pattern ", n, ":", m);
  int nnz = 0;
  for (int i = 0; i < m; ++i) {
    NMS_CHECK(a[i] >= 0.0 && std::isfinite(a[i]), "a[", i, "] = ", a[i], " is not a magnitude");
    nnz += a[i] > 0.0;
  }
  if (nnz <= n) {
    for (int i = 0; i < m; ++i) p[i] = a[i] > 0.0 ? 1.0 : 0.0;
    return;
  }
  uint64_t capped = 0;
  int np = n;
  double r = 0.0;
  for (;;) {
    r = 0.0;
    int best = -1;
    for (int i = 0; i < m; ++i) {
      if ((capped >> i) & 1) continue;
      r += a[i];
      if (best < 0 || a[i] > a[best]) best = i;
    }
    if (np >= 2 && a[best] * np >= r) {
      capped |= uint64_t{1} << best;
      --np;
    } else {
      break;
    }
  }
  for (int i = 0; i < m; ++i) p[i] = ((capped >> i) & 1) ? 1.0 : np * a[i] / r;
}

void mvue_approx24_probabilities(const double* a, double* p) {
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

namespace detail {
namespace {

// +0.0 for a zero (also -0.0), the value otherwise.
inline float canonical(float v) {
  return v == 0.0f ? 0.0f : v;
}

// Keeps every nonzero exactly (groups with <= n nonzeros).
void keep_all(int m, const float* g, float* out) {
  for (int i = 0; i < m; ++i) out[i] = canonical(g[i]);
}

// Index of the element covering t on the magnitudes laid end to end in index order, skipping
// `skip` (-1 for none); -1 when rounding put t at or past the end.
int covering(const float* a, int m, int skip, float t) {
  float prefix = 0.0f;
  for (int i = 0; i < m; ++i) {
    if (i == skip) continue;
    const float next = prefix + a[i];
    if (prefix <= t && t < next) return i;
    prefix = next;
  }
  return -1;
}

int last_nonzero(const float* a, int m, int skip) {
  for (int i = m - 1; i >= 0; --i) {
    if (i != skip && a[i] > 0.0f) return i;
  }
  return -1;
}

bool mvue_group(int n, int m, const float* g, float u, float* out) {
  float a[kMaxGroupSize];
  int nnz = 0;
  for (int i = 0; i < m; ++i) {
    a[i] = std::fabs(g[i]);
    nnz += a[i] > 0.0f;
  }
  if (nnz <= n) {
    keep_all(m, g, out);
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
    if (!std::isfinite(r)) return false;
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
    out[i] = kept ? std::copysign(step, g[i]) : 0.0f;
    prefix = next;
  }
  return true;
}

bool approx24_group(const float* g, float u0, float u1, float* out) {
  float a[4];
  int nnz = 0;
  for (int i = 0; i < 4; ++i) {
    a[i] = std::fabs(g[i]);
    nnz += a[i] > 0.0f;
  }
  if (nnz <= 2) {
    keep_all(4, g, out);
    return true;
  }
  const float s = ((a[0] + a[1]) + a[2]) + a[3];
  if (!std::isfinite(s)) return false;
  int first = covering(a, 4, -1, u0 * s);
  if (first < 0) first = last_nonzero(a, 4, -1);
  float rest = 0.0f;
  for (int i = 0; i < 4; ++i) rest += i == first ? 0.0f : a[i];
  int second = covering(a, 4, first, u1 * rest);
  if (second < 0) second = last_nonzero(a, 4, first);
  double ad[4];
  double p[4];
  for (int i = 0; i < 4; ++i) ad[i] = a[i];
  mvue_approx24_probabilities(ad, p);
  for (int i = 0; i < 4; ++i) {
    out[i] =
        (i == first || i == second) ? static_cast<float>(static_cast<double>(g[i]) / p[i]) : 0.0f;
    if (!std::isfinite(out[i])) return false;
  }
  return true;
}

void topn_group(int n, int m, const float* g, float* out) {
  int order[kMaxGroupSize];
  for (int i = 0; i < m; ++i) order[i] = i;
  std::partial_sort(order, order + n, order + m, [g](int x, int y) {
    const float ax = std::fabs(g[x]);
    const float ay = std::fabs(g[y]);
    return ax > ay || (ax == ay && x < y);
  });
  for (int i = 0; i < m; ++i) out[i] = 0.0f;
  for (int k = 0; k < n; ++k) out[order[k]] = canonical(g[order[k]]);
}

}  // namespace

bool prune_group(GradMethod method, int n, int m, const float* g, float u0, float u1, float* out) {
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

}  // namespace detail
}  // namespace nms
