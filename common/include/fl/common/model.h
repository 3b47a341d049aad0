// Model: named float32 tensors laid out back to back in one aligned buffer.
//
// The buffer's bytes (little-endian float32, tensors in spec order) are the model's payload: what
// travels in chunks, what checkpoints hold and what SHA-256 fingerprints. A Model owns its buffer;
// copies are explicit (Clone) because models can be gigabytes. A model of 1 MiB or more lives in
// its own mapping (PageBuffer): its zero pages cost memory only once written, and freeing it
// returns the memory to the system at once. Not thread-safe for writes.
#ifndef FL_COMMON_MODEL_H_
#define FL_COMMON_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fl {

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  // Number of elements: the product of the shape (1 for a scalar).
  int64_t NumElements() const;
  bool operator==(const TensorSpec&) const = default;
};

class ModelSpec {
 public:
  ModelSpec() = default;
  explicit ModelSpec(std::vector<TensorSpec> tensors);

  // Checks names are non-empty and unique, every dimension is positive, and the model has at
  // most kMaxModelFloats parameters.
  absl::Status Validate() const;

  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  int64_t NumFloats() const;
  int64_t NumBytes() const { return NumFloats() * static_cast<int64_t>(sizeof(float)); }
  // Offset, in floats, of tensor `index` in the payload.
  int64_t OffsetOf(size_t index) const;

  // JSON text: [{"name": "w", "shape": [10, 784]}, ...]. Parse refuses malformed text with
  // INVALID_ARGUMENT.
  std::string ToJson() const;
  static absl::StatusOr<ModelSpec> FromJson(std::string_view json);

  bool operator==(const ModelSpec&) const = default;

 private:
  std::vector<TensorSpec> tensors_;
};

class Model {
 public:
  // A zero-filled model of the given (valid) spec.
  explicit Model(ModelSpec spec);
  Model(Model&&) noexcept = default;
  Model& operator=(Model&&) noexcept = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  Model Clone() const;
  // A model over memory owned elsewhere, without a copy: `data` holds spec.NumFloats() floats
  // (spec valid) that nothing else writes while the model lives, and `keeper` keeps them alive;
  // it is released when the model is destroyed. The Python SDK hands numpy buffers over this way.
  static Model Borrow(ModelSpec spec, float* data, std::shared_ptr<void> keeper);

  const ModelSpec& spec() const { return spec_; }
  std::span<float> data() { return {data_.get(), size_}; }
  std::span<const float> data() const { return {data_.get(), size_}; }
  std::span<const std::byte> bytes() const {
    return std::as_bytes(std::span<const float>(data_.get(), size_));
  }
  int64_t NumBytes() const { return static_cast<int64_t>(size_ * sizeof(float)); }

  std::span<float> tensor(size_t index);
  std::span<const float> tensor(size_t index) const;
  // NOT_FOUND when the model has no tensor of that name.
  absl::StatusOr<std::span<float>> tensor(std::string_view name);

  // Hex SHA-256 of the payload.
  std::string Sha256Hex() const;

 private:
  // Frees an aligned_alloc block, unmaps `mapped_bytes` of a PageBuffer's mapping, or releases
  // the keeper of borrowed memory.
  struct FreeDeleter {
    size_t mapped_bytes;                   // 0: aligned_alloc (the deleter is value-initialised)
    mutable std::shared_ptr<void> keeper;  // set: borrowed memory (Borrow)
    void operator()(float* p) const;
  };
  Model(ModelSpec spec, float* data, FreeDeleter deleter);
  ModelSpec spec_;
  size_t size_ = 0;
  std::unique_ptr<float[], FreeDeleter> data_;
};

// "" when `ours` equals `theirs`; otherwise one sentence naming the first tensor that differs and
// both shapes, from the point of view of whoever holds `theirs`, e.g.
//   "tensor 1 'fc1.bias' is [32] in the server's model but [64] in this site's model"
//   "this site's model lacks tensor 3 'fc2.bias' [10] of the server's model (4 tensors there,
//    3 here)"
// Tensors are numbered from 0.
// `ours_name` and `theirs_name` name the two sides ("the server's model", "this site's").
std::string DescribeSpecDifference(const ModelSpec& ours, const ModelSpec& theirs,
                                   std::string_view ours_name, std::string_view theirs_name);

// "[10, 784]" ("[]" for a scalar).
std::string ShapeToString(const std::vector<int64_t>& shape);

// Largest number of parameters a model may have: 2^38 floats (1 TiB), far beyond any model this
// system trains, and small enough that sizes in bytes never overflow.
inline constexpr int64_t kMaxModelFloats = int64_t{1} << 38;

// SCAFFOLD's control variates ride in the model as extra tensors: for each tensor t of the
// weights, "scaffold.c.<t>" of the same shape. The global model carries the server's variate c
// there; a client's update carries its delta c_i in the same tensors, so both have one spec.
inline constexpr std::string_view kScaffoldPrefix = "scaffold.c.";
// `weights` followed by one control-variate tensor per weight tensor.
ModelSpec ScaffoldSpec(const ModelSpec& weights);
// Whether tensor `name` is a SCAFFOLD control variate.
bool IsScaffoldTensor(std::string_view name);

// Largest number of payload bytes in one chunk on the wire.
inline constexpr int64_t kMaxChunkBytes = 1 << 20;

}  // namespace fl

#endif  // FL_COMMON_MODEL_H_
