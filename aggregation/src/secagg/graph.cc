#include "fl/aggregation/secagg/graph.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fl/common/random.h"

namespace fl::secagg {

absl::StatusOr<NeighborGraph> NeighborGraph::Make(int n, int k, uint64_t seed) {
  if (n < 2 || k < 1 || k > n - 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a Harary graph needs n >= 2 and k in [1, n-1],"
                     " got n = ",
                     n, ", k = ", k));
  }
  if ((static_cast<int64_t>(n) * k) % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("no ", k, "-regular graph on ", n, " vertices (n * k is odd)"));
  }
  // client_at[position]: the shuffled labels. The seed is public, so a non-cryptographic
  // generator is enough here.
  std::vector<int> client_at(n);
  std::iota(client_at.begin(), client_at.end(), 0);
  std::mt19937_64 rng(seed);
  Shuffle(client_at, rng);

  NeighborGraph g;
  g.degree_ = k;
  g.neighbors_.assign(n, {});
  for (int pos = 0; pos < n; ++pos) {
    std::vector<int>& out = g.neighbors_[client_at[pos]];
    for (int d = 1; d <= k / 2; ++d) {
      out.push_back(client_at[(pos + d) % n]);
      out.push_back(client_at[(pos - d + n) % n]);
    }
    if (k % 2 != 0) out.push_back(client_at[(pos + n / 2) % n]);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  }
  return g;
}

bool NeighborGraph::AreNeighbors(int a, int b) const {
  if (a < 0 || a >= num_clients()) return false;
  return std::binary_search(neighbors_[a].begin(), neighbors_[a].end(), b);
}

}  // namespace fl::secagg
