// A float64 accumulator that many threads add to at once: it locks in 1 MiB stripes, so updates
// folding different parts of the model do not wait for each other. Shared by the streaming
// strategies (FedAvg, SCAFFOLD).
#ifndef FL_AGGREGATION_INTERNAL_STRIPED_SUM_H_
#define FL_AGGREGATION_INTERNAL_STRIPED_SUM_H_

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "fl/common/model.h"

namespace fl::aggregation::internal {

class StripedSum {
 public:
  static constexpr int64_t kStripeFloats = kMaxChunkBytes / static_cast<int64_t>(sizeof(float));

  explicit StripedSum(int64_t size)
      : sum_(static_cast<size_t>(size), 0.0),
        stripes_(static_cast<size_t>((size + kStripeFloats - 1) / kStripeFloats)) {}

  // sum[offset + i] += weight * values[i], holding each stripe's lock in turn. Thread-safe; the
  // range must lie inside the sum.
  void Add(int64_t offset, std::span<const float> values, double weight) {
    const int64_t end = offset + static_cast<int64_t>(values.size());
    for (int64_t pos = offset; pos < end;) {
      const int64_t stripe = pos / kStripeFloats;
      const int64_t stop = std::min(end, (stripe + 1) * kStripeFloats);
      std::lock_guard<std::mutex> lock(stripes_[static_cast<size_t>(stripe)]);
      double* sum = sum_.data() + pos;
      const float* x = values.data() + (pos - offset);
      for (int64_t i = 0; i < stop - pos; ++i) sum[i] += weight * static_cast<double>(x[i]);
      pos = stop;
    }
  }

  // The sums; read only after every Add has returned.
  std::span<const double> values() const { return sum_; }
  int64_t size() const { return static_cast<int64_t>(sum_.size()); }

 private:
  std::vector<double> sum_;
  std::vector<std::mutex> stripes_;
};

}  // namespace fl::aggregation::internal

#endif  // FL_AGGREGATION_INTERNAL_STRIPED_SUM_H_
