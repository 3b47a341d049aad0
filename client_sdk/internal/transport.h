// Transport: how the SDK's client loop reaches a federation's server, in domain types.
//
// Client::Impl (the loop: join, poll, fit, evaluate, the secure-aggregation stages) speaks only
// to this interface. The production implementation is GrpcTransport (grpc_transport.cc, mutual
// TLS, chunked streams, SHA-256 checks); the simulation has an in-process one that calls the
// round engine directly (simulation/src/inproc_transport.cc), and tests use fakes. Everything
// here is the SDK's own vocabulary: no protobuf, no gRPC, no server type.
//
// Errors are absl::Status values with gRPC's canonical codes, as the server sent them:
// UNAVAILABLE / DEADLINE_EXCEEDED / CANCELLED for transport trouble (the loop retries), anything
// else a refusal with the server's reason. A transport is used by one loop thread, except
// Heartbeat and Cancel, which may come from other threads.
#ifndef FL_CLIENT_INTERNAL_TRANSPORT_H_
#define FL_CLIENT_INTERNAL_TRANSPORT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fl/aggregation/secagg/params.h"
#include "fl/aggregation/secagg/protocol.h"
#include "fl/client/client.h"
#include "fl/client/dataset.h"
#include "fl/client/trainer.h"
#include "fl/common/model.h"
#include "fl/common/update_codec.h"

namespace fl::client {

// A secure-aggregation round's public parameters as the client uses them.
using SecAggRoundParams = secagg::RoundParams;

// What the server asks of this client.
struct ClientTask {
  enum class Kind {
    kWait,
    kFit,
    kDone,
    kEvaluate,
    kStatistics,
    kSecAggAdvertise,
    kSecAggShare,
    kSecAggMaskedInput,
    kSecAggConsistency,
    kSecAggUnmask,
  };
  Kind kind = Kind::kWait;
  int64_t run_id = 0;
  int32_t round = 0;
  std::string task_id;
  std::string message;      // kDone: why the run ended; otherwise informative
  bool run_failed = false;  // kDone: the run failed (false: finished)

  // kFit, kEvaluate, kSecAggMaskedInput (and kSecAggAdvertise when the server names the model):
  // what to train and from which model. `config.secure_aggregation` is set for the kSecAgg*
  // kinds.
  FitConfig config;
  bool has_spec = false;                         // the server named the model's tensors
  absl::StatusOr<ModelSpec> spec = ModelSpec{};  // what it named, or why that is unusable
  int64_t model_bytes = 0;
  std::string model_sha256;
  // kFit: the encoding the update must come in; nullopt: one this SDK does not know (named in
  // `encoding_name`, and the task is declined).
  std::optional<UpdateEncoding> update_encoding = UpdateEncoding::kFloat32;
  std::string encoding_name;
  // The federation's feature statistics (empty: none), and the rows behind them.
  ColumnStats feature_statistics;
  int64_t feature_statistics_count = 0;

  // The kSecAgg* kinds. Each field is what the transport could read of the server's message:
  // an error names what was malformed, and the stage that needs the field declines with it.
  int32_t secagg_id = -1;
  absl::StatusOr<SecAggRoundParams> secagg_params = SecAggRoundParams{};
  absl::StatusOr<secagg::KeyDirectory> directory = secagg::KeyDirectory{};  // kSecAggShare
  absl::StatusOr<secagg::ShareBundle> bundle = secagg::ShareBundle{};       // kSecAggMaskedInput
  absl::StatusOr<secagg::SurvivorList> survivors = secagg::SurvivorList{};  // kSecAggConsistency
  absl::StatusOr<secagg::UnmaskRequest> unmask = secagg::UnmaskRequest{};   // kSecAggUnmask
};

// "fit", or the secure-aggregation stage ("secagg_advertise_keys", ...), as TaskReport names it.
std::string StageName(ClientTask::Kind kind);
bool IsSecAgg(ClientTask::Kind kind);

// What a joining site says about itself.
struct JoinRequestInfo {
  std::string client_name;
  std::vector<std::string> capabilities;
  std::optional<ModelSpec> model_spec;       // the trainer's; nullopt: none sent
  std::vector<std::string> feature_columns;  // empty: none sent
  std::string feature_schema_sha256;
  bool dry_run = false;  // preflight: checked, not registered
};

struct JoinAnswer {
  std::string client_id;
  int64_t run_id = 0;
};

// The header of an update (or a masked input), sent before its payload.
struct UpdateHeader {
  int64_t run_id = 0;
  int32_t round = 0;
  std::string task_id;
  int64_t num_examples = 0;
  std::map<std::string, double> metrics;
  std::optional<ModelSpec> spec;
  using Encoding = PayloadEncoding;
  Encoding encoding = Encoding::kFloat32;
  int64_t payload_bytes = 0;
};

// The payload's chunk that starts at `offset` (1 to kMaxChunkBytes bytes, a multiple of 8 except
// the last; valid until the next call).
using ChunkSource = std::function<std::span<const std::byte>(int64_t offset)>;

// An evaluation (or, for kStatistics, the feature sums) of a task's model.
struct EvaluationReply {
  int64_t run_id = 0;
  int32_t round = 0;
  std::string task_id;
  int64_t num_examples = 0;
  double loss = 0;
  std::map<std::string, double> metrics;
  std::string error;  // non-empty: this client could not evaluate
  std::optional<FeatureSums> feature_sums;
  bool share_site_result = false;  // ClientOptions::share_site_evaluation
};

// A client's message in one stage of a secure-aggregation round (exactly one of the bodies, or a
// decline_reason).
struct SecAggReply {
  int64_t run_id = 0;
  int32_t round = 0;
  std::string task_id;
  ClientTask::Kind stage = ClientTask::Kind::kWait;
  std::optional<secagg::KeyAdvertisement> keys;
  std::optional<secagg::EncryptedShares> shares;
  std::optional<secagg::SurvivorSignature> survivor_signature;
  std::optional<secagg::UnmaskResponse> unmask;
  std::string decline_reason;
};

// Fills the ids of a reply from the task it answers.
template <typename Reply>
Reply ReplyTo(const ClientTask& task) {
  Reply r;
  r.run_id = task.run_id;
  r.round = task.round;
  r.task_id = task.task_id;
  return r;
}

class Transport {
 public:
  virtual ~Transport() = default;

  virtual absl::StatusOr<JoinAnswer> Join(const JoinRequestInfo& request) = 0;
  // The next task (kWait when none came within `wait`).
  virtual absl::StatusOr<ClientTask> Poll(int64_t run_id, absl::Duration wait) = 0;
  // The global model of a fit, evaluate or masked-input task, of `spec`, checked against the
  // task's size and SHA-256. May share the model with other clients (it is never written).
  virtual absl::StatusOr<std::shared_ptr<const Model>> Download(const ClientTask& task,
                                                                const ModelSpec& spec) = 0;
  // Sends `header` and then its payload as `next_chunk` produces it; OK once the server accepted
  // the update.
  virtual absl::Status SubmitUpdate(const UpdateHeader& header, const ChunkSource& next_chunk) = 0;
  // Tells the server this client will not do `task` (fit or evaluate), with the reason.
  virtual absl::Status Decline(const ClientTask& task, const std::string& reason) = 0;
  virtual absl::Status SubmitEvaluation(const EvaluationReply& reply) = 0;
  virtual absl::Status SubmitSecAgg(const SecAggReply& reply) = 0;
  // Whether the task is still open (false: the server closed it; `message` says why). Any thread.
  virtual absl::StatusOr<bool> Heartbeat(const ClientTask& task, std::string* message) = 0;
  // Whether the loop should send heartbeats while it works on a task (a transport whose server
  // cannot lose sight of the client, such as the in-process one, says no).
  virtual bool wants_heartbeats() const { return true; }
  // Waits up to `d` for the server to become reachable, returning early once it is; false when
  // the transport was cancelled.
  virtual bool WaitForServer(absl::Duration d) = 0;
  // Makes the call in flight, and every later one, end soon with CANCELLED. Any thread.
  virtual void Cancel() = 0;
};

// The gRPC transport to options.server_address: mutual TLS with the site's files (or plaintext
// to a loopback address only). Fills an empty options.name (the certificate's common name, "site"
// in plaintext). INVALID_ARGUMENT for missing TLS paths, plaintext to another host or a
// certificate without a common name; a ReadFile error for a file that cannot be read.
absl::StatusOr<std::unique_ptr<Transport>> MakeGrpcTransport(ClientOptions& options);

// One plaintext connection that many sites' transports share: the server tells them apart by the
// name each call carries (plaintext mode), so thousands of simulated sites need one channel. With
// TLS a site is its certificate, which a connection carries once: there is no such sharing.
class SharedConnection;
// INVALID_ARGUMENT unless options.insecure_plaintext (to a loopback address, as MakeGrpcTransport).
absl::StatusOr<std::shared_ptr<SharedConnection>> MakeSharedConnection(ClientOptions& options);
// A transport for the site `options.name` over `connection`.
absl::StatusOr<std::unique_ptr<Transport>> MakeGrpcTransport(
    ClientOptions& options, std::shared_ptr<SharedConnection> connection);

namespace internal {

// A site's identity in secure aggregation (SecAggParticipant::SetIdentity).
struct SecAggIdentity {
  std::shared_ptr<const secagg::IdentitySigner> signer;
  std::shared_ptr<const secagg::IdentityVerifier> verifier;
};

// The SDK's client over any transport, and its loop one task at a time: for the simulation's
// virtual clients (which a driver runs on a pool only when they have a task) and for tests.
// Its secure-aggregation identity is `identity` when given, else made from the options'
// certificate, key and CA files as Client::Create does (none in plaintext); errors reading
// or parsing those files are returned.
absl::StatusOr<std::unique_ptr<Client>> MakeClient(ClientOptions options, Trainer* trainer,
                                                   std::unique_ptr<Transport> transport,
                                                   SecAggIdentity identity = {});
// Joins (as Client::Run does first). The client's id and run are then set.
absl::Status JoinOnce(Client& client);
// Does one task as Client::Run does after a poll, reporting fit and secure-aggregation stages
// through the client's on_task callback. Returns that task's outcome (OK, the refusal or the
// transport's error); a DONE task records last_run().
absl::Status RunTask(Client& client, const ClientTask& task);

}  // namespace internal
}  // namespace fl::client

#endif  // FL_CLIENT_INTERNAL_TRANSPORT_H_
