#include "fl/server/staging.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "fl/common/file_util.h"

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
    if (int error = PwriteAll(fd_, bytes, offset); error != 0) {
      return absl::InternalError(
          absl::StrCat("cannot stage the update in ", path_, ": ", std::strerror(error)));
    }
    return absl::OkStatus();
  }

  absl::Status Read(int64_t offset, std::span<std::byte> out) const override {
    if (int error = PreadAll(fd_, out, offset); error != 0) {
      return absl::InternalError(absl::StrCat("cannot read back the staged update ", path_, ": ",
                                              error < 0 ? "short read" : std::strerror(error)));
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
