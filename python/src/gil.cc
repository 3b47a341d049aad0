#include "python/src/gil.h"

#include <utility>

namespace nb = nanobind;

namespace fl::python {

std::shared_ptr<nb::object> Shared(nb::object o) {
  return std::shared_ptr<nb::object>(new nb::object(std::move(o)), [](nb::object* p) {
    nb::gil_scoped_acquire gil;
    delete p;
  });
}

}  // namespace fl::python
