// The in-process transport: a virtual site's SDK loop calling the real round engine directly, in
// domain types, with no serialization, no encryption and no network. What the simulation runs by
// default (`fl sim --transport inproc`); the gRPC transport (client_sdk/src/grpc_transport.cc)
// is the production path.
//
// Everything the engine checks still happens: task ids, stale rounds, SHA-256 of every update,
// admission of the site's model spec. The site's identity is given (the simulation made it), as
// the service would take it from a certificate. Nothing blocks: Poll answers at once (kWait when
// there is no task), and time is whatever the engine's clock says.
#ifndef FL_SIMULATION_INTERNAL_INPROC_TRANSPORT_H_
#define FL_SIMULATION_INTERNAL_INPROC_TRANSPORT_H_

#include <atomic>
#include <memory>
#include <string>

#include "client_sdk/internal/transport.h"
#include "fl/server/engine.h"

namespace fl::simulation {

// The SDK's view of a server task (shared by the transport and the driver).
client::ClientTask ToClientTask(const server::Task& task);

class InprocTransport final : public client::Transport {
 public:
  // `engine` is not owned and must outlive the transport.
  InprocTransport(server::RoundEngine* engine, std::string client_id)
      : engine_(engine), client_id_(std::move(client_id)) {}

  absl::StatusOr<client::JoinAnswer> Join(const client::JoinRequestInfo& request) override;
  absl::StatusOr<client::ClientTask> Poll(int64_t run_id, absl::Duration wait) override;
  absl::StatusOr<std::shared_ptr<const Model>> Download(const client::ClientTask& task,
                                                        const ModelSpec& spec) override;
  absl::Status SubmitUpdate(const client::UpdateHeader& header,
                            const client::ChunkSource& next_chunk) override;
  absl::Status Decline(const client::ClientTask& task, const std::string& reason) override;
  absl::Status SubmitEvaluation(const client::EvaluationReply& reply) override;
  absl::Status SubmitSecAgg(const client::SecAggReply& reply) override;
  absl::StatusOr<bool> Heartbeat(const client::ClientTask& task, std::string* message) override;
  // The driver speaks for the site's liveness on the simulated clock.
  bool wants_heartbeats() const override { return false; }
  bool WaitForServer(absl::Duration) override { return !cancelled_; }
  void Cancel() override { cancelled_ = true; }

 private:
  absl::Status CheckCancelled() const;

  server::RoundEngine* engine_;
  const std::string client_id_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace fl::simulation

#endif  // FL_SIMULATION_INTERNAL_INPROC_TRANSPORT_H_
