// A Python object as the SDK's Trainer: the site's fit and evaluate, called from the client's
// loop thread with the GIL taken only around the call.
//
// The Python trainer has
//   get_weights() -> dict[str, np.ndarray]            names and shapes: the model this site trains
//   fit(weights, config) -> (weights, num_examples, metrics)
//   evaluate(weights, config) -> (loss, num_examples, metrics)     (optional)
// `weights` are read-only float32 views of the SDK's buffer (python/src/weights.h), `config` a
// dict of the round's settings. An exception becomes the task's decline reason: fl.FlError keeps
// its code, anything else is UNKNOWN with its type and message (its traceback is logged).
#ifndef FL_PYTHON_PY_TRAINER_H_
#define FL_PYTHON_PY_TRAINER_H_

#include <nanobind/nanobind.h>

#include <atomic>
#include <memory>

#include "fl/client/trainer.h"

namespace fl::python {

class PyTrainer final : public client::Trainer {
 public:
  // The spec from trainer.get_weights(); INVALID_ARGUMENT when it lacks fit or get_weights, or
  // its weights are not a valid model. GIL held.
  static absl::StatusOr<std::unique_ptr<PyTrainer>> Create(nanobind::object trainer);
  // For a model whose spec is known (a simulation's sites): get_weights is not called.
  static absl::StatusOr<std::unique_ptr<PyTrainer>> Create(nanobind::object trainer,
                                                           ModelSpec spec);
  ~PyTrainer() override;

  ModelSpec spec() const override { return spec_; }
  absl::StatusOr<client::FitResult> Fit(const Model& global,
                                        const client::FitConfig& config) override;
  absl::StatusOr<client::EvalResult> Evaluate(const Model& model) override;
  absl::StatusOr<client::FitResult> FitShared(std::shared_ptr<const Model> global,
                                              const client::FitConfig& config) override;
  absl::StatusOr<client::EvalResult> EvaluateShared(std::shared_ptr<const Model> model) override;

  // The Python thread id of a call under way, 0 when none: Ctrl-C interrupts it there.
  unsigned long calling_thread() const { return calling_thread_.load(); }
  // Tensors handed back without a copy so far (fit results that borrowed their buffer).
  int64_t borrowed_results() const { return borrowed_results_.load(); }

 private:
  PyTrainer(nanobind::object trainer, ModelSpec spec);

  nanobind::object trainer_;  // touched with the GIL only
  ModelSpec spec_;
  std::atomic<unsigned long> calling_thread_{0};
  std::atomic<int64_t> borrowed_results_{0};
};

}  // namespace fl::python

#endif  // FL_PYTHON_PY_TRAINER_H_
