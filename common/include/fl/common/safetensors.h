// Models in and out of safetensors files (https://github.com/huggingface/safetensors).
//
// The format: 8 bytes of little-endian u64 N, then N bytes of UTF-8 JSON (possibly padded with
// trailing spaces), then the data region. The JSON object maps each tensor name to
// {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, offsets in bytes relative to the
// start of the data region, tensors little-endian and row-major; an optional "__metadata__" entry
// maps strings to strings. This is what Python's `safetensors` (torch, numpy, flax) writes and
// what the Hugging Face Hub serves.
//
// Reading is strict, after the reference implementation, and never trusts the file: every size is
// computed with overflow checks and checked against the bytes present before anything is read or
// allocated. A file is refused, with INVALID_ARGUMENT and a message that says what is wrong (and,
// for ReadSafetensors*, starts with "safetensors file '<path>': "), when:
//   - it is shorter than 8 bytes, its header size is over kSafetensorsMaxHeaderBytes (the
//     reference's limit), or the header runs past the end of the file;
//   - the header is not JSON (or not UTF-8), not an object, or repeats a key at any level;
//   - an entry is not an object or lacks "dtype", "shape" or "data_offsets", a shape is not an
//     array of non-negative integers, the offsets are not two non-negative integers;
//   - a dtype is not one of safetensors' names (BOOL, U8, I8, I16, U16, F16, BF16, I32, U32, F32,
//     F64, I64, U64, F8_E5M2, F8_E4M3, F8_E8M0, F4, F6_E2M3, F6_E3M2, C64);
//   - a dimension is zero (ModelSpec requires positive dimensions), or a tensor has more than
//     kMaxModelFloats elements;
//   - begin > end, end is past the end of the data, or end - begin is not the size that the
//     shape and dtype need;
//   - two tensors overlap, or some bytes of the data region (between tensors, before the first or
//     after the last) belong to no tensor ("gap"): the reference refuses holes too;
//   - the file holds no tensor, more than `max_tensors`, or more than `max_floats` parameters;
//   - a tensor name is empty (ModelSpec requires names);
//   - "__metadata__" is not an object of strings;
//   - a tensor's dtype is not floating point: "tensor 'embed.ids' has dtype I64; only
//     floating-point tensors (F32, F16, BF16, F64) can be federated"; the 8-, 6- and 4-bit float
//     formats and C64 are refused as unsupported, naming the tensor and the dtype;
//   - a value is NaN or infinite (the message names the tensor and the element's flat index), or
//     an F64 value is beyond the range of float32 (|v| > 3.4028235e38).
// Unknown keys inside a tensor's entry are ignored, as by the reference.
//
// Conversion: F32 is read as is; F16, BF16 and F64 are converted to float32 (F16 and BF16
// exactly, F64 rounded to nearest; F64 values below float32's range become subnormals or zero).
// A scalar (shape []) is one element of shape [].
//
// Tensor order in the Model is file order: ascending data_offsets, which is how safetensors
// writers lay tensors out. (The order of keys in the JSON does not matter, as JSON objects are
// unordered.)
//
// Writing produces F32 tensors in spec order, back to back from offset 0, with the "__metadata__"
// entry first when there is metadata, and the header padded with spaces so that the data region
// starts at a multiple of 8 bytes: the files Python's safetensors writes and reads.
//
// All functions are thread-safe (they share no state). Nothing here throws.
#ifndef FL_COMMON_SAFETENSORS_H_
#define FL_COMMON_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fl/common/model.h"

namespace fl {

// Largest JSON header accepted, in bytes: the reference implementation's limit.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;
// The file's layout: this many bytes of little-endian u64 header size, then the JSON header,
// whose optional string-to-string object under this key is the file's metadata.
inline constexpr size_t kSafetensorsSizeBytes = 8;
inline constexpr char kSafetensorsMetadataKey[] = "__metadata__";

// Default for SafetensorsReadOptions::max_tensors.
inline constexpr int64_t kSafetensorsDefaultMaxTensors = int64_t{1} << 16;

struct SafetensorsReadOptions {
  // Most tensors the file may hold (the "__metadata__" entry is not a tensor); more is refused
  // while the header is parsed, before its memory is spent. Default 65,536: far more than the
  // models federated here (a large language model has about a thousand).
  int64_t max_tensors = kSafetensorsDefaultMaxTensors;
  // Most parameters (float32 elements, summed over tensors) the model may have. Values above
  // kMaxModelFloats act as kMaxModelFloats.
  int64_t max_floats = kMaxModelFloats;
};

// A parsed file: the model (its own copy of the values, as float32) and the "__metadata__" map
// (empty when the file has none).
struct SafetensorsFile {
  Model model;
  std::map<std::string, std::string> metadata;
};

// Parses a whole safetensors file held in memory. `bytes` is only read during the call. Returns
// the model, tensors in file order, and the metadata; INVALID_ARGUMENT, saying what is wrong, for
// every refusal listed above; RESOURCE_EXHAUSTED when memory for the header runs out.
absl::StatusOr<SafetensorsFile> ParseSafetensors(std::span<const std::byte> bytes,
                                                 SafetensorsReadOptions options = {});

// Reads and parses the file at `path` (one read of the whole file into memory, so reading takes
// the file's size plus the model's). As ParseSafetensors, with every refusal's message prefixed
// by "safetensors file '<path>': "; a file that cannot be read gives ReadFile's status
// (NOT_FOUND, PERMISSION_DENIED or INTERNAL, naming the path).
absl::StatusOr<SafetensorsFile> ReadSafetensorsFile(const std::string& path,
                                                    SafetensorsReadOptions options = {});

// ReadSafetensorsFile without the metadata.
absl::StatusOr<Model> ReadSafetensors(const std::string& path, SafetensorsReadOptions options = {});

// The bytes of a safetensors file holding `model` (F32, spec order) and `metadata`. Values are
// written as they are, NaN included (which ParseSafetensors would then refuse). INVALID_ARGUMENT
// when the model has no tensors, a tensor is named "__metadata__", a name or a metadata string
// is not valid UTF-8, or the header would exceed kSafetensorsMaxHeaderBytes.
absl::StatusOr<std::string> SerializeSafetensors(
    const Model& model, const std::map<std::string, std::string>& metadata = {});

// Writes SerializeSafetensors(model, metadata) to `path` atomically (WriteFileAtomic: temporary
// file, fsync, rename, fsync of the directory; mode 0644): a crash leaves the old file or the new
// one, never a mix. Errors: those of SerializeSafetensors, then WriteFileAtomic's (naming the
// path). Holds the whole file in memory while writing.
absl::Status WriteSafetensors(const std::string& path, const Model& model,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace fl

#endif  // FL_COMMON_SAFETENSORS_H_
