// The queue of runs submitted through the control API (table run_queue, schema 6), on its own
// connection to the server's federation.db: the server takes the oldest queued run when the
// active one is over, and a run file stays with the run it became, so that a restarted server
// resumes the run with its own configuration. Thread-safe.
#ifndef FL_SERVER_STORE_RUN_QUEUE_H_
#define FL_SERVER_STORE_RUN_QUEUE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/store/sqlite_util.h"

namespace fl::server {

struct QueuedRun {
  enum class Status { kQueued, kStarted, kCancelled };
  int64_t queue_id = 0;
  std::string name;
  std::string config_toml;   // the run file as submitted
  std::string submitted_by;  // the admin certificate's common name
  int64_t submitted_at_ms = 0;
  Status status = Status::kQueued;
  int64_t run_id = 0;  // once started
  std::string reason;  // why it was cancelled
};

std::string_view QueuedRunStatusName(QueuedRun::Status status);

class RunQueue {
 public:
  // Opens the federation.db at `db_path` (which Store::Open has created and migrated).
  static absl::StatusOr<std::unique_ptr<RunQueue>> Open(const std::string& db_path);

  absl::StatusOr<int64_t> Enqueue(const std::string& name, const std::string& config_toml,
                                  const std::string& submitted_by, int64_t now_ms);
  // Queued ones first (oldest first), then the rest, newest first.
  absl::StatusOr<std::vector<QueuedRun>> List();
  absl::StatusOr<std::optional<QueuedRun>> Oldest();  // the next to start, if any
  absl::StatusOr<QueuedRun> Get(int64_t queue_id);    // NOT_FOUND
  absl::StatusOr<std::optional<QueuedRun>> ForRun(int64_t run_id);
  // Takes a queued entry to start it (status started, run 0 until SetRun): it can no longer be
  // cancelled. FAILED_PRECONDITION when it is no longer queued.
  absl::Status Claim(int64_t queue_id);
  absl::Status SetRun(int64_t queue_id, int64_t run_id);
  // The entry claimed last whose run was not recorded (the server stopped in between), if any.
  absl::StatusOr<std::optional<QueuedRun>> ClaimedWithoutRun();
  // An operator cancels a queued entry. FAILED_PRECONDITION when it is no longer queued.
  absl::Status Cancel(int64_t queue_id, const std::string& reason);
  // A claimed entry that could not start is cancelled with the reason.
  absl::Status Abandon(int64_t queue_id, const std::string& reason);

 private:
  explicit RunQueue(sqlite::DbPtr db) : db_(std::move(db)) {}
  absl::Status Move(int64_t queue_id, absl::string_view from, absl::string_view to,
                    const std::string& reason);

  std::mutex mu_;
  sqlite::DbPtr db_;
};

}  // namespace fl::server

#endif  // FL_SERVER_STORE_RUN_QUEUE_H_
