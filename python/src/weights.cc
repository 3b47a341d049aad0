#include "python/src/weights.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "python/src/gil.h"
#include "python/src/status.h"

namespace nb = nanobind;

namespace fl::python {
namespace {

using ReadArray = nb::ndarray<const float, nb::c_contig, nb::device::cpu>;
using WriteArray = nb::ndarray<float, nb::c_contig, nb::device::cpu>;

// The object whose memory a numpy array finally views (its `base` chain's end).
nb::object RootOf(nb::handle array) {
  nb::object at = nb::borrow(array);
  for (int depth = 0; depth < 64 && nb::hasattr(at, "base"); ++depth) {
    nb::object base = at.attr("base");
    if (base.is_none()) break;
    at = base;
  }
  return at;
}

std::string Shape(const nb::ndarray<>& a) {
  std::vector<int64_t> shape;
  for (size_t i = 0; i < a.ndim(); ++i) shape.push_back(static_cast<int64_t>(a.shape(i)));
  return ShapeToString(shape);
}

template <typename Array>
bool ShapeIs(const Array& a, const TensorSpec& t) {
  if (a.ndim() != t.shape.size()) return false;
  for (size_t i = 0; i < a.ndim(); ++i) {
    if (static_cast<int64_t>(a.shape(i)) != t.shape[i]) return false;
  }
  return true;
}

}  // namespace

nb::dict GlobalWeights(std::shared_ptr<const Model> model) {
  auto* keep = new std::shared_ptr<const Model>(std::move(model));
  nb::capsule owner(keep,
                    [](void* p) noexcept { delete static_cast<std::shared_ptr<const Model>*>(p); });
  const Model& m = **keep;
  nb::dict out;
  const std::vector<TensorSpec>& tensors = m.spec().tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::vector<size_t> shape(tensors[i].shape.begin(), tensors[i].shape.end());
    nb::ndarray<nb::numpy, const float> view(m.tensor(i).data(), shape.size(), shape.data(), owner);
    out[tensors[i].name.c_str()] = view.cast();
  }
  return out;
}

absl::StatusOr<ModelSpec> SpecOfWeights(nb::handle weights) {
  if (!nb::hasattr(weights, "items")) {
    return absl::InvalidArgumentError(
        absl::StrCat("weights must be a dict of name to numpy array, not ",
                     SafeStr(weights.type().attr("__name__"))));
  }
  std::vector<TensorSpec> tensors;
  for (nb::handle item : weights.attr("items")()) {
    nb::handle key = item[0];
    if (!nb::isinstance<nb::str>(key)) {
      return absl::InvalidArgumentError("weights' names must be strings");
    }
    const std::string name = SafeStr(key);
    nb::object array = nb::module_::import_("numpy").attr("asarray")(item[1]);
    TensorSpec t{.name = name, .shape = {}};
    for (nb::handle d : array.attr("shape")) t.shape.push_back(nb::cast<int64_t>(d));
    tensors.push_back(std::move(t));
  }
  ModelSpec spec(std::move(tensors));
  if (absl::Status s = spec.Validate(); !s.ok()) return s;
  return spec;
}

absl::StatusOr<Model> ModelFromWeights(nb::handle weights, const ModelSpec& spec, const char* what,
                                       bool* borrowed) {
  if (borrowed != nullptr) *borrowed = false;
  if (!nb::hasattr(weights, "items") || !nb::hasattr(weights, "__getitem__")) {
    return absl::InvalidArgumentError(absl::StrCat(what,
                                                   " must be a dict of name to numpy array, not ",
                                                   SafeStr(weights.type().attr("__name__"))));
  }
  const std::vector<TensorSpec>& tensors = spec.tensors();
  if (nb::len(weights) != tensors.size()) {
    for (nb::handle key : weights.attr("keys")()) {
      const std::string name = nb::isinstance<nb::str>(key) ? SafeStr(key) : "";
      bool known = false;
      for (const TensorSpec& t : tensors) known = known || t.name == name;
      if (!known) {
        return absl::InvalidArgumentError(absl::StrCat(what, " hold '", SafeStr(nb::str(key)),
                                                       "', which the model (", tensors.size(),
                                                       " tensors) does not have"));
      }
    }
  }
  // Every tensor as a writable float32 C-contiguous view if it is one, to borrow them all.
  std::vector<nb::object> arrays;
  std::vector<WriteArray> writable;
  bool can_borrow = true;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& t = tensors[i];
    if (!nb::bool_(weights.attr("__contains__")(t.name))) {
      return absl::InvalidArgumentError(absl::StrCat(what, " lack tensor '", t.name, "' ",
                                                     ShapeToString(t.shape), " of the model"));
    }
    arrays.push_back(nb::borrow(weights[t.name.c_str()]));
    WriteArray w;
    if (can_borrow && nb::try_cast(arrays.back(), w, /*convert=*/false) && ShapeIs(w, t) &&
        reinterpret_cast<uintptr_t>(w.data()) % alignof(float) == 0) {
      writable.push_back(std::move(w));
    } else {
      can_borrow = false;
    }
  }
  if (can_borrow && !tensors.empty()) {
    // One buffer, tensors back to back in spec order, all viewing the same object.
    nb::object root = RootOf(arrays[0]);
    float* next = writable[0].data();
    for (size_t i = 0; i < tensors.size() && can_borrow; ++i) {
      can_borrow = writable[i].data() == next && RootOf(arrays[i]).is(root);
      next += tensors[i].NumElements();
    }
    if (can_borrow) {
      if (borrowed != nullptr) *borrowed = true;
      return Model::Borrow(spec, writable[0].data(), Shared(std::move(root)));
    }
  }
  Model model(spec);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& t = tensors[i];
    ReadArray r;
    if (!nb::try_cast(arrays[i], r, /*convert=*/true)) {
      // asarray, not ascontiguousarray: that one makes a 0-d array 1-d.
      nb::object as_float = nb::module_::import_("numpy").attr("asarray")(
          arrays[i], nb::arg("dtype") = "float32", nb::arg("order") = "C");
      if (!nb::try_cast(as_float, r, /*convert=*/false)) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, "' tensor '", t.name, "' is not an array of numbers"));
      }
    }
    if (!ShapeIs(r, t)) {
      return absl::InvalidArgumentError(absl::StrCat(what, "' tensor '", t.name, "' is ",
                                                     Shape(nb::ndarray<>(r)), "; the model's is ",
                                                     ShapeToString(t.shape)));
    }
    std::span<float> dst = model.tensor(i);
    std::memcpy(dst.data(), r.data(), dst.size() * sizeof(float));
  }
  return model;
}

}  // namespace fl::python
