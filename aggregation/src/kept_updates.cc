#include "aggregation/internal/kept_updates.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "fl/common/chunking.h"

namespace fl::aggregation::internal {
namespace {

// Writes one update into its own spill file; Accept hands the file to the round.
class SpillSink final : public UpdateSink {
 public:
  SpillSink(KeptUpdatesRound& round, std::unique_ptr<SpillFile> file, double weight)
      : round_(round), file_(std::move(file)), weight_(weight) {}
  absl::Status Write(int64_t offset, std::span<const float> values) override {
    // The engine checked every chunk already; a caller of the library may not have, and one NaN
    // would make every statistic of the round NaN.
    if (absl::Status s = CheckFinite(values, offset); !s.ok()) return s;
    return file_->Write(offset, values);
  }
  absl::Status Accept() override {
    if (file_ == nullptr) return absl::FailedPreconditionError("update accepted twice");
    round_.Keep(std::move(file_), weight_);
    return absl::OkStatus();
  }

 private:
  KeptUpdatesRound& round_;
  std::unique_ptr<SpillFile> file_;
  double weight_;
};

}  // namespace

KeptUpdatesRound::KeptUpdatesRound(std::string name, std::shared_ptr<SpillSpace> spill,
                                   ModelSpec spec)
    : name_(std::move(name)), spill_(std::move(spill)), spec_(std::move(spec)) {}

absl::StatusOr<std::unique_ptr<UpdateSink>> KeptUpdatesRound::BeginUpdate(const UpdateInfo& info) {
  absl::StatusOr<std::unique_ptr<SpillFile>> file = spill_->Create(spec_.NumFloats());
  if (!file.ok()) return file.status();
  return std::make_unique<SpillSink>(*this, *std::move(file), info.weight);
}

int KeptUpdatesRound::num_accepted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(kept_.size());
}

void KeptUpdatesRound::Keep(std::unique_ptr<SpillFile> file, double weight) {
  std::lock_guard<std::mutex> lock(mu_);
  kept_.push_back({std::move(file), weight});
}

void KeptUpdatesRound::MarkMisused() {
  std::lock_guard<std::mutex> lock(mu_);
  misused_ = true;
}

absl::StatusOr<Model> KeptUpdatesRound::Finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (misused_) {
    return absl::InternalError(
        absl::StrCat("strategy '", name_, "' was given pieces of updates not kept apart"));
  }
  const int k = static_cast<int>(kept_.size());
  if (k == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": no update was accepted in this round"));
  }
  if (absl::Status s = CheckCount(k); !s.ok()) return s;
  Rows rows;
  std::vector<double> weights;
  for (Kept& kept : kept_) {
    absl::StatusOr<std::span<const float>> row = kept.file->Map();
    if (!row.ok()) return row.status();
    rows.push_back(*row);
    weights.push_back(kept.weight);
  }
  // Each block of every update leaves the server's memory once read.
  ReleaseFn release = [this](int64_t first, int64_t count) {
    for (Kept& kept : kept_) kept.file->Release(first, count);
  };
  Model out(spec_);
  std::span<float> data = out.data();
  if (absl::Status s = Combine(rows, weights, release, data); !s.ok()) return s;
  for (size_t i = 0; i < data.size(); ++i) {
    if (!std::isfinite(data[i])) {
      return absl::FailedPreconditionError(absl::StrCat(
          name_, ": the aggregate is not finite at parameter ", i, " (", data[i], ")"));
    }
  }
  return out;
}

}  // namespace fl::aggregation::internal
