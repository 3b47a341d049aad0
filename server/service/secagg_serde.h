// Secure aggregation at the transport edge, server side: a stage task's SecAggTaskInfo to the
// proto SecAggTask, and a client's SecAggSubmission to the engine's SecAggMessage. Pure
// functions; thread-safe.
#ifndef FL_SERVER_SERVICE_SECAGG_SERDE_H_
#define FL_SERVER_SERVICE_SECAGG_SERDE_H_

#include "absl/status/statusor.h"
#include "fl/server/engine.h"
#include "fl/v1/federation.pb.h"

namespace fl::server {

// The proto kind of a task kind (WAIT for kinds without one).
fl::v1::Task::Kind ToProtoKind(Task::Kind kind);

void SecAggTaskToProto(const SecAggTaskInfo& info, fl::v1::SecAggTask* out);

// INVALID_ARGUMENT for a stage that is no SECAGG_* kind. A body that cannot be read (missing, a
// key that is not exactly 32 bytes, a share outside the field or without kShamirPieces y values,
// a peer or owner listed twice) is kept, named, in SecAggMessage::malformed: the engine drops
// the client from the round with it (as it does a message the library refuses) rather than wait
// for the stage's deadline. The library structs' `client` fields are left -1 (the engine sets
// them).
absl::StatusOr<SecAggMessage> SecAggMessageFromProto(const fl::v1::SecAggSubmission& in);

}  // namespace fl::server

#endif  // FL_SERVER_SERVICE_SECAGG_SERDE_H_
