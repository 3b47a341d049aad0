#include "server/store/sqlite_util.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace fl::server::sqlite {
namespace {

absl::Status Configure(sqlite3* db) {
  if (absl::Status s = Exec(db, "PRAGMA busy_timeout = 5000", "set busy_timeout"); !s.ok()) {
    return s;
  }
  absl::StatusOr<Statement> wal =
      Statement::Prepare(db, "PRAGMA journal_mode = WAL", "set journal_mode=WAL");
  if (!wal.ok()) return wal.status();
  absl::StatusOr<bool> row = wal->Step();
  if (!row.ok()) return row.status();
  if (!*row || wal->Text(0) != "wal") {
    return absl::FailedPreconditionError(absl::StrCat(
        "set journal_mode=WAL: the database stays in '", *row ? wal->Text(0) : "", "' mode"));
  }
  if (absl::Status s = Exec(db, "PRAGMA foreign_keys = ON", "set foreign_keys=ON"); !s.ok()) {
    return s;
  }
  return Exec(db, "PRAGMA synchronous = NORMAL", "set synchronous=NORMAL");
}

}  // namespace

absl::Status Error(sqlite3* db, int rc, absl::string_view what) {
  const char* message = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  std::string text = absl::StrCat(what, ": ", message, " (sqlite code ", rc, ")");
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(text);
    case SQLITE_CONSTRAINT:
      if (rc == SQLITE_CONSTRAINT_PRIMARYKEY || rc == SQLITE_CONSTRAINT_UNIQUE) {
        return absl::AlreadyExistsError(text);
      }
      return absl::FailedPreconditionError(text);
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(text);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(text);
    default:
      return absl::InternalError(text);
  }
}

absl::StatusOr<DbPtr> OpenDatabase(const std::string& path) {
  sqlite3* raw = nullptr;
  // The store serializes every use of the connection with its own mutex.
  int rc =
      sqlite3_open_v2(path.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  DbPtr db(raw);  // sqlite3_open_v2 may return a handle even on failure
  if (rc != SQLITE_OK) return Error(db.get(), rc, absl::StrCat("open database ", path));
  sqlite3_extended_result_codes(db.get(), 1);
  if (absl::Status s = Configure(db.get()); !s.ok()) return s;
  return db;
}

absl::StatusOr<DbPtr> OpenDatabaseReadOnly(const std::string& path) {
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr);
  DbPtr db(raw);
  if ((rc & 0xff) == SQLITE_CANTOPEN) {
    return absl::NotFoundError(absl::StrCat("cannot open database ", path, " for reading: ",
                                            db != nullptr ? sqlite3_errmsg(db.get()) : "no file"));
  }
  if (rc != SQLITE_OK) return Error(db.get(), rc, absl::StrCat("open database ", path));
  sqlite3_extended_result_codes(db.get(), 1);
  if (absl::Status s = Exec(db.get(), "PRAGMA busy_timeout = 5000", "set busy_timeout"); !s.ok()) {
    return s;
  }
  if (absl::Status s = Exec(db.get(), "PRAGMA query_only = ON", "set query_only"); !s.ok()) {
    return s;
  }
  return db;
}

absl::Status Exec(sqlite3* db, const char* sql, absl::string_view what) {
  int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return Error(db, rc, what);
  return absl::OkStatus();
}

absl::StatusOr<Statement> Statement::Prepare(sqlite3* db, absl::string_view sql,
                                             absl::string_view what) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &raw, nullptr);
  StmtPtr stmt(raw);
  if (rc != SQLITE_OK) return Error(db, rc, absl::StrCat(what, " (prepare)"));
  return Statement(db, std::move(stmt), std::string(what));
}

void Statement::Check(int rc) {
  if (rc != SQLITE_OK && bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  ++next_param_;
}

void Statement::BindOne(int64_t value) {
  Check(sqlite3_bind_int64(stmt_.get(), next_param_, value));
}

void Statement::BindOne(double value) {
  Check(sqlite3_bind_double(stmt_.get(), next_param_, value));
}

void Statement::BindOne(absl::string_view value) {
  Check(sqlite3_bind_text64(stmt_.get(), next_param_, value.data(), value.size(), SQLITE_TRANSIENT,
                            SQLITE_UTF8));
}

absl::StatusOr<bool> Statement::Step() {
  if (bind_rc_ != SQLITE_OK) return Error(db_, bind_rc_, absl::StrCat(what_, " (bind)"));
  int rc = sqlite3_step(stmt_.get());
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return Error(db_, rc, what_);
}

absl::Status Statement::Run() {
  for (;;) {
    absl::StatusOr<bool> row = Step();
    if (!row.ok()) return row.status();
    if (!*row) return absl::OkStatus();
  }
}

std::string Statement::Text(int column) const {
  const unsigned char* text = sqlite3_column_text(stmt_.get(), column);
  if (text == nullptr) return {};
  return std::string(reinterpret_cast<const char*>(text),
                     static_cast<size_t>(sqlite3_column_bytes(stmt_.get(), column)));
}

Transaction::Transaction(sqlite3* db, absl::string_view what) : db_(db), what_(what) {
  status_ = Exec(db_, "BEGIN IMMEDIATE", absl::StrCat(what_, " (begin)"));
  open_ = status_.ok();
}

Transaction::~Transaction() {
  if (open_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
}

absl::Status Transaction::Commit() {
  if (!open_) return absl::FailedPreconditionError(absl::StrCat(what_, ": no open transaction"));
  absl::Status s = Exec(db_, "COMMIT", absl::StrCat(what_, " (commit)"));
  // A failed COMMIT leaves the transaction open (e.g. SQLITE_BUSY); the destructor rolls it back.
  if (s.ok()) open_ = false;
  return s;
}

}  // namespace fl::server::sqlite
