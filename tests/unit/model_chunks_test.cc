// The shared chunk set DownloadModel serves (server/service/model_chunks.h): byte for byte what
// protobuf would serialize, built once per model, pointing into the model without a copy, and
// keeping the model alive while anything still references it.
#include "server/service/model_chunks.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fl/common/model.h"
#include "fl/v1/federation.pb.h"
#include "grpcpp/support/slice.h"
#include "gtest/gtest.h"

namespace fl::server {
namespace {

// A model of `floats` parameters holding 0, 1, 2, ... (so every chunk's bytes differ).
std::shared_ptr<const Model> CountingModel(int64_t floats) {
  auto model = std::make_shared<Model>(ModelSpec({{"w", {floats}}}));
  std::span<float> data = model->data();
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
  return model;
}

// What DownloadModel sent before the chunk set: one ModelChunk per 1 MiB slice, the SHA-256 on
// the last.
std::vector<v1::ModelChunk> ProtoChunks(const Model& model, const std::string& sha) {
  std::vector<v1::ModelChunk> out;
  std::span<const std::byte> payload = model.bytes();
  for (int64_t offset = 0; offset < static_cast<int64_t>(payload.size());
       offset += kMaxChunkBytes) {
    const int64_t n =
        std::min<int64_t>(kMaxChunkBytes, static_cast<int64_t>(payload.size()) - offset);
    v1::ModelChunk chunk;
    chunk.set_offset(offset);
    chunk.set_data(reinterpret_cast<const char*>(payload.data()) + offset,
                   static_cast<size_t>(n));
    if (offset + n == static_cast<int64_t>(payload.size())) chunk.set_sha256(sha);
    out.push_back(std::move(chunk));
  }
  return out;
}

std::string Bytes(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// The slice of `buffer` that holds the chunk's data (the largest one).
grpc::Slice PayloadSlice(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  grpc::Slice best;
  for (const grpc::Slice& s : slices) {
    if (s.size() > best.size()) best = s;
  }
  return best;
}

void ExpectSameAsProtobuf(int64_t floats) {
  std::shared_ptr<const Model> model = CountingModel(floats);
  const std::string sha = model->Sha256Hex();
  std::shared_ptr<const ModelChunks> set = ModelChunks::Build(model, sha);
  std::vector<v1::ModelChunk> expected = ProtoChunks(*model, sha);
  ASSERT_EQ(set->chunks().size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE(i);
    const std::string wire = Bytes(set->chunks()[i]);
    // Byte-identical to protobuf's own serialization...
    EXPECT_EQ(wire, expected[i].SerializeAsString());
    // ...and so parses back into the same message: offset, data, SHA-256 on the last only.
    v1::ModelChunk parsed;
    ASSERT_TRUE(parsed.ParseFromString(wire));
    EXPECT_EQ(parsed.offset(), static_cast<int64_t>(i) * kMaxChunkBytes);
    EXPECT_EQ(parsed.data(), expected[i].data());
    EXPECT_EQ(parsed.sha256(), i + 1 == expected.size() ? sha : "");
  }
}

TEST(ModelChunksTest, SerializesAsProtobufWhenTheSizeIsNotAMultipleOfTheChunk) {
  // 2.5 MiB + 12 bytes: two full chunks and a short third (offsets as 3- and 4-byte varints).
  ExpectSameAsProtobuf(5 * kMaxChunkBytes / 8 + 3);
}

TEST(ModelChunksTest, SerializesAsProtobufWhenTheModelIsUnderOneChunk) {
  ExpectSameAsProtobuf(7850);  // softmax regression 784 x 10 + 10: one chunk, offset 0 omitted
}

TEST(ModelChunksTest, SerializesAsProtobufForExactlyOneChunk) {
  ExpectSameAsProtobuf(kMaxChunkBytes / 4);
}

TEST(ModelChunksTest, PayloadSlicesPointIntoTheModel) {
  std::shared_ptr<const Model> model = CountingModel(5 * kMaxChunkBytes / 8 + 3);
  std::shared_ptr<const ModelChunks> set = ModelChunks::Build(model, model->Sha256Hex());
  for (size_t i = 0; i < set->chunks().size(); ++i) {
    grpc::Slice payload = PayloadSlice(set->chunks()[i]);
    EXPECT_EQ(static_cast<const void*>(payload.begin()),
              static_cast<const void*>(model->bytes().data() + i * kMaxChunkBytes))
        << "chunk " << i << " copied the model's bytes";
  }
}

TEST(ModelChunksTest, TwoDownloadsOfTheSameModelShareOneSet) {
  ModelChunkCache cache;
  std::shared_ptr<const Model> model = CountingModel(3 * kMaxChunkBytes / 4);
  const std::string sha = model->Sha256Hex();
  std::shared_ptr<const ModelChunks> first = cache.Get(model, sha);
  std::shared_ptr<const ModelChunks> second = cache.Get(model, sha);
  EXPECT_EQ(first, second);
  ASSERT_EQ(first->chunks().size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    // A ByteBuffer copy (what a write hands gRPC) references the same memory: the model's.
    grpc::ByteBuffer in_flight(second->chunks()[i]);
    EXPECT_EQ(static_cast<const void*>(PayloadSlice(in_flight).begin()),
              static_cast<const void*>(model->bytes().data() + i * kMaxChunkBytes));
  }
}

TEST(ModelChunksTest, TheNextModelReplacesTheSetAndNoFinishedSetIsKept) {
  ModelChunkCache cache;
  std::shared_ptr<const Model> round1 = CountingModel(1000);
  std::shared_ptr<const Model> round2 = CountingModel(1000);
  std::shared_ptr<const ModelChunks> set1 = cache.Get(round1, round1->Sha256Hex());
  std::shared_ptr<const ModelChunks> set2 = cache.Get(round2, round2->Sha256Hex());
  EXPECT_NE(set1, set2);
  EXPECT_EQ(set2->model(), round2);
  EXPECT_EQ(cache.Get(round2, round2->Sha256Hex()), set2);  // shared while one streams
  // No download streams round 1's set any more: it goes, and its model with it.
  std::weak_ptr<const Model> watch = round1;
  std::weak_ptr<const ModelChunks> gone = set1;
  set1.reset();
  round1.reset();
  EXPECT_TRUE(gone.expired());
  EXPECT_TRUE(watch.expired()) << "the cache kept a finished round's model";
  // Nor between two downloads of the same model: a later one builds the headers again, over the
  // same memory.
  const void* payload = set2->model()->bytes().data();
  set2.reset();
  std::shared_ptr<const ModelChunks> again = cache.Get(round2, round2->Sha256Hex());
  EXPECT_EQ(static_cast<const void*>(PayloadSlice(again->chunks()[0]).begin()), payload);
}

TEST(ModelChunksTest, TheSetKeepsTheModelAliveAfterTheEngineDropsIt) {
  ModelChunkCache cache;
  std::shared_ptr<const Model> global = CountingModel(3 * kMaxChunkBytes / 8);
  std::weak_ptr<const Model> watch = global;
  std::shared_ptr<const ModelChunks> download = cache.Get(global, global->Sha256Hex());
  global.reset();  // the engine moves to the next round
  EXPECT_FALSE(watch.expired());
  std::shared_ptr<const Model> next = CountingModel(8);
  cache.Get(next, next->Sha256Hex());  // the next round's first download replaces the set
  EXPECT_FALSE(watch.expired()) << "a download still streams the old model";
  // A chunk still in gRPC's hands (a ByteBuffer referencing its slices) outlives the set.
  grpc::ByteBuffer in_transport(download->chunks().back());
  const std::string expected = Bytes(in_transport);
  download.reset();
  ASSERT_FALSE(watch.expired());
  EXPECT_EQ(Bytes(in_transport), expected);
  in_transport.Clear();
  EXPECT_TRUE(watch.expired()) << "the model leaked";
}

TEST(ModelChunksTest, AnEmptyModelHasNoChunks) {
  std::shared_ptr<const ModelChunks> set = ModelChunks::Build(nullptr, "");
  EXPECT_TRUE(set->chunks().empty());
}

}  // namespace
}  // namespace fl::server
