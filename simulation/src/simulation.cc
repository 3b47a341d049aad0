#include "fl/simulation/simulation.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "fl/aggregation/scaffold.h"
#include "fl/client/builtin_models.h"
#include "fl/client/client.h"
#include "fl/client/dataset.h"
#include "fl/common/file_util.h"
#include "fl/common/logging.h"
#include "fl/common/provision.h"
#include "fl/server/server.h"
#include "fl/simulation/evaluation.h"
#include "fl/simulation/partition.h"
#include "simulation/internal/sim_setup.h"

namespace fl::simulation {

absl::StatusOr<internal::SimulationData> internal::PrepareSimulation(
    const SimulationOptions& options) {
  if (absl::Status s = options.privacy.Validate(); !s.ok()) return s;
  if (options.max_examples_per_client < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_examples_per_client must be >= 0 (0: all), got ", options.max_examples_per_client));
  }
  SimulationData data;
  absl::StatusOr<client::Dataset> train =
      client::LoadIdx(options.dataset_dir + "/train-images-idx3-ubyte.gz",
                      options.dataset_dir + "/train-labels-idx1-ubyte.gz");
  if (!train.ok()) return train.status();
  absl::StatusOr<client::Dataset> test =
      client::LoadIdx(options.dataset_dir + "/t10k-images-idx3-ubyte.gz",
                      options.dataset_dir + "/t10k-labels-idx1-ubyte.gz");
  if (!test.ok()) return test.status();

  absl::StatusOr<std::vector<std::vector<int64_t>>> parts =
      options.partition == "iid"
          ? PartitionIid(train->num_examples(), options.num_clients, options.seed)
      : options.partition == "dirichlet"
          ? PartitionDirichlet(train->labels, train->num_classes, options.num_clients,
                               options.dirichlet_beta, options.seed)
          : absl::StatusOr<std::vector<std::vector<int64_t>>>(
                absl::InvalidArgumentError(absl::StrCat("unknown partition '", options.partition,
                                                        "'; choose iid or dirichlet")));
  if (!parts.ok()) return parts.status();
  if (options.max_examples_per_client > 0) {
    for (std::vector<int64_t>& part : *parts) {
      if (static_cast<int64_t>(part.size()) > options.max_examples_per_client) {
        part.resize(static_cast<size_t>(options.max_examples_per_client));
      }
    }
  }

  absl::StatusOr<client::ModelKind> kind = client::ParseModelKind(options.model);
  if (!kind.ok()) return kind.status();
  if (absl::Status s = options.strategy.Validate(); !s.ok()) return s;
  if (options.transport != "inproc" && options.transport != "grpc") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown transport '", options.transport, "'; choose inproc or grpc"));
  }
  client::ModelArchitecture& arch = data.arch;
  arch.kind = *kind;
  arch.num_features = train->num_features;
  arch.num_classes = train->num_classes;
  arch.hidden = options.hidden;
  arch.image_height = 28;  // Fashion-MNIST
  arch.image_width = 28;
  arch.image_channels = 1;
  data.train = std::make_shared<const client::Dataset>(*std::move(train));
  data.test = std::make_shared<const client::Dataset>(*std::move(test));
  data.parts = *std::move(parts);
  return data;
}

server::EngineOptions internal::EngineOptionsFor(const SimulationOptions& options,
                                                 const client::ModelArchitecture& arch) {
  server::EngineOptions engine;
  engine.run_name = absl::StrCat("fashion-mnist-", options.model, "-", options.strategy.name,
                                 options.privacy.accounted() ? "-dp" : "",
                                 options.secure_aggregation.enabled ? "-secagg" : "");
  engine.num_rounds = options.num_rounds;
  engine.min_clients = options.num_clients;
  engine.min_fit_clients =
      options.min_fit_clients > 0
          ? options.min_fit_clients
          : std::max(1, static_cast<int32_t>(options.num_clients * options.sample_fraction));
  engine.sample_fraction = options.sample_fraction;
  engine.round_timeout = options.round_timeout;
  engine.seed = options.seed;
  engine.fit = options.fit;
  engine.fit.model_name = std::string(client::ModelKindName(arch.kind));
  engine.privacy = options.privacy;
  engine.secure_aggregation = options.secure_aggregation;
  engine.update_encoding = options.update_encoding;
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
  for (const server::RoundRecord& r : *records) {  // by round: the last committed one wins
    if (r.status == server::RoundStatus::kCommitted) result.dp_epsilon = r.dp_epsilon;
  }
  return absl::OkStatus();
}

void internal::MakeRoundRecorder(
    const SimulationOptions& options, SimulationResult& result, std::mutex& result_mu,
    std::atomic<server::Store*>& store, std::function<void(const SimulationRound&)> on_round,
    server::EngineHooks& hooks) {
  hooks.on_round_end = [&options, &result, &result_mu, &store, last = absl::Now(),
                        on_round = std::move(on_round)](
                           const server::RoundSummary& summary) mutable {
    SimulationRound round;
    round.summary = summary;
    const absl::Time now = absl::Now();
    round.wall_time = now - last;
    last = now;
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
}

absl::StatusOr<SimulationResult> RunSimulation(
    const SimulationOptions& options, std::function<void(const SimulationRound&)> on_round) {
  const absl::Time start = absl::Now();
  absl::StatusOr<internal::SimulationData> data = internal::PrepareSimulation(options);
  if (!data.ok()) return data.status();
  if (options.transport == "inproc") {
    absl::StatusOr<SimulationResult> result =
        internal::RunInprocSimulation(options, *data, std::move(on_round));
    if (result.ok()) result->wall_time = absl::Now() - start;
    return result;
  }
  const client::ModelArchitecture& arch = data->arch;
  const client::Dataset* train = data->train.get();
  const std::vector<std::vector<int64_t>>* parts = &data->parts;
  // The clients train at once: share the cores among them.
  const int cpu_threads = std::max(
      1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, options.num_clients));

  if (absl::Status s = MakeDirectories(options.work_dir); !s.ok()) return s;
  ProvisionOptions provision;
  provision.out_dir = options.work_dir + "/certs";
  for (int32_t i = 0; i < options.num_clients; ++i) {
    provision.client_names.push_back(absl::StrCat("site-", i));
  }
  ProvisionedFiles files;
  if (options.tls) {
    absl::StatusOr<ProvisionedFiles> made = ProvisionFederation(provision);
    if (!made.ok()) return made.status();
    files = *std::move(made);
  }

  server::ServerOptions server_options;
  server_options.listen_address = "127.0.0.1:0";
  server_options.data_dir = options.work_dir + "/server";
  server_options.insecure_plaintext = !options.tls;
  server_options.ca_cert_path = files.ca_cert;
  server_options.cert_path = files.server_cert;
  server_options.key_path = files.server_key;
  server_options.enroll_cert_paths = files.client_certs;
  server_options.engine = internal::EngineOptionsFor(options, arch);
  server_options.strategy = options.strategy;
  const bool scaffold = options.strategy.name == "scaffold";

  SimulationResult result;
  std::mutex result_mu;
  // Set once the server has started, before any client exists (so before any round ends).
  std::atomic<server::Store*> store{nullptr};
  server::EngineHooks hooks;
  hooks.evaluate = BuiltinTestSetEvaluation(arch, data->test, options.backend);
  internal::MakeRoundRecorder(options, result, result_mu, store, std::move(on_round), hooks);
  absl::StatusOr<Model> weights = client::InitialBuiltinModel(arch, options.seed);
  if (!weights.ok()) return weights.status();
  Model initial = scaffold ? aggregation::WithZeroControlVariates(*weights) : *std::move(weights);
  absl::StatusOr<std::unique_ptr<server::Server>> server =
      server::Server::Start(server_options, std::move(initial), hooks);
  if (!server.ok()) return server.status();
  result.run_id = (*server)->engine().run_id();
  result.db_path = (*server)->store().db_path();
  store.store(&(*server)->store());

  std::vector<std::unique_ptr<client::Trainer>> trainers;
  std::vector<std::unique_ptr<client::Client>> clients;
  for (int32_t i = 0; i < options.num_clients; ++i) {
    absl::StatusOr<std::unique_ptr<client::Trainer>> trainer =
        client::MakeBuiltinTrainer(arch, train->Subset((*parts)[i]), client::Dataset{},
                                   internal::TrainerOptionsFor(options, i, cpu_threads));
    if (!trainer.ok()) return trainer.status();
    trainers.push_back(*std::move(trainer));
    client::ClientOptions client_options;
    client_options.server_address = absl::StrCat("127.0.0.1:", (*server)->port());
    client_options.name = provision.client_names[i];
    client_options.insecure_plaintext = !options.tls;
    if (options.tls) {
      client_options.ca_cert_path = files.ca_cert;
      client_options.cert_path = files.client_certs[i];
      client_options.key_path = files.client_keys[i];
    }
    absl::StatusOr<std::unique_ptr<client::Client>> c =
        client::Client::Create(client_options, trainers.back().get());
    if (!c.ok()) return c.status();
    clients.push_back(*std::move(c));
  }
  std::vector<absl::Status> client_status(clients.size());
  std::vector<std::thread> threads;
  std::atomic<int> clients_done{0};
  for (size_t i = 0; i < clients.size(); ++i) {
    threads.emplace_back([&, i] {
      client_status[i] = clients[i]->Run();
      ++clients_done;
    });
  }
  (*server)->WaitUntilFinished(absl::ZeroDuration());
  // Clients hear DONE at their next poll; give them a moment, then stop the stragglers.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (clients_done.load() < options.num_clients && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  for (auto& c : clients) c->Stop();
  for (std::thread& t : threads) t.join();
  (*server)->Shutdown();

  std::vector<std::string> errors;
  for (size_t i = 0; i < client_status.size(); ++i) {
    if (!client_status[i].ok() && !absl::IsCancelled(client_status[i])) {
      errors.push_back(absl::StrCat("client ", provision.client_names[i],
                                    " failed: ", client_status[i].ToString()));
    }
  }
  if (absl::Status s = internal::FinishResult((*server)->store(), result, errors); !s.ok()) {
    return s;
  }
  result.wall_time = absl::Now() - start;
  return result;
}

}  // namespace fl::simulation
