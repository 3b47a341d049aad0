// `fl admin backup`: an online, consistent copy of a server's data directory. The SQLite file is
// copied with SQLite's backup API from one read transaction (a snapshot of every committed round,
// whatever the server commits meanwhile), then the checkpoint files that snapshot refers to:
// each was written and fsynced before the row that names it committed, and is never changed
// after (named by its SHA-256), so the copy is whole. Restoring is starting a server on the copy
// (see README): it resumes the unfinished run at the round after the last one the copy holds.
#ifndef FL_SERVER_ADMIN_BACKUP_H_
#define FL_SERVER_ADMIN_BACKUP_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace fl::server::admin {

struct BackupSummary {
  std::string db_path;  // the copy's federation.db
  int64_t runs = 0;     // in the copy
  int64_t rounds = 0;   // committed rounds in the copy
  int64_t checkpoints = 0;
  int64_t bytes = 0;  // checkpoint bytes copied
};

// Copies the data directory `data_dir` (a server may be running on it) into `out_dir`, which
// must not exist or be empty (FAILED_PRECONDITION otherwise: a backup never overwrites). Every
// file is fsynced. DATA_LOSS naming the file when a checkpoint the database refers to is missing
// or of the wrong size; on any error the partial copy is left for inspection and the error says
// so.
absl::StatusOr<BackupSummary> BackupDataDirectory(const std::string& data_dir,
                                                  const std::string& out_dir);

}  // namespace fl::server::admin

#endif  // FL_SERVER_ADMIN_BACKUP_H_
