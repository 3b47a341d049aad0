// A global model's payload as the serialized fl.v1.ModelChunk messages that DownloadModel
// streams, encoded once per model and shared by every download of it.
//
// Each chunk is a grpc::ByteBuffer of two or three slices: a small owned slice holding the
// protobuf wire header (field 1 `offset` unless 0, then the tag and length of field 2 `data`), a
// slice that points into the model's own buffer (no copy; the slice holds a shared_ptr to the
// model, so the model lives as long as any slice of it is referenced, by this set or by gRPC's
// transport), and, on the last chunk only, field 3 `sha256`. The bytes are exactly what
// ModelChunk::SerializeAsString() produces for the same message, so clients read the stream with
// the generated typed reader.
#ifndef FL_SERVER_SERVICE_MODEL_CHUNKS_H_
#define FL_SERVER_SERVICE_MODEL_CHUNKS_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fl/common/model.h"
#include "grpcpp/support/byte_buffer.h"

namespace fl::server {

class ModelChunks {
  struct PassKey {
    explicit PassKey() = default;
  };

 public:
  // Cuts `model`'s payload into chunks of kMaxChunkBytes (the last one shorter); `sha256` (hex, of
  // the payload) rides on the last chunk. An empty payload has no chunks.
  static std::shared_ptr<const ModelChunks> Build(std::shared_ptr<const Model> model,
                                                  std::string sha256);

  // For Build only (std::make_shared needs a public constructor; PassKey is private).
  ModelChunks(PassKey, std::shared_ptr<const Model> model, std::string sha256)
      : model_(std::move(model)), sha256_(std::move(sha256)) {}
  ModelChunks(const ModelChunks&) = delete;
  ModelChunks& operator=(const ModelChunks&) = delete;

  // The serialized messages, in order. A ByteBuffer copy only references the slices, so callers
  // copy one per write; this set is read-only and safe to share between threads.
  const std::vector<grpc::ByteBuffer>& chunks() const { return chunks_; }
  const std::shared_ptr<const Model>& model() const { return model_; }
  const std::string& sha256() const { return sha256_; }

 private:
  std::shared_ptr<const Model> model_;
  std::string sha256_;
  std::vector<grpc::ByteBuffer> chunks_;
};

// The chunk set of the model being served: the first download of a model builds it, and every
// download of that model while one is streaming shares it (the sites of a round download at
// once). The cache only watches the set: it lives, and keeps its model alive, while a download
// streams it, so a committed round's model is never held past its last download (the next
// round's sum would otherwise sit beside it: 4x the model). A download after the set went builds
// a new one: headers only, the payload is never copied. Thread-safe.
class ModelChunkCache {
 public:
  std::shared_ptr<const ModelChunks> Get(const std::shared_ptr<const Model>& model,
                                         const std::string& sha256);

 private:
  std::mutex mu_;
  std::weak_ptr<const ModelChunks> current_;
};

}  // namespace fl::server

#endif  // FL_SERVER_SERVICE_MODEL_CHUNKS_H_
