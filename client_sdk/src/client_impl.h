// Client::Impl, the SDK's client behind Client's pimpl, and the helpers its files share:
// client.cc (join, poll, fit, evaluate, the transport, the run loop) and client_secagg.cc (the
// stages of a secure-aggregation round). Private to the SDK: it includes gRPC and protobuf.
#ifndef FL_CLIENT_SRC_CLIENT_IMPL_H_
#define FL_CLIENT_SRC_CLIENT_IMPL_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client_sdk/src/secagg_client.h"
#include "fl/client/client.h"
#include "fl/common/logging.h"
#include "fl/common/model.h"
#include "fl/v1/federation.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace fl::client {
namespace internal {

inline constexpr char kClientNameHeader[] = "fl-client-name";

// A deadline for moving `bytes` of model: generous (1 MB/s), but never infinite, so that a
// transfer stuck on a connection that no longer leads anywhere ends in a retry.
absl::Duration TransferTimeout(int64_t bytes);

// Every answer to a task names it: run, round and task id.
template <typename Message>
void SetTaskIds(const fl::v1::Task& task, Message& m) {
  m.set_run_id(task.run_id());
  m.set_round(task.round());
  m.set_task_id(task.task_id());
}

// The name of a task's stage in TaskReport::stage and in logs: "fit" or "secagg_<stage>".
std::string StageName(fl::v1::Task::Kind kind);
bool IsSecAgg(fl::v1::Task::Kind kind);
// How the server asks a FIT or SECAGG_* task to train (secure_aggregation set for SECAGG_*).
FitConfig FitConfigOf(const fl::v1::Task& task);

// The channel to options.server_address: mutual TLS with the site's files (or plaintext to a
// loopback address only), the SDK's reconnect backoff and keepalive. Fills an empty
// options.name (the certificate's common name, "site" in plaintext). INVALID_ARGUMENT for
// missing TLS paths, plaintext to another host or a certificate without a common name; a
// ReadFile error for a file that cannot be read. (channel.cc)
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(ClientOptions& options);

// What a Join says about the site, for the server's admission checks: the trainer's model spec
// (none when `trainer` is null) and options.feature_columns with their SHA-256.
void DescribeSite(const ClientOptions& options, const Trainer* trainer, fl::v1::JoinRequest& req);

}  // namespace internal

class Client::Impl {
 public:
  Impl(ClientOptions options, Trainer* trainer, std::shared_ptr<grpc::Channel> channel)
      : options_(std::move(options)),
        trainer_(trainer),
        channel_(channel),
        stub_(fl::v1::Federation::NewStub(channel)) {}

  absl::Status Run();
  void Stop() {
    std::lock_guard<std::mutex> lock(ctx_mu_);
    stopping_ = true;
    if (active_ctx_ != nullptr) active_ctx_->TryCancel();
  }

  std::function<void(const TaskReport&)> on_task_;
  mutable std::mutex id_mu_;
  std::string client_id_;
  RunEnd last_run_;  // guarded by id_mu_

 private:
  // A ClientContext registered so that Stop can cancel the call in flight.
  class Call {
   public:
    Call(Impl* impl, absl::Duration timeout) : impl_(impl) {
      if (impl_->options_.insecure_plaintext) {
        ctx.AddMetadata(internal::kClientNameHeader, impl_->options_.name);
      }
      if (timeout != absl::InfiniteDuration()) {
        ctx.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
      }
      std::lock_guard<std::mutex> lock(impl_->ctx_mu_);
      impl_->active_ctx_ = &ctx;
      if (impl_->stopping_) ctx.TryCancel();  // Stop came before this call registered
    }
    ~Call() {
      std::lock_guard<std::mutex> lock(impl_->ctx_mu_);
      impl_->active_ctx_ = nullptr;
    }
    grpc::ClientContext ctx;

   private:
    Impl* impl_;
  };

  // The federation's feature statistics the trainer was last given (empty: none yet).
  ColumnStats applied_stats_;
  absl::Status Join();
  absl::Status Poll(fl::v1::Task* task);
  class HeartbeatThread;
  absl::Status Fit(const fl::v1::Task& task, TaskReport& report);
  // The site's limits, then the server's model against the trainer's: the spec to train, or why
  // the task is declined (nothing has been downloaded yet).
  absl::StatusOr<ModelSpec> AcceptFitTask(const fl::v1::Task& task, const FitConfig& config);
  // One stage of a secure-aggregation round (the SECAGG_* kinds); see secagg_client.h.
  absl::Status SecAggStage(const fl::v1::Task& task, TaskReport& report);
  // Downloads, trains, masks and uploads (SECAGG_MASKED_INPUT). A failure that is not transport
  // trouble is returned in `decline`; the caller declines it.
  absl::Status MaskedInput(const fl::v1::Task& task, TaskReport& report, absl::Status& decline);
  // Sends a stage's message; ALREADY_EXISTS for a message sent again counts as delivered.
  absl::Status SendSecAgg(const fl::v1::SecAggSubmission& message, bool again);
  // Tells the server this client leaves the round (SubmitSecAgg with decline_reason) and forgets
  // the session.
  void DeclineSecAgg(const fl::v1::Task& task, const absl::Status& why);
  // Evaluates the task's model with the trainer and reports the result (or why it could not).
  absl::Status Evaluate(const fl::v1::Task& task);
  // Federated standardisation (client_statistics.cc): answers a STATISTICS task with the
  // trainer's FeatureSumsForStatistics (or its decline); hands the task's feature statistics, if
  // any and not already applied, to the trainer's ApplyFeatureStatistics.
  absl::Status Statistics(const fl::v1::Task& task);
  absl::Status ApplyStatistics(const fl::v1::Task& task);
  absl::StatusOr<Model> Download(const fl::v1::Task& task, const ModelSpec& spec);
  // Sends the trained model in the encoding the task asks for: FLOAT32 (or unset) the weights,
  // FLOAT16 / INT8 the change from `global` (fl/common/update_codec.h). An update that cannot be
  // encoded (a change not finite in float16) or an encoding this SDK does not know is declined
  // with the reason, and that reason returned.
  absl::Status Submit(const fl::v1::Task& task, const FitResult& result, const Model& global);
  // Streams `meta`, then `payload` in chunks of at most kMaxChunkBytes (a multiple of 8, so of
  // every word size), then the payload's SHA-256.
  absl::Status SubmitPayload(const fl::v1::UpdateMetadata& meta,
                             std::span<const std::byte> payload);
  // The payload's chunk that starts at `offset` (1 to kMaxChunkBytes bytes, valid until the
  // next call).
  using ChunkSource = std::function<std::span<const std::byte>(int64_t offset)>;
  // Streams `meta`, then the `payload_bytes` of payload as `next_chunk` produces them, then
  // their SHA-256.
  absl::Status SubmitChunks(const fl::v1::UpdateMetadata& meta, int64_t payload_bytes,
                            const ChunkSource& next_chunk);
  // Tells the server this client will not do `task`, so the round stops waiting for it.
  void Decline(const fl::v1::Task& task, const absl::Status& why);
  // Sleeps `d` unless stopped; false when stopped.
  bool SleepUnlessStopped(absl::Duration d) {
    const absl::Time until = absl::Now() + d;
    while (!stopping_ && absl::Now() < until) absl::SleepFor(absl::Milliseconds(10));
    return !stopping_;
  }
  // Waits up to `d` for the channel to (re)connect, returning early once it is connected; false
  // when stopped. Waiting on the channel is what drives its connection attempts: a blocked
  // sleep would leave them to gRPC's 5-second backup poller.
  bool WaitForServer(absl::Duration d) {
    const absl::Time until = absl::Now() + d;
    while (!stopping_ && absl::Now() < until) {
      const absl::Time step = std::min(until, absl::Now() + absl::Milliseconds(100));
      if (channel_->WaitForConnected(absl::ToChronoTime(step))) break;
    }
    return !stopping_;
  }

  const ClientOptions options_;
  Trainer* trainer_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<fl::v1::Federation::Stub> stub_;
  std::atomic<bool> stopping_{false};
  std::mutex ctx_mu_;
  grpc::ClientContext* active_ctx_ = nullptr;
  int64_t run_id_ = 0;
  internal::SecAggParticipant secagg_;  // Run's thread only
};

// Sends heartbeats for a task from a background thread until destroyed.
class Client::Impl::HeartbeatThread {
 public:
  HeartbeatThread(Impl* impl, const fl::v1::Task& task) : impl_(impl) {
    req_.set_run_id(task.run_id());
    req_.set_round(task.round());
    req_.set_task_id(task.task_id());
    thread_ = std::thread([this] { Loop(); });
  }
  ~HeartbeatThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, absl::ToChronoMilliseconds(impl_->options_.heartbeat_interval),
                         [this] { return done_; })) {
      lock.unlock();
      grpc::ClientContext ctx;
      if (impl_->options_.insecure_plaintext) {
        ctx.AddMetadata(internal::kClientNameHeader, impl_->options_.name);
      }
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      fl::v1::HeartbeatReply reply;
      grpc::Status s = impl_->stub_->Heartbeat(&ctx, req_, &reply);
      if (s.ok() && !reply.task_open()) {
        LogEvent(LogLevel::kWarn, "task_closed_while_working",
                 {{"name", impl_->options_.name},
                  {"round", absl::StrCat(req_.round())},
                  {"server", reply.message()}});
      }
      lock.lock();
    }
  }

  Impl* impl_;
  fl::v1::HeartbeatRequest req_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace fl::client

#endif  // FL_CLIENT_SRC_CLIENT_IMPL_H_
