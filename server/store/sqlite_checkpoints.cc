// The store's checkpoint files: written before the row that names them, read by SHA-256, and
// removed by the retention policy once no run needs them.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fl/common/logging.h"
#include "server/store/checkpoint_file.h"
#include "server/store/sqlite_store.h"

namespace fl::server::internal {

using sqlite::Statement;

absl::StatusOr<std::string> SqliteStore::WriteCheckpoint(const Model& model) {
  if (absl::Status s = CheckWritable("write a checkpoint"); !s.ok()) return s;
  const std::string sha = model.Sha256Hex();
  const std::string relative = absl::StrCat(kCheckpointSubdir, "/", sha, ".ckpt");
  const std::string path = absl::StrCat(data_dir_, "/", relative);
  const int64_t bytes = CheckpointFileSize(model);
  // Not while the retention policy removes files: a file found here must still be there when
  // its row is written.
  std::lock_guard files(checkpoint_mu_);
  // The file is only ever renamed into place complete, so one of the right size is this model.
  std::error_code ec;
  if (std::filesystem::file_size(path, ec) != static_cast<uintmax_t>(bytes) || ec) {
    if (absl::Status s = WriteCheckpointFile(path, model, durable_); !s.ok()) return s;
  }
  std::lock_guard lock(mu_);
  absl::StatusOr<Statement> st = Prepare(
      "INSERT OR IGNORE INTO checkpoints(sha256, path, bytes, created_at_ms) "
      "VALUES (?, ?, ?, ?)",
      "insert into checkpoints");
  if (!st.ok()) return st.status();
  if (absl::Status s = st->Bind(sha, relative, bytes, WallClockMs()).Run(); !s.ok()) return s;
  return sha;
}

absl::StatusOr<Model> SqliteStore::ReadCheckpoint(const std::string& sha256) {
  if (!IsSha256Hex(sha256)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", sha256, "' is not a checkpoint name (64 lowercase hex digits)"));
  }
  return ReadCheckpointFile(absl::StrCat(checkpoint_dir(), "/", sha256, ".ckpt"), sha256);
}

absl::StatusOr<int64_t> SqliteStore::PruneCheckpoints(int32_t keep_last, int32_t keep_every) {
  if (absl::Status s = CheckWritable("remove checkpoints"); !s.ok()) return s;
  if (keep_last <= 0) return 0;  // keep everything
  // Not while a backup copies the files its snapshot names: the next commit prunes instead.
  const std::string lock_path = absl::StrCat(data_dir_, "/", kRetentionLockFile);
  const int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0) return 0;
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{lock_fd};
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    LogEvent(LogLevel::kInfo, "checkpoints_not_pruned", {{"reason", "a backup is copying them"}});
    return 0;
  }
  std::lock_guard files(checkpoint_mu_);
  std::vector<std::pair<std::string, std::string>> removed;  // sha256, path
  {
    std::lock_guard lock(mu_);
    sqlite::Transaction tx(db_.get(), "remove checkpoints");
    if (!tx.status().ok()) return tx.status();
    // Candidates are checkpoints of committed rounds, models and strategy states (one written
    // for a round not yet committed is no candidate); kept are every run's initial model, the
    // models of its last keep_last committed rounds and of each keep_every-th round, and the
    // strategy state of a running run's last committed round (the only one a resume reads).
    absl::StatusOr<Statement> st = Prepare(
        "WITH kept AS (SELECT r.checkpoint FROM rounds r "
        "  WHERE r.status = 'committed' AND ("
        "    r.round > (SELECT MAX(m.round) FROM rounds m WHERE m.run_id = r.run_id AND "
        "               m.status = 'committed') - ?1 "
        "    OR (?2 > 0 AND r.round % ?2 = 0))) "
        "SELECT c.sha256, c.path FROM checkpoints c "
        "WHERE c.sha256 IN (SELECT checkpoint FROM rounds WHERE status = 'committed' UNION "
        "                   SELECT state_checkpoint FROM rounds WHERE status = 'committed') "
        "AND c.sha256 NOT IN ("
        "  SELECT initial_checkpoint FROM runs UNION SELECT checkpoint FROM kept UNION "
        "  SELECT r.state_checkpoint FROM rounds r JOIN runs u ON u.run_id = r.run_id "
        "  WHERE u.status = 'running' AND r.status = 'committed' AND r.round = "
        "    (SELECT MAX(m.round) FROM rounds m WHERE m.run_id = r.run_id AND "
        "     m.status = 'committed')) "
        // Bounded, so that the first pass over a long history does not hold the checkpoint
        // files (and with them the next commit) for long; later commits take the rest.
        "LIMIT 64",
        "find checkpoints to remove");
    if (!st.ok()) return st.status();
    st->Bind(static_cast<int64_t>(keep_last), static_cast<int64_t>(keep_every));
    for (;;) {
      absl::StatusOr<bool> row = st->Step();
      if (!row.ok()) return row.status();
      if (!*row) break;
      removed.emplace_back(st->Text(0), st->Text(1));
    }
    for (const auto& [sha, path] : removed) {
      absl::StatusOr<Statement> del =
          Prepare("DELETE FROM checkpoints WHERE sha256 = ?", "remove a checkpoint row");
      if (!del.ok()) return del.status();
      if (absl::Status s = del->Bind(sha).Run(); !s.ok()) return s;
    }
    if (absl::Status s = tx.Commit(); !s.ok()) return s;
  }
  // The rows go first: a file left by a crash here is only disk space, never a row without file.
  for (const auto& [sha, path] : removed) {
    std::error_code ec;
    std::filesystem::remove(absl::StrCat(data_dir_, "/", path), ec);
    if (ec) {
      LogEvent(LogLevel::kWarn, "checkpoint_not_removed",
               {{"file", path}, {"error", ec.message()}});
    }
  }
  return static_cast<int64_t>(removed.size());
}

}  // namespace fl::server::internal
