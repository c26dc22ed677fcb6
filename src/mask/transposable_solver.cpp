// Solver names and dispatch (include/nmsparse/mask/transposable.h).
#include <array>

#include "nmsparse/mask/transposable.h"

namespace nms {
namespace {
constexpr std::array<std::string_view, 3> kSolverNames{"exact", "greedy", "entropic"};
}  // namespace

std::string_view transposable_solver_name(TransposableSolver solver) {
  return kSolverNames[static_cast<size_t>(solver)];
}

std::optional<TransposableSolver> transposable_solver_from_name(std::string_view name) {
  for (size_t k = 0; k < kSolverNames.size(); ++k)
    if (kSolverNames[k] == name) return static_cast<TransposableSolver>(k);
  return std::nullopt;
}

TransposableResult mask_transposable(ConstMatrixViewF scores, NmPattern pattern,
                                     TransposableSolver solver) {
  switch (solver) {
    case TransposableSolver::kGreedy:
      return mask_transposable_greedy(scores, pattern);
    case TransposableSolver::kEntropic:
      return mask_transposable_entropic(scores, pattern);
    case TransposableSolver::kExact:
      break;
  }
  return mask_transposable_exact(scores, pattern);
}

}  // namespace nms
