// Whole-file reads and crash-safe writes.
#ifndef FL_COMMON_FILE_UTIL_H_
#define FL_COMMON_FILE_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fl {

// Reads a whole file. NOT_FOUND / PERMISSION_DENIED / INTERNAL, each naming the path.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Writes a whole file atomically: to a temporary name in the same directory, fsync, rename over
// `path`, fsync of the directory. Either the old or the new contents survive a crash, never a
// mix. `mode` is the new file's permission bits, applied exactly (not masked by the umask);
// INVALID_ARGUMENT when it has bits outside 07777. The temporary file is
// "<path>.tmp.<pid>.<random>" and is removed on failure. kUnsynced fsyncs nothing: still never
// a mix, but a machine that crashes may lose the file (for throwaway files such as a
// simulation's certificates, where thousands of fsyncs would cost seconds).
enum class Durability { kSynced, kUnsynced };
absl::Status WriteFileAtomic(const std::string& path, std::string_view contents, int mode = 0644,
                             Durability durability = Durability::kSynced);

// fsyncs a directory so that a rename inside it is durable.
absl::Status SyncDirectory(const std::string& dir);

// Writes all of `data` at `offset` of `fd` (pwrite(2), retried on EINTR and short writes). 0, or
// the errno of the failed call (EIO when a call wrote nothing).
int PwriteAll(int fd, std::span<const std::byte> data, int64_t offset);
// Reads exactly out.size() bytes at `offset` (pread(2), retried likewise). 0, the errno of the
// failed call, or -1 when the file ends first.
int PreadAll(int fd, std::span<std::byte> out, int64_t offset);

// Creates `dir` and its parents if missing (mode 0700 for new ones; existing ones keep theirs).
// An error names the component that could not be created.
absl::Status MakeDirectories(const std::string& dir);

}  // namespace fl

#endif  // FL_COMMON_FILE_UTIL_H_
