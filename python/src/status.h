// absl::Status and Python exceptions, both ways, for the fl._fl module.
#ifndef FL_PYTHON_STATUS_H_
#define FL_PYTHON_STATUS_H_

#include <nanobind/nanobind.h>

#include <string>

#include "absl/status/status.h"

namespace fl::python {

// Raises fl.FlError(code, message) (code: absl's name, e.g. "PERMISSION_DENIED"). GIL held.
[[noreturn]] void Raise(const absl::Status& s);

// The Python exception `e` as a Status, `what` naming the call that raised it: KeyboardInterrupt
// is CANCELLED, fl.FlError keeps its code, anything else is UNKNOWN "<what> raised <Type>:
// <message>" with its traceback logged at warn. GIL held.
absl::Status StatusOfPythonError(nanobind::python_error& e, const char* what);

// str(o) as UTF-8 (lone surrogates backslash-escaped), "<unprintable>" when str() raises; never
// throws. GIL held.
std::string SafeStr(nanobind::handle o);

}  // namespace fl::python

#endif  // FL_PYTHON_STATUS_H_
