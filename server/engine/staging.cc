#include "fl/server/staging.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace fl::server {
namespace {

class FileStagedUpload final : public StagedUpload {
 public:
  FileStagedUpload(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~FileStagedUpload() override {
    ::close(fd_);
    ::unlink(path_.c_str());
  }

  absl::Status Write(int64_t offset, std::span<const std::byte> bytes) override {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::pwrite(fd_, bytes.data() + done, bytes.size() - done,
                                 offset + static_cast<int64_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        return absl::InternalError(absl::StrCat("cannot stage the update in ", path_, ": ",
                                                n < 0 ? std::strerror(errno) : "nothing written"));
      }
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

  absl::Status Read(int64_t offset, std::span<std::byte> out) const override {
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t n =
          ::pread(fd_, out.data() + done, out.size() - done, offset + static_cast<int64_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        return absl::InternalError(absl::StrCat("cannot read back the staged update ", path_, ": ",
                                                n < 0 ? std::strerror(errno) : "short read"));
      }
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

 private:
  const int fd_;
  const std::string path_;
};

class FileStaging final : public StagingSpace {
 public:
  explicit FileStaging(std::string dir) : dir_(std::move(dir)) {}

  absl::StatusOr<std::unique_ptr<StagedUpload>> Create(const std::string& name) override {
    std::string path = absl::StrCat(dir_, "/", name, ".part");
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
      return absl::InternalError(
          absl::StrCat("cannot create spill file ", path, ": ", std::strerror(errno)));
    }
    return std::make_unique<FileStagedUpload>(fd, std::move(path));
  }

 private:
  const std::string dir_;
};

}  // namespace

std::shared_ptr<StagingSpace> MakeFileStaging(std::string dir) {
  return std::make_shared<FileStaging>(std::move(dir));
}

}  // namespace fl::server
