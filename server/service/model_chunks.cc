#include "server/service/model_chunks.h"

#include <algorithm>
#include <array>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "grpcpp/support/slice.h"

namespace fl::server {
namespace {

// Wire tags of fl.v1.ModelChunk (proto/fl/v1/federation.proto): (field number << 3) | wire type.
constexpr uint8_t kOffsetTag = (1 << 3) | 0;  // int64 offset = 1 (varint)
constexpr uint8_t kDataTag = (2 << 3) | 2;    // bytes data = 2 (length-delimited)
constexpr uint8_t kSha256Tag = (3 << 3) | 2;  // string sha256 = 3 (length-delimited)

// Appends `v` as a protobuf base-128 varint (an int64 field's value is its two's complement as
// uint64, so non-negative values encode the same either way).
void PutVarint(uint64_t v, std::string& out) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// A slice that points at `bytes` inside `model` without copying them; the slice owns a reference
// to the model, dropped by gRPC when the last reference to the slice goes.
grpc::Slice PayloadSlice(const std::shared_ptr<const Model>& model,
                         std::span<const std::byte> bytes) {
  using KeepAlive = std::shared_ptr<const Model>;
  auto keep_alive = std::make_unique<KeepAlive>(model);
  // gRPC only reads the bytes; the const_cast is for grpc_slice_new_with_user_data's signature.
  return grpc::Slice(
      const_cast<std::byte*>(bytes.data()), bytes.size(),
      [](void* p) { std::unique_ptr<KeepAlive> owned(static_cast<KeepAlive*>(p)); },
      keep_alive.release());
}

}  // namespace

std::shared_ptr<const ModelChunks> ModelChunks::Build(std::shared_ptr<const Model> model,
                                                      std::string sha256) {
  auto set = std::make_shared<ModelChunks>(PassKey(), std::move(model), std::move(sha256));
  const std::span<const std::byte> payload =
      set->model_ == nullptr ? std::span<const std::byte>() : set->model_->bytes();
  const int64_t size = static_cast<int64_t>(payload.size());
  set->chunks_.reserve(static_cast<size_t>((size + kMaxChunkBytes - 1) / kMaxChunkBytes));
  std::string header;
  for (int64_t offset = 0; offset < size; offset += kMaxChunkBytes) {
    const int64_t n = std::min<int64_t>(kMaxChunkBytes, size - offset);
    // Fields in number order, proto3 defaults (offset 0) omitted, as protobuf serializes them.
    header.clear();
    if (offset != 0) {
      header.push_back(static_cast<char>(kOffsetTag));
      PutVarint(static_cast<uint64_t>(offset), header);
    }
    header.push_back(static_cast<char>(kDataTag));
    PutVarint(static_cast<uint64_t>(n), header);
    std::array<grpc::Slice, 3> slices = {
        grpc::Slice(header.data(), header.size()),
        PayloadSlice(set->model_,
                     payload.subspan(static_cast<size_t>(offset), static_cast<size_t>(n))),
        grpc::Slice()};
    size_t count = 2;
    if (offset + n == size && !set->sha256_.empty()) {
      std::string trailer(1, static_cast<char>(kSha256Tag));
      PutVarint(set->sha256_.size(), trailer);
      trailer += set->sha256_;
      slices[2] = grpc::Slice(trailer.data(), trailer.size());
      count = 3;
    }
    set->chunks_.emplace_back(slices.data(), count);
  }
  return set;
}

std::shared_ptr<const ModelChunks> ModelChunkCache::Get(const std::shared_ptr<const Model>& model,
                                                        const std::string& sha256) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<const ModelChunks> set = current_.lock();
  if (set != nullptr && set->model() == model && set->sha256() == sha256) return set;
  set = ModelChunks::Build(model, sha256);
  current_ = set;
  return set;
}

}  // namespace fl::server
