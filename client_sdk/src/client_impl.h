// Client::Impl, the SDK's client behind Client's pimpl: the loop (client.cc: join, poll, fit,
// evaluate, run), the stages of a secure-aggregation round (client_secagg.cc) and federated
// standardisation (client_statistics.cc). It reaches the server only through a Transport
// (client_sdk/internal/transport.h), so it includes no gRPC or protobuf header.
#ifndef FL_CLIENT_SRC_CLIENT_IMPL_H_
#define FL_CLIENT_SRC_CLIENT_IMPL_H_

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client_sdk/internal/transport.h"
#include "client_sdk/src/privacy_ledger.h"
#include "client_sdk/src/secagg_client.h"
#include "fl/client/client.h"
#include "fl/common/logging.h"
#include "fl/common/model.h"

namespace fl::client {

class Client::Impl {
 public:
  Impl(ClientOptions options, Trainer* trainer, std::unique_ptr<Transport> transport)
      : options_(std::move(options)), trainer_(trainer), transport_(std::move(transport)) {}

  absl::Status Run();
  void Stop() {
    stopping_ = true;
    transport_->Cancel();
  }
  absl::Status Join();
  const ClientOptions& options() const { return options_; }
  internal::SecAggParticipant& secagg() { return secagg_; }
  // Opens limits.privacy_ledger, when set, and counts its inputs in limits.max_epsilon; warns
  // that a budget without one counts this process's inputs only.
  absl::Status OpenPrivacyLedger();
  // One task, as Run does it after a poll (fit_backoff and the log of a failure are Run's).
  absl::Status RunTask(const ClientTask& task);

  std::function<void(const TaskReport&)> on_task_;
  mutable absl::Mutex id_mu_;
  std::string client_id_ ABSL_GUARDED_BY(id_mu_);
  RunEnd last_run_ ABSL_GUARDED_BY(id_mu_);
  bool live_ = false;  // a task other than DONE came since the last Join

 private:
  // The federation's feature statistics the trainer was last given (empty: none yet).
  ColumnStats applied_stats_;
  class HeartbeatThread;
  absl::Status Fit(const ClientTask& task, TaskReport& report);
  // The site's limits, then the server's model against the trainer's: the spec to train, or why
  // the task is declined (nothing has been downloaded yet).
  absl::StatusOr<ModelSpec> AcceptFitTask(const ClientTask& task);
  // One stage of a secure-aggregation round (the kSecAgg* kinds); see secagg_client.h.
  absl::Status SecAggStage(const ClientTask& task, TaskReport& report);
  // Downloads, trains, masks and uploads (kSecAggMaskedInput). A failure that is not transport
  // trouble is returned in `decline`; the caller declines it.
  absl::Status MaskedInput(const ClientTask& task, TaskReport& report, absl::Status& decline);
  // Sends a stage's message; ALREADY_EXISTS for a message sent again counts as delivered.
  absl::Status SendSecAgg(const SecAggReply& message, bool again);
  // Tells the server this client leaves the round (a decline_reason) and forgets the session.
  void DeclineSecAgg(const ClientTask& task, const absl::Status& why);
  // Evaluates the task's model with the trainer and reports the result (or why it could not).
  absl::Status Evaluate(const ClientTask& task);
  // Federated standardisation (client_statistics.cc): answers a kStatistics task with the
  // trainer's FeatureSumsForStatistics (or its decline); hands the task's feature statistics, if
  // any and not already applied, to the trainer's ApplyFeatureStatistics.
  absl::Status Statistics(const ClientTask& task);
  absl::Status ApplyStatistics(const ClientTask& task);
  // Sends the trained model in the encoding the task asks for: float32 the weights, float16 /
  // int8 the change from `global` (fl/common/update_codec.h). An update that cannot be encoded
  // (a change not finite in float16) or an encoding this SDK does not know is declined with the
  // reason, and that reason returned.
  absl::Status Submit(const ClientTask& task, const FitResult& result, const Model& global);
  // Sends `header` and then `payload` in chunks of at most kMaxChunkBytes.
  absl::Status SubmitPayload(const UpdateHeader& header, std::span<const std::byte> payload);
  // Tells the server this client will not do `task`, so the round stops waiting for it.
  void Decline(const ClientTask& task, const absl::Status& why);
  // Sleeps `d` unless stopped; false when stopped.
  bool SleepUnlessStopped(absl::Duration d) {
    const absl::Time until = absl::Now() + d;
    while (!stopping_ && absl::Now() < until) absl::SleepFor(absl::Milliseconds(10));
    return !stopping_;
  }

  const ClientOptions options_;
  Trainer* trainer_;
  std::unique_ptr<Transport> transport_;
  std::atomic<bool> stopping_{false};
  int64_t run_id_ = 0;
  internal::SecAggParticipant secagg_;  // Run's thread only
  // The noise multiplier against the server of each input this client masked, whatever run the
  // server named (Run's thread only): what limits.max_epsilon is counted over.
  std::vector<double> inputs_masked_;
  std::optional<internal::PrivacyLedger> ledger_;  // limits.privacy_ledger, when set
  // The secure round's noise within this site's limits (CheckSecureRoundLimits), given the inputs
  // this client already masked.
  absl::Status CheckSecureRoundNoise(const ClientTask& task) const;
};

// Sends heartbeats for a task from a background thread until destroyed; none when the transport
// does not want them.
class Client::Impl::HeartbeatThread {
 public:
  HeartbeatThread(Impl* impl, const ClientTask& task) : impl_(impl), task_(task) {
    if (impl_->transport_->wants_heartbeats()) thread_ = std::thread([this] { Loop(); });
  }
  ~HeartbeatThread() {
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
    }
    cv_.SignalAll();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() {
    mu_.Lock();
    while (true) {
      const absl::Time next = absl::Now() + impl_->options_.heartbeat_interval;
      while (!done_ && !cv_.WaitWithDeadline(&mu_, next)) {
      }
      if (done_) break;
      mu_.Unlock();
      std::string message;
      absl::StatusOr<bool> open = impl_->transport_->Heartbeat(task_, &message);
      if (open.ok() && !*open) {
        LogEvent(LogLevel::kWarn, "task_closed_while_working",
                 {{"name", impl_->options_.name},
                  {"round", absl::StrCat(task_.round)},
                  {"server", message}});
      }
      mu_.Lock();
    }
    mu_.Unlock();
  }

  Impl* impl_;
  const ClientTask& task_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace fl::client

#endif  // FL_CLIENT_SRC_CLIENT_IMPL_H_
