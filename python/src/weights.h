// The weights dict of the Python SDK: a model's tensors as numpy arrays by name, both ways.
//
// Into Python (GlobalWeights): read-only views of the C++ buffer, no copy; each view keeps the
// model alive, so a trainer may keep one past its call. Back from Python (ModelFromWeights): the
// arrays checked against the spec (names, shapes; float32 or a dtype numpy converts), then copied
// into a new model, or borrowed without a copy when they are writable float32 views laid out back
// to back in spec order over one buffer (fl.empty_weights makes such a dict).
#ifndef FL_PYTHON_WEIGHTS_H_
#define FL_PYTHON_WEIGHTS_H_

#include <nanobind/nanobind.h>

#include <memory>

#include "absl/status/statusor.h"
#include "fl/common/model.h"

namespace fl::python {

// {name: read-only float32 array of the tensor's shape} over `model`'s buffer.
nanobind::dict GlobalWeights(std::shared_ptr<const Model> model);

// The model `weights` (a mapping of name to array) holds for `spec`; INVALID_ARGUMENT naming the
// missing, extra or misshapen tensor (`what` says whose weights, e.g. "fit's weights"). With
// `borrowed`, set when the model borrows the arrays' buffer. Called with the GIL held.
absl::StatusOr<Model> ModelFromWeights(nanobind::handle weights, const ModelSpec& spec,
                                       const char* what, bool* borrowed = nullptr);

// The spec of a weights mapping: its names in order and the arrays' shapes.
absl::StatusOr<ModelSpec> SpecOfWeights(nanobind::handle weights);

}  // namespace fl::python

#endif  // FL_PYTHON_WEIGHTS_H_
