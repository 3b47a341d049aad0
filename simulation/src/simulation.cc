#include "fl/simulation/simulation.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "absl/strings/str_cat.h"
#include "fl/client/builtin_models.h"
#include "fl/client/dataset.h"
#include "fl/common/logging.h"
#include "fl/simulation/partition.h"
#include "simulation/internal/sim_setup.h"

namespace fl::simulation {

absl::StatusOr<internal::SimulationData> internal::PrepareSimulation(
    const SimulationOptions& options, const std::function<void(const std::string&)>& on_setup) {
  auto say = [&on_setup](const std::string& step) {
    if (on_setup) on_setup(step);
  };
  if (absl::Status s = options.privacy.Validate(); !s.ok()) return s;
  if (options.max_examples_per_client < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_examples_per_client must be >= 0 (0: all), got ", options.max_examples_per_client));
  }
  if (options.num_clients < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_clients must be >= 0 (0: one site per key of a natural split, else 10), got ",
        options.num_clients));
  }
  absl::StatusOr<client::ModelKind> kind = client::ParseModelKind(options.model);
  if (!kind.ok()) return kind.status();
  if (absl::Status s = options.strategy.Validate(); !s.ok()) return s;
  if (absl::Status s = options.attack.Validate(); !s.ok()) return s;
  if (options.attack.poisons_updates() &&
      (options.secure_aggregation.enabled || options.update_encoding != "float32" || options.mpi)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attack '", options.attack.kind,
        "' rewrites float32 updates in the clear between training and delivery: not with secure "
        "aggregation, update_encoding '",
        options.update_encoding,
        "' or MPI; use float32 updates in one process (label_flip works with any)"));
  }
  if (options.transport != "inproc" && options.transport != "grpc") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown transport '", options.transport, "'; choose inproc or grpc"));
  }
  if (options.trainer_factory) return PrepareCallersSites(options);
  SimulationData data;
  say(absl::StrCat("loading the data (", options.data, ")"));
  if (absl::Status s = LoadSimulationData(options, data); !s.ok()) return s;
  say(absl::StrCat("partitioning ", data.description));
  if (absl::Status s = PartitionSimulationData(options, data); !s.ok()) return s;

  client::ModelArchitecture& arch = data.arch;
  arch.kind = *kind;
  arch.num_features = data.train->num_features;
  arch.num_classes = data.train->num_classes;
  arch.hidden = options.hidden;
  arch.image_height = 28;  // Fashion-MNIST's; BuiltinModelSpec refuses a CNN on other data
  arch.image_width = 28;
  arch.image_channels = 1;
  if (absl::StatusOr<ModelSpec> spec = client::BuiltinModelSpec(arch); !spec.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", options.model, "' on ", data.description, ": ", spec.status().message()));
  }
  return data;
}

absl::StatusOr<internal::SimulationData> internal::PrepareCallersSites(
    const SimulationOptions& options) {
  auto refuse = [](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("a simulation of the caller's own sites (a "
                     "trainer_factory) ",
                     why));
  };
  if (options.num_clients < 1) return refuse("needs num_clients >= 1");
  if (options.initial_model == nullptr) return refuse("needs initial_model, the server's start");
  if (absl::Status s = options.initial_model->spec().Validate(); !s.ok()) {
    return refuse(absl::StrCat("has an invalid initial_model: ", s.message()));
  }
  if (options.transport != "inproc" || options.mpi) {
    return refuse("runs in process only (transport inproc, no MPI)");
  }
  if (options.attack.enabled() && options.attack.kind == "label_flip") {
    return refuse("cannot flip labels: the data is the trainers' own");
  }
  if (options.strategy.name == "fltrust" || options.strategy.name == "scaffold") {
    return refuse(absl::StrCat("cannot run strategy '", options.strategy.name, "': ",
                               options.strategy.name == "fltrust"
                                   ? "it needs the server's own root data"
                                   : "its control variates would be the trainers' to carry"));
  }
  SimulationData data;
  data.description = absl::StrCat(options.num_clients, " sites of the caller's own model");
  data.partition_name = "the caller's";
  data.parts.resize(static_cast<size_t>(options.num_clients));
  return data;
}

server::EngineOptions internal::EngineOptionsFor(const SimulationOptions& options,
                                                 const client::ModelArchitecture& arch) {
  server::EngineOptions engine;
  engine.run_name = absl::StrCat(options.trainer_factory ? "custom" : options.data, "-",
                                 options.trainer_factory ? "model" : options.model, "-",
                                 options.strategy.name, options.privacy.accounted() ? "-dp" : "",
                                 options.secure_aggregation.enabled ? "-secagg" : "");
  engine.num_rounds = options.num_rounds;
  engine.min_clients = options.num_clients;
  engine.min_fit_clients =
      options.min_fit_clients > 0
          ? options.min_fit_clients
          // Every sampled site: the engine samples ceil(n x fraction) (the epsilon as its own).
          : std::max(1, static_cast<int32_t>(
                            std::ceil(options.num_clients * options.sample_fraction - 1e-9)));
  engine.sample_fraction = options.sample_fraction;
  engine.round_timeout = options.round_timeout;
  engine.seed = options.seed;
  engine.fit = options.fit;
  // A caller's own model has no built-in name (Trainer::FitConfig::model_name empty).
  engine.fit.model_name =
      options.trainer_factory ? "" : std::string(client::ModelKindName(arch.kind));
  engine.privacy = options.privacy;
  engine.secure_aggregation = options.secure_aggregation;
  engine.update_encoding = options.update_encoding;
  // Nobody reads a simulated site's LAST_SEEN; writing 100,000 of them a minute would cost.
  engine.last_seen_flush = absl::InfiniteDuration();
  return engine;
}

client::BuiltinTrainerOptions internal::TrainerOptionsFor(const SimulationOptions& options,
                                                          int32_t site, int cpu_threads) {
  client::BuiltinTrainerOptions trainer_options;
  trainer_options.seed = options.seed * 1000 + static_cast<uint64_t>(site);
  trainer_options.backend = options.backend;
  trainer_options.cpu_threads = cpu_threads;
  trainer_options.scaffold = options.strategy.name == "scaffold";
  return trainer_options;
}

absl::Status internal::FinishResult(server::Store& store, SimulationResult& result,
                                    const std::vector<std::string>& site_errors) {
  absl::StatusOr<server::RunRecord> run = store.GetRun(result.run_id);
  if (!run.ok()) return run.status();
  if (run->status != server::RunStatus::kFinished) {
    return absl::AbortedError(absl::StrCat("run ", result.run_id, " ended ",
                                           server::ToString(run->status), ": ", run->reason));
  }
  if (!site_errors.empty()) return absl::InternalError(site_errors.front());
  for (const SimulationRound& r : result.rounds) {
    if (r.summary.committed && r.summary.metrics.count("test_accuracy")) {
      result.final_test_accuracy = r.summary.metrics.at("test_accuracy");
    }
  }
  result.finish_reason = run->reason;
  absl::StatusOr<std::vector<server::RoundRecord>> records = store.Rounds(result.run_id);
  if (!records.ok()) return records.status();
  // By round: the last committed one wins, or a failed attempt after it whose secure sum was
  // unmasked (its release counted: dp_epsilon set).
  for (const server::RoundRecord& r : *records) {
    if (r.status == server::RoundStatus::kCommitted || r.dp_epsilon > 0) {
      result.dp_epsilon = r.dp_epsilon;
      result.dp_epsilon_server = r.dp_epsilon_server;
    }
  }
  return absl::OkStatus();
}

std::function<void()> internal::MakeRoundRecorder(
    const SimulationOptions& options, SimulationResult& result, std::mutex& result_mu,
    std::atomic<server::Store*>& store, std::function<void(const SimulationRound&)> on_round,
    server::EngineHooks& hooks) {
  // The evaluation's wall time, measured around the hook and read when its round ends (the
  // engine calls both from the thread that finishes the round).
  auto evaluate_time = std::make_shared<std::atomic<int64_t>>(0);
  if (hooks.evaluate) {
    hooks.evaluate = [evaluate = std::move(hooks.evaluate), evaluate_time](const Model& model) {
      const absl::Time start = absl::Now();
      std::map<std::string, double> metrics = evaluate(model);
      evaluate_time->fetch_add(absl::ToInt64Nanoseconds(absl::Now() - start));
      return metrics;
    };
  }
  // When the last round attempt ended (or training started), for the next one's wall time.
  auto last_ns = std::make_shared<std::atomic<int64_t>>(absl::ToUnixNanos(absl::Now()));
  hooks.on_round_end = [&options, &result, &result_mu, &store, last_ns, evaluate_time,
                        on_round =
                            std::move(on_round)](const server::RoundSummary& summary) mutable {
    SimulationRound round;
    round.summary = summary;
    round.evaluate_time = absl::Nanoseconds(evaluate_time->exchange(0));
    const int64_t now = absl::ToUnixNanos(absl::Now());
    round.wall_time = absl::Nanoseconds(now - last_ns->exchange(now));
    server::Store* s = store.load();
    if (options.privacy.accounted() && summary.committed && s != nullptr) {
      // The engine records the epsilon with the round it commits; read it back from there.
      absl::StatusOr<std::vector<server::RoundRecord>> records = s->Rounds(summary.run_id);
      if (records.ok()) {
        for (const server::RoundRecord& r : *records) {
          if (r.round == summary.round && r.status == server::RoundStatus::kCommitted) {
            round.dp_epsilon = r.dp_epsilon;
          }
        }
      }
    }
    {
      std::lock_guard<std::mutex> lock(result_mu);
      result.rounds.push_back(round);
    }
    if (on_round) on_round(round);
  };
  return [last_ns] { last_ns->store(absl::ToUnixNanos(absl::Now())); };
}

absl::StatusOr<SimulationResult> RunSimulation(
    const SimulationOptions& options, std::function<void(const SimulationRound&)> on_round) {
  SimulationCallbacks callbacks;
  callbacks.on_round = std::move(on_round);
  return RunSimulation(options, callbacks);
}

namespace {

absl::StatusOr<SimulationResult> RunOnThisRank(const SimulationOptions& requested,
                                               const SimulationCallbacks& callbacks,
                                               const std::optional<internal::MpiJob>& mpi) {
  const absl::Time start = absl::Now();
  absl::StatusOr<internal::SimulationData> data =
      internal::PrepareSimulation(requested, callbacks.on_setup);
  if (!data.ok()) return data.status();
  SimulationOptions options = requested;  // with the number of sites the partition gave
  options.num_clients = static_cast<int32_t>(data->parts.size());
  if (mpi.has_value()) {
    options.transport = "grpc";
    if (mpi->rank > 0) return internal::RunMpiWorker(options, *data, *mpi);
  }
  if (callbacks.on_partition) callbacks.on_partition(data->summary);
  absl::StatusOr<SimulationResult> result =
      options.transport == "inproc"
          ? internal::RunInprocSimulation(options, *data, callbacks)
          : internal::RunGrpcSimulation(options, *data, callbacks, mpi ? &*mpi : nullptr);
  if (result.ok()) {
    result->partition = data->summary;
    result->wall_time = absl::Now() - start;
  }
  return result;
}

}  // namespace

absl::StatusOr<SimulationResult> RunSimulation(const SimulationOptions& requested,
                                               const SimulationCallbacks& callbacks) {
  if (!requested.mpi) return RunOnThisRank(requested, callbacks, std::nullopt);
  absl::StatusOr<internal::MpiJob> job = internal::JoinMpiJob();
  if (!job.ok()) return job.status();
  absl::StatusOr<SimulationResult> result = RunOnThisRank(requested, callbacks, *job);
  if (!result.ok() && job->size > 1) {
    // Rank 0 may be waited for, the others may not: a worker's error ends the job; rank 0 tells
    // the workers that still wait for its setup to stop (after that, its executor stopped them)
    // and returns its error, for its caller to report.
    if (job->rank > 0) internal::AbortMpiJob(*job, result.status());
    if (!internal::SetupWasBroadcast()) {
      internal::MpiSetup failed;
      failed.error = result.status().ToString();
      (void)internal::BroadcastSetup(*job, failed);
    }
  }
  return result;
}

absl::StatusOr<int32_t> SimulationRank(const SimulationOptions& options) {
  if (!options.mpi) return 0;
  absl::StatusOr<internal::MpiJob> job = internal::JoinMpiJob();
  if (!job.ok()) return job.status();
  return job->rank;
}

}  // namespace fl::simulation
