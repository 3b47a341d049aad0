// What the fuzz targets of tests/fuzz/ share: an invariant check that aborts (so that libFuzzer
// and the replay main both report it as a crash), a reader that cuts one input into the fields a
// target needs, and a temporary file for decoders that only read paths. Header-only; each target
// is one process, fuzzed by one thread.
#ifndef FL_TESTS_FUZZ_FUZZ_SUPPORT_H_
#define FL_TESTS_FUZZ_FUZZ_SUPPORT_H_

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace fl::fuzz {

// The paths of this process's TempFiles, removed before a broken invariant aborts it (a fuzzing
// campaign that keeps crashing would otherwise leave one set per crash).
inline std::vector<std::string>& TempPaths() {
  static std::vector<std::string> paths;
  return paths;
}

// Aborts, naming the broken invariant, unless `condition` holds.
inline void Check(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "ERROR: fuzz target: invariant broken: %s\n", what);
  for (const std::string& path : TempPaths()) std::remove(path.c_str());
  std::abort();
}

// With FL_FUZZ_VERBOSE set in the environment, targets print each refusal (to see how far the
// seeds get: `FL_FUZZ_VERBOSE=1 <target>_fuzz_replay --mutations=0 corpus/<target>`).
inline bool Verbose() {
  static const bool verbose = std::getenv("FL_FUZZ_VERBOSE") != nullptr;
  return verbose;
}

// Prints `status` under `what` when Verbose().
inline void Note(const absl::Status& status, const char* what) {
  if (Verbose()) std::fprintf(stderr, "%s: %s\n", what, status.ToString().c_str());
}

// A refusal is one of the decoder's documented codes and says why.
inline void CheckRefusal(const absl::Status& status, absl::StatusCode code, const char* what) {
  Note(status, what);
  Check(!status.ok(), what);
  if (status.code() != code) {
    std::fprintf(stderr, "fuzz target: %s: unexpected code: %s\n", what, status.ToString().c_str());
  }
  Check(status.code() == code, what);
  Check(!status.message().empty(), "a refusal says why");
}

// Reads fields off the front of an input. Past its end, numbers read as 0 and byte strings as
// empty, so that every input is a valid sequence of fields.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t remaining() const { return size_ - at_; }
  bool empty() const { return at_ == size_; }

  uint8_t U8() {
    if (empty()) return 0;
    return data_[at_++];
  }
  // Little-endian.
  uint16_t U16() { return static_cast<uint16_t>(U8() | (U8() << 8)); }
  uint32_t U32() { return static_cast<uint32_t>(U16()) | (static_cast<uint32_t>(U16()) << 16); }
  uint64_t U64() { return static_cast<uint64_t>(U32()) | (static_cast<uint64_t>(U32()) << 32); }

  // The next `n` bytes, fewer at the end of the input.
  std::string_view Bytes(size_t n) {
    n = std::min(n, remaining());
    std::string_view out(reinterpret_cast<const char*>(data_) + at_, n);
    at_ += n;
    return out;
  }
  // A U16 length, then that many bytes.
  std::string_view Record() { return Bytes(U16()); }
  std::string_view Rest() { return Bytes(remaining()); }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

// A file of this process in $TMPDIR, else /dev/shm (memory: opening and truncating a file there
// costs microseconds, on a disk it can cost a millisecond an input), else /tmp; rewritten for
// each input and removed with the object: for decoders whose only entry point takes a path.
class TempFile {
 public:
  explicit TempFile(std::string_view tag) {
    const char* env = std::getenv("TMPDIR");
    std::string dir = env != nullptr && *env != '\0' ? env : "";
    if (dir.empty()) dir = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    path_ = dir + "/fl_fuzz_" + std::to_string(::getpid()) + "_" + std::string(tag);
    TempPaths().push_back(path_);
  }
  ~TempFile() { std::remove(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  // Replaces the file's contents with `bytes`; aborts when it cannot (the harness is broken, not
  // the decoder).
  const std::string& Write(std::string_view bytes) const {
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    Check(f != nullptr, "the temporary file opens");
    const size_t written = bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), f);
    Check(std::fclose(f) == 0 && written == bytes.size(), "the temporary file is written");
    return path_;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace fl::fuzz

#endif  // FL_TESTS_FUZZ_FUZZ_SUPPORT_H_
