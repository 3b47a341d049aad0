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

std::string SafeStr(nb::handle o) {
  // str() may raise, and a str with lone surrogates is not UTF-8: neither may escape as a C++
  // exception from a trainer call.
  PyObject* text = PyObject_Str(o.ptr());
  if (text == nullptr) {
    PyErr_Clear();
    return "<unprintable>";
  }
  PyObject* bytes = PyUnicode_AsEncodedString(text, "utf-8", "backslashreplace");
  Py_DECREF(text);
  if (bytes == nullptr) {
    PyErr_Clear();
    return "<unprintable>";
  }
  std::string out(PyBytes_AS_STRING(bytes), static_cast<size_t>(PyBytes_GET_SIZE(bytes)));
  Py_DECREF(bytes);
  return out;
}

namespace {

// The exception's traceback as text, without python_error::what(), which fails on a message that
// is not UTF-8.
std::string Traceback(nb::python_error& e) {
  try {
    nb::object lines = nb::module_::import_("traceback")
                           .attr("format_exception")(nb::borrow(e.type()), nb::borrow(e.value()),
                                                     nb::borrow(e.traceback()));
    return SafeStr(nb::str("").attr("join")(lines));
  } catch (nb::python_error&) {
    return "<no traceback>";
  }
}

}  // namespace

absl::Status StatusOfPythonError(nb::python_error& e, const char* what) {
  nb::object type = nb::borrow(e.type());
  nb::object value = nb::borrow(e.value());
  const std::string type_name = SafeStr(type.attr("__name__"));
  const std::string message = SafeStr(value);
  if (e.matches(PyExc_KeyboardInterrupt)) return absl::CancelledError("interrupted (Ctrl-C)");
  try {
    nb::object fl_error = nb::module_::import_("fl._errors").attr("FlError");
    if (PyObject_IsInstance(value.ptr(), fl_error.ptr()) == 1) {
      // fl.FlError (or a subclass) carries an absl status code name.
      const std::string code = SafeStr(value.attr("code"));
      const std::string text = SafeStr(value.attr("message"));
      for (int c = 1; c <= 16; ++c) {
        if (absl::StatusCodeToString(static_cast<absl::StatusCode>(c)) == code) {
          return absl::Status(static_cast<absl::StatusCode>(c), text);
        }
      }
    }
  } catch (nb::python_error& inner) {
    inner.discard_as_unraisable("fl: reading a trainer's FlError");
  }
  LogEvent(LogLevel::kWarn, "python_trainer_error", {{"call", what}, {"traceback", Traceback(e)}});
  return absl::UnknownError(absl::StrCat(what, " raised ", type_name, ": ", message));
}

}  // namespace fl::python
