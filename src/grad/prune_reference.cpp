#include "grad/prune_reference.h"

#include <cmath>

#include "grad/group.h"
#include "nmsparse/core/error.h"

namespace nms::detail {

Matrix grad_prune_reference(ConstMatrixViewF g, const GradPruneOptions& options) {
  const NmPattern p = options.pattern;
  p.validate();
  const int m = p.m;
  const bool rows_axis = options.axis == NmAxis::kRows;
  NMS_CHECK((rows_axis ? g.cols() : g.rows()) % m == 0, "m (", m, ") does not divide the ",
            rows_axis ? "cols" : "rows");
  NMS_CHECK(options.method != GradMethod::kMvueApprox24 || (p.n == 2 && p.m == 4),
            "mvue-approx24 is 2:4 only");
  const CounterRng rng(options.seed, options.stream);
  Matrix out(g.rows(), g.cols());
  float in[kMaxGroupSize];
  float res[kMaxGroupSize];
  const int64_t outer = rows_axis ? g.rows() : g.rows() / m;
  const int64_t inner = rows_axis ? g.cols() / m : g.cols();
  for (int64_t a = 0; a < outer; ++a) {
    for (int64_t b = 0; b < inner; ++b) {
      const int64_t r0 = rows_axis ? a : a * m;
      const int64_t c0 = rows_axis ? b * m : b;
      for (int i = 0; i < m; ++i) {
        in[i] = rows_axis ? g(r0, c0 + i) : g(r0 + i, c0);
        NMS_CHECK(std::isfinite(in[i]), "non-finite gradient at (", rows_axis ? r0 : r0 + i, ", ",
                  rows_axis ? c0 + i : c0, ")");
      }
      const uint64_t gid = grad_group_id(options.axis, r0, c0, g.rows(), g.cols(), m);
      const bool ok =
          prune_group(options.method, p.n, m, in, grad_uniform(rng, options.method, gid, 0),
                      grad_uniform(rng, options.method, gid, 1), res);
      NMS_CHECK(ok, "magnitude sum overflows fp32 in the group at (", r0, ", ", c0, ")");
      for (int i = 0; i < m; ++i) {
        if (rows_axis) {
          out(r0, c0 + i) = res[i];
        } else {
          out(r0 + i, c0) = res[i];
        }
      }
    }
  }
  return out;
}

}  // namespace nms::detail
