// Central differential privacy as a strategy wrapper (McMahan et al. 2018's DP-FedAvg; Flower's
// DifferentialPrivacy*FixedClipping): every update folded is a model whose change from the global
// model has L2 norm at most C; the wrapper averages the n accepted updates with equal weights and
// adds N(0, (z * C / n)^2) to every coordinate of the mean, i.e. N(0, (z * C)^2) on the sum.
//
// Equal weights: an example-weighted mean lets one client with many examples move the mean by up
// to C, not C / n, so the noise would have to grow with the largest weight; DP-FedAvg weighs every
// client alike, and so does this wrapper (the inner strategy sees weight 1 for every update).
// The wrapper does not clip the pieces it is given: its update_norm_bound() is C, and the server's
// engine clips each update's change to it (dp/clipping.h's StreamingClip) before folding; a
// caller that folds directly must clip first (ClipModelUpdate).
// Noise comes from a BitSource per round, OpenSSL's CSPRNG by default.
#ifndef FL_AGGREGATION_DP_CENTRAL_DP_H_
#define FL_AGGREGATION_DP_CENTRAL_DP_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "fl/aggregation/dp/gaussian_noise.h"
#include "fl/aggregation/strategy.h"

namespace fl::aggregation::dp {

struct CentralDpOptions {
  double noise_multiplier = 1.0;  // z, a finite number > 0
  double clip_norm = 1.0;         // C, a finite number > 0
  // Makes the noise source of each round; empty: MakeSecureBitSource. Tests inject a seeded one.
  std::function<std::unique_ptr<BitSource>()> make_source;
};

// Wraps `inner` (not owned; it must outlive the wrapper), whose aggregator must compute a
// weighted mean of the clients' models (FedAvg, FedProx; not SCAFFOLD, whose control variates are
// no mean of models). The wrapper's name is "<inner>+central_dp". Its Finish fails with the inner
// aggregator's status, or INTERNAL when the noise source fails (the round then fails rather than
// publish an un-noised model). INVALID_ARGUMENT, naming the value, when z or C is not a finite
// number > 0, or when `inner` is "scaffold".
absl::StatusOr<std::unique_ptr<Strategy>> MakeCentralDp(Strategy& inner, CentralDpOptions options);

}  // namespace fl::aggregation::dp

#endif  // FL_AGGREGATION_DP_CENTRAL_DP_H_
