#include "fl/aggregation/spill.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "fl/common/file_util.h"

namespace fl::aggregation {
namespace {

class FileSpillFile final : public SpillFile {
 public:
  FileSpillFile(int fd, int64_t num_floats, std::string dir)
      : fd_(fd), num_floats_(num_floats), dir_(std::move(dir)) {}
  ~FileSpillFile() override {
    if (map_ != nullptr) ::munmap(map_, Bytes());
    ::close(fd_);
  }

  absl::Status Write(int64_t offset, std::span<const float> values) override {
    if (offset < 0 || offset + static_cast<int64_t>(values.size()) > num_floats_) {
      return absl::OutOfRangeError(absl::StrCat("spill write of ", values.size(), " floats at ",
                                                offset, " is past the update's ", num_floats_));
    }
    if (int error =
            PwriteAll(fd_, std::as_bytes(values), offset * static_cast<int64_t>(sizeof(float)));
        error != 0) {
      return absl::InternalError(absl::StrCat("cannot write an update to the spill in ", dir_, ": ",
                                              std::strerror(error)));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::span<const float>> Map() override {
    if (num_floats_ == 0) return std::span<const float>();
    if (map_ == nullptr) {
      void* m = ::mmap(nullptr, Bytes(), PROT_READ, MAP_SHARED, fd_, 0);
      if (m == MAP_FAILED) {
        return absl::InternalError(absl::StrCat("cannot map an update of the spill in ", dir_, ": ",
                                                std::strerror(errno)));
      }
      map_ = m;
    }
    return std::span<const float>(static_cast<const float*>(map_),
                                  static_cast<size_t>(num_floats_));
  }

  void Release(int64_t offset, int64_t count) override {
    if (map_ == nullptr || count <= 0) return;
    static const int64_t page = ::sysconf(_SC_PAGESIZE);
    // Whole pages inside the range only: a neighbouring block may still be reading the rest.
    const int64_t begin = (offset * 4 + page - 1) / page * page;
    const int64_t end = std::min<int64_t>((offset + count) * 4, static_cast<int64_t>(Bytes()));
    const int64_t end_page = end == static_cast<int64_t>(Bytes()) ? end : end / page * page;
    if (end_page <= begin) return;
    ::madvise(static_cast<char*>(map_) + begin, static_cast<size_t>(end_page - begin),
              MADV_DONTNEED);
  }

 private:
  size_t Bytes() const { return static_cast<size_t>(num_floats_) * sizeof(float); }

  int fd_;
  int64_t num_floats_;
  std::string dir_;
  void* map_ = nullptr;
};

// Raises this process's soft limit of open files to its hard limit; false when it was there.
bool RaiseOpenFileLimit() {
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return false;
  limit.rlim_cur = limit.rlim_max;
  return ::setrlimit(RLIMIT_NOFILE, &limit) == 0;
}

class FileSpill final : public SpillSpace {
 public:
  explicit FileSpill(std::string dir) : dir_(std::move(dir)) {}

  absl::StatusOr<std::unique_ptr<SpillFile>> Create(int64_t num_floats) override {
    if (num_floats < 0) return absl::InvalidArgumentError("a spill file of negative size");
    int fd = Open();
    int err = fd < 0 ? errno : 0;
    if (err == EMFILE && RaiseOpenFileLimit()) {
      fd = Open();
      err = fd < 0 ? errno : 0;
    }
    if (err == EMFILE) {
      // Each kept update holds a file open until its round finishes.
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot keep one more update apart in ", dir_,
          ": the process has as many files open as it may (ulimit -n); raise the limit or "
          "sample fewer sites per round"));
    }
    if (fd < 0) {
      return absl::InternalError(absl::StrCat("cannot create a spill file in ", dir_, ": ",
                                              std::strerror(err),
                                              "; the directory must exist and be writable"));
    }
    const off_t bytes = static_cast<off_t>(num_floats) * static_cast<off_t>(sizeof(float));
    if (bytes > 0) {
      err = ::posix_fallocate(fd, 0, bytes);
      if (err == EOPNOTSUPP || err == EINVAL) err = ::ftruncate(fd, bytes) == 0 ? 0 : errno;
      if (err != 0) {
        ::close(fd);
        if (err == ENOSPC || err == EDQUOT) {
          return absl::ResourceExhaustedError(
              absl::StrCat("no space in the spill directory ", dir_, " for an update of ", bytes,
                           " bytes; free space there or move the server's data_dir"));
        }
        return absl::InternalError(absl::StrCat(
            "cannot reserve ", bytes, " bytes for an update in ", dir_, ": ", std::strerror(err)));
      }
    }
    return std::make_unique<FileSpillFile>(fd, num_floats, dir_);
  }

 private:
  int Open() const {
    int fd = ::open(dir_.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
      // A file system without O_TMPFILE: a named file, unlinked at once.
      std::string name = dir_ + "/update-XXXXXX";
      fd = ::mkostemp(name.data(), O_CLOEXEC);
      if (fd >= 0) ::unlink(name.c_str());
    }
    return fd;
  }

  std::string dir_;
};

}  // namespace

std::shared_ptr<SpillSpace> MakeFileSpill(std::string dir) {
  return std::make_shared<FileSpill>(std::move(dir));
}

}  // namespace fl::aggregation
