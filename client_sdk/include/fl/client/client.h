// Client: what a site runs to take part in a federation.
//
// It dials out to the server (mutual TLS with the site's certificate by default), joins, and then
// loops: poll for a task, download the round's global model in chunks (checking its SHA-256),
// train it with the site's Trainer, and stream the result back in chunks with its SHA-256. It
// returns when the server says the run is over. When the server is unreachable (restarting, a
// network drop) it retries with exponential backoff for up to `reconnect_timeout`, then gives up.
//
// In a run with secure aggregation a round is four tasks (advertise keys, share keys, masked
// input, unmask): the site trains as for a fit task, but what leaves it is its change from the
// global model, clipped, quantized and masked, so that the server learns only the round's sum.
// The keys and secrets of a round live in this object's memory only; a client restarted in the
// middle of a round is a dropout of that round and takes part in the next.
//
// Example:
//   fl::client::ClientOptions options;
//   options.server_address = "fl.example.org:7443";
//   options.ca_cert_path = "ca.pem"; options.cert_path = "site.pem"; options.key_path = "site.key";
//   auto client = fl::client::Client::Create(options, &my_trainer);
//   if (client.ok()) absl::Status done = (*client)->Run();
#ifndef FL_CLIENT_CLIENT_H_
#define FL_CLIENT_CLIENT_H_

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fl/client/trainer.h"

namespace fl::client {
namespace internal {
struct ClientAccess;  // the SDK's and the simulation's step-by-step access (transport.h)
}  // namespace internal

// What a site agrees to do, whatever the server asks: the server cannot override these. A FIT
// task outside them is declined before its model is downloaded, with a reason that names the
// limit and the task's value (e.g. "task asks for 5 local epochs; this site allows at most 2");
// the server records the reason in its audit log (task_declined) and the round goes on without
// this site. Every default allows everything.
struct SiteLimits {
  // Most local epochs a task may ask for; 0: no limit.
  int32_t max_local_epochs = 0;
  // The built-in architectures a task may train, as the server names them in
  // FitConfig::model_name ("softmax", "mlp", "simple_cnn"); a task that names no architecture
  // (the site's own model code) is then refused too. Empty: any model.
  std::vector<std::string> allowed_models;
  // Refuse a task unless the run applies differential privacy (FitConfig::differential_privacy).
  bool require_differential_privacy = false;
  // Refuse a task unless the server sees only masked updates and their sum (secure aggregation,
  // FitConfig::secure_aggregation): plain FIT tasks are declined, the secure stages pass.
  bool require_secure_aggregation = false;

  // Noise this site enforces in secure rounds with distributed DP, judged against the server
  // (CheckSecureRoundLimits). The server chooses the noise each site adds and knows who took
  // part in a sum, so a site that trusted the task could be told to add none, and against the
  // server sampling amplifies nothing. The consistency check keeps honest sites from revealing
  // enough to isolate one site's input, but t colluding neighbours of a site, or a server that
  // can issue certificates, still can, so the noise a site counts on is its own: sigma / C.
  // Setting either noise limit also declines plain rounds (the server would read the update).
  // 0 (the defaults): no limit.
  double min_noise_multiplier = 0;
  // The most epsilon (at epsilon_delta, in (0, 1)) this site spends against the server: each input
  // it masks is one release of the Gaussian mechanism at sigma / C, composed in RDP over every
  // input this site masked (whatever run the server names): those in privacy_ledger when it is
  // set, else this client process's only (a restarted process then counts afresh).
  double max_epsilon = 0;
  double epsilon_delta = 1e-5;
  // A file where each input's noise multiplier is appended and synced before the input is sent,
  // and read back when the client starts. Empty: none.
  std::string privacy_ledger;
  // The fewest inputs a sum of this site's may hold: the unmask stage is refused (ABORTED, a
  // refusal of that round only) when the server lists fewer survivors. A floor for the federation
  // rather than for one site: the sites holding this site's shares (its neighbours) can still
  // reveal its self-mask seed, so a smaller sum stays masked only when they set it too. 0: none.
  int32_t min_sum_size = 0;
  // The least share of colluding sites a secure round's consistency check must be sized for
  // (its corrupt_fraction, gamma): a round sized for fewer is declined at its first stage. In
  // [0, 0.5); 0: any (the check still holds against the server alone).
  double min_corrupt_fraction = 0;
  // The graph a secure round's server chose (k neighbours, threshold t) must leave a site with t
  // or more colluding neighbours (at the round's corrupt_fraction) with probability at most
  // 2^-(40 + grinding_bits) (secagg::PrivacyRiskTarget): a server may hash directories until a
  // graph suits it, or simply send a small k. Judged only against colluders the round admits
  // to, so a site that fears collusion sets min_corrupt_fraction too. In [0, 100].
  int32_t grinding_bits = 40;
};

// A secure round's noise as its tasks state it (SecAggTaskInfo's round parameters).
struct SecureRoundNoise {
  int32_t num_sites = 0;        // n, the sites in the round
  int32_t num_neighbors = 0;    // k of its graph (0: not stated)
  int32_t threshold = 0;        // t of its graph
  double clip_norm = 0;         // C each site clips its change to; 0: no distributed DP
  double noise_stddev = 0;      // sigma each site adds
  double corrupt_fraction = 0;  // gamma the consistency check is sized for
};

// The noise multiplier this site's input has against the server at worst: sigma / C (see
// SiteLimits); 0 without distributed DP.
double WorstCaseNoiseMultiplier(const SecureRoundNoise& round);

// OK when a secure round with `round`'s noise is within the limits above, given the noise
// multipliers of the inputs this client already masked (`earlier`); otherwise PERMISSION_DENIED
// naming the limit, the task's value and the site's (e.g. "the round's noise gives this site's
// input a noise multiplier of 0.5 against the server; this site requires at least 1
// (limits.min_noise_multiplier)"). INVALID_ARGUMENT for limits out of range.
absl::Status CheckSecureRoundLimits(const SiteLimits& limits, const SecureRoundNoise& round,
                                    std::span<const double> earlier);

// OK when a task with `config` is within `limits`; otherwise PERMISSION_DENIED naming the first
// limit it breaks and the task's value. Thread-safe (a pure function).
absl::Status CheckSiteLimits(const SiteLimits& limits, const FitConfig& config);

struct ClientOptions {
  std::string server_address = "127.0.0.1:7443";
  // Mutual TLS (PEM file paths): the federation CA, this site's certificate and its key.
  std::string ca_cert_path;
  std::string cert_path;
  std::string key_path;
  // Overrides the host name checked against the server certificate (default: the address's host).
  std::string server_name_override;
  // Plaintext, for simulation and tests on loopback only; `name` then identifies the client.
  bool insecure_plaintext = false;
  // The site's name in logs; empty: the certificate's common name (or "site" in plaintext).
  std::string name;
  absl::Duration poll_wait = absl::Seconds(15);
  // While working on a task (download, training, upload) the client tells the server it is alive
  // this often; keep it well under the server's client_timeout (90 s by default).
  absl::Duration heartbeat_interval = absl::Seconds(10);
  absl::Duration reconnect_timeout = absl::Minutes(2);
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
  // The site's data columns, in the order its model reads them (e.g. Dataset::feature_names of a
  // CSV). Sent at join with their SHA-256 (FeatureSchemaSha256): the server fixes the run's
  // columns from the first site that sends them and refuses a site whose columns differ, naming
  // the first difference. Empty: none sent (data without named columns). The trainer's spec()
  // is always sent, and a site whose spec is not the global model's is refused at join.
  std::vector<std::string> feature_columns;
  // Enforced on every FIT task before anything is downloaded, and in a secure-aggregation round
  // before its model is downloaded (already at its first stage when that task names the model);
  // see SiteLimits.
  SiteLimits limits;
  // The server records each site's federated-evaluation result (fl admin evals), except in runs
  // with secure aggregation, where it keeps only the federation's aggregate unless this is true.
  // A site that requires secure aggregation (limits.require_secure_aggregation) goes further:
  // unless this is true it declines evaluation tasks and sends no result at all, since the
  // server reads a result in the clear and only the server's word keeps it from the records.
  bool share_site_evaluation = false;
};

// What happened to one fit task, or one stage of a secure-aggregation round, for progress
// displays (and for tests, which may stop a client at a given stage).
struct TaskReport {
  int32_t round = 0;
  std::string task_id;
  // "fit", or the secure-aggregation stage: "secagg_advertise_keys", "secagg_share_keys",
  // "secagg_masked_input" (download, train, mask, upload), "secagg_unmask".
  std::string stage = "fit";
  absl::Status status;       // OK when the server accepted the update (or the stage's message)
  int64_t num_examples = 0;  // fit and secagg_masked_input: what the trainer reported
  absl::Duration train_time;
  // The whole task at this site: from its arrival to the server's answer to what the site sent
  // (download, training, encoding, upload).
  absl::Duration task_time;
};

// How the run that ended a Run call ended (the server's DONE task).
struct RunEnd {
  int64_t run_id = 0;   // 0: no Run call has ended with DONE yet
  bool failed = false;  // the server says the run failed; false: it finished (or an older
                        // server that does not say)
  std::string message;  // the server's words, e.g. "run 3 is failed: round 2 failed 4 times"
  // This Run call saw the run before it ended (any task but DONE: it was online in the run).
  // False when the client joined a run that was already over: a program serving run after run
  // then waits for the next one instead of taking the old one's end for a new one.
  bool was_live = false;
};

// How Client::Run's error begins when this site does not trust the server's certificate.
inline constexpr char kServerTrustPrefix[] = "cannot trust the server at ";

class Client {
 public:
  // Reads the certificates and builds the channel; refuses missing files or plaintext to a
  // non-loopback address. `trainer` is not owned and must outlive the client.
  static absl::StatusOr<std::unique_ptr<Client>> Create(ClientOptions options, Trainer* trainer);
  ~Client();

  // Runs until the server ends the run (OK; last_run() says how), Stop is called (CANCELLED),
  // the server refuses this client (UNAUTHENTICATED / PERMISSION_DENIED, with the server's
  // reason), this client cannot trust the server (UNAUTHENTICATED, message starting with
  // kServerTrustPrefix: its certificate is not from ca_cert_path's CA or not valid for the
  // address; at the first attempt, not retried), or the server stays unreachable past
  // reconnect_timeout (UNAVAILABLE). Every retry
  // is logged (client_retry, at warn: the attempt, the delay and the status message). May be
  // called again after it returned (but not after Stop): it joins afresh, so a program can serve
  // run after run; a run already over ends the call at once with OK and was_live false.
  absl::Status Run();
  // How the run ended that ended the last Run call with OK. Thread-safe.
  RunEnd last_run() const;
  // Makes Run return soon. Thread-safe.
  void Stop();
  // Called after every fit task and every secure-aggregation stage, from Run's thread. Set before
  // Run.
  void set_on_task(std::function<void(const TaskReport&)> fn);

  // The identity the server knows this client by (empty before joining).
  std::string client_id() const;

  class Impl;
  explicit Client(std::unique_ptr<Impl> impl);  // use Create

 private:
  friend struct internal::ClientAccess;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fl::client

#endif  // FL_CLIENT_CLIENT_H_
