// Fuzz target for fl::ParseSafetensors: any bytes must give a Status or a model, never a crash,
// an out-of-bounds access or undefined behaviour; a file that parses must survive a round trip
// (SerializeSafetensors, then ParseSafetensors again gives the same spec, values and metadata).
//
// Two executables share this file (tests/fuzz/CMakeLists.txt):
//   safetensors_fuzz         libFuzzer, when the compiler is Clang with -fsanitize=fuzzer;
//                            CTest runs it for 20 s over the seed corpus
//                            (Fuzz.SafetensorsLibFuzzer).
//   safetensors_fuzz_replay  any compiler (fuzz_replay_main.cc): the seeds plus deterministic
//                            mutations, under ASan and UBSan where the compiler has them; CTest
//                            always runs it (Fuzz.SafetensorsReplay).
// In both, common/src/safetensors*.cc are compiled into the executable with the sanitizers, and
// the rest comes from the (unsanitized) fl::common. bench/fuzz_long.sh runs it (and the other
// targets) for longer, in a tree whose libraries are instrumented too. A crash file it writes
// replays with `safetensors_fuzz_replay --mutations=0 crash-<sha1>`.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "fl/common/safetensors.h"
#include "tests/fuzz/fuzz_support.h"

using fl::fuzz::Check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<fl::SafetensorsFile> file =
      fl::ParseSafetensors(std::as_bytes(std::span(data, size)));
  if (!file.ok()) {
    fl::fuzz::CheckRefusal(file.status(), absl::StatusCode::kInvalidArgument,
                           "a refusal is INVALID_ARGUMENT");
    return 0;
  }
  absl::StatusOr<std::string> bytes = fl::SerializeSafetensors(file->model, file->metadata);
  Check(bytes.ok(), "a parsed model serializes");
  absl::StatusOr<fl::SafetensorsFile> again =
      fl::ParseSafetensors(std::as_bytes(std::span(bytes->data(), bytes->size())));
  Check(again.ok(), "a serialized model parses");
  Check(again->model.spec() == file->model.spec(), "the spec survives a round trip");
  Check(again->metadata == file->metadata, "the metadata survives a round trip");
  Check(again->model.NumBytes() == file->model.NumBytes() &&
            std::memcmp(again->model.bytes().data(), file->model.bytes().data(),
                        static_cast<size_t>(file->model.NumBytes())) == 0,
        "the values survive a round trip");
  return 0;
}
