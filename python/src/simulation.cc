// fl._fl.simulate and fl._fl.partition: a whole federation of Python sites in this process (the
// real round engine, store and strategy; fl::simulation::RunSimulation with the caller's
// trainers), and the simulation's partitioners over a label array.
//
// RunSimulation runs on a thread of its own while the calling thread waits with the GIL released
// (the pool's workers call the Python trainers, taking the GIL around each call; the commit's
// evaluation and the round reports run on the simulation's thread). Ctrl-C makes every later
// trainer creation fail, which ends the run, and raises KeyboardInterrupt once it has ended.
#include "python/src/simulation.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fl/simulation/partition.h"
#include "fl/simulation/simulation.h"
#include "python/src/gil.h"
#include "python/src/py_trainer.h"
#include "python/src/status.h"
#include "python/src/weights.h"

namespace nb = nanobind;

namespace fl::python {
namespace {

template <typename T>
void Set(nb::handle d, const char* key, T& out) {
  if (!nb::bool_(d.attr("__contains__")(key))) return;
  if (!nb::try_cast(d[key], out)) {
    throw nb::value_error(
        absl::StrCat("'", key, "' has the wrong type: ", SafeStr(nb::repr(d[key]))).c_str());
  }
}

aggregation::StrategyOptions StrategyOf(nb::handle d) {
  aggregation::StrategyOptions s;
  Set(d, "name", s.name);
  Set(d, "proximal_mu", s.proximal_mu);
  Set(d, "momentum", s.momentum);
  Set(d, "weight_decay", s.weight_decay);
  Set(d, "server_learning_rate", s.server_learning_rate);
  Set(d, "server_momentum", s.server_momentum);
  Set(d, "beta_1", s.beta_1);
  Set(d, "beta_2", s.beta_2);
  Set(d, "tau", s.tau);
  Set(d, "trim_beta", s.trim_beta);
  Set(d, "num_malicious", s.num_malicious);
  Set(d, "num_to_keep", s.num_to_keep);
  Set(d, "q", s.q);
  Set(d, "norm_bound", s.norm_bound);
  return s;
}

nb::dict RoundDict(const simulation::SimulationRound& r) {
  nb::dict d;
  d["round"] = r.summary.round;
  d["committed"] = r.summary.committed;
  d["num_accepted"] = r.summary.num_accepted;
  d["reason"] = r.summary.reason;
  nb::dict metrics;
  for (const auto& [k, v] : r.summary.metrics) metrics[k.c_str()] = v;
  d["metrics"] = metrics;
  d["dp_epsilon"] = r.dp_epsilon;
  d["wall_seconds"] = absl::ToDoubleSeconds(r.wall_time);
  return d;
}

nb::dict Simulate(nb::object client_fn, nb::object initial_weights, int32_t num_clients,
                  int32_t rounds, nb::dict strategy, nb::dict fit, double sample_fraction,
                  int32_t min_fit_clients, uint64_t seed, int32_t workers, std::string work_dir,
                  nb::object evaluate, nb::object on_round) {
  absl::StatusOr<ModelSpec> spec = SpecOfWeights(initial_weights);
  if (!spec.ok()) Raise(spec.status());
  absl::StatusOr<Model> initial = ModelFromWeights(initial_weights, *spec, "initial_weights");
  if (!initial.ok()) Raise(initial.status());

  simulation::SimulationOptions o;
  o.num_clients = num_clients;
  o.num_rounds = rounds;
  o.sample_fraction = sample_fraction;
  o.min_fit_clients = min_fit_clients;
  o.seed = seed;
  o.workers = workers;
  o.work_dir = std::move(work_dir);
  o.strategy = StrategyOf(strategy);
  Set(fit, "local_epochs", o.fit.local_epochs);
  Set(fit, "batch_size", o.fit.batch_size);
  Set(fit, "learning_rate", o.fit.learning_rate);
  o.initial_model = std::make_shared<const Model>(*std::move(initial));

  auto stopping = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<nb::object> make = Shared(std::move(client_fn));
  const ModelSpec site_spec = *spec;
  o.trainer_factory = [make, stopping, site_spec](
                          int32_t site) -> absl::StatusOr<std::unique_ptr<client::Trainer>> {
    if (stopping->load()) return absl::CancelledError("interrupted (Ctrl-C)");
    nb::gil_scoped_acquire gil;
    nb::object trainer;
    try {
      trainer = (*make)(site);
    } catch (nb::python_error& e) {
      return StatusOfPythonError(e, absl::StrCat("client_fn(", site, ")").c_str());
    }
    absl::StatusOr<std::unique_ptr<PyTrainer>> t = PyTrainer::Create(std::move(trainer), site_spec);
    if (!t.ok()) return t.status();
    return std::unique_ptr<client::Trainer>(*std::move(t));
  };
  if (!evaluate.is_none()) {
    std::shared_ptr<nb::object> fn = Shared(std::move(evaluate));
    o.evaluate = [fn](const Model& model) -> absl::StatusOr<std::map<std::string, double>> {
      // A copy the views may keep: the engine's model is its own.
      auto copy = std::make_shared<const Model>(model.Clone());
      nb::gil_scoped_acquire gil;
      try {
        nb::object r = (*fn)(GlobalWeights(std::move(copy)));
        std::map<std::string, double> metrics;
        if (!r.is_none() && !nb::try_cast(r, metrics)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "evaluate_fn must return a dict of name to number, not ", SafeStr(nb::repr(r))));
        }
        return metrics;
      } catch (nb::python_error& e) {
        return StatusOfPythonError(e, "evaluate_fn");
      }
    };
  }
  simulation::SimulationCallbacks callbacks;
  if (!on_round.is_none()) {
    std::shared_ptr<nb::object> fn = Shared(std::move(on_round));
    callbacks.on_round = [fn](const simulation::SimulationRound& r) {
      nb::gil_scoped_acquire gil;
      try {
        (*fn)(RoundDict(r));
      } catch (nb::python_error& e) {
        e.discard_as_unraisable("fl.simulation on_round callback");
      }
    };
  }

  std::promise<absl::StatusOr<simulation::SimulationResult>> done;
  auto result = done.get_future();
  std::thread runner([&] { done.set_value(simulation::RunSimulation(o, callbacks)); });
  std::optional<nb::python_error> pending =
      WaitHandlingSignals(result, [&] { stopping->store(true); });
  runner.join();
  if (pending.has_value()) throw *pending;
  absl::StatusOr<simulation::SimulationResult> r = result.get();
  if (!r.ok()) Raise(r.status());
  nb::dict out;
  out["run_id"] = r->run_id;
  nb::list rounds_out;
  for (const simulation::SimulationRound& round : r->rounds) rounds_out.append(RoundDict(round));
  out["rounds"] = rounds_out;
  out["final_test_accuracy"] = r->final_test_accuracy;
  out["dp_epsilon"] = r->dp_epsilon;
  out["finish_reason"] = r->finish_reason;
  out["db_path"] = r->db_path;
  out["wall_seconds"] = absl::ToDoubleSeconds(r->wall_time);
  return out;
}

nb::list Partition(nb::object labels, int32_t num_clients, std::string name, double beta, int32_t k,
                   int32_t shards_per_client, int64_t examples_per_party, uint64_t seed) {
  nb::object as_int =
      nb::module_::import_("numpy").attr("asarray")(labels, "int32").attr("ravel")();
  nb::ndarray<const int32_t, nb::c_contig, nb::device::cpu> a;
  if (!nb::try_cast(as_int, a, false)) Raise(absl::InvalidArgumentError("labels must be integers"));
  std::vector<int32_t> y(a.data(), a.data() + a.size());
  int32_t classes = 0;
  for (int32_t v : y) {
    if (v < 0) Raise(absl::InvalidArgumentError("labels must be >= 0"));
    classes = std::max(classes, v + 1);
  }
  simulation::PartitionSpec spec;
  spec.name = std::move(name);
  spec.beta = beta;
  spec.k = k;
  spec.shards_per_client = shards_per_client;
  spec.examples_per_party = examples_per_party;
  spec.seed = seed;
  absl::StatusOr<simulation::Partition> parts =
      simulation::MakePartition(spec, y, classes, num_clients);
  if (!parts.ok()) Raise(parts.status());
  nb::list out;
  nb::object np_array = nb::module_::import_("numpy").attr("array");
  for (const std::vector<int64_t>& rows : *parts) {
    nb::list l;
    for (int64_t r : rows) l.append(r);
    out.append(np_array(l, "int64"));
  }
  return out;
}

}  // namespace

void RegisterSimulation(nb::module_& m) {
  m.def("simulate", &Simulate, nb::arg("client_fn"), nb::arg("initial_weights"),
        nb::arg("num_clients"), nb::arg("rounds"), nb::arg("strategy"), nb::arg("fit"),
        nb::arg("sample_fraction"), nb::arg("min_fit_clients"), nb::arg("seed"), nb::arg("workers"),
        nb::arg("work_dir"), nb::arg("evaluate").none(), nb::arg("on_round").none());
  m.def("partition", &Partition, nb::arg("labels"), nb::arg("num_clients"), nb::arg("name"),
        nb::arg("beta"), nb::arg("k"), nb::arg("shards_per_client"), nb::arg("examples_per_party"),
        nb::arg("seed"));
}

}  // namespace fl::python
