// LEMON's NetworkSimplex (Debian liblemon-dev) on one m x m tile: the independent exact oracle of
// the tests and the off-the-shelf baseline of the benchmarks. Include only where NMS_HAVE_LEMON.
#pragma once

#include <lemon/list_graph.h>
#include <lemon/network_simplex.h>

#include <cstdint>
#include <vector>

namespace nms::testing {

// Kept score of the "= n" transposable optimum of one tile with integer scores (row-major m*m):
// min-cost flow source -> row (cap n) -> column (cap 1, cost -score) -> sink (cap n). Returns -1
// when LEMON does not report OPTIMAL.
inline int64_t lemon_tile_optimum(const std::vector<int64_t>& tile, int n, int m) {
  lemon::ListDigraph g;
  const auto s = g.addNode();
  const auto t = g.addNode();
  std::vector<lemon::ListDigraph::Node> rows;
  std::vector<lemon::ListDigraph::Node> cols;
  for (int k = 0; k < m; ++k) {
    rows.push_back(g.addNode());
    cols.push_back(g.addNode());
  }
  lemon::ListDigraph::ArcMap<int64_t> cap(g);
  lemon::ListDigraph::ArcMap<int64_t> cost(g);
  lemon::ListDigraph::NodeMap<int64_t> supply(g, 0);
  auto arc = [&](lemon::ListDigraph::Node a, lemon::ListDigraph::Node b, int64_t c, int64_t w) {
    const auto e = g.addArc(a, b);
    cap[e] = c;
    cost[e] = w;
  };
  for (int k = 0; k < m; ++k) {
    arc(s, rows[static_cast<size_t>(k)], n, 0);
    arc(cols[static_cast<size_t>(k)], t, n, 0);
  }
  for (int r = 0; r < m; ++r) {
    for (int c = 0; c < m; ++c) {
      arc(rows[static_cast<size_t>(r)], cols[static_cast<size_t>(c)], 1,
          -tile[static_cast<size_t>(r) * m + c]);
    }
  }
  supply[s] = static_cast<int64_t>(n) * m;
  supply[t] = -static_cast<int64_t>(n) * m;
  lemon::NetworkSimplex<lemon::ListDigraph, int64_t, int64_t> ns(g);
  ns.upperMap(cap).costMap(cost).supplyMap(supply);
  if (ns.run() != decltype(ns)::OPTIMAL) return -1;
  return -ns.totalCost();
}

}  // namespace nms::testing
