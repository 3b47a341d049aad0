#include "server/store/run_queue.h"

#include "absl/strings/str_cat.h"

namespace fl::server {
namespace {

constexpr const char* kSelect =
    "SELECT queue_id, name, config_toml, submitted_by, submitted_at_ms, status, run_id, reason "
    "FROM run_queue ";

absl::StatusOr<QueuedRun> Read(sqlite::Statement& st) {
  QueuedRun q;
  q.queue_id = st.Int(0);
  q.name = st.Text(1);
  q.config_toml = st.Text(2);
  q.submitted_by = st.Text(3);
  q.submitted_at_ms = st.Int(4);
  const std::string status = st.Text(5);
  q.status = status == "queued"    ? QueuedRun::Status::kQueued
             : status == "started" ? QueuedRun::Status::kStarted
                                   : QueuedRun::Status::kCancelled;
  q.run_id = st.Int(6);
  q.reason = st.Text(7);
  return q;
}

}  // namespace

std::string_view QueuedRunStatusName(QueuedRun::Status status) {
  switch (status) {
    case QueuedRun::Status::kQueued:
      return "queued";
    case QueuedRun::Status::kStarted:
      return "started";
    case QueuedRun::Status::kCancelled:
      return "cancelled";
  }
  return "queued";
}

absl::StatusOr<std::unique_ptr<RunQueue>> RunQueue::Open(const std::string& db_path) {
  absl::StatusOr<sqlite::DbPtr> db = sqlite::OpenDatabase(db_path);
  if (!db.ok()) return db.status();
  return std::unique_ptr<RunQueue>(new RunQueue(*std::move(db)));
}

absl::StatusOr<int64_t> RunQueue::Enqueue(const std::string& name, const std::string& config_toml,
                                          const std::string& submitted_by, int64_t now_ms) {
  std::lock_guard lock(mu_);
  absl::StatusOr<sqlite::Statement> st = sqlite::Statement::Prepare(
      db_.get(),
      "INSERT INTO run_queue(name, config_toml, submitted_by, submitted_at_ms, status) "
      "VALUES (?, ?, ?, ?, 'queued')",
      "queue a run");
  if (!st.ok()) return st.status();
  if (absl::Status s = st->Bind(name, config_toml, submitted_by, now_ms).Run(); !s.ok()) return s;
  return sqlite3_last_insert_rowid(db_.get());
}

absl::StatusOr<std::vector<QueuedRun>> RunQueue::List() {
  std::lock_guard lock(mu_);
  absl::StatusOr<sqlite::Statement> st = sqlite::Statement::Prepare(
      db_.get(),
      absl::StrCat(kSelect,
                   "ORDER BY status != 'queued', CASE WHEN status = 'queued' THEN queue_id "
                   "ELSE -queue_id END"),
      "list the run queue");
  if (!st.ok()) return st.status();
  return sqlite::Collect(*st, Read);
}

absl::StatusOr<std::optional<QueuedRun>> RunQueue::Oldest() {
  std::lock_guard lock(mu_);
  absl::StatusOr<sqlite::Statement> st = sqlite::Statement::Prepare(
      db_.get(), absl::StrCat(kSelect, "WHERE status = 'queued' ORDER BY queue_id LIMIT 1"),
      "read the run queue");
  if (!st.ok()) return st.status();
  return sqlite::First(*st, Read);
}

absl::StatusOr<QueuedRun> RunQueue::Get(int64_t queue_id) {
  std::lock_guard lock(mu_);
  absl::StatusOr<sqlite::Statement> st = sqlite::Statement::Prepare(
      db_.get(), absl::StrCat(kSelect, "WHERE queue_id = ?"), "read the run queue");
  if (!st.ok()) return st.status();
  absl::StatusOr<std::optional<QueuedRun>> q = sqlite::First(st->Bind(queue_id), Read);
  if (!q.ok()) return q.status();
  if (!q->has_value()) {
    return absl::NotFoundError(
        absl::StrCat("no queued run ", queue_id, "; fl run list shows them"));
  }
  return **std::move(q);
}

absl::StatusOr<std::optional<QueuedRun>> RunQueue::ForRun(int64_t run_id) {
  std::lock_guard lock(mu_);
  absl::StatusOr<sqlite::Statement> st = sqlite::Statement::Prepare(
      db_.get(), absl::StrCat(kSelect, "WHERE run_id = ? AND status = 'started'"),
      "read the run queue");
  if (!st.ok()) return st.status();
  return sqlite::First(st->Bind(run_id), Read);
}

absl::Status RunQueue::Claim(int64_t queue_id) { return Move(queue_id, "queued", "started", ""); }

absl::Status RunQueue::Cancel(int64_t queue_id, const std::string& reason) {
  return Move(queue_id, "queued", "cancelled", reason);
}

absl::Status RunQueue::Abandon(int64_t queue_id, const std::string& reason) {
  return Move(queue_id, "started", "cancelled", reason);
}

absl::Status RunQueue::SetRun(int64_t queue_id, int64_t run_id) {
  std::lock_guard lock(mu_);
  absl::StatusOr<sqlite::Statement> st = sqlite::Statement::Prepare(
      db_.get(), "UPDATE run_queue SET run_id = ? WHERE queue_id = ? AND status = 'started'",
      "record a queued run's run");
  if (!st.ok()) return st.status();
  return st->Bind(run_id, queue_id).Run();
}

absl::StatusOr<std::optional<QueuedRun>> RunQueue::ClaimedWithoutRun() {
  std::lock_guard lock(mu_);
  absl::StatusOr<sqlite::Statement> st = sqlite::Statement::Prepare(
      db_.get(),
      absl::StrCat(kSelect,
                   "WHERE status = 'started' AND run_id = 0 ORDER BY queue_id DESC LIMIT 1"),
      "read the run queue");
  if (!st.ok()) return st.status();
  return sqlite::First(*st, Read);
}

absl::Status RunQueue::Move(int64_t queue_id, absl::string_view from, absl::string_view to,
                            const std::string& reason) {
  std::lock_guard lock(mu_);
  absl::StatusOr<sqlite::Statement> st = sqlite::Statement::Prepare(
      db_.get(), "UPDATE run_queue SET status = ?, reason = ? WHERE queue_id = ? AND status = ?",
      "update the run queue");
  if (!st.ok()) return st.status();
  if (absl::Status s = st->Bind(to, reason, queue_id, from).Run(); !s.ok()) return s;
  if (sqlite3_changes(db_.get()) == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("q", queue_id,
                     from == "queued" ? " is no longer queued (it started or was cancelled)"
                                      : " is not starting"));
  }
  return absl::OkStatus();
}

}  // namespace fl::server
