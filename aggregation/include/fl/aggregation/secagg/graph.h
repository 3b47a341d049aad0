// The SecAgg+ communication graph (Bell et al. 2020): a k-regular Harary graph H(k, n) whose
// vertex labels are shuffled by a public seed, so that who neighbours whom is not chosen by the
// server after seeing the clients. Position i on the cycle is joined to positions i +- 1 .. k/2
// (mod n), and for odd k (n even) also to i + n/2. Immutable after Make; thread-safe.
#ifndef FL_AGGREGATION_SECAGG_GRAPH_H_
#define FL_AGGREGATION_SECAGG_GRAPH_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace fl::secagg {

class NeighborGraph {
 public:
  // INVALID_ARGUMENT when n < 2, k outside [1, n - 1], or n * k is odd.
  static absl::StatusOr<NeighborGraph> Make(int num_clients, int degree, uint64_t seed);

  int num_clients() const { return static_cast<int>(neighbors_.size()); }
  int degree() const { return degree_; }
  // The k neighbours of `client` (0 <= client < n), ascending; never the client itself.
  const std::vector<int>& Neighbors(int client) const { return neighbors_[client]; }
  bool AreNeighbors(int a, int b) const;

  // An empty graph (no clients), to be assigned from Make.
  NeighborGraph() = default;

 private:
  int degree_ = 0;
  std::vector<std::vector<int>> neighbors_;
};

}  // namespace fl::secagg

#endif  // FL_AGGREGATION_SECAGG_GRAPH_H_
