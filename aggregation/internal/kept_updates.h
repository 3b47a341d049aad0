// The round of a strategy that needs every update apart (robust.h, fltrust.h): each update is
// written into a spill file of its own (BeginUpdate's sink; Accept hands the file to the round),
// and Finish maps them all and hands the rows to the strategy's Combine, with a release callback
// that gives each column block's pages back once read.
#ifndef FL_AGGREGATION_INTERNAL_KEPT_UPDATES_H_
#define FL_AGGREGATION_INTERNAL_KEPT_UPDATES_H_

#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "aggregation/internal/robust_kernels.h"
#include "fl/aggregation/spill.h"
#include "fl/aggregation/strategy.h"

namespace fl::aggregation::internal {

class KeptUpdatesRound : public RoundAggregator {
 public:
  // `name` is the strategy's, for messages.
  KeptUpdatesRound(std::string name, std::shared_ptr<SpillSpace> spill, ModelSpec spec);

  absl::StatusOr<std::unique_ptr<UpdateSink>> BeginUpdate(const UpdateInfo& info) override;
  bool keeps_updates_apart() const override { return true; }
  // Pieces folded without BeginUpdate cannot be told apart: they fail the round.
  void Fold(int64_t, std::span<const float>, double) override { MarkMisused(); }
  void Accept(double) override { MarkMisused(); }
  int num_accepted() const override;
  // Checks, maps, Combine, then refuses a result that is not finite.
  absl::StatusOr<Model> Finish() final;

  // Called by the sink: the update is whole.
  void Keep(std::unique_ptr<SpillFile> file, double weight);

 protected:
  // The strategy's statistic over `rows` (each an accepted update, with `weights` its example
  // counts) into `out`; call `release` as in robust_kernels.h.
  virtual absl::Status Combine(const Rows& rows, const std::vector<double>& weights,
                               const ReleaseFn& release, std::span<float> out) = 0;
  // OK when `k` accepted updates are enough for the strategy; else why not.
  virtual absl::Status CheckCount(int k) const { return absl::OkStatus(); }
  const std::string& name() const { return name_; }

 private:
  struct Kept {
    std::unique_ptr<SpillFile> file;
    double weight = 0;
  };
  void MarkMisused();

  const std::string name_;
  const std::shared_ptr<SpillSpace> spill_;
  const ModelSpec spec_;
  mutable std::mutex mu_;
  std::vector<Kept> kept_;  // guarded by mu_
  bool misused_ = false;    // guarded by mu_
};

}  // namespace fl::aggregation::internal

#endif  // FL_AGGREGATION_INTERNAL_KEPT_UPDATES_H_
