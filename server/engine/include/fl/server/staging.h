// Staging: where the round engine keeps an upload's payload while it streams in, until its
// SHA-256 checks out and the update is folded (a plain round's float32 weights, decoded from a
// float16 / int8 change when need be; a secure round's masked words). Only a verified update
// reaches the aggregate, and a refused one costs the server nothing but its staging, so the
// payload waits outside the heap: in a file of the data directory's spill folder by default.
//
// An interface, so that tests can make staging fail (a full disk, a read error) and see what the
// round does: the update is refused with the staging's own message, and the round goes on with
// the others (or, when a read fails half-way through folding a streaming aggregate, fails as a
// whole). The engine takes one through EngineHooks::staging.
#ifndef FL_SERVER_STAGING_H_
#define FL_SERVER_STAGING_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fl::server {

// One upload's staged bytes; gone when destroyed. Write is called by the upload's thread, one
// chunk at a time; Read after the last Write, by the upload's Finish. It may be destroyed by the
// round's close, on another thread, while the engine holds its locks: the destructor must not
// block.
class StagedUpload {
 public:
  virtual ~StagedUpload() = default;
  // `bytes` at `offset`. An error names the place and why ("cannot stage the update in
  // /data/spill/...part: No space left on device").
  virtual absl::Status Write(int64_t offset, std::span<const std::byte> bytes) = 0;
  // Bytes [offset, offset + out.size()), as written. An error names the place and why.
  virtual absl::Status Read(int64_t offset, std::span<std::byte> out) const = 0;
};

// Create is called under the engine's lock (keep it quick: every site waits) and, when engines
// share one, from several threads at once: it must be thread-safe.
class StagingSpace {
 public:
  virtual ~StagingSpace() = default;
  // An empty staging place for one upload; `name` is unique to it (run, round, attempt and a hash
  // of the client) and names it in errors.
  virtual absl::StatusOr<std::unique_ptr<StagedUpload>> Create(const std::string& name) = 0;
};

// Files `dir`/<name>.part (mode 0600), removed when the upload is done. `dir` must exist.
std::shared_ptr<StagingSpace> MakeFileStaging(std::string dir);

}  // namespace fl::server

#endif  // FL_SERVER_STAGING_H_
