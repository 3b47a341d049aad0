#include "client_sdk/src/privacy_ledger.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
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
  // Read through the descriptor it will append to: a ledger that exists but cannot be read
  // fails here instead of counting as empty.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return SystemError("cannot open", path);
  // Its directory entry made durable: a ledger that vanished with a power cut would count as new.
  {
    const std::string dir = std::filesystem::path(path).parent_path().string();
    const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      (void)::fsync(dfd);
      ::close(dfd);
    }
  }
  // One process per ledger: two would each count the other's inputs out.
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const absl::Status s = errno == EWOULDBLOCK
                               ? absl::FailedPreconditionError(absl::StrCat(
                                     "privacy ledger ", path, " is in use by another process"))
                               : SystemError("cannot lock", path);
    ::close(fd);
    return s;
  }
  std::string all;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const absl::Status s = SystemError("cannot read", path);
      ::close(fd);
      return s;
    }
    all.append(buffer, static_cast<size_t>(n));
  }
  std::vector<double> entries;
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
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat(
          "privacy ledger ", path, " line ", line, " does not start with a noise multiplier (",
          fields[0].substr(0, 40),
          "): repair or move the file; it is what limits.max_epsilon counts, so it is not read "
          "as empty"));
    }
    entries.push_back(z);
  }
  if (start < all.size()) {
    // The partial line is cut off, so that the next record starts a line of its own.
    if (::ftruncate(fd, static_cast<off_t>(start)) != 0) {
      const absl::Status s = SystemError("cannot cut its partial last line", path);
      ::close(fd);
      return s;
    }
  }
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
  if (fd_ < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "privacy ledger ", path_, " failed earlier and takes no more records; restart the site"));
  }
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
      // A partial line would run into the next one: cut it off again, or, if even that fails,
      // take no more records (a restart reads the file and cuts it at the partial line).
      if (::ftruncate(fd_, before) != 0) {
        ::close(fd_);
        fd_ = -1;
      }
      return failed;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd_) != 0) return SystemError("cannot sync", path_);
  noise_multipliers_.push_back(noise_multiplier);
  return absl::OkStatus();
}

}  // namespace fl::client::internal
