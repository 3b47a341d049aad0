#include "server/store/checkpoint_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "fl/common/crash_point.h"
#include "fl/common/crypto.h"
#include "fl/common/file_util.h"

namespace fl::server {
namespace {

constexpr absl::string_view kMagic = "FLCKPT01";
constexpr size_t kHeaderBytes = 16;  // magic + uint64 spec length
constexpr size_t kIoChunkBytes = size_t{4} << 20;

// Owns a file descriptor.
class UniqueFd {
 public:
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  // Closes now, reporting the error close(2) may carry on some file systems.
  int Close() {
    int rc = ::close(std::exchange(fd_, -1));
    return rc;
  }

 private:
  int fd_;
};

// Removes a temporary file unless released.
class TempFileGuard {
 public:
  explicit TempFileGuard(std::string path) : path_(std::move(path)) {}
  ~TempFileGuard() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;
  void Release() { path_.clear(); }

 private:
  std::string path_;
};

absl::Status WriteAll(int fd, std::span<const std::byte> data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), std::min(data.size(), kIoChunkBytes));
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, absl::StrCat("write checkpoint ", path));
    }
    data = data.subspan(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

// Reads exactly data.size() bytes; DATA_LOSS if the file ends first.
absl::Status ReadExactly(int fd, std::span<std::byte> data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::read(fd, data.data(), std::min(data.size(), kIoChunkBytes));
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, absl::StrCat("read checkpoint ", path));
    }
    if (n == 0) return absl::DataLossError(absl::StrCat("checkpoint ", path, " is truncated"));
    data = data.subspan(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

std::array<std::byte, kHeaderBytes> EncodeHeader(uint64_t spec_length) {
  std::array<std::byte, kHeaderBytes> header;
  std::memcpy(header.data(), kMagic.data(), kMagic.size());
  for (size_t i = 0; i < 8; ++i) {
    header[kMagic.size() + i] = static_cast<std::byte>((spec_length >> (8 * i)) & 0xff);
  }
  return header;
}

uint64_t DecodeLength(std::span<const std::byte, 8> bytes) {
  uint64_t value = 0;
  for (size_t i = 0; i < 8; ++i) value |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  return value;
}

}  // namespace

bool IsSha256Hex(absl::string_view text) {
  return text.size() == 64 && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

int64_t CheckpointFileSize(const Model& model) {
  return static_cast<int64_t>(kHeaderBytes + model.spec().ToJson().size()) + model.NumBytes();
}

absl::Status WriteCheckpointFile(const std::string& path, const Model& model, bool durable) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  std::string temp = absl::StrCat(path, ".tmp.XXXXXX");
  UniqueFd fd(::mkostemp(temp.data(), O_CLOEXEC));
  if (fd.get() < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("create temporary checkpoint ", temp));
  }
  TempFileGuard guard(temp);

  const std::string spec = model.spec().ToJson();
  const auto header = EncodeHeader(spec.size());
  if (absl::Status s = WriteAll(fd.get(), header, temp); !s.ok()) return s;
  if (absl::Status s = WriteAll(fd.get(), std::as_bytes(std::span(spec)), temp); !s.ok()) return s;
  if (absl::Status s = WriteAll(fd.get(), model.bytes(), temp); !s.ok()) return s;
  if (durable && ::fsync(fd.get()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("fsync checkpoint ", temp));
  }
  if (fd.Close() != 0) return absl::ErrnoToStatus(errno, absl::StrCat("close checkpoint ", temp));
  CrashPoint("checkpoint_write");
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("rename checkpoint ", temp, " to ", path));
  }
  guard.Release();
  return durable ? SyncDirectory(dir) : absl::OkStatus();
}

absl::StatusOr<Model> ReadCheckpointFile(const std::string& path, absl::string_view sha256) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return absl::ErrnoToStatus(errno, absl::StrCat("open checkpoint ", path));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("stat checkpoint ", path));
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < kHeaderBytes) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, " is truncated"));
  }

  std::array<std::byte, kHeaderBytes> header;
  if (absl::Status s = ReadExactly(fd.get(), header, path); !s.ok()) return s;
  if (std::memcmp(header.data(), kMagic.data(), kMagic.size()) != 0) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, " lacks the FLCKPT01 magic"));
  }
  const uint64_t spec_length =
      DecodeLength(std::span<const std::byte, 8>(header.data() + kMagic.size(), 8));
  if (spec_length > file_size - kHeaderBytes) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", path, " claims a ", spec_length, "-byte spec it cannot hold"));
  }
  std::string spec_json(spec_length, '\0');
  if (absl::Status s = ReadExactly(fd.get(), std::as_writable_bytes(std::span(spec_json)), path);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<ModelSpec> spec = ModelSpec::FromJson(spec_json);
  if (!spec.ok()) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", path, " has a bad model spec: ", spec.status().message()));
  }
  const uint64_t payload_bytes = file_size - kHeaderBytes - spec_length;
  if (payload_bytes != static_cast<uint64_t>(spec->NumBytes())) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, " holds ", payload_bytes,
                                            " payload bytes; its spec needs ", spec->NumBytes()));
  }

  Model model(*std::move(spec));
  std::span<std::byte> payload = std::as_writable_bytes(model.data());
  Sha256 hash;
  for (size_t offset = 0; offset < payload.size(); offset += kIoChunkBytes) {
    std::span<std::byte> chunk =
        payload.subspan(offset, std::min(kIoChunkBytes, payload.size() - offset));
    if (absl::Status s = ReadExactly(fd.get(), chunk, path); !s.ok()) return s;
    hash.Update(chunk);
  }
  if (std::string actual = hash.FinishHex(); actual != sha256) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint ", path, " is corrupt: its payload hashes to ", actual, ", not ", sha256));
  }
  return model;
}

}  // namespace fl::server
