// Partitioners that split a dataset's row indices among simulated clients, after NIID-Bench
// (see shared/reference/papers.md). Deterministic for a given seed.
#ifndef FL_SIMULATION_PARTITION_H_
#define FL_SIMULATION_PARTITION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace fl::simulation {

// IID: a random permutation of [0, num_examples) split into `num_clients` parts whose sizes
// differ by at most one. INVALID_ARGUMENT when num_clients < 1 or > num_examples.
absl::StatusOr<std::vector<std::vector<int64_t>>> PartitionIid(int64_t num_examples,
                                                               int32_t num_clients, uint64_t seed);

// Dirichlet label skew Dir(beta) with NIID-Bench's semantics (a party holding >= N/num_clients
// samples gets no more; the draw repeats until every party holds >= 10 samples).
absl::StatusOr<std::vector<std::vector<int64_t>>> PartitionDirichlet(
    const std::vector<int32_t>& labels, int32_t num_classes, int32_t num_clients, double beta,
    uint64_t seed);

}  // namespace fl::simulation

#endif  // FL_SIMULATION_PARTITION_H_
