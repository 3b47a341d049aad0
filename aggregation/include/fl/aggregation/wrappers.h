// Wrappers that make any strategy more robust (after Flower's strategy wrappers): each wraps
// another strategy, takes its name, and changes one thing.
//
//   norm bound      every update's change from the round's global model is clipped to L2 norm M
//                   before the inner strategy sees it: a site's influence on the round is
//                   bounded, which blunts scaled ("model replacement") updates and backdoors (Sun
//                   et al. 2019, "Can you really backdoor federated learning?"). The engine clips
//                   (Strategy::update_norm_bound); with central DP the smaller bound holds.
//   every site      Flower's accept_failures = False: a round in which any sampled site failed
//                   (dropped, declined, refused, missing at the close) does not commit; its
//                   attempt fails, naming the sites, and the run retries it.
#ifndef FL_AGGREGATION_WRAPPERS_H_
#define FL_AGGREGATION_WRAPPERS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "fl/aggregation/strategy.h"

namespace fl::aggregation {

// INVALID_ARGUMENT unless `max_norm` is a finite number > 0, and for SCAFFOLD (whose updates
// carry control variates beside the weights). The wrapper's CheckPlan refuses secure aggregation
// (the server cannot clip updates it cannot read).
absl::StatusOr<std::unique_ptr<Strategy>> MakeNormBound(std::unique_ptr<Strategy> inner,
                                                        double max_norm);

// The round's Finish fails (FAILED_PRECONDITION) when any site failed, listing up to five of
// them with why, e.g. "accept_failures is false and 1 of the sampled sites failed: 3f2a...
// declined (the client declined the task: UNAVAILABLE: ...)".
std::unique_ptr<Strategy> MakeRequireEverySite(std::unique_ptr<Strategy> inner);

}  // namespace fl::aggregation

#endif  // FL_AGGREGATION_WRAPPERS_H_
