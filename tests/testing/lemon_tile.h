// LEMON's NetworkSimplex (Debian liblemon-dev) on one m x m tile: the independent exact oracle of
// the tests and the off-the-shelf baseline of the benchmarks. Include only where NMS_HAVE_LEMON.
#pragma once

#include <lemon/list_graph.h>
#include <lemon/network_simplex.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace nms::testing {

// The "= n" transposable optimum of m x m tiles with integer scores: min-cost flow source -> row
// (cap n) -> column (cap 1, cost -score) -> sink (cap n). The graph and the solver are built once
// and only the costs change per tile, the fastest way a caller can use LEMON here (building the
// graph per tile costs about 30 % more at 8:16).
class LemonTileSolver {
 public:
  LemonTileSolver(int n, int m) : m_(m), cost_(graph_), cap_(graph_), supply_(graph_, 0) {
    const auto s = graph_.addNode();
    const auto t = graph_.addNode();
    std::vector<lemon::ListDigraph::Node> rows;
    std::vector<lemon::ListDigraph::Node> cols;
    for (int k = 0; k < m; ++k) {
      rows.push_back(graph_.addNode());
      cols.push_back(graph_.addNode());
    }
    auto arc = [&](lemon::ListDigraph::Node a, lemon::ListDigraph::Node b, int64_t c) {
      const auto e = graph_.addArc(a, b);
      cap_[e] = c;
      cost_[e] = 0;
      return e;
    };
    for (int k = 0; k < m; ++k) {
      arc(s, rows[static_cast<size_t>(k)], n);
      arc(cols[static_cast<size_t>(k)], t, n);
    }
    for (int r = 0; r < m; ++r) {
      for (int c = 0; c < m; ++c) {
        tile_arcs_.push_back(arc(rows[static_cast<size_t>(r)], cols[static_cast<size_t>(c)], 1));
      }
    }
    supply_[s] = static_cast<int64_t>(n) * m;
    supply_[t] = -static_cast<int64_t>(n) * m;
    simplex_ = std::make_unique<Simplex>(graph_);
    simplex_->upperMap(cap_).supplyMap(supply_);
  }

  // Kept score of the optimum of one tile (row-major m * m); -1 unless LEMON reports OPTIMAL.
  int64_t optimum(const int64_t* tile) {
    for (size_t k = 0; k < tile_arcs_.size(); ++k) cost_[tile_arcs_[k]] = -tile[k];
    simplex_->costMap(cost_);
    if (simplex_->run() != Simplex::OPTIMAL) return -1;
    return -simplex_->totalCost();
  }

 private:
  using Simplex = lemon::NetworkSimplex<lemon::ListDigraph, int64_t, int64_t>;
  int m_;
  lemon::ListDigraph graph_;
  lemon::ListDigraph::ArcMap<int64_t> cost_;
  lemon::ListDigraph::ArcMap<int64_t> cap_;
  lemon::ListDigraph::NodeMap<int64_t> supply_;
  std::vector<lemon::ListDigraph::Arc> tile_arcs_;
  std::unique_ptr<Simplex> simplex_;
};

inline int64_t lemon_tile_optimum(const std::vector<int64_t>& tile, int n, int m) {
  LemonTileSolver solver(n, m);
  return solver.optimum(tile.data());
}

}  // namespace nms::testing
