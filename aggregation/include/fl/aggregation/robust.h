// Robust aggregation: strategies that bound what a fraction of attacking sites can do to the
// global model, by statistics over the updates taken apart instead of their mean.
//
//   "fedmedian"      the coordinate-wise median of the clients' models (Yin et al. 2018).
//   "fedtrimmedavg"  the coordinate-wise mean without the floor(trim_beta K) smallest and largest
//                    values of each coordinate (Yin et al. 2018).
//   "krum"           the model of the client whose K - f - 2 nearest others are nearest (sum of
//                    squared L2 distances; Blanchard et al. 2017). Needs K >= 2f + 3.
//   "multikrum"      the example-weighted mean of the num_to_keep models of best Krum score
//                    (0: K - f, El Mhamdi et al.'s choice; Flower's to_keep = 0 means plain Krum,
//                    which is "krum" here). Needs K >= 2f + 3.
//   "bulyan"         K - 2f models chosen by Krum one at a time, then per coordinate the mean of
//                    the K - 4f values nearest their median (El Mhamdi et al. 2018). Needs
//                    K >= 4f + 3.
// K: the updates a round accepted; f: num_malicious. These follow Flower's aggregate_median,
// aggregate_trimmed_avg, aggregate_krum and aggregate_bulyan (ties aside). Only Multi-Krum weighs
// by examples, as Flower's does; the others ignore the example counts (a site could claim many to
// gain weight).
//
// They need every update at once: each accepted update is kept in a spill file (spill.h) and the
// round's finish computes in column blocks over the mapped files (internal/robust_kernels.h).
// Server memory at finish: the output model, a K x K distance matrix per core (no more cores than
// keep those below one model), and a tile of 512 x K floats per core; the updates themselves are
// the page cache's, each block handed back once read. The spill needs K x the model's size on
// disk, and one open file per kept update until the round finishes.
//
// Refused (Strategy::CheckPlan): with secure aggregation (the server must see the updates apart),
// with central DP (its noise is calibrated to a mean's sensitivity), and when min_fit_clients is
// too small for f. A round that accepted too few updates for f fails with the reason.
#ifndef FL_AGGREGATION_ROBUST_H_
#define FL_AGGREGATION_ROBUST_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "fl/aggregation/spill.h"
#include "fl/aggregation/strategy.h"

namespace fl::aggregation {

struct RobustOptions {
  std::string name = "fedmedian";  // see above
  double trim_beta = 0.2;          // fedtrimmedavg: in [0, 0.5)
  int32_t num_malicious = 0;       // f: krum, multikrum, bulyan; >= 0
  int32_t num_to_keep = 0;         // multikrum: >= 0 (0: K - f)
};

// Whether `name` is one of the five.
bool IsRobustStrategy(const std::string& name);

// The fewest accepted updates a round of `options` can aggregate: 1, or 2f + 3 (Krum and
// Multi-Krum; Multi-Krum also f + num_to_keep), or 4f + 3 (Bulyan).
int32_t MinRobustUpdates(const RobustOptions& options);

// INVALID_ARGUMENT naming the setting and its bound when one is out of range or the name is not
// one of the five. `spill` keeps the updates (must not be null).
absl::StatusOr<std::unique_ptr<Strategy>> MakeRobustStrategy(RobustOptions options,
                                                             std::shared_ptr<SpillSpace> spill);

}  // namespace fl::aggregation

#endif  // FL_AGGREGATION_ROBUST_H_
