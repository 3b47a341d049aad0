// DownloadModel's reactor: streams the global model of a client's task from the chunk set shared
// by every download of that model (model_chunks.h), one chunk at a time (the next only when the
// previous write is done, so gRPC's flow control holds at most one chunk per client). Its checks
// (the caller's identity and quota, the task) run on the service's threads; a client that stops
// reading is cut after limits.stream_idle_timeout (stream_watch.h), and the cut audited.
#ifndef FL_SERVER_SERVICE_MODEL_DOWNLOAD_H_
#define FL_SERVER_SERVICE_MODEL_DOWNLOAD_H_

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "server/service/service_core.h"

namespace fl::server {

// Starts the download `request` (a serialized fl.v1.DownloadRequest) asks for. gRPC owns the
// reactor and hands it back in OnDone, where it is destroyed.
grpc::ServerWriteReactor<grpc::ByteBuffer>* StartModelDownload(ServiceCore* core,
                                                               grpc::CallbackServerContext* ctx,
                                                               const grpc::ByteBuffer* request);

}  // namespace fl::server

#endif  // FL_SERVER_SERVICE_MODEL_DOWNLOAD_H_
