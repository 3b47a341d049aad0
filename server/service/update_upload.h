// SubmitUpdate's reactor: one client's update, read message by message (the metadata first, then
// chunks, then the SHA-256) and handed to the engine's Upload on the service's threads, one
// message at a time, so that a stream costs a thread only while a message of it is handled.
//
// An upload that sends nothing for limits.stream_idle_timeout, or whose round closes while it is
// open, is cut (stream_watch.h): the update is refused with why, audited, and its quota slot and
// buffers freed. Each client may have limits.max_uploads_per_client uploads in progress.
#ifndef FL_SERVER_SERVICE_UPDATE_UPLOAD_H_
#define FL_SERVER_SERVICE_UPDATE_UPLOAD_H_

#include "fl/v1/federation.pb.h"
#include "grpcpp/support/server_callback.h"
#include "server/service/service_core.h"

namespace fl::server {

// Starts reading an update into `reply`. gRPC owns the reactor and hands it back in OnDone,
// where it is destroyed.
grpc::ServerReadReactor<fl::v1::UpdatePart>* StartUpdateUpload(ServiceCore* core,
                                                               grpc::CallbackServerContext* ctx,
                                                               fl::v1::SubmitReply* reply);

}  // namespace fl::server

#endif  // FL_SERVER_SERVICE_UPDATE_UPLOAD_H_
