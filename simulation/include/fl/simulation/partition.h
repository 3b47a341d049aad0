// Partitioners that split a dataset's row indices among simulated clients ("parties"), after
// NIID-Bench (Li et al., ICDE 2022; see shared/reference/papers.md), with the names Flower
// Datasets uses. A partition is one vector of row indices per party. Every function is
// deterministic for a given seed (std::mt19937_64 and fl::Shuffle), thread-compatible (no shared
// state), and refuses a bad argument with INVALID_ARGUMENT whose message names the argument and
// its value. Unless stated otherwise every index in [0, N) is in exactly one party.
#ifndef FL_SIMULATION_PARTITION_H_
#define FL_SIMULATION_PARTITION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fl::simulation {

using Partition = std::vector<std::vector<int64_t>>;

// IID (Flower's IidPartitioner): a random permutation of [0, num_examples) split into
// `num_clients` parts whose sizes differ by at most one. INVALID_ARGUMENT when num_clients < 1 or
// > num_examples.
absl::StatusOr<Partition> PartitionIid(int64_t num_examples, int32_t num_clients, uint64_t seed);

// Dirichlet label skew Dir(beta) (Flower's DirichletPartitioner) with NIID-Bench's semantics (a
// party holding >= N/num_clients samples gets no more; the draw repeats until every party holds
// >= 10 samples).
absl::StatusOr<Partition> PartitionDirichlet(const std::vector<int32_t>& labels,
                                             int32_t num_classes, int32_t num_clients, double beta,
                                             uint64_t seed);

// McMahan et al.'s pathological non-IID split (Flower's ShardPartitioner): the indices sorted by
// label (stable: ties in index order) are cut into num_clients * shards_per_client contiguous
// shards whose sizes differ by at most one (the first N % shards shards are one longer, so no
// index is dropped), and each client gets `shards_per_client` distinct shards drawn at random,
// concatenated in the order drawn. When every class size is a multiple of the shard size, a
// client holds at most `shards_per_client` classes. Labels may be any integers.
// INVALID_ARGUMENT when num_clients < 1, shards_per_client < 1, or there are fewer examples than
// shards.
absl::StatusOr<Partition> PartitionShards(const std::vector<int32_t>& labels, int32_t num_clients,
                                          int32_t shards_per_client, uint64_t seed);

// NIID-Bench's "#C=k" label-quantity skew (Flower's PathologicalPartitioner with its "random"
// choice, but NIID-Bench's first class): party i holds class i % num_classes plus k - 1 further
// distinct classes drawn at random; each class's indices are shuffled and split into as many
// near-equal parts (sizes differ by at most one) as there are parties holding it, in party order.
// A party thus holds exactly k classes whenever each class has at least as many examples as
// parties holding it. As NIID-Bench, the examples of a class that no party holds are left out of
// the partition (possible only when num_clients < num_classes); SummarizePartition counts them.
// Parties' indices are in class-then-shuffled order. INVALID_ARGUMENT when num_classes < 1,
// num_clients < 1, k outside [1, num_classes], or a label is outside [0, num_classes).
absl::StatusOr<Partition> PartitionLabelK(const std::vector<int32_t>& labels, int32_t num_classes,
                                          int32_t num_clients, int32_t k, uint64_t seed);

// NIID-Bench's quantity skew (Flower's SizePartitioner with Dirichlet sizes): party sizes
// proportional to p ~ Dir(beta) over parties (each party's size is the difference of the floored
// cumulative proportions times N), redrawn until every party holds >= 10 examples; which examples
// is a random permutation, so labels stay IID. INVALID_ARGUMENT when num_clients < 1, beta is not
// positive and finite, num_examples < 10 * num_clients, or no draw in 1000 satisfies the minimum.
absl::StatusOr<Partition> PartitionQuantitySkew(int64_t num_examples, int32_t num_clients,
                                                double beta, uint64_t seed);

// Each party draws `examples_per_party` distinct indices uniformly from [0, num_examples),
// independently of the others, so parties may share indices (SummarizePartition counts them as
// duplicated): a federation of more parties than examples, for scale tests rather than accuracy
// studies. Each party's indices ascending. INVALID_ARGUMENT when num_clients < 1 or
// examples_per_party is outside [1, num_examples].
absl::StatusOr<Partition> PartitionSampled(int64_t num_examples, int32_t num_clients,
                                           int64_t examples_per_party, uint64_t seed);

// A natural split by a column's value, e.g. a hospital id (Flower's NaturalIdPartitioner): one
// party per distinct value of `keys`, parties ordered by value (byte-wise, as std::string's <),
// each party's indices ascending. Deterministic; no seed. INVALID_ARGUMENT when `keys` is empty.
absl::StatusOr<Partition> PartitionByColumn(const std::vector<std::string>& keys);

// What a partition gives each party: what a researcher checks before training.
struct PartySummary {
  int64_t num_examples = 0;
  std::vector<int64_t> class_counts;  // num_classes entries
};
struct PartitionSummary {
  int32_t num_classes = 0;
  int64_t num_examples = 0;    // labels.size(): the dataset's, not the partition's
  int64_t num_unassigned = 0;  // indices in [0, num_examples) in no party
  int64_t num_duplicated = 0;  // assignments beyond an index's first
  std::vector<PartySummary> parties;
};

// Counts per party its examples and examples per class. INVALID_ARGUMENT when num_classes < 1, a
// label is outside [0, num_classes), or an index is outside [0, labels.size()).
absl::StatusOr<PartitionSummary> SummarizePartition(const Partition& partition,
                                                    const std::vector<int32_t>& labels,
                                                    int32_t num_classes);

// A few lines of text for a log or a terminal: the number of parties and examples (and any
// unassigned or duplicated ones), min / median / max examples per party, the mean number of
// distinct classes per party, and a histogram of party sizes in at most 10 equal-width buckets
// with '#' bars (at most 40 characters). Ends with a newline.
std::string FormatPartitionSummary(const PartitionSummary& summary);

// Which partitioner MakePartition runs, and its parameters; each field is read only by the
// partitioners named beside it.
struct PartitionSpec {
  // "iid", "dirichlet", "label_k" (alias "pathological"), "shards", "quantity_skew", "sampled",
  // "column".
  std::string name = "iid";
  double beta = 0.5;              // dirichlet, quantity_skew
  int32_t k = 2;                  // label_k: classes per party
  int32_t shards_per_client = 2;  // shards
  int64_t examples_per_party = 0;  // sampled
  uint64_t seed = 0;              // all but column
};

// Runs the partitioner `spec.name` on a dataset with these labels (N = labels.size()). For
// "column", `column` holds the key of each row (its size must be N) and num_clients must be 0 or
// the number of distinct keys; the others ignore `column`. Returns what that partitioner returns;
// INVALID_ARGUMENT listing the valid names for an unknown name.
absl::StatusOr<Partition> MakePartition(const PartitionSpec& spec,
                                        const std::vector<int32_t>& labels, int32_t num_classes,
                                        int32_t num_clients,
                                        const std::vector<std::string>& column = {});

}  // namespace fl::simulation

#endif  // FL_SIMULATION_PARTITION_H_
