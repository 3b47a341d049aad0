// Store: the server's durable state in one SQLite file (WAL mode) plus checkpoint files.
//
// Layout under the data directory:
//   federation.db             runs, rounds, clients, participations, evaluations, checkpoints,
//                             audit_log, schema_version (migrations numbered, run at Open)
//   checkpoints/<sha256>.ckpt one file per distinct global model, named by the SHA-256 of its
//                             payload, written atomically before any row refers to it
//
// Times are milliseconds since the Unix epoch, passed in by the caller (the engine's clock), so
// tests are exact. Every method is thread-safe (one connection, one mutex) and returns a Status
// naming the table and the SQLite error on failure. Committing a round uses synchronous=FULL: once
// CommitRound returns OK the round survives a crash or power loss.
//
// Other processes may open the same data directory while a server runs (the operator's `fl admin`):
// WAL mode lets a reader see the last committed state without blocking the server, and writers
// take turns (busy_timeout of 5 s). A store opened with OpenReadOnly never writes: every method
// that would returns FAILED_PRECONDITION and leaves files and rows alone.
#ifndef FL_SERVER_STORE_H_
#define FL_SERVER_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fl/common/model.h"

namespace fl::server {

enum class RunStatus { kRunning, kFinished, kFailed };
enum class RoundStatus { kRunning, kCommitted, kAborted, kFailed };
enum class ParticipationStatus { kAssigned, kAccepted, kRefused, kDropped };

const char* ToString(RunStatus s);
const char* ToString(RoundStatus s);
const char* ToString(ParticipationStatus s);

struct RunRecord {
  int64_t run_id = 0;
  std::string name;
  std::string config_json;         // the run's configuration, as given
  std::string model_spec_json;     // ModelSpec::ToJson()
  std::string initial_checkpoint;  // SHA-256 of the initial global model
  RunStatus status = RunStatus::kRunning;
  std::string reason;  // why it failed, if it did
  int64_t created_at_ms = 0;
  int64_t ended_at_ms = 0;  // 0 while running
};

// What a round's release spent (RoundRecord's dp_* fields, which say what each means).
struct SpentPrivacy {
  double sampling_rate = 0;
  double epsilon = 0;
  double epsilon_server = 0;
};

struct RoundRecord {
  int64_t run_id = 0;
  int32_t round = 0;    // 1-based
  int32_t attempt = 0;  // 0 for the first attempt of a round, 1 for its first retry, ...
  RoundStatus status = RoundStatus::kRunning;
  int64_t started_at_ms = 0;
  int64_t ended_at_ms = 0;
  int32_t num_sampled = 0;
  int32_t num_reported = 0;
  std::string checkpoint;    // SHA-256 of the aggregated model (committed rounds only)
  std::string metrics_json;  // e.g. {"train_loss": 0.5, "test_accuracy": 0.8}
  std::string reason;        // why it was aborted or failed
  // Differential privacy (committed rounds of a run with it, and a secure attempt whose sum was
  // unmasked but not committed; 0 otherwise): the fraction of the online clients the round
  // sampled (the accountant's q), and the epsilon the run has spent up to and including this
  // round, for the run's delta: against those who see the models, amplified by sampling.
  double dp_sampling_rate = 0;
  double dp_epsilon = 0;
  // Distributed DP: the epsilon against the server (which knows who was in each sum, so nothing
  // is amplified) of the site that has spent most, over the sums it was in up to this round, for
  // the run's delta, assuming no site colludes with the server. 0 without distributed DP (with
  // central DP the server reads every update: there is none against it).
  double dp_epsilon_server = 0;
  // Secure aggregation (rounds that ran it; empty otherwise): a JSON object with the round's
  // parameters, the sizes of U1..U3, who dropped at which stage, the relayed bytes and a SHA-256
  // over the relayed ciphertexts. Never a key, a share, a mask or an update.
  std::string secagg_json;
  // SHA-256 of the strategy's server state after this round (a server optimizer's moments),
  // checkpointed beside the model; empty for a strategy without state.
  std::string state_checkpoint;
};

struct ParticipationRecord {
  int64_t run_id = 0;
  int32_t round = 0;
  int32_t attempt = 0;
  std::string client_id;
  std::string task_id;
  ParticipationStatus status = ParticipationStatus::kAssigned;
  int64_t num_examples = 0;
  int64_t bytes_received = 0;
  std::string metrics_json;
  std::string reason;  // why refused or dropped
};

struct ClientRecord {
  std::string client_id;  // SHA-256 fingerprint of the client's certificate
  std::string name;
  int64_t enrolled_at_ms = 0;
  int64_t revoked_at_ms = 0;  // 0 when not revoked
  int64_t last_seen_ms = 0;
  int64_t cert_not_after_ms = 0;  // its certificate's expiry; 0 when unknown
};

// The source of a site's own federated-evaluation row: this, then the client's id.
inline constexpr char kSiteEvaluationSource[] = "site:";

struct EvaluationRecord {
  int64_t id = 0;
  int64_t run_id = 0;
  int32_t round = 0;
  std::string source;  // who evaluated: "server", "federated" (the sites' mean) or "site:<id>"
  double loss = 0;
  double accuracy = 0;  // metrics["accuracy"] when recorded, kept as a column for old readers
  int64_t num_examples = 0;
  int64_t at_ms = 0;
  // Every metric of the evaluation by name (e.g. "accuracy", "auc"), loss apart; for a federated
  // evaluation each is the example-weighted mean over the sites that reported it. Empty for rows
  // recorded before schema version 2.
  std::map<std::string, double> metrics;
};

// How one client's participations ended, summed over the attempts it was sampled for.
struct ParticipationCount {
  std::string client_id;
  int64_t assigned = 0;  // sampled, never finished (a round still running, or a crash)
  int64_t accepted = 0;
  int64_t refused = 0;
  int64_t dropped = 0;
  int64_t last_round_started_ms = 0;  // start of the newest attempt it was sampled for
};

struct AuditRecord {
  int64_t id = 0;
  int64_t at_ms = 0;
  std::string client_id;  // may be empty (e.g. a failed TLS handshake)
  std::string event;      // short machine-readable kind, e.g. "update_refused"
  std::string detail;     // the human-readable reason
  int64_t run_id = 0;
  int32_t round = 0;
};

struct StoreOpenOptions {
  // Removes the temporary checkpoint files (checkpoints/*.tmp.*) that a crash left behind. A
  // process that opens the store beside a running server (e.g. `fl admin enroll`) sets this to
  // false: those files may be the server's checkpoint being written right now.
  bool remove_stale_temp_files = true;
  // fsync every commit and checkpoint, as a server that runs for months must. False for a
  // simulation, which a crash loses but the same seed reruns: SQLite's synchronous=OFF and no
  // fsync of checkpoint files (a process that dies loses nothing committed; a machine that dies
  // may lose the last rounds).
  bool durable = true;
};

// The data directory that `path` names: `path` itself (a directory, or nothing yet), or the
// directory of the federation.db file it names (the path `fl sim` and `fl report` print).
// FAILED_PRECONDITION when it names another file, saying what to give instead.
absl::StatusOr<std::string> DataDirectoryOf(const std::string& path);

class Store {
 public:
  // Opens (creating if needed) the store under `data_dir` and migrates it to the current schema.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& data_dir,
                                                     const StoreOpenOptions& options = {});
  // Opens an existing store for reading only (SQLITE_OPEN_READONLY, query_only), also while a
  // server holds it open and writes. Runs no migration and creates no directory, database or
  // checkpoint (SQLite itself may create the database's empty -wal and -shm side files, as for
  // any WAL reader). Each call reads the last committed state at that moment. NOT_FOUND naming
  // the path when there is no database under `data_dir`; FAILED_PRECONDITION when the file is not
  // a federation database or its schema version is not this build's (start the matching server
  // once to migrate it); DATA_LOSS when it is not an SQLite file.
  static absl::StatusOr<std::unique_ptr<Store>> OpenReadOnly(const std::string& data_dir);
  virtual ~Store() = default;

  virtual std::string db_path() const = 0;
  virtual std::string checkpoint_dir() const = 0;
  virtual int schema_version() const = 0;
  virtual bool read_only() const = 0;

  // --- runs
  virtual absl::StatusOr<int64_t> CreateRun(const RunRecord& run) = 0;  // run_id is assigned
  // The newest run whose status is running, if any.
  virtual absl::StatusOr<std::optional<RunRecord>> ActiveRun() = 0;
  virtual absl::StatusOr<RunRecord> GetRun(int64_t run_id) = 0;  // NOT_FOUND
  // Every run, oldest (smallest run_id) first; empty when there is none.
  virtual absl::StatusOr<std::vector<RunRecord>> Runs() = 0;
  // Ends a running run with `status` (finished or failed, else INVALID_ARGUMENT). NOT_FOUND for an
  // unknown run, FAILED_PRECONDITION for one already ended.
  // A run's configuration after an operator changed its policies (EngineOptions::ToJson).
  virtual absl::Status UpdateRunConfig(int64_t run_id, const std::string& config_json) = 0;
  virtual absl::Status FinishRun(int64_t run_id, RunStatus status, const std::string& reason,
                                 int64_t now_ms) = 0;
  // The run's feature schema (the data columns every site must have, as a JSON text): sets it to
  // `schema_json` when the run has none yet, in one statement (the first caller wins), and
  // returns the run's schema after the call ('' when it has none). An empty `schema_json` only
  // reads. NOT_FOUND for an unknown run.
  virtual absl::StatusOr<std::string> ClaimFeatureSchema(int64_t run_id,
                                                         const std::string& schema_json) = 0;
  // The run's federated feature statistics (EngineOptions::federated_standardization) as a JSON
  // text, '' before they are set. NOT_FOUND for an unknown run.
  virtual absl::StatusOr<std::string> FeatureStatistics(int64_t run_id) = 0;
  // Forgets the run's feature schema, so that the next site to join fixes it anew (`fl admin
  // columns --reset`, after a misconfigured first site). NOT_FOUND for an unknown run.
  virtual absl::Status ResetFeatureSchema(int64_t run_id) = 0;
  virtual absl::Status SetFeatureStatistics(int64_t run_id, const std::string& stats_json) = 0;

  // --- rounds
  // Inserts the row of a new attempt with status running. ALREADY_EXISTS if it exists,
  // FAILED_PRECONDITION if the run does not.
  virtual absl::Status BeginRound(const RoundRecord& round) = 0;
  // Atomically (one transaction, synchronous=FULL) marks the attempt committed with the record's
  // checkpoint, counts, metrics and end time, and writes the participations. The checkpoint must
  // already be written. FAILED_PRECONDITION when the attempt is not running, another attempt of
  // the same round is already committed, or the checkpoint has no row (WriteCheckpoint first);
  // NOT_FOUND when there is no such attempt; INVALID_ARGUMENT when a participation names another
  // attempt. On any error nothing is written.
  virtual absl::Status CommitRound(const RoundRecord& round,
                                   const std::vector<ParticipationRecord>& participations) = 0;
  // Marks a running attempt aborted or failed (else INVALID_ARGUMENT), with its reason. NOT_FOUND
  // for an unknown attempt, FAILED_PRECONDITION for one that is not running.
  virtual absl::Status EndRound(int64_t run_id, int32_t round, int32_t attempt, RoundStatus status,
                                const std::string& reason, int64_t now_ms) = 0;
  // Sets the secagg_json of a running attempt (one that is then failed or aborted; a commit
  // writes the record's), and the privacy it spent: a secure sum unmasked but not committed was
  // still released to the server, so its RoundRecord's dp_* values are recorded (zeros: none).
  // NOT_FOUND for an unknown attempt, FAILED_PRECONDITION for one that is not running.
  virtual absl::Status SetRoundSecAgg(int64_t run_id, int32_t round, int32_t attempt,
                                      const std::string& secagg_json,
                                      const SpentPrivacy& spent) = 0;
  // The privacy an aborted attempt spent: a server stopped while the attempt's secure sum was
  // being unmasked counts the release when it restarts (the attempt's dp_* values; its
  // secagg_json stays). NOT_FOUND for an unknown attempt, FAILED_PRECONDITION for one that is not
  // aborted.
  virtual absl::Status SetAbortedRoundPrivacy(int64_t run_id, int32_t round, int32_t attempt,
                                              const SpentPrivacy& spent) = 0;
  // Marks every running attempt of the run aborted ("server restarted"); returns how many.
  virtual absl::StatusOr<int> AbortInFlightRounds(int64_t run_id, int64_t now_ms) = 0;
  virtual absl::StatusOr<std::vector<RoundRecord>> Rounds(int64_t run_id) = 0;  // by round, attempt
  virtual absl::StatusOr<std::optional<RoundRecord>> LastCommittedRound(int64_t run_id) = 0;

  // --- participations (insert or replace by run, round, attempt, client; FAILED_PRECONDITION when
  // the attempt does not exist). Participations(run, round) lists every attempt's, by attempt, then
  // client.
  virtual absl::Status RecordParticipation(const ParticipationRecord& p) = 0;
  virtual absl::StatusOr<std::vector<ParticipationRecord>> Participations(int64_t run_id,
                                                                          int32_t round) = 0;
  // One row per client that was ever sampled, in the run `run_id` or, when nullopt, in any run,
  // by client_id. Every attempt counts (a retried round counts once per attempt). Clients that
  // were never sampled have no row.
  virtual absl::StatusOr<std::vector<ParticipationCount>> ParticipationCounts(
      std::optional<int64_t> run_id) = 0;

  // --- clients
  // Idempotent; re-enrolling a revoked client clears the revocation.
  virtual absl::Status EnrollClient(const std::string& client_id, const std::string& name,
                                    int64_t now_ms) = 0;
  virtual absl::Status RevokeClient(const std::string& client_id, int64_t now_ms) = 0;  // NOT_FOUND
  // Enrolled and not revoked.
  virtual absl::StatusOr<bool> IsEnrolled(const std::string& client_id) = 0;
  // Records that the client was seen (last_seen_ms never moves backwards). NOT_FOUND if unknown.
  virtual absl::Status TouchClient(const std::string& client_id, int64_t now_ms) = 0;
  // TouchClient for each (client id, time) in one transaction; ids not enrolled are skipped.
  virtual absl::Status TouchClients(
      const std::vector<std::pair<std::string, int64_t>>& seen_ms) = 0;
  // Every client, revoked ones included, by enrollment time.
  virtual absl::StatusOr<std::vector<ClientRecord>> Clients() = 0;
  // An admin's certificate (the control API's) revoked by fingerprint: refused from then on.
  virtual absl::Status RevokeCertificate(const std::string& fingerprint, const std::string& name,
                                         int64_t now_ms) = 0;
  // When the certificate was revoked (RevokeCertificate), or nullopt.
  virtual absl::StatusOr<std::optional<int64_t>> CertificateRevokedAt(
      const std::string& fingerprint) = 0;
  // Records when an enrolled client's certificate expires (NOT_FOUND when not enrolled).
  virtual absl::Status SetClientCertificateExpiry(const std::string& client_id,
                                                  int64_t not_after_ms) = 0;
  // The client with this id, revoked or not; nullopt when it was never enrolled.
  virtual absl::StatusOr<std::optional<ClientRecord>> Client(const std::string& client_id) = 0;

  // --- evaluations
  // Records one evaluation of a round's model with its metrics (stored as a JSON object in
  // evaluations.metrics_json). INVALID_ARGUMENT naming the metric when one is not finite (JSON
  // has no NaN or infinity).
  virtual absl::Status RecordEvaluation(int64_t run_id, int32_t round, const std::string& source,
                                        double loss, double accuracy, int64_t num_examples,
                                        int64_t now_ms,
                                        const std::map<std::string, double>& metrics) = 0;
  // The run's evaluations by round, then in the order they were recorded; empty for a run with
  // none or an unknown run.
  virtual absl::StatusOr<std::vector<EvaluationRecord>> Evaluations(int64_t run_id) = 0;

  // --- checkpoints
  // Writes the model to checkpoints/<sha>.ckpt (temporary file, fsync, rename, fsync of the
  // directory) unless it already exists, records it, and returns the SHA-256 of its payload.
  virtual absl::StatusOr<std::string> WriteCheckpoint(const Model& model) = 0;
  // Reads a checkpoint back; DATA_LOSS when the file's payload does not hash to `sha256`,
  // NOT_FOUND when there is no such file, INVALID_ARGUMENT when `sha256` is not 64 lowercase hex
  // digits.
  virtual absl::StatusOr<Model> ReadCheckpoint(const std::string& sha256) = 0;
  // The retention policy: removes the checkpoint files (and rows) of committed rounds that no
  // run keeps. Every run keeps its initial model, the checkpoints of its last `keep_last`
  // committed rounds (so it always resumes) and of each round that is a multiple of
  // `keep_every` (0: none). keep_last 0 keeps everything. Returns how many were removed.
  virtual absl::StatusOr<int64_t> PruneCheckpoints(int32_t keep_last, int32_t keep_every) = 0;

  // --- audit log
  virtual absl::Status Audit(const AuditRecord& record) = 0;  // id is assigned
  // The newest `limit` records, oldest first. INVALID_ARGUMENT when `limit` is negative.
  virtual absl::StatusOr<std::vector<AuditRecord>> AuditLog(int limit) = 0;
  // The records of one run with an id above `after_id`, oldest first, at most `limit`.
  virtual absl::StatusOr<std::vector<AuditRecord>> RunAuditLog(int64_t run_id, int64_t after_id,
                                                               int limit) = 0;
};

}  // namespace fl::server

#endif  // FL_SERVER_STORE_H_
