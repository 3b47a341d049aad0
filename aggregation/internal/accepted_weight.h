// The updates a round accepted and their total weight: what every weighted-mean aggregator
// (FedAvg, SCAFFOLD, the server optimizers) counts in Accept and divides by in Finish.
// Thread-safe: clients' uploads accept at once.
#ifndef FL_AGGREGATION_INTERNAL_ACCEPTED_WEIGHT_H_
#define FL_AGGREGATION_INTERNAL_ACCEPTED_WEIGHT_H_

#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace fl::aggregation::internal {

class AcceptedWeight {
 public:
  void Add(double weight) {
    std::lock_guard<std::mutex> lock(mu_);
    total_ += weight;
    ++count_;
  }
  int count() const {
    std::lock_guard<std::mutex> lock(mu_);
    return count_;
  }
  double total() const {
    std::lock_guard<std::mutex> lock(mu_);
    return total_;
  }
  // OK when some update of positive total weight was accepted; else FAILED_PRECONDITION
  // "<who>: no update was accepted in this round".
  absl::Status CheckAny(const std::string& who) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (count_ > 0 && total_ > 0) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(who, ": no update was accepted in this round"));
  }

 private:
  mutable std::mutex mu_;
  double total_ = 0;
  int count_ = 0;
};

}  // namespace fl::aggregation::internal

#endif  // FL_AGGREGATION_INTERNAL_ACCEPTED_WEIGHT_H_
