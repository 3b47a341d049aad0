// RoundEngine: the server's round state machine.
//
// A run is a sequence of rounds. A round waits until `min_clients` clients are online, samples
// some of them, hands each a fit task, folds their updates into the strategy's aggregator as the
// chunks arrive, and closes when every sampled client reported or the deadline passed. It commits
// (checkpoint file first, then the round's row, synchronous) if at least `min_fit_clients`
// updates were accepted; otherwise the attempt fails and the round is retried up to
// `max_round_retries` times before the run fails.
//
// The engine never sleeps and never reads the wall clock: time comes from the injected Clock and
// advances only through calls (Tick, Poll, upload events), so tests drive it step by step with a
// fake clock. The gRPC service only translates to and from these calls. Thread-safe.
//
// Refusals return a Status whose code maps one to one onto gRPC's: FAILED_PRECONDITION for a
// stale or foreign round or task, ALREADY_EXISTS for a second update, INVALID_ARGUMENT for a
// malformed one, DATA_LOSS for a truncated one. Each refusal is written to the audit log and the
// participation table, and the round goes on with the other clients.
#ifndef FL_SERVER_ENGINE_H_
#define FL_SERVER_ENGINE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fl/aggregation/secagg/params.h"
#include "fl/aggregation/secagg/protocol.h"
#include "fl/aggregation/strategies.h"
#include "fl/aggregation/strategy.h"
#include "fl/common/model.h"
#include "fl/common/update_codec.h"
#include "fl/server/staging.h"
#include "fl/server/store.h"

namespace fl::server {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
  static Clock* Real();  // the process-wide wall clock
};

// What a client is asked to do in a fit task.
struct FitSettings {
  int32_t local_epochs = 1;
  int32_t batch_size = 32;
  float learning_rate = 0.05f;
  std::string model_name;               // the built-in architecture, or empty (see FitTask)
  bool differential_privacy = false;    // see FitTask
  std::map<std::string, double> extra;  // strategy values sent with every fit task
};

// Differential privacy with central noise (DP-FedAvg, McMahan et al. 2018). The server clips the
// delta of each accepted update from the round's global model to L2 norm `clip_norm`, averages
// the clipped updates with equal weights (not by examples), and adds N(0, (z * clip_norm / n)^2)
// to each coordinate of the mean of n (z = noise_multiplier), from OpenSSL's CSPRNG. A Renyi
// accountant (fl/aggregation/dp/rdp_accountant.h; each round's q = sampled / online clients)
// records the epsilon spent for `delta` with every committed round, and the run finishes before a
// round that would take it past `epsilon_budget`. Fit tasks carry differential_privacy = true.
//
// Distributed DP (mode "distributed", only with secure aggregation, where the server cannot clip
// what it cannot read): each client clips its change to `clip_norm` and adds N(0, s^2) with
// s = DistributedNoiseStddev(z, clip_norm, n_min) before masking, weights are 1, and a round
// commits only when at least n_min = max(min_fit_clients, floor((1 - max_dropout) x sampled))
// masked inputs were summed, so every committed sum carries at least (z * clip_norm)^2. The
// accountant counts rounds as in central mode.
struct PrivacyOptions {
  std::string mode = "off";  // "off", "central" or "distributed"
  // With "distributed": "gaussian" (continuous noise before quantizing) or "discrete_gaussian"
  // (secagg::DdgEncoding; accounted by dp::ComputeDdgRdp).
  std::string distributed_noise = "gaussian";
  double noise_multiplier = 1.0;
  double clip_norm = 1.0;
  double delta = 1e-5;
  double epsilon_budget = 0;  // 0: no budget (epsilon is still recorded)

  bool enabled() const { return mode == "central"; }  // central noise added by the server
  bool distributed() const { return mode == "distributed"; }
  bool accounted() const { return enabled() || distributed(); }
  bool discrete() const { return distributed() && distributed_noise == "discrete_gaussian"; }
  // OK, or INVALID_ARGUMENT naming the key and the value (e.g. "privacy.delta must be in (0, 1),
  // got 0"). Only checked when the mode is not "off".
  absl::Status Validate() const;
};

// Secure aggregation (SecAgg+ with the double masking of Bonawitz et al.; fl/aggregation/secagg/):
// every round runs five stages (advertise keys, share keys, masked input, consistency, unmask) so
// that the server learns only the weighted sum of the sampled clients' changes from the global
// model, never one client's. Clients of a round get secagg ids 0..n-1 in the order of their sorted
// client ids. Each round derives DefaultSecAggParams(n, modulus_bits, max_weight) and overrides it
// with the keys set here (0: keep the default). Stages 1, 2, 4 and 5 close when every client still
// in them answered, or after `stage_timeout`; stage 3 (training) after round_timeout. A client that
// does not answer a stage is dropped from the round; the round survives while the library can
// recover the dropped clients' masks.
struct SecureAggregationOptions {
  bool enabled = false;
  // k; 0: the library's default for the round's n, corrupt_fraction and max_dropout
  // (secagg::DefaultSecAggParams). Settings whose privacy risk (secagg::SecAggRiskOf) exceeds
  // 2^-(40 + grinding_bits) are refused.
  int32_t num_neighbors = 0;
  int32_t threshold = 0;    // t; 0: the least that keeps that risk (for the default k or this one)
  double clip_range = 8.0;  // c: each coordinate of a change is clipped to [-c, c]
  int32_t quantization_bits = 0;  // b; 0: the largest that cannot wrap the modulus
  int32_t modulus_bits = 32;      // 32 or 64
  uint32_t max_weight = 1000;
  // weight = clamp(ceil(num_examples / example_unit), 1, max_weight), computed by the client.
  int64_t example_unit = 1;
  absl::Duration stage_timeout = absl::Seconds(60);
  // Distributed DP plans its noise for this share of dropouts, and the default k and t keep the
  // round live with it (secagg::DefaultSecAggParams).
  double max_dropout = 0.3;
  // gamma: the share of a round's sites that may collude with a malicious server. The sites
  // reveal shares only once floor((|U1| + gamma |U1|) / 2) + 1 of them signed one survivor set,
  // so a round with more dropouts before the consistency stage fails. In [0, 0.5).
  double corrupt_fraction = 1.0 / 3;
  // How many directories (2^grinding_bits) a malicious server is assumed able to try for a graph
  // it likes: the graph follows the session's hash, which it steers by the directory it sends
  // (which sites' keys, colluders' fresh keys). Each graph must then hold at 2^-(40 + bits)
  // (secagg::PrivacyRiskTarget), so that the best of the server's tries still holds at 2^-40.
  // 40: about 2^40 hashes of a directory, months of one core. In [0, 100].
  int32_t grinding_bits = 40;

  // OK, or INVALID_ARGUMENT naming the key and its value (e.g. "secure_aggregation.threshold
  // must be >= 0, got -1"). Only checked when enabled.
  absl::Status Validate() const;
  // The parameters of a round of `num_clients` clients (see above), validated; INVALID_ARGUMENT
  // with the library's reason when they would overflow or give no privacy.
  absl::StatusOr<secagg::SecAggParams> ParamsFor(int32_t num_clients, uint64_t graph_seed) const;
};

// The longest wait before a failed round's next attempt (EngineOptions::retry_backoff).
inline constexpr absl::Duration kMaxRetryBackoff = absl::Seconds(60);

struct EngineOptions {
  std::string run_name = "default";
  int32_t num_rounds = 10;
  int32_t min_clients = 2;       // clients online before a round starts
  int32_t min_fit_clients = 2;   // accepted updates needed to commit a round
  double sample_fraction = 1.0;  // of the online clients, at least min_fit_clients
  absl::Duration round_timeout = absl::Minutes(10);
  // A client neither polling nor heartbeating for this long is offline: it does not count towards
  // min_clients, and a round it was sampled in stops waiting for it.
  absl::Duration client_timeout = absl::Seconds(90);
  // A client sampled in a (plain) round that has not asked for its fit task this long after the
  // round opened is dropped from it: a client that only joins, or holds streams without polling,
  // cannot hold a round until client_timeout or the deadline. A polling client asks within
  // milliseconds of the round's start.
  absl::Duration task_pickup_timeout = absl::Seconds(90);
  int32_t max_round_retries = 3;
  // A failed attempt is retried after this delay, doubled for each further failure of the same
  // round and at most kMaxRetryBackoff (60 s); 0: at once. So a round that fails for a reason
  // that passes (a site restarting) does not spend its retries within a second.
  absl::Duration retry_backoff = absl::Seconds(2);
  // How often the clients' last poll or heartbeat is written to the store (what `fl admin
  // clients` shows as LAST_SEEN), in one transaction; InfiniteDuration: only at join (a
  // simulation). Not part of a run's configuration.
  absl::Duration last_seen_flush = absl::Seconds(60);
  // Longest wait for min_clients to be online before a round; then the run fails with the reason.
  absl::Duration wait_timeout = absl::Hours(1);
  uint64_t seed = 0;  // sampling
  FitSettings fit;
  // Stopping rule: when set, the run finishes early once a committed round's metric (e.g.
  // "test_accuracy" from the evaluation hook, "train_loss" from the clients) or its federated
  // evaluation's ("eval_loss", "eval_accuracy", "eval_auc": "eval_" and the sites' metric name)
  // reaches `stop_threshold` (or falls to it, with `stop_when_below`).
  std::string stop_metric;
  double stop_threshold = 0;
  bool stop_when_below = false;
  // Federated evaluation: after every `eval_every` committed rounds (0: never), a sample of the
  // online clients evaluates the new global model on its own held-out data; loss and every
  // metric are averaged weighted by examples (a metric over the sites that report it) and
  // recorded. The next round waits for it, at most `eval_timeout`.
  int32_t eval_every = 0;
  double eval_fraction = 1.0;
  absl::Duration eval_timeout = absl::Minutes(5);
  // Federated standardisation: before round 1, every online client reports the per-feature
  // sums and sums of squares of its training rows (a STATISTICS task, at most `eval_timeout`);
  // the server adds them up into each feature's mean and standard deviation, stores them with
  // the run, and sends them with every later fit and evaluation task, so that every site scales
  // its features by the same statistics. Not with secure aggregation (the sums would reach the
  // server per site).
  bool federated_standardization = false;
  PrivacyOptions privacy;
  SecureAggregationOptions secure_aggregation;
  // How clients encode their updates ([run] update_encoding): "float32" (the weights), "float16"
  // or "int8" (the change from the round's global model; fl/common/update_codec.h). Fit tasks
  // carry it; an update in another encoding is refused. Anything but "float32" is refused with
  // secure aggregation (its rounds send masked words).
  std::string update_encoding = "float32";
  // The strategy the run was started with and its settings, recorded with the run when the
  // caller gives it (the server does): the engine aggregates with the Strategy object it is
  // handed; a server that resumes the run makes that object from these, and a start that would
  // change them is refused like any setting a run keeps.
  std::optional<aggregation::StrategyOptions> strategy;
  // Where updates are staged while their chunks arrive (not part of a run's configuration).
  std::string spill_dir;
  // Where a closed round's commit runs (not part of a run's configuration). The commit finishes
  // the aggregation, runs the evaluation hook and writes the checkpoint without the engine's
  // lock either way, so polls, heartbeats and downloads go on meanwhile. true: on the engine's
  // own thread, so that the upload that closed the round returns at once (a server); false: in
  // the call that closed the round, once the lock is released, so that a single-threaded
  // driver under a fake clock (a simulation, a unit test) sees the commit done when the call
  // returns.
  bool commit_thread = false;

  std::string ToJson() const;
  // Reads back what ToJson wrote (spill_dir is not part of a run's configuration); keys absent
  // from older runs keep their defaults.
  static absl::StatusOr<EngineOptions> FromJson(std::string_view json);
};

// The FitTask.config key that carries Task::client_committed_round; the client SDK reads the same
// key (fl::client::kScaffoldCommittedRoundKey).
inline constexpr std::string_view kScaffoldCommittedRoundKey = "scaffold_committed_round";

// What a client of a secure-aggregation round gets with its stage's task.
struct SecAggTaskInfo {
  secagg::RoundParams round;  // the protocol's parameters, weights, distributed DP
  int32_t secagg_id = -1;
  // kSecAggShare: this client's keys and its neighbours' in full, the others' digests.
  secagg::KeyDirectory directory;
  secagg::ShareBundle bundle;      // kSecAggMaskedInput: the shares addressed to it, by sender
  secagg::SurvivorList survivors;  // kSecAggConsistency: the survivor set to sign
  secagg::UnmaskRequest unmask;    // kSecAggUnmask
};

// One site's answer to a statistics task: the sums over its `count` training rows.
struct FeatureSumsReport {
  int64_t count = 0;
  std::vector<double> sum;          // per feature
  std::vector<double> sum_squares;  // per feature
};

// The federation's per-feature statistics (EngineOptions::federated_standardization).
struct FeatureStatistics {
  std::vector<double> mean;
  std::vector<double> stddev;
  int64_t count = 0;  // rows behind them
  bool empty() const { return mean.empty(); }
};

struct Task {
  enum class Kind {
    kWait,
    kFit,
    kDone,
    kEvaluate,
    kSecAggAdvertise,
    kSecAggShare,
    kSecAggMaskedInput,  // `fit`, `spec`, `model_*` as for kFit
    kSecAggConsistency,
    kSecAggUnmask,
    kStatistics,  // report FeatureSumsReport through SubmitEvaluation (round 0)
  };
  Kind kind = Kind::kWait;
  int64_t run_id = 0;
  int32_t round = 0;
  std::string task_id;
  FitSettings fit;
  // Fit tasks: the last round in which this client's update was accepted and that round committed
  // (0: none in this run). Sent as FitTask.config[kScaffoldCommittedRoundKey], with every
  // strategy, so that a SCAFFOLD client promotes only the c_i+ that the server's c counts.
  int32_t client_committed_round = 0;
  // Fit tasks: the encoding the update must come in (EngineOptions::update_encoding).
  UpdateEncoding update_encoding = UpdateEncoding::kFloat32;
  ModelSpec spec;
  int64_t model_bytes = 0;
  std::string model_sha256;
  std::string message;
  SecAggTaskInfo secagg;                       // the kSecAgg* kinds
  RunStatus run_status = RunStatus::kRunning;  // kDone: how the run ended (finished or failed)
  // kFit, kEvaluate, kSecAggMaskedInput: the run's federated statistics (empty without them).
  std::shared_ptr<const FeatureStatistics> feature_statistics;
};

// A client's message for one stage of a secure-aggregation round. The engine sets the `client`
// field of the library structs from its own map (what the client claims is not trusted).
struct SecAggMessage {
  int64_t run_id = 0;
  int32_t round = 0;
  std::string task_id;
  Task::Kind stage = Task::Kind::kWait;  // the kSecAgg* kind this answers
  std::optional<secagg::KeyAdvertisement> keys;
  std::optional<secagg::EncryptedShares> shares;
  std::optional<secagg::SurvivorSignature> survivor_signature;
  std::optional<secagg::UnmaskResponse> unmask;
  std::string decline_reason;  // non-empty: the client leaves the round
  // Non-empty: the message's body could not be read (the transport says why); the client is
  // dropped from the round with it and the message refused (INVALID_ARGUMENT).
  std::string malformed;
};

struct EvaluationReport {
  int64_t run_id = 0;
  int32_t round = 0;
  std::string task_id;
  int64_t num_examples = 0;
  double loss = 0;
  std::map<std::string, double> metrics;
  std::string error;               // non-empty: the client could not evaluate
  FeatureSumsReport feature_sums;  // the answer to a kStatistics task
  // The site lets its own result be recorded in a run with secure aggregation.
  bool share_site_result = false;
};

struct UpdateMeta {
  int64_t run_id = 0;
  int32_t round = 0;
  std::string task_id;
  int64_t num_examples = 0;
  std::map<std::string, double> metrics;
  int64_t payload_bytes = 0;
  // The tensors the client says it sends; when set, they must be the global model's.
  std::optional<ModelSpec> spec;
  // kMaskedUint32/64: a secure round's masked input, (parameters + 1) words; then num_examples
  // is 0 and metrics empty. kFloat16 / kInt8: the change from the round's global model
  // (fl/common/update_codec.h), accepted only in a run whose update_encoding names them.
  using Encoding = PayloadEncoding;
  Encoding encoding = Encoding::kFloat32;
};

// What the engine reports when a round ends, for progress displays.
struct RoundSummary {
  int64_t run_id = 0;
  int32_t round = 0;
  int32_t attempt = 0;
  bool committed = false;
  int32_t num_sampled = 0;
  int32_t num_accepted = 0;
  std::map<std::string, double> metrics;  // weighted client metrics ("train_loss") + evaluation
  absl::Duration duration;
  std::string reason;  // why the attempt failed
};

struct EngineHooks {
  using EvaluateFn = std::function<std::map<std::string, double>(const Model&)>;
  // Server-side evaluation of a new global model before its round commits; its metrics are stored
  // with the round. May be empty.
  EvaluateFn evaluate;
  // Called after every round attempt ends (outside the engine's lock). May be empty.
  std::function<void(const RoundSummary&)> on_round_end;
  // Called when an update is accepted (OK, with its payload bytes) or refused (the refusal),
  // from the uploading thread, outside the engine's lock. May be empty.
  std::function<void(const absl::Status& outcome, int64_t bytes)> on_update;
  // Where uploads wait while they stream in (staging.h); null: files in options.spill_dir.
  std::shared_ptr<StagingSpace> staging;
  // Under differential privacy, the seed of each round's draw. The accountant's amplification by
  // sampling holds only while the cohort is secret, so the draw must not follow from the run's
  // stored seed: empty (the default) draws it from OpenSSL's CSPRNG, kept nowhere. Tests inject
  // a fixed one.
  std::function<uint64_t()> dp_draw_seed;
  // Secure aggregation: checks each site's signed keys and survivor signature as they arrive
  // (fl/aggregation/secagg/identity.h), so that one bad signature drops that site instead of
  // failing the round at its peers. Null: the sites alone check each other (a site that does not
  // sign is then dropped by its peers, not here). The server binary gives one for its CA.
  std::shared_ptr<const secagg::IdentityVerifier> secagg_verifier;
};

// One client's update while its chunks stream in. Destroying it before Finish refuses it as
// truncated. Not thread-safe: one stream, one thread.
class Upload {
 public:
  virtual ~Upload() = default;
  // Validates and folds one chunk. On error the whole update is refused and folded out.
  virtual absl::Status AddChunk(int64_t offset, std::string_view data) = 0;
  // Checks completeness and the SHA-256, then accepts the update into the round.
  virtual absl::Status Finish(std::string_view sha256_hex) = 0;
  // The stream ended before Finish: refuses the update as truncated (DATA_LOSS) and returns why.
  virtual absl::Status Abandon() = 0;
  // Refuses the update for a reason found outside the engine (e.g. a protocol violation) and
  // returns `why`.
  virtual absl::Status Refuse(absl::Status why) = 0;
  // True once the update's round closes (its deadline passed, or it has what it needs): the
  // update can no longer be accepted, so the stream need not be kept open. Thread-safe, unlike
  // the rest.
  virtual bool RoundClosing() const = 0;
};

// The global model of the open round, as handed to the clients sampled in it.
struct GlobalModel {
  std::shared_ptr<const Model> model;
  std::string sha256;  // of the payload
};

// What a joining site says about itself, checked against the run before it is admitted.
struct SiteProfile {
  std::optional<ModelSpec> model_spec;       // its trainer's spec; nullopt: not sent
  std::vector<std::string> feature_columns;  // its data columns, in order (for messages)
  std::string feature_schema_sha256;         // over those columns; empty: not sent
};

// What a run is doing, for /healthz, a metric and the waiting log.
struct RunActivity {
  enum class Phase { kWaiting, kTraining, kEvaluating, kFinished, kFailed };
  Phase phase = Phase::kWaiting;
  // The last progress: a round or evaluation opened or closed, an update accepted, a client
  // joined. A run that is neither finished nor failed and shows none for long has stalled.
  absl::Time last_progress;
  int32_t needed = 0;   // min_clients
  std::string failure;  // kFailed: why (as the store records it, where it could)
};

// A run's state as /healthz, fl_run_state and `fl run status` name it: the engine's phase, or
// "stalled" when a run still going has made no progress for `stall_after`; "idle" (value 6) is
// a server between runs.
struct RunStateView {
  std::string name;     // waiting, training, evaluating, stalled, finished, failed
  int value = 0;        // 0..5 in that order
  absl::Duration idle;  // since the last progress
};
RunStateView RunStateOf(const RunActivity& activity, absl::Time now, absl::Duration stall_after);

class RoundEngine {
 public:
  // Opens the engine over `store`, resuming its unfinished run (from the last committed round,
  // the rounds in flight marked aborted) or starting a new one from `initial_model`. None of the
  // pointers is owned; all must outlive the engine.
  static absl::StatusOr<std::unique_ptr<RoundEngine>> Create(EngineOptions options, Store* store,
                                                             aggregation::Strategy* strategy,
                                                             Clock* clock, Model initial_model,
                                                             EngineHooks hooks = {});
  virtual ~RoundEngine() = default;

  // A client announces itself (the service already checked its certificate and enrollment).
  // Returns the run id.
  virtual absl::StatusOr<int64_t> Join(const std::string& client_id, const std::string& name) = 0;
  // Whether a site that presents `profile` may join this run (for Join and for a dry run): OK, or
  // FAILED_PRECONDITION when its model spec is not the global model's (naming the first tensor
  // that differs, with both shapes) or its feature columns are not those of the run's first site
  // to send columns (naming the first column that differs). The first site's columns are stored
  // with the run, so they hold across restarts. A refusal goes to the audit log (join_refused).
  // `dry_run` (preflight): the same checks, but a first site's columns are not stored.
  virtual absl::Status Admit(const std::string& client_id, const SiteProfile& profile,
                             bool dry_run) = 0;
  // The client's next task; kWait when there is none yet. Marks the client as seen.
  virtual Task Poll(const std::string& client_id) = 0;
  // The global model a fit task trains from. FAILED_PRECONDITION for a task that is not this
  // client's current one.
  virtual absl::StatusOr<GlobalModel> ModelForTask(const std::string& client_id, int64_t run_id,
                                                   int32_t round, const std::string& task_id) = 0;
  // Starts receiving an update; refusals as described above.
  virtual absl::StatusOr<std::unique_ptr<Upload>> BeginUpload(const std::string& client_id,
                                                              const UpdateMeta& meta) = 0;
  // The client will not do its task (its trainer failed, or the task is outside its limits):
  // the round stops waiting for it, and the reason goes to the audit log and its participation.
  // Refused like an update when the task is stale or an update was already received.
  virtual absl::Status Decline(const std::string& client_id, const UpdateMeta& meta,
                               const std::string& reason) = 0;
  // Records a client's evaluation of the global model. FAILED_PRECONDITION for a task that is not
  // this client's open evaluation, ALREADY_EXISTS for a second report, INVALID_ARGUMENT for
  // non-finite values or a non-positive example count.
  virtual absl::Status SubmitEvaluation(const std::string& client_id,
                                        const EvaluationReport& report) = 0;
  // A client's keys, encrypted shares or unmasking shares in a secure round, or its decline.
  // FAILED_PRECONDITION for a task that is not this client's, a stage that is not open or a
  // client dropped from the round; ALREADY_EXISTS for a second message in a stage;
  // INVALID_ARGUMENT for what the library refuses (the client is then dropped from the round).
  virtual absl::Status SubmitSecAgg(const std::string& client_id, const SecAggMessage& message) = 0;
  // The client is alive and working on `task_id`. Returns whether that task is still open (false
  // when its round closed or the client was dropped from it as offline).
  virtual bool Heartbeat(const std::string& client_id, int32_t round,
                         const std::string& task_id) = 0;
  // The clients are alive, waiting in a long poll (the service parks polls without polling the
  // engine): they count as seen now. Ids the engine does not know are ignored.
  virtual void NoteSeen(const std::vector<std::string>& client_ids) = 0;
  // Forgets a client the service no longer admits (revoked): it stops counting as online at once,
  // and a round it was sampled in records it as dropped instead of waiting for it.
  virtual void ForgetClient(const std::string& client_id, const std::string& reason) = 0;
  // Records a refusal made before the engine saw the request (e.g. a bad certificate).
  virtual void AuditRefusal(const std::string& client_id, const std::string& event,
                            const absl::Status& status) = 0;

  // The clients the engine is waiting on now, sorted: those sampled in the open round (each may
  // have a task, or already be done with its stage), or in the open evaluation or statistics
  // phase and not yet answered. O(sampled), whatever the number of clients: what lets an
  // in-process driver (the simulation) poll only the clients that may have work.
  virtual std::vector<std::string> PendingClients() const = 0;

  // Advances time-driven transitions: starts a round when enough clients are online, closes one
  // whose deadline passed.
  virtual void Tick() = 0;
  // Blocks until the engine's state changed since `seen_version` or `timeout` passed; returns the
  // current version. For long polls. (Stop and Abort also block, for a round's commit in flight.)
  virtual uint64_t WaitForChange(uint64_t seen_version, absl::Duration timeout) = 0;
  virtual uint64_t version() const = 0;

  // Aborts the round in flight (cutting off its uploads) and records it as aborted with `reason`;
  // a restarted server runs that round again. For a graceful shutdown: afterwards the engine
  // starts no round and hands out no task.
  virtual void Abort(const std::string& reason) = 0;
  // An operator ends the run (fl run stop): the round in flight is aborted, the run recorded as
  // finished (its committed rounds are its result) or failed with `reason`, and every client
  // hears DONE. FAILED_PRECONDITION when the run is already over.
  virtual absl::Status Stop(RunStatus status, const std::string& reason) = 0;
  // The run's configuration as it stands (its policies as last changed).
  virtual EngineOptions options() const = 0;
  // Changes the policies a run may change while it runs to those of `wanted`: rounds,
  // min_clients, min_fit_clients, sample_fraction, the timeouts and deadlines, retries and
  // backoff, federated evaluation's cadence, the stopping rule. Returns one line per change
  // ("rounds: 10 -> 20"), each audited (run_updated, naming `by`) and the run's stored
  // configuration rewritten; a deadline applies from the next round. FAILED_PRECONDITION,
  // changing nothing, when `wanted` differs in anything else (model, strategy settings,
  // privacy, secure aggregation, encoding, local training, seed) or the run is over;
  // INVALID_ARGUMENT for values a run cannot have (min_fit_clients > min_clients, ...).
  virtual absl::StatusOr<std::vector<std::string>> ChangePolicies(const EngineOptions& wanted,
                                                                  const std::string& by) = 0;

  virtual bool finished() const = 0;
  virtual RunActivity Activity() const = 0;
  // Clients seen (poll, heartbeat, upload) within client_timeout.
  virtual int clients_online() const = 0;
  virtual int64_t run_id() const = 0;
  // The last committed round (0 before the first commit).
  virtual int32_t committed_round() const = 0;
  virtual std::shared_ptr<const Model> global_model() const = 0;
};

}  // namespace fl::server

#endif  // FL_SERVER_ENGINE_H_
