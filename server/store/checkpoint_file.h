// Checkpoint files, private to the store. One file holds one global model:
//
//   "FLCKPT01"                 8-byte magic
//   uint64 little-endian       length of the spec JSON
//   spec JSON                  ModelSpec::ToJson()
//   payload                    Model::bytes(), exactly spec.NumBytes() bytes
//
// The file is named by the SHA-256 of its payload, so a reader verifies what it reads. Both
// functions stream: neither builds a second in-memory copy of the payload. Thread-safe (they touch
// only the files they name; concurrent writers of one model each rename their own temporary file).
#ifndef FL_SERVER_STORE_CHECKPOINT_FILE_H_
#define FL_SERVER_STORE_CHECKPOINT_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "fl/common/model.h"

namespace fl::server {

// True when `text` is 64 lowercase hex digits, the only names checkpoints have.
bool IsSha256Hex(absl::string_view text);

// The size in bytes of the checkpoint file of `model`.
int64_t CheckpointFileSize(const Model& model);

// Writes `model` to `path` crash-safely: a temporary file in the same directory, fsync, rename
// over `path`, fsync of the directory. The temporary file is removed on failure. Errors name the
// file and the system call.
// With `durable` false nothing is fsynced (a simulation's store): still written whole and
// renamed into place, so a process that dies leaves no partial checkpoint.
absl::Status WriteCheckpointFile(const std::string& path, const Model& model, bool durable = true);

// Reads the checkpoint at `path` and checks that its payload hashes to `sha256`. NOT_FOUND when
// there is no such file; DATA_LOSS naming the file when the magic, spec, length or hash is wrong.
absl::StatusOr<Model> ReadCheckpointFile(const std::string& path, absl::string_view sha256);

}  // namespace fl::server

#endif  // FL_SERVER_STORE_CHECKPOINT_FILE_H_
