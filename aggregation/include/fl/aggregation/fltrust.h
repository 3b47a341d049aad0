// FLTrust (Cao et al. 2021, "FLTrust: Byzantine-robust federated learning via trust
// bootstrapping"): the server holds a small root dataset of its own and trains the round's global
// model on it like a site would (RootTrainer); each site's change is trusted by how well its
// direction agrees with the server's. With x the round's global model, w_0 the server's model
// trained on the root data and w_i a site's:
//
//   g_0 = w_0 - x;   g_i = w_i - x;   TS_i = max(0, cos(g_i, g_0))
//   x' = x + sum_i TS_i (||g_0|| / ||g_i||) g_i / sum_i TS_i
//
// A change pointing away from the server's counts for nothing, and every change is scaled to the
// server's length, so no site outweighs the others by the size of what it sends. The site's
// example counts are not used (the paper's rule).
//
// The scale of g_i is known only once all of it has arrived, so the updates are kept apart in the
// spill like robust aggregation's (robust.h) and combined in column blocks at the round's finish,
// which also trains on the root data (off the engine's lock). A round in which no site's change
// agrees with the server's (every TS_i = 0) fails with that reason. Refused with secure
// aggregation and central DP, like the robust strategies.
#ifndef FL_AGGREGATION_FLTRUST_H_
#define FL_AGGREGATION_FLTRUST_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "fl/aggregation/spill.h"
#include "fl/aggregation/strategy.h"

namespace fl::aggregation {

// Trains `global` on the server's root dataset and returns the trained model (of global's spec).
// `attempt` counts the round attempts this strategy object has begun (1, 2, ...; a retried round
// counts again, a resumed run starts over): use it to vary the batch order, not as a round number.
using RootTrainer = std::function<absl::StatusOr<Model>(const Model& global, int32_t attempt)>;

// INVALID_ARGUMENT when `root` is empty or `spill` null.
absl::StatusOr<std::unique_ptr<Strategy>> MakeFLTrust(RootTrainer root,
                                                      std::shared_ptr<SpillSpace> spill);

}  // namespace fl::aggregation

#endif  // FL_AGGREGATION_FLTRUST_H_
