#include "python/src/py_trainer.h"

#include <nanobind/stl/string.h>
#include <pythread.h>

#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "fl/common/logging.h"
#include "python/src/status.h"
#include "python/src/weights.h"

namespace nb = nanobind;

namespace fl::python {
namespace {

// Marks the calling thread as in a trainer call while it lives (for Ctrl-C).
class CallScope {
 public:
  explicit CallScope(std::atomic<unsigned long>& slot) : slot_(slot) {
    slot_.store(PyThread_get_thread_ident());
  }
  ~CallScope() { slot_.store(0); }

 private:
  std::atomic<unsigned long>& slot_;
};

nb::dict ConfigDict(const client::FitConfig& c) {
  nb::dict d;
  for (const auto& [k, v] : c.extra) d[k.c_str()] = v;
  d["round"] = c.round;
  d["local_epochs"] = c.local_epochs;
  d["batch_size"] = c.batch_size;
  d["learning_rate"] = c.learning_rate;
  d["model_name"] = c.model_name;
  d["differential_privacy"] = c.differential_privacy;
  d["secure_aggregation"] = c.secure_aggregation;
  return d;
}

absl::StatusOr<std::map<std::string, double>> Metrics(nb::handle m, const char* what) {
  std::map<std::string, double> out;
  if (m.is_none()) return out;
  if (!nb::hasattr(m, "items")) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " metrics must be a dict of name to number"));
  }
  for (nb::handle item : m.attr("items")()) {
    double value = 0;
    if (!nb::isinstance<nb::str>(item[0]) || !nb::try_cast(item[1], value)) {
      return absl::InvalidArgumentError(absl::StrCat(what, " metric ", SafeStr(nb::repr(item[0])),
                                                     " must be a number under a string name, not ",
                                                     SafeStr(nb::repr(item[1]))));
    }
    const std::string name = SafeStr(item[0]);
    if (!std::isfinite(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " metric '", name, "' is ", value, "; metrics must be finite"));
    }
    out[name] = value;
  }
  return out;
}

// The tuple a trainer returned, checked to have `n` or `n - 1` items (metrics optional).
absl::StatusOr<nb::tuple> Returned(nb::handle r, const char* what, const char* form) {
  if (!nb::isinstance<nb::tuple>(r) && !nb::isinstance<nb::list>(r)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must return ", form, ", not ", SafeStr(nb::repr(r.type()))));
  }
  nb::tuple t = nb::tuple(r);
  if (nb::len(t) != 2 && nb::len(t) != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must return ", form, ", not ", nb::len(t), " values"));
  }
  return t;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PyTrainer>> PyTrainer::Create(nb::object trainer) {
  if (!nb::hasattr(trainer, "fit") || !nb::hasattr(trainer, "get_weights")) {
    return absl::InvalidArgumentError(
        "the trainer needs get_weights() (the model's tensors by name) and fit(weights, config); "
        "evaluate(weights, config) is optional");
  }
  absl::StatusOr<ModelSpec> spec = absl::UnknownError("");
  try {
    spec = SpecOfWeights(trainer.attr("get_weights")());
  } catch (nb::python_error& e) {
    return StatusOfPythonError(e, "get_weights()");
  }
  if (!spec.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the trainer's get_weights(): ", spec.status().message()));
  }
  return std::unique_ptr<PyTrainer>(new PyTrainer(std::move(trainer), *std::move(spec)));
}

absl::StatusOr<std::unique_ptr<PyTrainer>> PyTrainer::Create(nb::object trainer, ModelSpec spec) {
  if (!nb::hasattr(trainer, "fit")) {
    return absl::InvalidArgumentError(
        absl::StrCat("the trainer (", SafeStr(nb::repr(trainer.type())),
                     ") has no fit(weights, config); evaluate(weights, config) is optional"));
  }
  return std::unique_ptr<PyTrainer>(new PyTrainer(std::move(trainer), std::move(spec)));
}

PyTrainer::PyTrainer(nb::object trainer, ModelSpec spec)
    : trainer_(std::move(trainer)), spec_(std::move(spec)) {}

PyTrainer::~PyTrainer() {
  nb::gil_scoped_acquire gil;
  trainer_.reset();
}

absl::StatusOr<client::FitResult> PyTrainer::Fit(const Model& global,
                                                 const client::FitConfig& config) {
  return FitShared(std::make_shared<const Model>(global.Clone()), config);
}

absl::StatusOr<client::EvalResult> PyTrainer::Evaluate(const Model& model) {
  return EvaluateShared(std::make_shared<const Model>(model.Clone()));
}

absl::StatusOr<client::FitResult> PyTrainer::FitShared(std::shared_ptr<const Model> global,
                                                       const client::FitConfig& config) {
  nb::gil_scoped_acquire gil;
  CallScope scope(calling_thread_);
  try {
    nb::object r = trainer_.attr("fit")(GlobalWeights(std::move(global)), ConfigDict(config));
    absl::StatusOr<nb::tuple> t =
        Returned(r, "fit", "(weights, num_examples) or (weights, num_examples, metrics)");
    if (!t.ok()) return t.status();
    client::FitResult out{.model = Model(ModelSpec()), .num_examples = 0, .metrics = {}};
    bool borrowed = false;
    absl::StatusOr<Model> model = ModelFromWeights((*t)[0], spec_, "fit's weights", &borrowed);
    if (!model.ok()) return model.status();
    out.model = *std::move(model);
    if (borrowed && config.secure_aggregation) {
      // The masked-input stage turns the update into its change, clips and masks it in place:
      // that must not be the trainer's own memory.
      out.model = out.model.Clone();
      borrowed = false;
    }
    if (borrowed) borrowed_results_.fetch_add(1);
    if (nb::isinstance<nb::bool_>((*t)[1]) || !nb::try_cast((*t)[1], out.num_examples) ||
        out.num_examples <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fit's num_examples must be a positive int, not ", SafeStr(nb::repr((*t)[1]))));
    }
    if (nb::len(*t) == 3) {
      absl::StatusOr<std::map<std::string, double>> m = Metrics((*t)[2], "fit's");
      if (!m.ok()) return m.status();
      out.metrics = *std::move(m);
    }
    return out;
  } catch (nb::python_error& e) {
    return StatusOfPythonError(e, "fit");
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("reading fit's result: ", e.what()));
  }
}

absl::StatusOr<client::EvalResult> PyTrainer::EvaluateShared(std::shared_ptr<const Model> model) {
  nb::gil_scoped_acquire gil;
  if (!nb::hasattr(trainer_, "evaluate")) {
    return absl::UnimplementedError("this site's trainer has no evaluate(weights, config)");
  }
  CallScope scope(calling_thread_);
  try {
    nb::object r = trainer_.attr("evaluate")(GlobalWeights(std::move(model)), nb::dict());
    absl::StatusOr<nb::tuple> t =
        Returned(r, "evaluate", "(loss, num_examples) or (loss, num_examples, metrics)");
    if (!t.ok()) return t.status();
    client::EvalResult out;
    if (!nb::try_cast((*t)[0], out.loss) || !nb::try_cast((*t)[1], out.num_examples) ||
        out.num_examples < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("evaluate must return a number (the loss) and a non-negative int (the "
                       "examples), not ",
                       SafeStr(nb::repr(r))));
    }
    if (nb::len(*t) == 3) {
      absl::StatusOr<std::map<std::string, double>> m = Metrics((*t)[2], "evaluate's");
      if (!m.ok()) return m.status();
      out.metrics = *std::move(m);
    }
    return out;
  } catch (nb::python_error& e) {
    return StatusOfPythonError(e, "evaluate");
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("reading evaluate's result: ", e.what()));
  }
}

}  // namespace fl::python
