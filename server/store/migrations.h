// The store's schema as numbered migrations, applied in order at Open and recorded in
// schema_version. Migrations are append-only: a released one is never edited, a change is a new
// one.
#ifndef FL_SERVER_STORE_MIGRATIONS_H_
#define FL_SERVER_STORE_MIGRATIONS_H_

#include <sqlite3.h>

#include "absl/status/statusor.h"

namespace fl::server::sqlite {

// The newest schema version this build knows.
int LatestSchemaVersion();

// Brings the database up to LatestSchemaVersion() in one transaction (all or nothing) and returns
// the version it is now at. FAILED_PRECONDITION when the database is newer than this build.
absl::StatusOr<int> Migrate(sqlite3* db);

// Like Migrate, but stops at `target_version` (tests build a database as an older server left
// it). A database already past it is left alone and its version returned. INVALID_ARGUMENT when
// `target_version` is not in [1, LatestSchemaVersion()].
absl::StatusOr<int> MigrateTo(sqlite3* db, int target_version);

// The version the database is at, without changing anything (works on a read-only connection).
// FAILED_PRECONDITION when it has no schema_version table (not a federation database).
absl::StatusOr<int> SchemaVersion(sqlite3* db);

}  // namespace fl::server::sqlite

#endif  // FL_SERVER_STORE_MIGRATIONS_H_
