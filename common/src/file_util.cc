#include "fl/common/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace fl {
namespace {

absl::StatusCode CodeForErrno(int error) {
  switch (error) {
    case ENOENT:
    case ENOTDIR:
      return absl::StatusCode::kNotFound;
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::StatusCode::kPermissionDenied;
    default:
      return absl::StatusCode::kInternal;
  }
}

// "<what> <path>: <strerror>", with a code chosen from errno.
absl::Status ErrnoError(int error, absl::string_view what, absl::string_view path) {
  return absl::Status(CodeForErrno(error),
                      absl::StrCat(what, " ", path, ": ", std::strerror(error)));
}

// Owns a file descriptor. Close() reports the error that the destructor would swallow.
class ScopedFd final {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

  // Returns the errno of close(2), or 0.
  int Close() {
    int fd = std::exchange(fd_, -1);
    return ::close(fd) == 0 ? 0 : errno;  // Never retried: Linux frees the fd even on EINTR.
  }

 private:
  int fd_;
};

int OpenRetrying(const char* path, int flags, mode_t mode = 0) {
  int fd;
  do {
    fd = ::open(path, flags, mode);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

// Returns 0 or the errno of the failed write(2).
int WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t written = ::write(fd, data.data(), data.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data.remove_prefix(static_cast<size_t>(written));
  }
  return 0;
}

std::string TempPathFor(const std::string& path) {
  std::random_device random;
  uint64_t suffix = (static_cast<uint64_t>(random()) << 32) ^ random();
  return absl::StrFormat("%s.tmp.%d.%016x", path, ::getpid(), suffix);
}

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  ScopedFd fd(OpenRetrying(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoError(errno, "cannot open", path);
  std::string contents;
  struct stat st;
  if (::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    contents.reserve(static_cast<size_t>(st.st_size));
  }
  char buffer[64 * 1024];
  while (true) {
    ssize_t n = ::read(fd.get(), buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, "cannot read", path);
    }
    if (n == 0) break;
    contents.append(buffer, static_cast<size_t>(n));
  }
  return contents;
}

absl::Status WriteFileAtomic(const std::string& path, std::string_view contents, int mode,
                             Durability durability) {
  const bool durable = durability == Durability::kSynced;
  if (mode < 0 || (mode & ~07777) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat("invalid mode 0%o for %s", mode, path));
  }
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  const std::string temp = TempPathFor(path);

  ScopedFd fd(OpenRetrying(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) return ErrnoError(errno, "cannot create", temp);
  // Removes the temporary file unless it has been renamed over `path`.
  auto fail = [&temp](int error, absl::string_view what) {
    ::unlink(temp.c_str());
    return ErrnoError(error, what, temp);
  };
  if (int error = WriteAll(fd.get(), contents); error != 0) return fail(error, "cannot write");
  // fchmod is not subject to the umask. It comes before fsync so that the mode is durable too.
  if (::fchmod(fd.get(), static_cast<mode_t>(mode)) != 0) return fail(errno, "cannot chmod");
  if (durable && ::fsync(fd.get()) != 0) return fail(errno, "cannot fsync");
  if (int error = fd.Close(); error != 0) return fail(error, "cannot close");
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    return absl::Status(CodeForErrno(error), absl::StrCat("cannot rename ", temp, " to ", path,
                                                          ": ", std::strerror(error)));
  }
  return durable ? SyncDirectory(dir) : absl::OkStatus();
}

absl::Status SyncDirectory(const std::string& dir) {
  ScopedFd fd(OpenRetrying(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoError(errno, "cannot open directory", dir);
  if (::fsync(fd.get()) != 0) return ErrnoError(errno, "cannot fsync directory", dir);
  return absl::OkStatus();
}

absl::Status MakeDirectories(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("empty directory path");
  // One level at a time, so that exactly the directories created here get mode 0700.
  std::filesystem::path prefix;
  for (const std::filesystem::path& part : std::filesystem::path(dir)) {
    prefix /= part;
    if (part.empty()) continue;  // The empty element after a trailing separator.
    std::error_code ec;
    bool created = std::filesystem::create_directory(prefix, ec);
    if (ec) return ErrnoError(ec.value(), "cannot create directory", prefix.string());
    if (created) {
      std::filesystem::permissions(prefix, std::filesystem::perms::owner_all,
                                   std::filesystem::perm_options::replace, ec);
      if (ec) return ErrnoError(ec.value(), "cannot chmod directory", prefix.string());
    } else if (!std::filesystem::is_directory(prefix, ec)) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create directory ", prefix.string(), ": a file is in the way"));
    }
  }
  return absl::OkStatus();
}

int PwriteAll(int fd, std::span<const std::byte> data, int64_t offset) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::pwrite(fd, data.data() + done, data.size() - done,
                               static_cast<off_t>(offset + static_cast<int64_t>(done)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    done += static_cast<size_t>(n);
  }
  return 0;
}

int PreadAll(int fd, std::span<std::byte> out, int64_t offset) {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + done, out.size() - done,
                              static_cast<off_t>(offset + static_cast<int64_t>(done)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return -1;
    done += static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace fl
