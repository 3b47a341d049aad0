// FedProx's Synthetic(alpha, beta) federated dataset (Li et al., "Federated Optimization in
// Heterogeneous Networks", MLSys 2020, and its generate_synthetic.py): each device k has its own
// softmax-regression model and its own feature distribution, so alpha sets how much the devices'
// models differ and beta how much their data differ. Plain vectors only (no fl::client), so the
// generator can be used without the SDK; FlattenSynthetic gives the fields of an
// fl::client::Dataset plus the partition by device. Deterministic for a seed on every platform
// (own normal sampler over std::mt19937_64, not the implementation-defined std distributions).
// Thread-compatible.
#ifndef FL_SIMULATION_SYNTHETIC_H_
#define FL_SIMULATION_SYNTHETIC_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "fl/simulation/partition.h"

namespace fl::simulation {

inline constexpr int32_t kSyntheticNumFeatures = 60;
inline constexpr int32_t kSyntheticNumClasses = 10;

struct SyntheticOptions {
  // Standard deviations (as the authors' code, np.random.normal(0, alpha), not variances) of
  // u_k ~ N(0, alpha), the mean of device k's model, and of B_k ~ N(0, beta), the mean of the
  // mean of its features. Synthetic(0,0), (0.5,0.5) and (1,1) are the paper's.
  double alpha = 1.0;
  double beta = 1.0;
  int32_t num_devices = 30;  // the paper's
  // The paper's Synthetic-IID instead: one model W, b ~ N(0, 1) shared by every device (u_k is
  // then not drawn and is 0) and v_k = B_k in every dimension.
  bool iid = false;
  // Device k's number of examples is min(floor(LogNormal(4, 2)) + 50, this): a power law, capped
  // because the log-normal's tail is unbounded.
  int64_t max_examples_per_device = 10000;
  uint64_t seed = 0;
};

// One device's model, feature distribution and examples. For each example,
// x ~ N(v, Sigma) with Sigma diagonal, Sigma_jj = j^-1.2 for j = 1..60 (stored as float), and
// label = argmax(softmax(W x + b)) = argmax(W x + b), computed on the stored floats in double
// (the first maximum on a tie).
struct SyntheticDevice {
  double u = 0;                 // u_k ~ N(0, alpha): mean of W's and b's entries
  double feature_center = 0;    // B_k ~ N(0, beta): mean of v's entries
  std::vector<double> v;        // v_k ~ N(B_k, 1) per dimension: 60 entries
  std::vector<double> weights;  // W_k ~ N(u_k, 1): 10 x 60, row-major (one row per class)
  std::vector<double> bias;     // b_k ~ N(u_k, 1): 10 entries
  std::vector<float> features;  // num_examples() x 60, row-major
  std::vector<int32_t> labels;  // num_examples(), each in [0, 10)

  int64_t num_examples() const { return static_cast<int64_t>(labels.size()); }
};

// Draws the devices. INVALID_ARGUMENT naming the option and its value when alpha or beta is
// negative or not finite, num_devices < 1, or max_examples_per_device < 1.
absl::StatusOr<std::vector<SyntheticDevice>> GenerateSynthetic(const SyntheticOptions& options);

// The devices' examples as one dataset, device after device, and which rows are whose.
struct SyntheticDataset {
  int32_t num_features = kSyntheticNumFeatures;
  int32_t num_classes = kSyntheticNumClasses;
  std::vector<float> features;  // num rows x num_features, row-major
  std::vector<int32_t> labels;
  Partition partition;  // partition[k]: device k's rows, ascending and contiguous
};
SyntheticDataset FlattenSynthetic(const std::vector<SyntheticDevice>& devices);

}  // namespace fl::simulation

#endif  // FL_SIMULATION_SYNTHETIC_H_
