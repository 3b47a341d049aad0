#include "server/service/service_core.h"

#include "absl/strings/str_cat.h"
#include "fl/wire/proto_serde.h"

namespace fl::server {

absl::StatusOr<ServiceCore::Caller> ServiceCore::Enter(grpc::ServerContextBase* ctx, bool upload) {
  Caller caller;
  caller.engine = engines();
  absl::StatusOr<std::string> id = identity.Identify(ctx, caller.engine.get());
  if (!id.ok()) return id.status();
  caller.id = *std::move(id);
  bool audit = false;
  absl::StatusOr<ClientCalls::Lease> lease = calls.Open(caller.id, upload, &audit);
  if (!lease.ok()) {
    if (audit)
      identity.AuditRefusal(caller.engine.get(), caller.id, "quota_refused", lease.status());
    return lease.status();
  }
  caller.lease = *std::move(lease);
  return caller;
}

absl::Status NoRunActive() {
  return absl::FailedPreconditionError(
      "no run is active on this server: it waits for the next one (fl run submit); join again");
}

grpc::Status ServiceBusy() {
  return ToGrpcStatus(absl::ResourceExhaustedError(absl::StrCat(
      "the server is busy: ", ServiceCore::kMaxQueuedCalls,
      " calls wait for its threads; try again shortly (or raise server.service_threads)")));
}

}  // namespace fl::server
