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
// the rest comes from the (unsanitized) fl::common.
//
// A longer libFuzzer session, by hand, against a GCC build tree's fl_common (here build-st), from
// the repository root (one command; the lines are joined):
//   clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
//     -I. -Icommon/include tests/fuzz/safetensors_fuzz.cc common/src/safetensors.cc
//     common/src/safetensors_write.cc build-st/common/libfl_common.a
//     -labsl_statusor -labsl_status -labsl_strings -labsl_str_format_internal -labsl_throw_delegate
//     -lcrypto -o /tmp/safetensors_fuzz
//   mkdir -p /tmp/st_corpus
//   /tmp/safetensors_fuzz -max_total_time=60 /tmp/st_corpus tests/fuzz/corpus/safetensors
// A crash file it writes replays with `safetensors_fuzz_replay --mutations=0 crash-<sha1>`.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "fl/common/safetensors.h"

namespace {

void Check(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "safetensors_fuzz: invariant broken: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<fl::SafetensorsFile> file =
      fl::ParseSafetensors(std::as_bytes(std::span(data, size)));
  if (!file.ok()) {
    Check(file.status().code() == absl::StatusCode::kInvalidArgument,
          "a refusal is INVALID_ARGUMENT");
    Check(!file.status().message().empty(), "a refusal says why");
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
