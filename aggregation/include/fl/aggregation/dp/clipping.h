// Client-level L2 clipping for differential privacy (DP-FedAvg, McAfee et al. 2018): a client's
// update (its model minus the global model it started from) is scaled down to L2 norm at most C,
// so that one client's contribution to the sum is bounded and Gaussian noise of scale z * C hides
// it.
//
// Free functions, thread-compatible (no shared state). The norm is accumulated in float64.
#ifndef FL_AGGREGATION_DP_CLIPPING_H_
#define FL_AGGREGATION_DP_CLIPPING_H_

#include <span>

#include "absl/status/statusor.h"
#include "fl/common/model.h"

namespace fl::aggregation::dp {

// The L2 norm of `values`, accumulated in float64.
double L2Norm(std::span<const float> values);

// Scales `delta` in place by min(1, clip_norm / ||delta||), so that its norm afterwards is
// min(||delta||, clip_norm) and its direction is kept (a zero delta stays zero). Returns the norm
// before clipping. INVALID_ARGUMENT, naming the value, when clip_norm is not a finite number > 0
// or when `delta` holds a NaN or an infinity (then `delta` is left unchanged).
absl::StatusOr<double> ClipL2(std::span<float> delta, double clip_norm);

// Clips the update `local` - `global` to norm `clip_norm` and writes back
// local = global + clipped delta (what a client sends under DP). Returns the delta's norm before
// clipping. INVALID_ARGUMENT when the specs differ or for the reasons of ClipL2; `local` is
// unchanged on failure.
absl::StatusOr<double> ClipModelUpdate(const Model& global, Model& local, double clip_norm);

// Clipping of an update the server reads in pieces, twice (it holds the update staged, never
// whole in memory): pass 1 measures the change from `global` piece by piece, pass 2 rewrites
// each piece as global + (piece - global) * min(1, clip_norm / ||change||). The norm is summed in
// float64, in the order the pieces come; the values must be finite (the server checked them).
// Thread-compatible: one per update.
class StreamingClip {
 public:
  // `global` outlives the clip; `clip_norm` is a finite number > 0 (the caller validated it).
  StreamingClip(std::span<const float> global, double clip_norm)
      : global_(global), clip_norm_(clip_norm) {}
  // Pass 1: parameters [first, first + values.size()) of the update.
  void Measure(int64_t first, std::span<const float> values);
  // The change's norm over what was measured, and the factor pass 2 applies (1: within bounds).
  double norm() const;
  double scale() const;
  // Pass 2: the same piece, clipped in place (untouched when scale() is 1).
  void Apply(int64_t first, std::span<float> values) const;

 private:
  std::span<const float> global_;
  double clip_norm_;
  double sum_squares_ = 0;
};

}  // namespace fl::aggregation::dp

#endif  // FL_AGGREGATION_DP_CLIPPING_H_
