// RunSimulation over gRPC: the real server (mutual TLS with a certificate per site, or plaintext)
// with the simulated clock injected, each working site connecting with the SDK's gRPC transport;
// only the sites at work hold a channel, so thousands of sites need neither thousands of threads
// nor of connections. With MPI (simulation/internal/mpi_sites.h) rank 0 runs this and the other
// ranks run RunMpiWorker.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "fl/common/file_util.h"
#include "fl/common/provision.h"
#include "fl/server/server.h"
#include "fl/simulation/evaluation.h"
#include "simulation/internal/mpi_sites.h"
#include "simulation/internal/sim_setup.h"
#include "simulation/internal/site_identities.h"
#include "simulation/internal/virtual_federation.h"

namespace fl::simulation::internal {
namespace {

// How many sites of this process may keep their channel open between tasks, as a real site
// does (a TLS handshake saved per task; the rest connect for each task): at most 4096, and no
// more than the file descriptors allow, each open site holding two in the process that also runs
// the server (its socket and the server's), `sharers` sites' worth per descriptor there when
// several MPI ranks connect to one server. Raises the soft descriptor limit to the hard one.
int64_t OpenTransportBudget(int sharers) {
  constexpr int64_t kMost = 4096;
  constexpr int64_t kReserve = 512;  // the server's files, SQLite, spill files, gRPC's own
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  const int64_t fds =
      limit.rlim_cur == RLIM_INFINITY ? int64_t{1} << 20 : static_cast<int64_t>(limit.rlim_cur);
  return std::clamp<int64_t>((fds - kReserve) / 2 / std::max(1, sharers), 0, kMost);
}

// Site `i`'s gRPC transport to `address`, with its certificate under `certs` (or, in plaintext,
// its name).
TransportFactory GrpcTransportFactory(const std::string& address, const std::string& certs,
                                      bool tls) {
  if (!tls) {  // every site over one connection, told apart by the name its calls carry
    client::ClientOptions c;
    c.server_address = address;
    c.insecure_plaintext = true;
    absl::StatusOr<std::shared_ptr<client::SharedConnection>> connection =
        client::MakeSharedConnection(c);
    return [address, connection](int32_t i) -> absl::StatusOr<std::unique_ptr<client::Transport>> {
      if (!connection.ok()) return connection.status();
      client::ClientOptions c;
      c.server_address = address;
      c.name = absl::StrCat("site-", i);
      c.insecure_plaintext = true;
      return client::MakeGrpcTransport(c, *connection);
    };
  }
  return [address, certs, tls](int32_t i) -> absl::StatusOr<std::unique_ptr<client::Transport>> {
    client::ClientOptions c;
    c.server_address = address;
    c.name = absl::StrCat("site-", i);
    c.insecure_plaintext = !tls;
    if (tls) {
      c.ca_cert_path = certs + "/ca.pem";
      c.cert_path = absl::StrCat(certs, "/clients/site-", i, ".pem");
      c.key_path = absl::StrCat(certs, "/clients/site-", i, ".key");
    }
    return client::MakeGrpcTransport(c);
  };
}

}  // namespace

absl::StatusOr<SimulationResult> RunGrpcSimulation(const SimulationOptions& options,
                                                   const SimulationData& data,
                                                   const SimulationCallbacks& callbacks,
                                                   const MpiJob* mpi) {
  const int32_t n = options.num_clients;
  // Over MPI the server takes connections from other machines: on every address, under the
  // host's name (in its certificate); plaintext stays on one machine's loopback.
  const bool spread = mpi != nullptr && mpi->size > 1;
  const bool remote = spread && options.tls;
  char host[256] = "127.0.0.1";
  if (remote && gethostname(host, sizeof host) != 0) {
    return absl::InternalError("gethostname failed: the MPI ranks cannot be told where rank 0 is");
  }
  if (absl::Status s = MakeDirectories(options.work_dir); !s.ok()) return s;
  ProvisionOptions provision;
  if (remote) provision.server_names.push_back(host);
  provision.out_dir = options.work_dir + "/certs";
  provision.durability =
      Durability::kUnsynced;  // the run's own certificates, made again for every run
  for (int32_t i = 0; i < n; ++i) provision.client_names.push_back(absl::StrCat("site-", i));
  ProvisionedFiles files;
  std::vector<std::string> ids(static_cast<size_t>(n));
  if (options.tls) {
    SaySetup(callbacks,
             absl::StrCat("making a CA, a server certificate and ", n, " site certificates"));
    absl::StatusOr<ProvisionedFiles> made = ProvisionFederation(provision);
    if (!made.ok()) return made.status();
    files = *std::move(made);
    ids = files.client_fingerprints;  // the server knows a site by its certificate
  } else {
    for (int32_t i = 0; i < n; ++i) {  // and in plaintext by the name it sends
      ids[static_cast<size_t>(i)] = absl::StrCat("plain:", provision.client_names[i]);
    }
  }

  server::ServerOptions server_options;
  server_options.listen_address = remote ? "0.0.0.0:0" : "127.0.0.1:0";
  server_options.data_dir = options.work_dir + "/server";
  server_options.insecure_plaintext = !options.tls;
  server_options.ca_cert_path = files.ca_cert;
  server_options.cert_path = files.server_cert;
  server_options.key_path = files.server_key;
  server_options.enroll_cert_paths = files.client_certs;
  server_options.engine = EngineOptionsFor(options, data.arch);
  server_options.strategy = options.strategy;
  server_options.root_trainer = RootTrainerFor(options, data);
  SimulatedClock clock(absl::Now());
  server_options.clock = &clock;
  server_options.durable = false;  // as in process: a simulation is rerun, not recovered

  SimulationResult result;
  std::mutex result_mu;
  // Set once the server has started, before any site joins (so before any round ends).
  std::atomic<server::Store*> store{nullptr};
  server::EngineHooks hooks;
  hooks.evaluate = BuiltinTestSetEvaluation(data.arch, data.test, options.backend);
  const std::function<void()> training_started =
      MakeRoundRecorder(options, result, result_mu, store, callbacks.on_round, hooks);
  absl::StatusOr<Model> initial = InitialModelFor(options, data);
  if (!initial.ok()) return initial.status();
  const ModelSpec spec = initial->spec();
  SaySetup(callbacks,
           absl::StrCat("starting the server (", options.tls ? "mutual TLS, " : "plaintext, ",
                        remote ? "every address" : "loopback", ")"));
  absl::StatusOr<std::unique_ptr<server::Server>> server =
      server::Server::Start(server_options, *std::move(initial), hooks);
  if (!server.ok()) return server.status();
  result.run_id = (*server)->engine().run_id();
  result.db_path = (*server)->store().db_path();
  store.store(&(*server)->store());

  VirtualFederationOptions sites;
  sites.client_timeout = server_options.engine.client_timeout;
  sites.site_id = [&ids](int32_t i) { return ids[static_cast<size_t>(i)]; };
  const std::string address = absl::StrCat(host, ":", (*server)->port());
  sites.make_transport = GrpcTransportFactory(address, provision.out_dir, options.tls);
  sites.open_transports = options.tls ? OpenTransportBudget(1) : 0;  // plaintext: one shared
  if (options.tls && options.secure_aggregation.enabled) {
    absl::StatusOr<std::shared_ptr<SiteIdentities>> identities =
        LoadSiteIdentities(provision.out_dir);
    if (!identities.ok()) return identities.status();
    sites.identities = *std::move(identities);
  }
  absl::Status driven;
  if (spread) {
    MpiSetup setup{options.work_dir, address, options.tls, result.run_id, ""};
    driven = BroadcastSetup(*mpi, setup);
    if (driven.ok()) {
      std::unique_ptr<SiteExecutor> executor = MakeMpiSiteExecutor(*mpi);
      driven =
          DriveSites(options, data, (*server)->engine(), clock, spec, callbacks, std::move(sites),
                     training_started, executor.get(), &result.poisoned_updates);
    }
  } else {
    driven = DriveSites(options, data, (*server)->engine(), clock, spec, callbacks,
                        std::move(sites), training_started, nullptr, &result.poisoned_updates);
  }
  (*server)->Shutdown();
  if (!driven.ok()) return driven;
  if (absl::Status s = FinishResult((*server)->store(), result, {}); !s.ok()) return s;
  return result;
}

absl::StatusOr<SimulationResult> RunMpiWorker(const SimulationOptions& options,
                                              const SimulationData& data, const MpiJob& mpi) {
  MpiSetup setup;
  if (absl::Status s = BroadcastSetup(mpi, setup); !s.ok()) return s;
  SimulationResult result;
  result.rank = mpi.rank;
  if (!setup.error.empty()) return result;  // rank 0 failed and says why; nothing to serve
  absl::StatusOr<Model> initial = InitialModelFor(options, data);
  if (!initial.ok()) return initial.status();
  client::JoinRequestInfo join;
  join.capabilities = {"cpu", "fp32", "fp16", "int8"};
  join.model_spec = initial->spec();
  LocalSiteOptions local;
  local.workers = WorkersFor(options);
  local.persistent_trainers = options.strategy.name == "scaffold";
  local.open_transports = setup.tls ? OpenTransportBudget(mpi.size - 1) : 0;
  if (setup.tls && options.secure_aggregation.enabled) {
    absl::StatusOr<std::shared_ptr<SiteIdentities>> identities =
        LoadSiteIdentities(setup.work_dir + "/certs");
    if (!identities.ok()) return identities.status();
    local.identities = *std::move(identities);
  }
  std::unique_ptr<SiteExecutor> executor = MakeLocalSiteExecutor(
      local, TrainerFactoryFor(options, data),
      GrpcTransportFactory(setup.server_address, setup.work_dir + "/certs", setup.tls));
  if (absl::Status s = ServeMpiSites(mpi, *executor, setup.run_id, join); !s.ok()) return s;
  result.run_id = setup.run_id;
  return result;
}

}  // namespace fl::simulation::internal
