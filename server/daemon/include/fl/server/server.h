// Server: the aggregation server as one object — store, round engine, gRPC service over mutual
// TLS, and the thread that drives the engine's clock.
//
// Start refuses plaintext unless `insecure_plaintext` is set and the listen address is loopback.
// With TLS, the server asks every client for a certificate, then checks in each call that it
// chains to the federation's CA and that its fingerprint is enrolled; each refusal names the
// reason to the caller (UNAUTHENTICATED or PERMISSION_DENIED) and lands in the audit log. TLS
// handshakes that fail before any call (a plaintext client, no client certificate) are audited
// from gRPC's log.
#ifndef FL_SERVER_SERVER_H_
#define FL_SERVER_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fl/aggregation/strategies.h"
#include "fl/common/model.h"
#include "fl/server/client_limits.h"
#include "fl/server/engine.h"
#include "fl/server/store.h"

namespace fl::server {

// What one run needs beyond the server: made from a run file by ServerOptions::run_factory.
struct RunSetup {
  EngineOptions engine;  // its spill_dir is the server's
  aggregation::StrategyOptions strategy;
  Model initial_model;
  EngineHooks hooks;
  // FLTrust's training on the server's root dataset (fl/aggregation/fltrust.h); empty: the
  // server's ServerOptions::root_trainer.
  aggregation::RootTrainer root_trainer;
};

// Makes a run from a run file: TOML with a run's tables of a server configuration ([run], [fit],
// [strategy], [model], [privacy], [secure_aggregation]), applied over the server's own.
// INVALID_ARGUMENT naming what is wrong.
using RunFactory = std::function<absl::StatusOr<RunSetup>(const std::string& run_toml)>;

struct ServerOptions {
  std::string listen_address = "127.0.0.1:7443";  // port 0 picks a free port
  std::string data_dir = "fl-data";
  // Mutual TLS: the federation CA, and this server's certificate and key (PEM file paths).
  std::string ca_cert_path;
  std::string cert_path;
  std::string key_path;
  // Plaintext: only for simulation and tests, and only on a loopback address. Clients are then
  // identified by the name they send, and enrollment is not checked.
  bool insecure_plaintext = false;
  // Client certificates (PEM file paths) enrolled at start, in addition to those already enrolled.
  std::vector<std::string> enroll_cert_paths;
  EngineOptions engine;  // spill_dir defaults to <data_dir>/spill
  // How updates are aggregated, and the strategy's values every fit task carries (merged into
  // engine.fit.extra). SCAFFOLD's N defaults to the enrolled clients, counted at every round.
  aggregation::StrategyOptions strategy;
  // FLTrust's server-side training on a root dataset (fl/aggregation/fltrust.h), for the
  // server's own run (`fl server` makes it from model.root_images; a simulation gives its own).
  aggregation::RootTrainer root_trainer;
  absl::Duration max_poll_wait = absl::Seconds(20);
  // What a client's text and maps may hold ([limits]; fl/server/client_limits.h).
  ClientInputLimits client_limits;
  // Threads of the federation service (server/service/work_pool.h): every call into the engine
  // and the store runs on them; a parked poll or an idle stream holds none.
  int32_t service_threads = 8;
  // Flow-control window of each upload stream, in MiB: the server buffers at most this much of
  // each concurrent upload, so its memory stays flat in the number of uploading sites. One
  // upload's speed is at most window / round-trip time (4 MiB at 100 ms: 40 MB/s), so raise it
  // for sites far away. 0: gRPC's own window, tuned by its bandwidth-delay probe: one upload
  // ingests faster (measured on loopback: 1.3-1.6x), but every concurrent upload may then hold tens
  // of MiB of unread chunks (measured: 45-60 MiB each with 8 uploading sites), so memory grows
  // with the sites. Negative values count as 1, more than 1024 as 1024.
  int32_t stream_window_mib = 4;
  // host:port of the Prometheus text endpoint (/metrics) and the health check (/healthz), served
  // over plain HTTP; empty: off. Port 0 picks a free port (see metrics_port()).
  std::string metrics_address;
  // /healthz and fl_run_state call a run stalled after this long without progress
  // (RunActivity::last_progress).
  absl::Duration stall_after = absl::Minutes(30);
  // Checkpoint retention after each commit (Store::PruneCheckpoints): each run keeps its last
  // `checkpoints_keep_last` committed rounds' models and each `checkpoints_keep_every`-th;
  // 0: every checkpoint is kept.
  // Certificates expiring within this many days are logged (certificate_expiring, at start and
  // daily) and counted in fl_site_certificates_expiring.
  int32_t cert_warn_days = 30;
  int32_t checkpoints_keep_last = 0;
  int32_t checkpoints_keep_every = 0;
  absl::Duration tick_interval = absl::Milliseconds(50);
  // Whether the store fsyncs its commits and checkpoints (StoreOpenOptions::durable): false only
  // for a simulation, which the same seed reruns.
  bool durable = true;
  // Runs submitted through the control API (`fl run submit`) are made by this and run one after
  // another, oldest first, once the current run is over. Empty: the control API can list,
  // follow, change and stop runs but refuses submissions.
  RunFactory run_factory;
  // false: the server serves the run Start is given (or resumes the unfinished one), then the
  // runs queued by then, and WaitUntilFinished returns. true (a daemon): Start starts no run of
  // its own; the server resumes the unfinished run, then takes queued runs as they come, and
  // stays up between them until Shutdown.
  bool stay_up = false;
  // What the operator gave at this start for the run's tables (a run file, e.g. "[run]\nrounds
  // = 20\n": the flags given; not the --config file, which a service passes at every start). A
  // resumed run that was not submitted takes it: policies a run may change are changed and audited;
  // any other key that differs from the run's own refuses the start, naming it. "": nothing given.
  std::string resume_toml;
  // The engine's clock (not owned; must outlive the server); nullptr: the system's. A simulation
  // passes its simulated clock, which its driver moves.
  Clock* clock = nullptr;
};

class Server {
 public:
  // Opens the store, resumes or creates the run, and starts serving. `initial_model` seeds a new
  // run (ignored, but its spec checked, when resuming). INVALID_ARGUMENT when the strategy's
  // options are bad or it cannot aggregate the model (SCAFFOLD without its control variates).
  static absl::StatusOr<std::unique_ptr<Server>> Start(ServerOptions options, Model initial_model,
                                                       EngineHooks hooks = {});
  virtual ~Server() = default;

  virtual int port() const = 0;
  // The metrics endpoint's port; 0 when it is off.
  virtual int metrics_port() const = 0;
  // The current run's engine: the one Start made (or resumed) until the server moves on to a
  // queued run. Only with stay_up can there be none (null), between runs.
  virtual std::shared_ptr<RoundEngine> current_engine() = 0;
  RoundEngine& engine() { return *current_engine(); }
  // The runs this process started or resumed, in order.
  virtual std::vector<int64_t> served_runs() = 0;
  virtual Store& store() = 0;
  // Blocks until the run is over and no run is queued, then serves `grace` longer so that
  // clients hear DONE. With stay_up, until Shutdown.
  // Why the server stopped by itself, or OK: FAILED_PRECONDITION when its SQLite file was
  // removed or replaced while it ran (it stops rather than commit into a file nobody will see).
  virtual absl::Status fatal_error() const = 0;
  virtual void WaitUntilFinished(absl::Duration grace) = 0;
  // Stops serving (in-flight calls are cancelled) and the engine's clock thread. Idempotent.
  virtual void Shutdown() = 0;
};

}  // namespace fl::server

#endif  // FL_SERVER_SERVER_H_
