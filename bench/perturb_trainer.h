// A trainer for benchmarks that measure the framework, not training: it returns the global model
// plus a small pseudo-random change (xorshift; +-0.01 at most), with a fixed example count.
#ifndef FL_BENCH_PERTURB_TRAINER_H_
#define FL_BENCH_PERTURB_TRAINER_H_

#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fl/client/trainer.h"
#include "fl/common/model.h"

namespace fl::bench {

class PerturbTrainer final : public client::Trainer {
 public:
  PerturbTrainer(ModelSpec spec, uint64_t seed, int64_t examples)
      : spec_(std::move(spec)), seed_(seed), examples_(examples) {}
  ModelSpec spec() const override { return spec_; }
  absl::StatusOr<client::FitResult> Fit(const Model& global, const client::FitConfig&) override {
    client::FitResult r{.model = global.Clone(), .num_examples = examples_, .metrics = {}};
    uint64_t x = seed_ * 0x9E3779B97F4A7C15ull + 1;
    for (float& v : r.model.data()) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      v += static_cast<float>(static_cast<int64_t>(x % 2001) - 1000) * 1e-5f;
    }
    return r;
  }
  absl::StatusOr<client::EvalResult> Evaluate(const Model&) override {
    return absl::UnimplementedError("no evaluation in this benchmark");
  }

 private:
  ModelSpec spec_;
  uint64_t seed_;
  int64_t examples_;
};

}  // namespace fl::bench

#endif  // FL_BENCH_PERTURB_TRAINER_H_
