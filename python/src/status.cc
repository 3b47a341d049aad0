#include "python/src/status.h"

#include <nanobind/stl/string.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "fl/common/logging.h"

namespace nb = nanobind;

namespace fl::python {

void Raise(const absl::Status& s) {
  nb::object error_type = nb::module_::import_("fl._errors").attr("FlError");
  nb::object error =
      error_type(std::string(absl::StatusCodeToString(s.code())), std::string(s.message()));
  PyErr_SetObject(error_type.ptr(), error.ptr());
  throw nb::python_error();
}

absl::Status StatusOfPythonError(nb::python_error& e, const char* what) {
  nb::object type = nb::borrow(e.type());
  nb::object value = nb::borrow(e.value());
  const std::string type_name = nb::cast<std::string>(type.attr("__name__"));
  const std::string message = nb::cast<std::string>(nb::str(value));
  if (type_name == "KeyboardInterrupt") return absl::CancelledError("interrupted (Ctrl-C)");
  if (nb::hasattr(value, "code") && nb::hasattr(value, "message") && type_name == "FlError") {
    // fl.FlError carries an absl status code name.
    const std::string code = nb::cast<std::string>(nb::str(value.attr("code")));
    const std::string text = nb::cast<std::string>(nb::str(value.attr("message")));
    for (int c = 1; c <= 16; ++c) {
      if (absl::StatusCodeToString(static_cast<absl::StatusCode>(c)) == code) {
        return absl::Status(static_cast<absl::StatusCode>(c), text);
      }
    }
  }
  LogEvent(LogLevel::kWarn, "python_trainer_error", {{"call", what}, {"traceback", e.what()}});
  return absl::UnknownError(absl::StrCat(what, " raised ", type_name, ": ", message));
}

}  // namespace fl::python
