// Operator administration of a federation through its Store: the reports of `fl admin` (status,
// rounds, clients, audit log) as text tables, CSV or JSON, and enrolling and revoking clients.
//
// The reports only read, so they work on a store opened with Store::OpenReadOnly while the server
// runs; each store call sees the last committed state at that moment, so a report taken during a
// commit may show a round in one table and not yet in another. Enrolling and revoking write to
// the store (open it with Store::Open) and take effect on the running server's next call from
// that client, because the server looks enrollment up in the store on every call; each also
// writes an audit_log record ("client_enrolled" / "client_revoked") naming the client and the
// operator.
//
// Output formats (`Format`):
//   table  aligned columns for a terminal; a header line, then one line per row. Control
//          characters in text (e.g. a refusal reason a client sent) are escaped (\n, \x1b, ...).
//          Times are UTC ("2024-05-01 12:34:56Z", "-" for none); client ids are shortened to
//          their first 16 hex digits.
//   csv    RFC 4180: a header line with the column names below, then one line per row; text is
//          quoted when needed, and text starting with = + - @ gets a leading apostrophe so that a
//          spreadsheet does not run it. Times are integer milliseconds since the Unix epoch (0 for
//          none); client ids are full.
//   json   one JSON document (2-space indent, invalid UTF-8 replaced by U+FFFD), field names as
//          the CSV columns below.
//
// Stable columns (csv and json; new columns are only ever appended):
//   rounds:  run_id, round, attempt, status, started_at_ms, ended_at_ms, duration_ms (empty in
//            CSV and null in JSON while the attempt runs), num_sampled, num_reported, checkpoint,
//            reason; then in CSV one column "metric_<name>" per metric name that any attempt of
//            the run recorded, by name (empty where an attempt lacks it); then, when the run
//            has federated evaluations, one column "eval_<name>" per name in any of them
//            ("eval_loss", "eval_accuracy", "eval_auc", ...; the names the stopping rule uses),
//            filled on the row of the evaluated round's committed attempt. JSON:
//            {"run": {run_id, name, status, reason, created_at_ms, ended_at_ms},
//             "rounds": [{...the columns above..., "metrics": {name: number}}],
//             "evaluations": [{round, source, loss, accuracy, num_examples, at_ms,
//                              "metrics": {name: number} (empty for rows of schema 1)}]}
//   clients: client_id, name, status ("enrolled", "revoked", or "not_enrolled" for an identity
//            that took part without being enrolled, as in plaintext mode), enrolled_at_ms,
//            revoked_at_ms, last_seen_ms, assigned, accepted, refused, dropped,
//            last_round_started_ms. JSON: an array of objects with these fields.
//   audit:   id, at_ms, event, client_id, run_id, round, detail. JSON: an array of objects.
//
// Every function takes the store by reference and keeps no pointer to it, nor any state of its
// own, so they are as thread-safe as the Store (which is). No exception escapes.
#ifndef FL_SERVER_ADMIN_ADMIN_H_
#define FL_SERVER_ADMIN_ADMIN_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "fl/server/store.h"

namespace fl::server::admin {

enum class Format { kTable, kCsv, kJson };

// "table", "csv" or "json"; INVALID_ARGUMENT naming the choices for anything else.
absl::StatusOr<Format> ParseFormat(absl::string_view name);

// A client counts as seen recently in StatusReport when its last call is at most this old.
inline constexpr int64_t kRecentlySeenMs = 5 * 60 * 1000;
// How many hex digits of a client id tables show, and the fewest RevokeClient accepts.
inline constexpr int kTableIdDigits = 16;
inline constexpr int kMinPrefixDigits = 8;

// The run `run_id`, or the newest run (largest run_id) when nullopt. NOT_FOUND naming the run, or
// saying that the store has no run yet.
absl::StatusOr<RunRecord> ResolveRun(Store& store, std::optional<int64_t> run_id);

// A text overview for a terminal: the database's path and schema, one table row per run (id,
// name, status, created, rounds committed of the configured number, attempts, the last attempt's
// round and status, the last committed round's metrics, why the run failed), and the client
// counts: enrolled (not revoked), revoked, and seen at most kRecentlySeenMs before `now_ms`.
// CSV: one row per run, with the client counts on each; JSON: {"database", "schema_version",
// "read_at_ms", "runs": [...], "clients": {...}}. Errors are the store's.
absl::StatusOr<std::string> StatusReport(Store& store, int64_t now_ms,
                                         Format format = Format::kTable);

// Every attempt of the run (see ResolveRun: nullopt is the newest run) in round, attempt order.
// The table starts with one line naming the run, then the columns ROUND, ATTEMPT, STATUS,
// SAMPLED, REPORTED, DURATION_MS, METRICS ("name=value ..." or "-"), EVALUATION (only when the
// run has a federated evaluation: its "loss=... accuracy=... auc=..." on the evaluated round's
// committed attempt, else "-"), REASON. CSV and JSON as in the file comment. NOT_FOUND from
// ResolveRun; otherwise the store's errors.
absl::StatusOr<std::string> RoundsReport(Store& store, std::optional<int64_t> run_id,
                                         Format format);

// The evaluations of a run (see ResolveRun), of one round when `round` is set: the server's test
// set ("server"), the sites' mean ("federated") and each site's own ("site:<name>", recorded
// unless the run had secure aggregation and the site did not allow it). Table columns: ROUND,
// SOURCE, EXAMPLES, LOSS, METRICS; CSV and JSON carry the client id of a site's row too.
// NOT_FOUND from ResolveRun, or when the round has no evaluation.
absl::StatusOr<std::string> EvalsReport(Store& store, std::optional<int64_t> run_id,
                                        std::optional<int32_t> round, Format format);

// Every enrolled client (revoked ones included) by enrollment time, then every identity that took
// part without being enrolled, by id, with its participations over all runs. Table columns:
// CLIENT (id prefix), NAME, STATUS, ENROLLED, LAST_SEEN, ACCEPTED, REFUSED, DROPPED.
absl::StatusOr<std::string> ClientsReport(Store& store, Format format);

// The newest `limit` audit records, oldest first. Table columns: ID, TIME, EVENT, CLIENT (id
// prefix or "-"), RUN, ROUND, DETAIL. INVALID_ARGUMENT when `limit` is negative.
absl::StatusOr<std::string> AuditReport(Store& store, int limit, Format format);

struct Enrollment {
  std::string client_id;  // the certificate's fingerprint
  std::string name;
  bool changed = false;  // false when it was already enrolled, not revoked, under this name
};

// Enrolls the client certificate `cert_pem` under `name` (the certificate's common name when
// empty) after checking that it is a certificate, chains to the federation CA `ca_pem`, is valid
// now and is for client authentication. Writes the audit record "client_enrolled" (detail naming
// the client and `operator_name`) unless nothing changed. INVALID_ARGUMENT when either PEM holds
// no certificate; UNAUTHENTICATED with the reason when the certificate is not acceptable (e.g.
// "certificate is not signed by this federation's CA"); FAILED_PRECONDITION for a read-only
// store; otherwise the store's errors. When the audit write fails after the enrollment, the error
// says that the client is enrolled.
absl::StatusOr<Enrollment> EnrollCertificate(Store& store, absl::string_view cert_pem,
                                             absl::string_view ca_pem, const std::string& name,
                                             const std::string& operator_name, int64_t now_ms);

// The client whose id starts with `name_or_fingerprint` (kMinPrefixDigits to 64 hex digits;
// case and ':' separators are ignored, so OpenSSL's "AB:CD:..." form works), or else the client
// with exactly that name (`fl admin revoke site-2`). A fingerprint prefix wins over a name that
// happens to be hex. INVALID_ARGUMENT when it matches several clients (the error lists them and
// says what to give instead), or is hex of the wrong length and no client's name; NOT_FOUND when
// it matches none. Revoked clients are candidates too.
absl::StatusOr<ClientRecord> FindClient(Store& store, absl::string_view name_or_fingerprint);

struct Revocation {
  ClientRecord client;           // as it was before this call
  bool already_revoked = false;  // nothing was written
};

// Revokes the client FindClient finds and writes the audit record "client_revoked" (detail naming
// the client and `operator_name`). A client already revoked is left as it is (already_revoked).
// FindClient's errors; FAILED_PRECONDITION for a read-only store; otherwise the store's errors.
absl::StatusOr<Revocation> RevokeClient(Store& store, absl::string_view name_or_fingerprint,
                                        const std::string& operator_name, int64_t now_ms);

}  // namespace fl::server::admin

#endif  // FL_SERVER_ADMIN_ADMIN_H_
