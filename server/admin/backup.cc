#include "server/admin/backup.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fl/common/file_util.h"
#include "server/store/sqlite_util.h"

namespace fl::server::admin {
namespace {

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::Status SyncFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno(absl::StrCat("cannot open ", path));
  const int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? absl::OkStatus() : Errno(absl::StrCat("cannot fsync ", path));
}

// The database of `from` into a new file `to`, from one read transaction of the source.
absl::Status CopyDatabase(const std::string& from, const std::string& to) {
  absl::StatusOr<sqlite::DbPtr> src = sqlite::OpenDatabaseReadOnly(from);
  if (!src.ok()) return src.status();
  sqlite3* raw = nullptr;
  const int open_rc =
      sqlite3_open_v2(to.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  sqlite::DbPtr dst(raw);
  if (open_rc != SQLITE_OK) return sqlite::Error(raw, open_rc, absl::StrCat("create ", to));
  sqlite3_backup* backup = sqlite3_backup_init(dst.get(), "main", src->get(), "main");
  if (backup == nullptr) {
    return sqlite::Error(dst.get(), sqlite3_errcode(dst.get()), "start the backup");
  }
  // All pages in one step: one read transaction, so one consistent snapshot.
  const int step_rc = sqlite3_backup_step(backup, -1);
  const int finish_rc = sqlite3_backup_finish(backup);
  if (step_rc != SQLITE_DONE) return sqlite::Error(dst.get(), step_rc, "copy the database");
  if (finish_rc != SQLITE_OK) return sqlite::Error(dst.get(), finish_rc, "finish the backup");
  // The copy stands alone: one file, no WAL beside it.
  if (absl::Status s = sqlite::Exec(dst.get(), "PRAGMA journal_mode = DELETE", "set journal mode");
      !s.ok()) {
    return s;
  }
  dst.reset();
  return SyncFile(to);
}

absl::StatusOr<int64_t> CountOf(sqlite3* db, const char* sql) {
  absl::StatusOr<sqlite::Statement> st = sqlite::Statement::Prepare(db, sql, "count");
  if (!st.ok()) return st.status();
  absl::StatusOr<bool> row = st->Step();
  if (!row.ok()) return row.status();
  return *row ? st->Int(0) : 0;
}

}  // namespace

absl::StatusOr<BackupSummary> BackupDataDirectory(const std::string& data_dir,
                                                  const std::string& out_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(out_dir, ec) && !fs::is_empty(out_dir, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat(out_dir,
                     " exists and is not empty: a backup never overwrites; give a new "
                     "directory"));
  }
  const std::string db = data_dir + "/federation.db";
  if (!fs::is_regular_file(db, ec)) {
    return absl::NotFoundError(absl::StrCat("no federation database at ", db));
  }
  if (absl::Status s = MakeDirectories(out_dir + "/checkpoints"); !s.ok()) return s;
  BackupSummary summary;
  summary.db_path = out_dir + "/federation.db";
  auto partial = [&out_dir](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat(s.message(), " (the partial copy in ", out_dir,
                                               " is not a backup: remove it)"));
  };
  // From before the snapshot until its checkpoints are copied, the server's retention policy
  // removes none (it skips its passes while this shared lock is held).
  const std::string lock_path = data_dir + "/checkpoints/.retention.lock";
  const int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0 || ::flock(lock_fd, LOCK_SH) != 0) {
    if (lock_fd >= 0) ::close(lock_fd);
    return partial(Errno(absl::StrCat("cannot lock ", lock_path)));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{lock_fd};
  if (absl::Status s = CopyDatabase(db, summary.db_path); !s.ok()) return partial(s);

  // The checkpoints the copy refers to, read from the copy itself.
  absl::StatusOr<sqlite::DbPtr> copy = sqlite::OpenDatabaseReadOnly(summary.db_path);
  if (!copy.ok()) return partial(copy.status());
  absl::StatusOr<sqlite::Statement> st = sqlite::Statement::Prepare(
      copy->get(), "SELECT path, bytes FROM checkpoints ORDER BY sha256", "list checkpoints");
  if (!st.ok()) return partial(st.status());
  for (;;) {
    absl::StatusOr<bool> row = st->Step();
    if (!row.ok()) return partial(row.status());
    if (!*row) break;
    const std::string relative = st->Text(0);
    const int64_t bytes = st->Int(1);
    const std::string from = data_dir + "/" + relative;
    const std::string to = out_dir + "/" + relative;
    if (relative.find("..") != std::string::npos || fs::file_size(from, ec) != uintmax_t(bytes)) {
      return partial(absl::DataLossError(
          absl::StrCat("checkpoint ", from, " is missing or not ", bytes,
                       " bytes as the database records; the data directory is damaged")));
    }
    if (!fs::copy_file(from, to, fs::copy_options::none, ec)) {
      return partial(absl::InternalError(absl::StrCat("cannot copy ", from, ": ", ec.message())));
    }
    if (absl::Status s = SyncFile(to); !s.ok()) return partial(s);
    ++summary.checkpoints;
    summary.bytes += bytes;
  }
  for (const std::string& dir : {out_dir + "/checkpoints", out_dir}) {
    if (absl::Status s = SyncDirectory(dir); !s.ok()) return partial(s);
  }
  absl::StatusOr<int64_t> runs = CountOf(copy->get(), "SELECT COUNT(*) FROM runs");
  absl::StatusOr<int64_t> rounds =
      CountOf(copy->get(), "SELECT COUNT(*) FROM rounds WHERE status = 'committed'");
  if (!runs.ok()) return partial(runs.status());
  if (!rounds.ok()) return partial(rounds.status());
  summary.runs = *runs;
  summary.rounds = *rounds;
  return summary;
}

}  // namespace fl::server::admin
