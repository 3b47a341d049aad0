// Fuzz target for checkpoint files (server/store/checkpoint_file.h): the magic, the spec's
// length, the spec JSON (fl::ModelSpec::FromJson) and the payload.
//
// Input: the file's bytes. ReadCheckpointFile takes a path and the SHA-256 the store expects:
// the input is written to a temporary file and read with the SHA-256 of the bytes after the spec
// (so that the hash check passes whenever the layout does). Any file gives DATA_LOSS, saying
// why, or a model; a model's spec is valid and its payload is the file's; written back with
// WriteCheckpointFile (which has CheckpointFileSize bytes) it reads again to the same model, and
// with any other SHA-256 it is refused.
//
// Compiled into the executable with the sanitizers: server/store/checkpoint_file.cc and
// common/src/model.cc.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>

#include "fl/common/crypto.h"
#include "fl/common/model.h"
#include "server/store/checkpoint_file.h"
#include "tests/fuzz/fuzz_support.h"

namespace fl::fuzz {
namespace {

constexpr size_t kHeaderBytes = 16;  // "FLCKPT01", u64 spec length

// The SHA-256 of what follows the spec, when the header's length fits; of nothing otherwise.
std::string PayloadSha(std::string_view file) {
  if (file.size() < kHeaderBytes) return Sha256Hex(std::string_view());
  uint64_t spec_length = 0;
  for (size_t i = 0; i < 8; ++i) {
    spec_length |= static_cast<uint64_t>(static_cast<uint8_t>(file[8 + i])) << (8 * i);
  }
  if (spec_length > file.size() - kHeaderBytes) return Sha256Hex(std::string_view());
  return Sha256Hex(file.substr(kHeaderBytes + spec_length));
}

bool SameModel(const Model& a, const Model& b) {
  return a.spec() == b.spec() && a.NumBytes() == b.NumBytes() &&
         std::memcmp(a.bytes().data(), b.bytes().data(), static_cast<size_t>(a.NumBytes())) == 0;
}

}  // namespace
}  // namespace fl::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using fl::fuzz::Check;
  static const fl::fuzz::TempFile input("checkpoint_in");
  static const fl::fuzz::TempFile output("checkpoint_out");
  const std::string_view file(reinterpret_cast<const char*>(data), size);
  const std::string sha = fl::fuzz::PayloadSha(file);
  absl::StatusOr<fl::Model> model = fl::server::ReadCheckpointFile(input.Write(file), sha);
  if (!model.ok()) {
    fl::fuzz::CheckRefusal(model.status(), absl::StatusCode::kDataLoss, "a checkpoint is refused");
    return 0;
  }
  Check(model->spec().Validate().ok(), "a read spec is valid");
  Check(model->NumBytes() <= static_cast<int64_t>(size) &&
            std::memcmp(model->bytes().data(), data + size - model->NumBytes(),
                        static_cast<size_t>(model->NumBytes())) == 0,
        "a checkpoint's payload is the file's end");
  Check(model->Sha256Hex() == sha, "a read model hashes as its file says");
  absl::StatusOr<fl::Model> wrong =
      fl::server::ReadCheckpointFile(input.path(), std::string(64, 'f'));
  if (sha != std::string(64, 'f')) {
    fl::fuzz::CheckRefusal(wrong.status(), absl::StatusCode::kDataLoss,
                           "another SHA-256 is refused");
  }
  Check(fl::server::WriteCheckpointFile(output.path(), *model, /*durable=*/false).ok(),
        "a read model writes");
  Check(static_cast<int64_t>(std::filesystem::file_size(output.path())) ==
            fl::server::CheckpointFileSize(*model),
        "a written checkpoint has CheckpointFileSize bytes");
  absl::StatusOr<fl::Model> again = fl::server::ReadCheckpointFile(output.path(), sha);
  Check(again.ok() && fl::fuzz::SameModel(*again, *model), "a checkpoint survives a round trip");
  return 0;
}
