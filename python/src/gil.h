// Python objects and waits across the C++ threads of the fl._fl module.
#ifndef FL_PYTHON_GIL_H_
#define FL_PYTHON_GIL_H_

#include <nanobind/nanobind.h>

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <optional>

namespace fl::python {

// A Python object C++ threads may share: copies touch no reference count, and the last one
// drops the object with the GIL taken, from whichever thread that is. GIL held to call.
std::shared_ptr<nanobind::object> Shared(nanobind::object o);

// Waits for `done` with the GIL released, waking every 100 ms to run Python's signal handlers
// (GIL held to call). The first handler that raises (Ctrl-C) is taken and `on_interrupt` called,
// with the GIL, to make the work end; later ones while it winds down are swallowed. Returns the
// taken error, for the caller to raise once its worker thread is joined.
template <typename T>
std::optional<nanobind::python_error> WaitHandlingSignals(
    std::future<T>& done, const std::function<void()>& on_interrupt) {
  std::optional<nanobind::python_error> pending;
  while (true) {
    {
      nanobind::gil_scoped_release release;
      if (done.wait_for(std::chrono::milliseconds(100)) == std::future_status::ready) break;
    }
    if (PyErr_CheckSignals() == 0) continue;
    if (pending.has_value()) {
      PyErr_Clear();
      continue;
    }
    pending.emplace();  // takes the raised error
    on_interrupt();
  }
  return pending;
}

}  // namespace fl::python

#endif  // FL_PYTHON_GIL_H_
