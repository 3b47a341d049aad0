// Thin RAII layer over the SQLite C API, private to the store: an owned connection, an owned
// prepared statement with positional binding, a transaction guard, and the one place where SQLite
// result codes become absl::Status codes. None of these types lock; the store's mutex does.
#ifndef FL_SERVER_STORE_SQLITE_UTIL_H_
#define FL_SERVER_STORE_SQLITE_UTIL_H_

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fl::server::sqlite {

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
struct StmtFinalizer {
  void operator()(sqlite3_stmt* stmt) const { sqlite3_finalize(stmt); }
};
using DbPtr = std::unique_ptr<sqlite3, DbCloser>;
using StmtPtr = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

// A Status for the SQLite result `rc`, "<what>: <sqlite3_errmsg(db)>". Busy and locked map to
// UNAVAILABLE, unique and primary-key violations to ALREADY_EXISTS, other constraint violations to
// FAILED_PRECONDITION, a full disk to RESOURCE_EXHAUSTED, corruption to DATA_LOSS, the rest to
// INTERNAL.
absl::Status Error(sqlite3* db, int rc, absl::string_view what);

// Opens (creating if needed) the database file and sets up the connection: extended result codes,
// busy_timeout=5000, journal_mode=WAL (FAILED_PRECONDITION if the file cannot be put in WAL mode),
// foreign_keys=ON, synchronous=NORMAL.
absl::StatusOr<DbPtr> OpenDatabase(const std::string& path);

// Opens an existing database file for reading only (SQLITE_OPEN_READONLY, never creating it) with
// extended result codes, busy_timeout=5000 and query_only=ON. The journal mode is left as the
// file has it. NOT_FOUND naming the path when SQLite cannot open the file.
absl::StatusOr<DbPtr> OpenDatabaseReadOnly(const std::string& path);

// Runs constant SQL text (schema, pragmas, transaction control) that carries no values.
absl::Status Exec(sqlite3* db, const char* sql, absl::string_view what);

// One prepared statement. Values are bound in order with Bind(...), starting at parameter 1.
class Statement {
 public:
  static absl::StatusOr<Statement> Prepare(sqlite3* db, absl::string_view sql,
                                           absl::string_view what);

  Statement(Statement&&) noexcept = default;
  Statement& operator=(Statement&&) noexcept = default;

  // Binds the arguments to the next parameters, in order. A failure to bind is reported by the
  // next Step or Run.
  template <typename... Args>
  Statement& Bind(const Args&... args) {
    (BindOne(args), ...);
    return *this;
  }

  // true when a row is ready to be read, false when the statement is done.
  absl::StatusOr<bool> Step();
  // Steps a statement that returns no rows to completion.
  absl::Status Run();

  int64_t Int(int column) const { return sqlite3_column_int64(stmt_.get(), column); }
  double Double(int column) const { return sqlite3_column_double(stmt_.get(), column); }
  std::string Text(int column) const;

 private:
  Statement(sqlite3* db, StmtPtr stmt, std::string what)
      : db_(db), stmt_(std::move(stmt)), what_(std::move(what)) {}

  void BindOne(int64_t value);
  void BindOne(int32_t value) { BindOne(static_cast<int64_t>(value)); }
  void BindOne(double value);
  void BindOne(absl::string_view value);
  void BindOne(const std::string& value) { BindOne(absl::string_view(value)); }
  void BindOne(const char* value) { BindOne(absl::string_view(value)); }
  void Check(int rc);

  sqlite3* db_;  // not owned
  StmtPtr stmt_;
  std::string what_;
  int next_param_ = 1;
  int bind_rc_ = SQLITE_OK;
};

// Every row of `st`, read by `read`.
template <typename Read>
auto Collect(Statement& st, Read read)
    -> absl::StatusOr<std::vector<typename decltype(read(st))::value_type>> {
  std::vector<typename decltype(read(st))::value_type> out;
  for (;;) {
    absl::StatusOr<bool> row = st.Step();
    if (!row.ok()) return row.status();
    if (!*row) return out;
    auto value = read(st);
    if (!value.ok()) return value.status();
    out.push_back(*std::move(value));
  }
}

// The first row of `st`, if any.
template <typename Read>
auto First(Statement& st, Read read)
    -> absl::StatusOr<std::optional<typename decltype(read(st))::value_type>> {
  absl::StatusOr<bool> row = st.Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::nullopt;
  auto value = read(st);
  if (!value.ok()) return value.status();
  return *std::move(value);
}

// BEGIN IMMEDIATE on construction (check status()); rolls back on destruction unless Commit()
// succeeded.
class Transaction {
 public:
  Transaction(sqlite3* db, absl::string_view what);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  const absl::Status& status() const { return status_; }
  absl::Status Commit();

 private:
  sqlite3* db_;  // not owned
  std::string what_;
  absl::Status status_;
  bool open_ = false;
};

}  // namespace fl::server::sqlite

#endif  // FL_SERVER_STORE_SQLITE_UTIL_H_
