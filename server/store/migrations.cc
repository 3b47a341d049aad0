#include "server/store/migrations.h"

#include <algorithm>
#include <array>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/store/sqlite_util.h"

namespace fl::server::sqlite {
namespace {

// kMigrations[i] takes the schema from version i to version i + 1.
constexpr std::array<const char*, 10> kMigrations = {
    // 1: the initial schema.
    R"sql(
CREATE TABLE runs(
  run_id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL,
  config_json TEXT NOT NULL,
  model_spec_json TEXT NOT NULL,
  initial_checkpoint TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('running', 'finished', 'failed')),
  reason TEXT NOT NULL DEFAULT '',
  created_at_ms INTEGER NOT NULL,
  ended_at_ms INTEGER NOT NULL DEFAULT 0);
CREATE INDEX runs_by_status ON runs(status, run_id);

CREATE TABLE rounds(
  run_id INTEGER NOT NULL REFERENCES runs(run_id),
  round INTEGER NOT NULL CHECK (round >= 1),
  attempt INTEGER NOT NULL CHECK (attempt >= 0),
  status TEXT NOT NULL CHECK (status IN ('running', 'committed', 'aborted', 'failed')),
  started_at_ms INTEGER NOT NULL,
  ended_at_ms INTEGER NOT NULL DEFAULT 0,
  num_sampled INTEGER NOT NULL DEFAULT 0,
  num_reported INTEGER NOT NULL DEFAULT 0,
  checkpoint TEXT NOT NULL DEFAULT '',
  metrics_json TEXT NOT NULL DEFAULT '',
  reason TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (run_id, round, attempt));
-- At most one committed attempt per round, whatever the code above does.
CREATE UNIQUE INDEX rounds_one_commit ON rounds(run_id, round) WHERE status = 'committed';
CREATE INDEX rounds_by_status ON rounds(status, run_id);

CREATE TABLE clients(
  client_id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  enrolled_at_ms INTEGER NOT NULL,
  revoked_at_ms INTEGER NOT NULL DEFAULT 0,
  last_seen_ms INTEGER NOT NULL DEFAULT 0);

CREATE TABLE participations(
  run_id INTEGER NOT NULL,
  round INTEGER NOT NULL,
  attempt INTEGER NOT NULL,
  client_id TEXT NOT NULL,
  task_id TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('assigned', 'accepted', 'refused', 'dropped')),
  num_examples INTEGER NOT NULL DEFAULT 0,
  bytes_received INTEGER NOT NULL DEFAULT 0,
  metrics_json TEXT NOT NULL DEFAULT '',
  reason TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (run_id, round, attempt, client_id),
  FOREIGN KEY (run_id, round, attempt) REFERENCES rounds(run_id, round, attempt));
CREATE INDEX participations_by_client ON participations(client_id, run_id);

CREATE TABLE evaluations(
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(run_id),
  round INTEGER NOT NULL,
  source TEXT NOT NULL,
  loss REAL NOT NULL,
  accuracy REAL NOT NULL,
  num_examples INTEGER NOT NULL,
  at_ms INTEGER NOT NULL);
CREATE INDEX evaluations_by_round ON evaluations(run_id, round);

CREATE TABLE checkpoints(
  sha256 TEXT PRIMARY KEY,
  path TEXT NOT NULL,
  bytes INTEGER NOT NULL,
  created_at_ms INTEGER NOT NULL);

CREATE TABLE audit_log(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  at_ms INTEGER NOT NULL,
  client_id TEXT NOT NULL DEFAULT '',
  event TEXT NOT NULL,
  detail TEXT NOT NULL DEFAULT '',
  run_id INTEGER NOT NULL DEFAULT 0,
  round INTEGER NOT NULL DEFAULT 0);
CREATE INDEX audit_by_client ON audit_log(client_id, id);
CREATE INDEX audit_by_event ON audit_log(event, id);
)sql",
    // 2: every metric of an evaluation (a JSON object of name -> value), not only accuracy.
    // Rows from before read back with no metrics.
    R"sql(
ALTER TABLE evaluations ADD COLUMN metrics_json TEXT NOT NULL DEFAULT '{}';
)sql",
    // 3: differential privacy: the epsilon spent by the run up to and including a committed
    // round, and the round's sampling rate (the accountant replays it on resume). 0 in both for
    // rounds without differential privacy.
    R"sql(
ALTER TABLE rounds ADD COLUMN dp_epsilon REAL NOT NULL DEFAULT 0;
ALTER TABLE rounds ADD COLUMN dp_sampling_rate REAL NOT NULL DEFAULT 0;
)sql",
    // 4: secure aggregation: the attempt's public parameters, |U1|..|U3|, who dropped at which
    // stage, the relayed bytes and their SHA-256 (a JSON object); '' for rounds without it.
    R"sql(
ALTER TABLE rounds ADD COLUMN secagg_json TEXT NOT NULL DEFAULT '';
)sql",
    // 5: the data columns of the run's first site (a JSON object: sha256, columns, client), that
    // every later site's must equal, '' until a site that sends its columns joins; and the run's
    // federated feature statistics (mean, stddev, count, sites), '' until they are aggregated.
    R"sql(
ALTER TABLE runs ADD COLUMN feature_schema_json TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN feature_stats_json TEXT NOT NULL DEFAULT '';
)sql",
    // 6: runs submitted through the control API, oldest first: their run file (TOML), who
    // submitted them, and what became of them (queued, started as run_id, or cancelled).
    R"sql(
CREATE TABLE run_queue(
  queue_id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL,
  config_toml TEXT NOT NULL,
  submitted_by TEXT NOT NULL,
  submitted_at_ms INTEGER NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('queued', 'started', 'cancelled')),
  run_id INTEGER NOT NULL DEFAULT 0,
  reason TEXT NOT NULL DEFAULT '');
CREATE INDEX run_queue_by_status ON run_queue(status, queue_id);
)sql",
    // 7: when each enrolled client's certificate expires (ms since the epoch; 0: unknown, as for
    // clients enrolled before).
    R"sql(
ALTER TABLE clients ADD COLUMN cert_not_after_ms INTEGER NOT NULL DEFAULT 0;
)sql",
    // 8: certificates revoked that are not sites' (admins' for the control API), by fingerprint.
    R"sql(
CREATE TABLE revoked_certificates(
  fingerprint TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  revoked_at_ms INTEGER NOT NULL);
)sql",
    // 9: the strategy's server state after each committed round (a checkpoint, by SHA-256).
    R"sql(
ALTER TABLE rounds ADD COLUMN state_checkpoint TEXT NOT NULL DEFAULT '';
)sql",
    // 10: distributed DP: the epsilon spent against the server by the site that has spent most,
    // up to and including the round (the server knows who was in each sum: no amplification);
    // 0 for rounds before, and without distributed DP.
    R"sql(
ALTER TABLE rounds ADD COLUMN dp_epsilon_server REAL NOT NULL DEFAULT 0;
)sql",
};

absl::StatusOr<int> CurrentVersion(sqlite3* db) {
  absl::StatusOr<Statement> st = Statement::Prepare(
      db, "SELECT COALESCE(MAX(version), 0) FROM schema_version", "read schema_version");
  if (!st.ok()) return st.status();
  absl::StatusOr<bool> row = st->Step();
  if (!row.ok()) return row.status();
  return *row ? static_cast<int>(st->Int(0)) : 0;
}

}  // namespace

absl::StatusOr<int> SchemaVersion(sqlite3* db) {
  absl::StatusOr<Statement> table = Statement::Prepare(
      db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'",
      "look for schema_version");
  if (!table.ok()) return table.status();
  absl::StatusOr<bool> row = table->Step();
  if (!row.ok()) return row.status();
  if (!*row) {
    return absl::FailedPreconditionError(
        "the database has no schema_version table: not a federation database");
  }
  return CurrentVersion(db);
}

int LatestSchemaVersion() { return static_cast<int>(kMigrations.size()); }

absl::StatusOr<int> Migrate(sqlite3* db) { return MigrateTo(db, LatestSchemaVersion()); }

absl::StatusOr<int> MigrateTo(sqlite3* db, int target_version) {
  if (target_version < 1 || target_version > LatestSchemaVersion()) {
    return absl::InvalidArgumentError(absl::StrCat("schema version ", target_version,
                                                   " is not in [1, ", LatestSchemaVersion(), "]"));
  }
  Transaction tx(db, "migrate schema");
  if (!tx.status().ok()) return tx.status();
  if (absl::Status s =
          Exec(db, "CREATE TABLE IF NOT EXISTS schema_version(version INTEGER NOT NULL)",
               "create schema_version");
      !s.ok()) {
    return s;
  }
  absl::StatusOr<int> current = CurrentVersion(db);
  if (!current.ok()) return current.status();
  if (*current > LatestSchemaVersion()) {
    return absl::FailedPreconditionError(absl::StrCat("database schema version ", *current,
                                                      " is newer than this server's (",
                                                      LatestSchemaVersion(), ")"));
  }
  for (int version = *current + 1; version <= target_version; ++version) {
    if (absl::Status s =
            Exec(db, kMigrations[version - 1], absl::StrCat("apply schema migration ", version));
        !s.ok()) {
      return s;
    }
    absl::StatusOr<Statement> record = Statement::Prepare(
        db, "INSERT INTO schema_version(version) VALUES (?)", "record schema_version");
    if (!record.ok()) return record.status();
    if (absl::Status s = record->Bind(version).Run(); !s.ok()) return s;
  }
  if (absl::Status s = tx.Commit(); !s.ok()) return s;
  return std::max(*current, target_version);
}

}  // namespace fl::server::sqlite
