// A site's record of what its masked inputs revealed to the server (limits.privacy_ledger): one
// line per input, appended and synced to disk before the input is sent, read back when the
// client starts, so that limits.max_epsilon counts every input the site ever masked and not only
// this process's. A crash between the write and the sync leaves at most a partial last line:
// that input was never sent (the send waits for the sync), and the line is ignored.
//
// Line format (text, tab-separated): the noise multiplier against the server, the time in
// milliseconds since the epoch, and what the input was (run, round, task id).
#ifndef FL_CLIENT_SDK_SRC_PRIVACY_LEDGER_H_
#define FL_CLIENT_SDK_SRC_PRIVACY_LEDGER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fl::client::internal {

class PrivacyLedger {
 public:
  // Reads the ledger at `path` (none yet: empty), cuts off a partial last line, and keeps it
  // open and locked (flock) for appending. A complete line that does not parse is refused with
  // INVALID_ARGUMENT naming the file and the line (a ledger that cannot be read must not count
  // as empty); a ledger another process holds with FAILED_PRECONDITION; a file that cannot be
  // opened, locked or read with the system's reason.
  static absl::StatusOr<PrivacyLedger> Open(std::string path);

  PrivacyLedger(PrivacyLedger&& other) noexcept;
  PrivacyLedger& operator=(PrivacyLedger&&) = delete;
  ~PrivacyLedger();

  // Every recorded input's noise multiplier, in order.
  const std::vector<double>& noise_multipliers() const { return noise_multipliers_; }

  // Appends an input and syncs the file; only then may the input be sent. The system's reason
  // (e.g. no space left) when it cannot.
  absl::Status Record(double noise_multiplier, absl::string_view what);

  const std::string& path() const { return path_; }

 private:
  PrivacyLedger(std::string path, int fd, std::vector<double> noise_multipliers);

  std::string path_;
  int fd_ = -1;
  std::vector<double> noise_multipliers_;
};

}  // namespace fl::client::internal

#endif  // FL_CLIENT_SDK_SRC_PRIVACY_LEDGER_H_
