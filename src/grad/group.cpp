// The per-group pruners (scalar, any n:m), method names, stream ids and analytic probabilities.
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
  detail::approx24_probabilities(a, p);
}

}  // namespace nms
