// What every call of the federation service shares: the options, the run's engine, the store,
// the caller's identity and call quota, the service's threads, the watch over idle streams and
// the parked polls. The service and its stream reactors (model_download.h, update_upload.h) hold
// a pointer to one; it outlives every call (the gRPC server shuts down before it goes).
#ifndef FL_SERVER_SERVICE_SERVICE_CORE_H_
#define FL_SERVER_SERVICE_SERVICE_CORE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "fl/server/engine.h"
#include "fl/server/store.h"
#include "grpcpp/server_context.h"
#include "server/service/caller_identity.h"
#include "server/service/client_calls.h"
#include "server/service/federation_service.h"
#include "server/service/model_chunks.h"
#include "server/service/poll_parking.h"
#include "server/service/stream_watch.h"
#include "server/service/work_pool.h"

namespace fl::server {

struct ServiceCore {
  // Calls waiting for a service thread past which new calls are refused (RESOURCE_EXHAUSTED).
  static constexpr size_t kMaxQueuedCalls = 65536;

  ServiceCore(ServiceOptions options_in, EngineSource engines_in, Store* store_in)
      : options(std::move(options_in)),
        engines(std::move(engines_in)),
        store(store_in),
        identity(options.insecure_plaintext, options.verifier, options.limits, store),
        calls(options.limits),
        pool(options.threads, kMaxQueuedCalls),
        parking(&pool) {}

  // A caller identified and counted against its quota, on the engine it called (null between
  // runs). The lease ends the count when the call ends.
  struct Caller {
    std::shared_ptr<RoundEngine> engine;
    std::string id;
    ClientCalls::Lease lease;
  };
  // Identifies the caller (CallerIdentity::Identify's refusals) and counts the call
  // (ClientCalls::Open's RESOURCE_EXHAUSTED, audited as "quota_refused" at most once a minute per
  // client).
  absl::StatusOr<Caller> Enter(grpc::ServerContextBase* ctx, bool upload);

  const ServiceOptions options;
  const EngineSource engines;
  Store* const store;
  CallerIdentity identity;
  ClientCalls calls;
  ModelChunkCache chunk_cache;
  // Destroyed in reverse: the parked polls and the watch stop before the pool drains.
  WorkPool pool;
  StreamWatch watch;
  PollParking parking;
};

// "The server is busy": a call refused because kMaxQueuedCalls wait for a service thread.
grpc::Status ServiceBusy();
// FAILED_PRECONDITION for a call that needs a run while the server has none (between runs).
absl::Status NoRunActive();

}  // namespace fl::server

#endif  // FL_SERVER_SERVICE_SERVICE_CORE_H_
