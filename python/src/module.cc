// fl._fl: the C++ SDK's site loop for Python (the package `fl` wraps it; python/fl/__init__.py).
//
// Client.run runs the SDK's loop on a thread of its own while the calling thread waits with the
// GIL released, waking every 100 ms to let Python handle signals: Ctrl-C stops the client (and
// interrupts a fit under way) and raises KeyboardInterrupt once the loop has ended. The trainer
// is called from the loop's thread with the GIL taken only around the call. Errors are
// fl.FlError(code, message), code an absl status name such as "PERMISSION_DENIED".
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fl/client/client.h"
#include "fl/common/logging.h"
#include "python/src/gil.h"
#include "python/src/py_trainer.h"
#include "python/src/simulation.h"
#include "python/src/status.h"
#include "python/src/weights.h"

namespace nb = nanobind;

namespace fl::python {
namespace {

double Seconds(nb::handle v, const char* name) {
  double s = 0;
  if (!nb::try_cast(v, s) || !(s > 0)) {
    Raise(absl::InvalidArgumentError(absl::StrCat(name, " must be a positive number of seconds")));
  }
  return s;
}

// limits={...}: the keys of fl::client::SiteLimits.
client::SiteLimits LimitsOf(nb::handle limits) {
  client::SiteLimits l;
  if (limits.is_none()) return l;
  if (!nb::isinstance<nb::dict>(limits)) {
    Raise(absl::InvalidArgumentError("limits must be a dict, e.g. {\"max_local_epochs\": 2}"));
  }
  static const char* kKeys[] = {"max_local_epochs",
                                "allowed_models",
                                "require_differential_privacy",
                                "require_secure_aggregation",
                                "min_noise_multiplier",
                                "max_epsilon",
                                "epsilon_delta",
                                "privacy_ledger",
                                "min_sum_size",
                                "min_corrupt_fraction",
                                "grinding_bits"};
  for (auto [k, v] : nb::borrow<nb::dict>(limits)) {
    const std::string key = SafeStr(k);
    if (nb::isinstance<nb::bool_>(v) && key.rfind("require_", 0) != 0) {
      Raise(absl::InvalidArgumentError(
          absl::StrCat("limits['", key, "'] must be a number, not ", SafeStr(nb::repr(v)))));
    }
    try {
      if (key == "max_local_epochs") {
        l.max_local_epochs = nb::cast<int32_t>(v);
      } else if (key == "allowed_models") {
        l.allowed_models = nb::cast<std::vector<std::string>>(v);
      } else if (key == "require_differential_privacy") {
        l.require_differential_privacy = nb::cast<bool>(v);
      } else if (key == "require_secure_aggregation") {
        l.require_secure_aggregation = nb::cast<bool>(v);
      } else if (key == "min_noise_multiplier") {
        l.min_noise_multiplier = nb::cast<double>(v);
      } else if (key == "max_epsilon") {
        l.max_epsilon = nb::cast<double>(v);
      } else if (key == "epsilon_delta") {
        l.epsilon_delta = nb::cast<double>(v);
      } else if (key == "privacy_ledger") {
        l.privacy_ledger = nb::cast<std::string>(v);
      } else if (key == "min_sum_size") {
        l.min_sum_size = nb::cast<int32_t>(v);
      } else if (key == "min_corrupt_fraction") {
        l.min_corrupt_fraction = nb::cast<double>(v);
      } else if (key == "grinding_bits") {
        l.grinding_bits = nb::cast<int32_t>(v);
      } else {
        Raise(absl::InvalidArgumentError(
            absl::StrCat("unknown limit '", key, "'; known: ", absl::StrJoin(kKeys, ", "))));
      }
    } catch (const nb::cast_error&) {
      Raise(absl::InvalidArgumentError(
          absl::StrCat("limits['", key, "'] has the wrong type: ", SafeStr(nb::repr(v)))));
    }
  }
  auto bad = [](const std::string& what) {
    Raise(absl::InvalidArgumentError(absl::StrCat("limits: ", what)));
  };
  if (l.max_local_epochs < 0) bad("max_local_epochs must be >= 0 (0: no limit)");
  if (!(l.min_noise_multiplier >= 0) || !std::isfinite(l.min_noise_multiplier)) {
    bad("min_noise_multiplier must be a finite number >= 0");
  }
  if (!(l.max_epsilon >= 0) || !std::isfinite(l.max_epsilon)) {
    bad("max_epsilon must be a finite number >= 0 (0: no limit)");
  }
  if (!(l.epsilon_delta > 0 && l.epsilon_delta < 1)) bad("epsilon_delta must be in (0, 1)");
  if (l.min_sum_size < 0) bad("min_sum_size must be >= 0");
  if (!(l.min_corrupt_fraction >= 0 && l.min_corrupt_fraction < 0.5)) {
    bad("min_corrupt_fraction must be in [0, 0.5)");
  }
  if (l.grinding_bits < 0 || l.grinding_bits > 100) bad("grinding_bits must be in [0, 100]");
  return l;
}

class PyClient {
 public:
  PyClient(nb::object trainer, std::string server, std::string ca, std::string cert,
           std::string key, nb::object limits, std::string name, bool insecure_plaintext,
           nb::object reconnect_timeout, nb::object poll_wait, bool share_site_evaluation) {
    absl::StatusOr<std::unique_ptr<PyTrainer>> t = PyTrainer::Create(std::move(trainer));
    if (!t.ok()) Raise(t.status());
    trainer_ = *std::move(t);
    client::ClientOptions o;
    o.server_address = std::move(server);
    o.ca_cert_path = std::move(ca);
    o.cert_path = std::move(cert);
    o.key_path = std::move(key);
    o.name = std::move(name);
    o.insecure_plaintext = insecure_plaintext;
    o.limits = LimitsOf(limits);
    o.share_site_evaluation = share_site_evaluation;
    if (!reconnect_timeout.is_none()) {
      o.reconnect_timeout = absl::Seconds(Seconds(reconnect_timeout, "reconnect_timeout"));
    }
    if (!poll_wait.is_none()) o.poll_wait = absl::Seconds(Seconds(poll_wait, "poll_wait"));
    absl::StatusOr<std::unique_ptr<client::Client>> c = client::Client::Create(o, trainer_.get());
    if (!c.ok()) Raise(c.status());
    client_ = *std::move(c);
  }

  ~PyClient() {
    nb::gil_scoped_release release;  // the loop's thread may be waiting for the GIL to log
    client_.reset();
    trainer_.reset();
  }

  // Runs until the run ends; returns how it ended ({"run_id", "failed", "message"}). `on_task`
  // (or None) is called after every fit task and secure-aggregation stage with a dict: round,
  // stage, status ("OK" or the error), num_examples, train_seconds, task_seconds.
  nb::dict Run(nb::object on_task) {
    if (!on_task.is_none()) {
      std::shared_ptr<nb::object> held = Shared(std::move(on_task));
      client_->set_on_task([held](const client::TaskReport& r) {
        nb::gil_scoped_acquire gil;
        nb::dict d;
        d["round"] = r.round;
        d["stage"] = r.stage;
        d["status"] = r.status.ok() ? std::string("OK") : r.status.ToString();
        d["num_examples"] = r.num_examples;
        d["train_seconds"] = absl::ToDoubleSeconds(r.train_time);
        d["task_seconds"] = absl::ToDoubleSeconds(r.task_time);
        try {
          (*held)(d);
        } catch (nb::python_error& e) {
          e.discard_as_unraisable("fl on_task callback");
        }
      });
    }
    std::promise<absl::Status> done;
    std::future<absl::Status> result = done.get_future();
    std::thread loop([&] { done.set_value(client_->Run()); });
    // Ctrl-C (or another signal handler that raised): stop the loop, interrupt a trainer call
    // under way, and re-raise once the loop has ended.
    std::optional<nb::python_error> pending = WaitHandlingSignals(result, [&] {
      client_->Stop();
      if (unsigned long thread = trainer_->calling_thread(); thread != 0) {
        PyThreadState_SetAsyncExc(thread, PyExc_KeyboardInterrupt);
      }
    });
    loop.join();
    if (pending.has_value()) throw *pending;
    absl::Status s = result.get();
    if (!s.ok()) Raise(s);
    const client::RunEnd end = client_->last_run();
    nb::dict out;
    out["run_id"] = end.run_id;
    out["failed"] = end.failed;
    out["message"] = end.message;
    return out;
  }

  void Stop() { client_->Stop(); }
  std::string client_id() const { return client_->client_id(); }
  int64_t borrowed_results() const { return trainer_->borrowed_results(); }

 private:
  std::unique_ptr<PyTrainer> trainer_;
  std::unique_ptr<client::Client> client_;
};

// A Python callable that takes (level, line), released with the GIL from whatever thread drops
// the last copy.
void SetLogHandler(nb::object handler) {
  if (handler.is_none()) {
    SetLogSink({});
    return;
  }
  std::shared_ptr<nb::object> held = Shared(std::move(handler));
  SetLogSink([held](LogLevel level, std::string_view line) {
    if (!Py_IsInitialized()) return;
    nb::gil_scoped_acquire gil;
    try {
      (*held)(static_cast<int>(level), nb::str(line.data(), line.size()));
    } catch (nb::python_error& e) {
      e.discard_as_unraisable("fl log handler");
    }
  });
}

}  // namespace
}  // namespace fl::python

NB_MODULE(_fl, m) {
  using fl::python::PyClient;
  fl::python::RegisterSimulation(m);
  // A Client left in a module's globals at exit is not a leak worth a warning.
  nb::set_leak_warnings(false);
  m.doc() = "The C++ core of the fl package (use `fl`, not this module).";
  nb::class_<PyClient>(m, "Client")
      .def(nb::init<nb::object, std::string, std::string, std::string, std::string, nb::object,
                    std::string, bool, nb::object, nb::object, bool>(),
           nb::arg("trainer"), nb::arg("server"), nb::arg("ca") = "", nb::arg("cert") = "",
           nb::arg("key") = "", nb::arg("limits") = nb::none(), nb::arg("name") = "",
           nb::arg("insecure_plaintext") = false, nb::arg("reconnect_timeout") = nb::none(),
           nb::arg("poll_wait") = nb::none(), nb::arg("share_site_evaluation") = false)
      .def("run", &PyClient::Run, nb::arg("on_task") = nb::none())
      .def("stop", &PyClient::Stop, nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("client_id", &PyClient::client_id, nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("borrowed_results", &PyClient::borrowed_results);
  m.def("set_log_handler", &fl::python::SetLogHandler, nb::arg("handler").none());
  m.def(
      "spec_of",
      [](nb::handle weights) {
        absl::StatusOr<fl::ModelSpec> spec = fl::python::SpecOfWeights(weights);
        if (!spec.ok()) fl::python::Raise(spec.status());
        return spec->ToJson();
      },
      nb::arg("weights"));
  m.def(
      "_round_trip",
      [](nb::handle weights) {
        // The weights as the SDK takes them back from fit and hands them to a trainer: a test
        // of the conversions (and whether the buffer was borrowed).
        absl::StatusOr<fl::ModelSpec> spec = fl::python::SpecOfWeights(weights);
        if (!spec.ok()) fl::python::Raise(spec.status());
        bool borrowed = false;
        absl::StatusOr<fl::Model> model =
            fl::python::ModelFromWeights(weights, *spec, "the weights", &borrowed);
        if (!model.ok()) fl::python::Raise(model.status());
        return nb::make_tuple(
            fl::python::GlobalWeights(std::make_shared<const fl::Model>(*std::move(model))),
            borrowed);
      },
      nb::arg("weights"));
}
