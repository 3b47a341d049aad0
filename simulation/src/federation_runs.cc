// RunSimulation's two transports, both on virtual sites (simulation/internal/virtual_federation.h)
// driven on a simulated clock, so that the same seed gives the same model over either:
//   inproc: the real store (SQLite under work_dir/server), strategy and round engine in this
//     process; no certificate, socket or serialization;
//   grpc: the real server (gRPC, mutual TLS with a certificate per site, or plaintext) on a
//     loopback port, each working site connecting with the SDK's gRPC transport; only the sites
//     at work hold a channel, so thousands of sites need neither thousands of threads nor of
//     connections.
#include <atomic>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "fl/aggregation/scaffold.h"
#include "fl/aggregation/strategies.h"
#include "fl/common/crypto.h"
#include "fl/common/file_util.h"
#include "fl/common/logging.h"
#include "fl/common/provision.h"
#include "fl/server/server.h"
#include "fl/simulation/evaluation.h"
#include "simulation/internal/sim_setup.h"
#include "simulation/internal/virtual_federation.h"

namespace fl::simulation::internal {
namespace {

void Say(const SimulationCallbacks& callbacks, const std::string& step) {
  if (callbacks.on_setup) callbacks.on_setup(step);
}

absl::StatusOr<Model> InitialModel(const SimulationOptions& options, const SimulationData& data) {
  absl::StatusOr<Model> weights = client::InitialBuiltinModel(data.arch, options.seed);
  if (!weights.ok()) return weights.status();
  return options.strategy.name == "scaffold" ? aggregation::WithZeroControlVariates(*weights)
                                             : *std::move(weights);
}

// Joins the sites and drives `engine` to the end of its run; `sites` says how they reach it.
absl::Status DriveSites(const SimulationOptions& options, const SimulationData& data,
                        server::RoundEngine& engine, SimulatedClock& clock, const ModelSpec& spec,
                        const SimulationCallbacks& callbacks, VirtualFederationOptions sites) {
  const int32_t n = options.num_clients;
  sites.num_sites = n;
  sites.workers = options.workers;
  sites.persistent_trainers = options.strategy.name == "scaffold";
  sites.heterogeneity = options.heterogeneity;
  sites.seed = options.seed;
  const int workers = options.workers > 0
                          ? options.workers
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  // Sites train at once on the pool: share the cores among the workers.
  const int cpu_threads =
      std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / workers);
  auto make_trainer = [&](int32_t site) {
    return client::MakeBuiltinTrainer(
        data.arch, data.train->Subset(data.parts[static_cast<size_t>(site)]), client::Dataset{},
        TrainerOptionsFor(options, site, cpu_threads));
  };
  Say(callbacks, absl::StrCat("joining ", n, " virtual sites (", options.transport, ", ", workers,
                              " workers)"));
  absl::StatusOr<VirtualFederationStats> stats = RunVirtualFederation(
      engine, clock, sites, spec, make_trainer, [&callbacks, n](int32_t joined) {
        Say(callbacks, joined == n ? absl::StrCat("all ", n, " sites joined; training")
                                   : absl::StrCat(joined, " sites joined"));
      });
  if (!stats.ok()) return stats.status();
  LogEvent(LogLevel::kInfo, "simulation_sites_done",
           {{"tasks", absl::StrCat(stats->tasks)},
            {"dropouts", absl::StrCat(stats->dropouts)},
            {"refused", absl::StrCat(stats->refused)},
            {"join_time", absl::FormatDuration(stats->join_time)},
            {"simulated_time", absl::FormatDuration(stats->simulated_time)}});
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SimulationResult> RunInprocSimulation(const SimulationOptions& options,
                                                     const SimulationData& data,
                                                     const SimulationCallbacks& callbacks) {
  const std::string data_dir = options.work_dir + "/server";
  server::EngineOptions engine_options = EngineOptionsFor(options, data.arch);
  engine_options.spill_dir = data_dir + "/spill";
  if (absl::Status s = MakeDirectories(engine_options.spill_dir); !s.ok()) return s;
  const int32_t n = options.num_clients;
  absl::StatusOr<std::unique_ptr<aggregation::Strategy>> strategy =
      aggregation::MakeStrategy(options.strategy, [n] { return int64_t{n}; });
  if (!strategy.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("strategy: ", strategy.status().message()));
  }
  for (const auto& [key, value] : options.strategy.ClientConfig()) {
    engine_options.fit.extra[key] = value;
  }
  absl::StatusOr<Model> initial = InitialModel(options, data);
  if (!initial.ok()) return initial.status();
  if (absl::Status s = (*strategy)->CheckModel(initial->spec()); !s.ok()) return s;
  const ModelSpec spec = initial->spec();

  absl::StatusOr<std::unique_ptr<server::Store>> store = server::Store::Open(data_dir);
  if (!store.ok()) return store.status();
  SimulationResult result;
  std::mutex result_mu;
  std::atomic<server::Store*> store_ptr{store->get()};
  server::EngineHooks hooks;
  hooks.evaluate = BuiltinTestSetEvaluation(data.arch, data.test, options.backend);
  MakeRoundRecorder(options, result, result_mu, store_ptr, callbacks.on_round, hooks);
  SimulatedClock clock(absl::Now());
  absl::StatusOr<std::unique_ptr<server::RoundEngine>> engine = server::RoundEngine::Create(
      engine_options, store->get(), strategy->get(), &clock, *std::move(initial), hooks);
  if (!engine.ok()) return engine.status();
  result.run_id = (*engine)->run_id();
  result.db_path = (*store)->db_path();

  VirtualFederationOptions sites;
  sites.client_timeout = engine_options.client_timeout;
  if (absl::Status s = DriveSites(options, data, **engine, clock, spec, callbacks, sites);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = FinishResult(**store, result, {}); !s.ok()) return s;
  return result;
}

absl::StatusOr<SimulationResult> RunGrpcSimulation(const SimulationOptions& options,
                                                   const SimulationData& data,
                                                   const SimulationCallbacks& callbacks) {
  const int32_t n = options.num_clients;
  if (absl::Status s = MakeDirectories(options.work_dir); !s.ok()) return s;
  ProvisionOptions provision;
  provision.out_dir = options.work_dir + "/certs";
  for (int32_t i = 0; i < n; ++i) provision.client_names.push_back(absl::StrCat("site-", i));
  ProvisionedFiles files;
  std::vector<std::string> ids(static_cast<size_t>(n));
  if (options.tls) {
    Say(callbacks, absl::StrCat("making a CA, a server certificate and ", n, " site certificates"));
    absl::StatusOr<ProvisionedFiles> made = ProvisionFederation(provision);
    if (!made.ok()) return made.status();
    files = *std::move(made);
    for (int32_t i = 0; i < n; ++i) {  // the server knows a site by its certificate
      absl::StatusOr<std::string> pem = ReadFile(files.client_certs[static_cast<size_t>(i)]);
      if (!pem.ok()) return pem.status();
      absl::StatusOr<std::string> fingerprint = CertificateFingerprint(*pem);
      if (!fingerprint.ok()) return fingerprint.status();
      ids[static_cast<size_t>(i)] = *std::move(fingerprint);
    }
  } else {
    for (int32_t i = 0; i < n; ++i) {  // and in plaintext by the name it sends
      ids[static_cast<size_t>(i)] = absl::StrCat("plain:", provision.client_names[i]);
    }
  }

  server::ServerOptions server_options;
  server_options.listen_address = "127.0.0.1:0";
  server_options.data_dir = options.work_dir + "/server";
  server_options.insecure_plaintext = !options.tls;
  server_options.ca_cert_path = files.ca_cert;
  server_options.cert_path = files.server_cert;
  server_options.key_path = files.server_key;
  server_options.enroll_cert_paths = files.client_certs;
  server_options.engine = EngineOptionsFor(options, data.arch);
  server_options.strategy = options.strategy;
  SimulatedClock clock(absl::Now());
  server_options.clock = &clock;

  SimulationResult result;
  std::mutex result_mu;
  // Set once the server has started, before any site joins (so before any round ends).
  std::atomic<server::Store*> store{nullptr};
  server::EngineHooks hooks;
  hooks.evaluate = BuiltinTestSetEvaluation(data.arch, data.test, options.backend);
  MakeRoundRecorder(options, result, result_mu, store, callbacks.on_round, hooks);
  absl::StatusOr<Model> initial = InitialModel(options, data);
  if (!initial.ok()) return initial.status();
  const ModelSpec spec = initial->spec();
  Say(callbacks, absl::StrCat("starting the server (", options.tls ? "mutual TLS" : "plaintext",
                              ", loopback)"));
  absl::StatusOr<std::unique_ptr<server::Server>> server =
      server::Server::Start(server_options, *std::move(initial), hooks);
  if (!server.ok()) return server.status();
  result.run_id = (*server)->engine().run_id();
  result.db_path = (*server)->store().db_path();
  store.store(&(*server)->store());

  VirtualFederationOptions sites;
  sites.client_timeout = server_options.engine.client_timeout;
  sites.site_id = [&ids](int32_t i) { return ids[static_cast<size_t>(i)]; };
  const std::string address = absl::StrCat("127.0.0.1:", (*server)->port());
  sites.make_transport = [&](int32_t i) -> absl::StatusOr<std::unique_ptr<client::Transport>> {
    client::ClientOptions c;
    c.server_address = address;
    c.name = provision.client_names[static_cast<size_t>(i)];
    c.insecure_plaintext = !options.tls;
    if (options.tls) {
      c.ca_cert_path = files.ca_cert;
      c.cert_path = files.client_certs[static_cast<size_t>(i)];
      c.key_path = files.client_keys[static_cast<size_t>(i)];
    }
    return client::MakeGrpcTransport(c);
  };
  absl::Status driven =
      DriveSites(options, data, (*server)->engine(), clock, spec, callbacks, std::move(sites));
  (*server)->Shutdown();
  if (!driven.ok()) return driven;
  if (absl::Status s = FinishResult((*server)->store(), result, {}); !s.ok()) return s;
  return result;
}

}  // namespace fl::simulation::internal
