#include "fl/common/model.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fl/common/crypto.h"
#include "fl/common/page_buffer.h"
#include "nlohmann/json.hpp"

namespace fl {

int64_t TensorSpec::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

ModelSpec::ModelSpec(std::vector<TensorSpec> tensors) : tensors_(std::move(tensors)) {}

absl::Status ModelSpec::Validate() const {
  if (tensors_.empty()) return absl::InvalidArgumentError("model spec has no tensors");
  std::set<std::string> names;
  int64_t total = 0;
  for (const TensorSpec& t : tensors_) {
    if (t.name.empty()) return absl::InvalidArgumentError("model spec has a tensor without a name");
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("model spec names tensor '", t.name, "' twice"));
    }
    int64_t elements = 1;
    for (int64_t d : t.shape) {
      if (d <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", t.name, "' has a non-positive dimension ", d));
      }
      if (d > kMaxModelFloats || elements > kMaxModelFloats / d) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", t.name, "' has more than ", kMaxModelFloats, " elements"));
      }
      elements *= d;
    }
    total += elements;
    if (total > kMaxModelFloats) {
      return absl::InvalidArgumentError(
          absl::StrCat("model spec has more than ", kMaxModelFloats, " parameters"));
    }
  }
  return absl::OkStatus();
}

int64_t ModelSpec::NumFloats() const {
  int64_t n = 0;
  for (const TensorSpec& t : tensors_) n += t.NumElements();
  return n;
}

int64_t ModelSpec::OffsetOf(size_t index) const {
  int64_t offset = 0;
  for (size_t i = 0; i < index && i < tensors_.size(); ++i) offset += tensors_[i].NumElements();
  return offset;
}

std::string ModelSpec::ToJson() const {
  nlohmann::json j = nlohmann::json::array();
  for (const TensorSpec& t : tensors_) j.push_back({{"name", t.name}, {"shape", t.shape}});
  return j.dump();
}

absl::StatusOr<ModelSpec> ModelSpec::FromJson(std::string_view text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array()) {
    return absl::InvalidArgumentError("model spec is not a JSON array of tensors");
  }
  std::vector<TensorSpec> tensors;
  for (const nlohmann::json& e : j) {
    if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("shape") ||
        !e["shape"].is_array()) {
      return absl::InvalidArgumentError("model spec entry lacks a string 'name' or array 'shape'");
    }
    TensorSpec t;
    t.name = e["name"].get<std::string>();
    for (const nlohmann::json& d : e["shape"]) {
      if (!d.is_number_integer()) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", t.name, "' has a non-integer dimension"));
      }
      t.shape.push_back(d.get<int64_t>());
    }
    tensors.push_back(std::move(t));
  }
  ModelSpec spec(std::move(tensors));
  if (absl::Status s = spec.Validate(); !s.ok()) return s;
  return spec;
}

void Model::FreeDeleter::operator()(float* p) const {
  if (keeper != nullptr) {
    keeper.reset();
  } else if (mapped_bytes != 0) {
    munmap(p, mapped_bytes);
  } else {
    std::free(p);
  }
}

Model::Model(ModelSpec spec) : spec_(std::move(spec)), size_(spec_.NumFloats()) {
  if (size_ * sizeof(float) >= static_cast<size_t>(kMaxChunkBytes)) {
    // Page-aligned and already zero; the pages become resident as they are written.
    PageBuffer pages(size_ * sizeof(float));
    const size_t mapped = PageBuffer::MappedBytes(pages.size());
    data_ = std::unique_ptr<float[], FreeDeleter>(static_cast<float*>(pages.Detach()),
                                                  FreeDeleter{mapped, nullptr});
    return;
  }
  // 64-byte alignment for vector loads; aligned_alloc needs a size that is a multiple of it.
  size_t bytes = (size_ * sizeof(float) + 63) / 64 * 64;
  if (bytes == 0) bytes = 64;
  data_.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
  std::memset(data_.get(), 0, bytes);
}

Model::Model(ModelSpec spec, float* data, FreeDeleter deleter)
    : spec_(std::move(spec)), size_(spec_.NumFloats()), data_(data, std::move(deleter)) {}

Model Model::Borrow(ModelSpec spec, float* data, std::shared_ptr<void> keeper) {
  return Model(std::move(spec), data, FreeDeleter{0, std::move(keeper)});
}

Model Model::Clone() const {
  Model copy(spec_);
  std::memcpy(copy.data_.get(), data_.get(), size_ * sizeof(float));
  return copy;
}

std::span<float> Model::tensor(size_t index) {
  return data().subspan(spec_.OffsetOf(index), spec_.tensors()[index].NumElements());
}

std::span<const float> Model::tensor(size_t index) const {
  return data().subspan(spec_.OffsetOf(index), spec_.tensors()[index].NumElements());
}

absl::StatusOr<std::span<float>> Model::tensor(std::string_view name) {
  for (size_t i = 0; i < spec_.tensors().size(); ++i) {
    if (spec_.tensors()[i].name == name) return tensor(i);
  }
  return absl::NotFoundError(absl::StrCat("model has no tensor named '", std::string(name), "'"));
}

std::string Model::Sha256Hex() const { return fl::Sha256Hex(bytes()); }

ModelSpec ScaffoldSpec(const ModelSpec& weights) {
  std::vector<TensorSpec> tensors = weights.tensors();
  for (const TensorSpec& t : weights.tensors()) {
    tensors.push_back({std::string(kScaffoldPrefix) + t.name, t.shape});
  }
  return ModelSpec(std::move(tensors));
}

bool IsScaffoldTensor(std::string_view name) { return name.starts_with(kScaffoldPrefix); }

std::string ShapeToString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string DescribeSpecDifference(const ModelSpec& ours, const ModelSpec& theirs,
                                   std::string_view ours_view, std::string_view theirs_view) {
  // absl::StrCat here takes absl::string_view, which Debian's Abseil does not alias to std's.
  const std::string ours_name(ours_view), theirs_name(theirs_view);
  const std::vector<TensorSpec>& a = ours.tensors();
  const std::vector<TensorSpec>& b = theirs.tensors();
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (a[i] == b[i]) continue;
    if (a[i].name == b[i].name) {
      return absl::StrCat("tensor ", i, " '", a[i].name, "' is ", ShapeToString(a[i].shape), " in ",
                          ours_name, " but ", ShapeToString(b[i].shape), " in ", theirs_name);
    }
    return absl::StrCat("tensor ", i, " is '", a[i].name, "' ", ShapeToString(a[i].shape), " in ",
                        ours_name, " but '", b[i].name, "' ", ShapeToString(b[i].shape), " in ",
                        theirs_name);
  }
  if (a.size() > b.size()) {
    return absl::StrCat(theirs_name, " lacks tensor ", b.size(), " '", a[b.size()].name, "' ",
                        ShapeToString(a[b.size()].shape), " of ", ours_name, " (", a.size(),
                        " tensors there, ", b.size(), " here)");
  }
  if (b.size() > a.size()) {
    return absl::StrCat(theirs_name, " has tensor ", a.size(), " '", b[a.size()].name, "' ",
                        ShapeToString(b[a.size()].shape), " that ", ours_name, " lacks (", a.size(),
                        " tensors there, ", b.size(), " here)");
  }
  return "";
}

}  // namespace fl
