// The round engine with float16 and int8 updates (issue 6): rounds commit the global model plus
// the weighted mean of the decoded changes; updates in another encoding, of the wrong size, with
// a NaN scale or an infinite half are refused; the setting survives JSON and is refused with
// secure aggregation.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "fl/common/update_codec.h"
#include "tests/unit/engine_test_fixture.h"

namespace fl::server {
namespace {

// Over one int8 codec chunk, so that updates travel in two codec chunks of every encoding.
ModelSpec BigSpec() { return ModelSpec({{"w", {1000, 1000}}, {"b", {48572 + 1000}}}); }

Model Random(const ModelSpec& spec, uint64_t seed, float stddev) {
  Model m(spec);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, stddev);
  for (float& x : m.data()) x = normal(rng);
  return m;
}

class EngineEncodingTest : public EngineTest {
 protected:
  void StartWith(const std::string& encoding, Model initial) {
    options_.update_encoding = encoding;
    absl::StatusOr<std::unique_ptr<RoundEngine>> engine = RoundEngine::Create(
        options_, store_.get(), strategy_.get(), &clock_, std::move(initial), hooks_);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
    JoinAll();
  }

  UpdateMeta Meta(const Task& task, int64_t examples, UpdateMeta::Encoding e,
                  int64_t payload_bytes) {
    UpdateMeta meta;
    meta.run_id = task.run_id;
    meta.round = task.round;
    meta.task_id = task.task_id;
    meta.num_examples = examples;
    meta.payload_bytes = payload_bytes;
    meta.encoding = e;
    return meta;
  }

  // Streams `payload` in wire chunks of kMaxChunkBytes, as the SDK does.
  absl::Status Stream(const std::string& client, const UpdateMeta& meta,
                      std::span<const std::byte> payload) {
    absl::StatusOr<std::unique_ptr<Upload>> upload = engine_->BeginUpload(client, meta);
    if (!upload.ok()) return upload.status();
    Sha256 sha;
    sha.Update(payload);
    absl::Status s = ForEachChunk(
        payload, kMaxChunkBytes, [&](int64_t offset, std::span<const std::byte> bytes) {
          return (*upload)->AddChunk(
              offset, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
        });
    if (!s.ok()) return s;
    return (*upload)->Finish(sha.FinishHex());
  }

  // One round in which each client sends a random change in `encoding`; checks the commit
  // against global + the weighted mean of what the server decodes.
  void RoundOfChanges(UpdateEncoding encoding, UpdateMeta::Encoding wire) {
    std::shared_ptr<const Model> g = engine_->global_model();
    const Model& global = *g;
    const int64_t n = global.spec().NumFloats();
    const std::vector<double> weights = {100, 300, 600};
    std::vector<double> mean(static_cast<size_t>(n), 0.0);
    std::mt19937_64 rng(11);
    for (size_t c = 0; c < clients_.size(); ++c) {
      Task task = engine_->Poll(clients_[c]);
      ASSERT_EQ(task.kind, Task::Kind::kFit);
      EXPECT_EQ(task.update_encoding, encoding);
      Model delta = Random(global.spec(), 20 + c, 0.01f);
      absl::StatusOr<std::vector<std::byte>> payload = EncodeUpdate(encoding, delta.data(), rng);
      ASSERT_TRUE(payload.ok()) << payload.status();
      ASSERT_EQ(static_cast<int64_t>(payload->size()), EncodedBytes(encoding, n));
      // What the server will decode.
      const int64_t per = ValuesPerChunk(encoding);
      std::vector<float> decoded(static_cast<size_t>(n));
      int64_t offset = 0;
      for (int64_t first = 0; first < n; first += per) {
        const int64_t k = std::min(per, n - first);
        const int64_t bytes = EncodedChunkBytes(encoding, k);
        ASSERT_TRUE(DecodeChunk(encoding,
                                std::span<const std::byte>(*payload).subspan(offset, bytes), first,
                                std::span<float>(decoded).subspan(first, k))
                        .ok());
        offset += bytes;
      }
      for (int64_t i = 0; i < n; ++i) mean[i] += weights[c] / 1000.0 * decoded[i];
      absl::Status s = Stream(
          clients_[c],
          Meta(task, static_cast<int64_t>(weights[c]), wire, static_cast<int64_t>(payload->size())),
          *payload);
      ASSERT_TRUE(s.ok()) << s;
    }
    ASSERT_EQ(engine_->committed_round(), 1);
    std::span<const float> got = engine_->global_model()->data();
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(got[i], global.data()[i] + mean[i], 1e-5) << "parameter " << i;
    }
  }
};

TEST_F(EngineEncodingTest, Float16RoundCommitsGlobalPlusWeightedMeanOfDecodedChanges) {
  StartWith("float16", Random(BigSpec(), 99, 1.f));
  RoundOfChanges(UpdateEncoding::kFloat16, UpdateMeta::Encoding::kFloat16);
}

TEST_F(EngineEncodingTest, Int8RoundCommitsGlobalPlusWeightedMeanOfDecodedChanges) {
  StartWith("int8", Random(BigSpec(), 99, 1.f));
  RoundOfChanges(UpdateEncoding::kInt8, UpdateMeta::Encoding::kInt8);
  // Participations record the bytes that travelled (encoded).
  absl::StatusOr<std::vector<ParticipationRecord>> parts =
      store_->Participations(engine_->run_id(), 1);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 3u);
  for (const ParticipationRecord& p : *parts) {
    EXPECT_EQ(p.bytes_received, EncodedBytes(UpdateEncoding::kInt8, BigSpec().NumFloats()));
  }
}

TEST_F(EngineEncodingTest, RefusesAnotherEncodingAWrongSizeANanScaleAndAnInfiniteHalf) {
  StartWith("int8", Random(TestSpec(), 99, 1.f));
  const int64_t n = TestSpec().NumFloats();
  // A float32 update in an int8 run.
  Task a = engine_->Poll("client-a");
  absl::StatusOr<std::unique_ptr<Upload>> up =
      engine_->BeginUpload("client-a", Meta(a, 1, UpdateMeta::Encoding::kFloat32, 4 * n));
  ASSERT_EQ(up.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(up.status().message().find("FLOAT32"), std::string::npos) << up.status();
  EXPECT_NE(up.status().message().find("INT8"), std::string::npos) << up.status();
  // The wrong size for int8 (a float16-sized payload).
  Task b = engine_->Poll("client-b");
  up = engine_->BeginUpload("client-b", Meta(b, 1, UpdateMeta::Encoding::kInt8, 2 * n));
  ASSERT_EQ(up.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(up.status().message().find(std::to_string(n + 4)), std::string::npos) << up.status();
  // A NaN scale.
  Task c = engine_->Poll("client-c");
  std::vector<std::byte> payload(static_cast<size_t>(n + 4), std::byte{1});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(payload.data(), &nan, 4);
  absl::Status s = Stream("client-c", Meta(c, 1, UpdateMeta::Encoding::kInt8, n + 4), payload);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("scale"), std::string::npos) << s;
  // Every sampled client was refused: the attempt fails and the global model is untouched.
  EXPECT_EQ(engine_->committed_round(), 0);
  absl::StatusOr<std::vector<ParticipationRecord>> parts =
      store_->Participations(engine_->run_id(), 1);
  ASSERT_TRUE(parts.ok());
  ASSERT_FALSE(parts->empty());
  int refused = 0;  // in the first attempt (a retry may have started)
  for (const ParticipationRecord& p : *parts) {
    if (p.attempt == parts->front().attempt) {
      EXPECT_EQ(p.status, ParticipationStatus::kRefused) << p.client_id;
      ++refused;
    }
  }
  EXPECT_EQ(refused, 3);
}

TEST_F(EngineEncodingTest, RefusesAnInfiniteHalfNamingTheParameter) {
  StartWith("float16", Random(TestSpec(), 99, 1.f));
  const int64_t n = TestSpec().NumFloats();
  Task a = engine_->Poll("client-a");
  std::vector<uint16_t> halves(static_cast<size_t>(n), 0x3c00);
  halves[1234] = 0x7c00;
  absl::Status s = Stream("client-a", Meta(a, 1, UpdateMeta::Encoding::kFloat16, 2 * n),
                          std::as_bytes(std::span<const uint16_t>(halves)));
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("parameter 1234"), std::string::npos) << s;
  // An int8 update in a float16 run names both.
  Task b = engine_->Poll("client-b");
  absl::StatusOr<std::unique_ptr<Upload>> up =
      engine_->BeginUpload("client-b", Meta(b, 1, UpdateMeta::Encoding::kInt8, n + 4));
  ASSERT_EQ(up.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(up.status().message().find("INT8"), std::string::npos) << up.status();
  EXPECT_NE(up.status().message().find("FLOAT16"), std::string::npos) << up.status();
}

TEST_F(EngineEncodingTest, AnInt8ChangeThatDecodesToInfinityIsRefused) {
  StartWith("int8", Model(TestSpec()));
  const int64_t n = TestSpec().NumFloats();
  Task a = engine_->Poll("client-a");
  std::vector<std::byte> payload(static_cast<size_t>(n + 4), std::byte{0});
  const float scale = 1e37f;  // finite, but 127 * 1e37 is not
  std::memcpy(payload.data(), &scale, 4);
  payload[4 + 7] = std::byte{127};
  absl::Status s = Stream("client-a", Meta(a, 1, UpdateMeta::Encoding::kInt8, n + 4), payload);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("(inf) at parameter 7"), std::string::npos) << s;
}

TEST_F(EngineEncodingTest, UnknownEncodingAndSecureAggregationAreRefusedAtCreate) {
  options_.update_encoding = "int4";
  absl::StatusOr<std::unique_ptr<RoundEngine>> engine = RoundEngine::Create(
      options_, store_.get(), strategy_.get(), &clock_, Model(TestSpec()), hooks_);
  ASSERT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(engine.status().message().find("int4"), std::string::npos);
  options_.update_encoding = "int8";
  options_.secure_aggregation.enabled = true;
  engine = RoundEngine::Create(options_, store_.get(), strategy_.get(), &clock_, Model(TestSpec()),
                               hooks_);
  ASSERT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(engine.status().message().find("secure aggregation"), std::string::npos)
      << engine.status();
}

TEST_F(EngineEncodingTest, EncodingSurvivesJsonAndAbsentMeansFloat32) {
  EngineOptions o;
  o.update_encoding = "int8";
  absl::StatusOr<EngineOptions> back = EngineOptions::FromJson(o.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->update_encoding, "int8");
  back = EngineOptions::FromJson(R"({"num_rounds": 3})");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->update_encoding, "float32");
}

TEST_F(EngineEncodingTest, AResumedRunKeepsItsEncoding) {
  StartWith("float16", Model(TestSpec()));
  engine_.reset();
  options_.update_encoding = "float32";  // the stored run's configuration wins
  StartEngine();
  JoinAll();
  Task t = engine_->Poll("client-a");
  ASSERT_EQ(t.kind, Task::Kind::kFit);
  EXPECT_EQ(t.update_encoding, UpdateEncoding::kFloat16);
}

}  // namespace
}  // namespace fl::server
