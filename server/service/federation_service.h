// The gRPC face of the round engine: a thin, final service that identifies the caller, translates
// protobuf to domain types, calls the engine and maps its Status onto the gRPC status one to one.
//
// Every method is on gRPC's callback API, and every call into the engine or the store runs on
// the service's own `threads` (work_pool.h): a long poll with nothing to do is parked without a
// thread (poll_parking.h), an upload or download holds one only while a message of it is handled
// (update_upload.h, model_download.h), and one that moves nothing for
// limits.stream_idle_timeout is cut (stream_watch.h). Each client may have
// limits.max_streams_per_client calls in progress, of them limits.max_uploads_per_client uploads
// (client_calls.h). DownloadModel streams the global model from pre-serialized chunks shared by
// all clients (model_chunks.h).
#ifndef FL_SERVER_SERVICE_FEDERATION_SERVICE_H_
#define FL_SERVER_SERVICE_FEDERATION_SERVICE_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "fl/common/crypto.h"
#include "fl/server/client_limits.h"
#include "fl/server/engine.h"
#include "fl/server/store.h"
#include "fl/v1/federation.grpc.pb.h"

namespace fl::server {

struct ServiceOptions {
  bool insecure_plaintext = false;
  // Client certificates must chain to the federation CA it holds (null in plaintext).
  std::shared_ptr<const ClientCertificateVerifier> verifier;
  absl::Duration max_poll_wait = absl::Seconds(20);
  // What a client's text and maps may hold (fl/server/client_limits.h).
  ClientInputLimits limits;
  // Threads that run the calls into the engine and the store (work_pool.h).
  int32_t threads = 8;
};

// The engine of the server's current run, or null between runs (a server that stays up and has
// none queued). Each call takes it once and keeps it to its end, so a call in flight when the
// server moves to the next run finishes on the engine it began with.
using EngineSource = std::function<std::shared_ptr<RoundEngine>()>;

// Between runs, Join answers run 0 and PollTask DONE, so that sites wait for the next run; a
// poll for a run that is over (the server has gone on to another) is answered DONE for it.
std::unique_ptr<grpc::Service> MakeFederationService(ServiceOptions options, EngineSource engines,
                                                     Store* store);

}  // namespace fl::server

#endif  // FL_SERVER_SERVICE_FEDERATION_SERVICE_H_
