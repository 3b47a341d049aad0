#include "client_sdk/src/privacy_ledger.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace fl::client::internal {
namespace {

absl::Status SystemError(absl::string_view what, const std::string& path) {
  return absl::InternalError(
      absl::StrCat("privacy ledger ", path, ": ", what, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<PrivacyLedger> PrivacyLedger::Open(std::string path) {
  if (path.empty()) return absl::InvalidArgumentError("the privacy ledger's path is empty");
  std::vector<double> entries;
  {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    if (in) text << in.rdbuf();
    const std::string all = text.str();
    size_t start = 0;
    int line = 0;
    while (start < all.size()) {
      const size_t end = all.find('\n', start);
      if (end == std::string::npos) break;  // a partial last line: never sent (see the header)
      ++line;
      const absl::string_view row(all.data() + start, end - start);
      start = end + 1;
      if (row.empty()) continue;
      const std::vector<absl::string_view> fields = absl::StrSplit(row, '\t');
      double z = 0;
      if (!absl::SimpleAtod(fields[0], &z) || !std::isfinite(z) || z < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("privacy ledger ", path, " line ", line,
                         " does not start with a noise multiplier (", fields[0].substr(0, 40),
                         "): repair or move the file; it is what limits.max_epsilon "
                         "counts, so it is not read as empty"));
      }
      entries.push_back(z);
    }
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return SystemError("cannot open for appending", path);
  return PrivacyLedger(std::move(path), fd, std::move(entries));
}

PrivacyLedger::PrivacyLedger(std::string path, int fd, std::vector<double> noise_multipliers)
    : path_(std::move(path)), fd_(fd), noise_multipliers_(std::move(noise_multipliers)) {}

PrivacyLedger::PrivacyLedger(PrivacyLedger&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      noise_multipliers_(std::move(other.noise_multipliers_)) {}

PrivacyLedger::~PrivacyLedger() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status PrivacyLedger::Record(double noise_multiplier, absl::string_view what) {
  // Tabs and newlines in `what` (a server-chosen task id) would break the line format.
  const std::string clean = absl::StrReplaceAll(what, {{"\t", " "}, {"\n", " "}, {"\r", " "}});
  // All 17 digits: a multiplier read back rounded up would count less than was spent.
  const std::string line =
      absl::StrFormat("%.17g\t%d\t%s\n", noise_multiplier, absl::ToUnixMillis(absl::Now()), clean);
  const off_t before = ::lseek(fd_, 0, SEEK_END);
  if (before < 0) return SystemError("cannot seek", path_);
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const absl::Status failed = SystemError("cannot append", path_);
      // A partial line would run into the next one: cut it off again.
      (void)::ftruncate(fd_, before);
      return failed;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd_) != 0) return SystemError("cannot sync", path_);
  noise_multipliers_.push_back(noise_multiplier);
  return absl::OkStatus();
}

}  // namespace fl::client::internal
