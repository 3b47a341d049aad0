// A round's input (server/engine/round_input.h) on its own, without an engine: what a plain round
// and a secure round take of an update, how they stage and fold it, and what the commit gets.
// The engine tests (engine_test.cc, engine_secagg_test.cc) run both through whole rounds.
#include "server/engine/round_input.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "fl/aggregation/fedavg.h"
#include "fl/aggregation/qfedavg.h"
#include "fl/aggregation/wrappers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/secagg_round.h"
#include "server/engine/upload.h"

namespace fl::server::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::HasSubstr;
using Encoding = UpdateMeta::Encoding;

// Staging in memory; Read fails from the `fail_read_at`-th read on (0: never).
class MemoryStaging final : public StagedUpload {
 public:
  explicit MemoryStaging(int fail_read_at = 0) : fail_read_at_(fail_read_at) {}
  absl::Status Write(int64_t offset, std::span<const std::byte> bytes) override {
    if (bytes_.size() < offset + bytes.size()) bytes_.resize(offset + bytes.size());
    std::memcpy(bytes_.data() + offset, bytes.data(), bytes.size());
    return absl::OkStatus();
  }
  absl::Status Read(int64_t offset, std::span<std::byte> out) const override {
    if (fail_read_at_ > 0 && ++reads_ >= fail_read_at_) {
      return absl::DataLossError("cannot read the staged update: disk gone");
    }
    std::memcpy(out.data(), bytes_.data() + offset, out.size());
    return absl::OkStatus();
  }

 private:
  std::vector<std::byte> bytes_;
  int fail_read_at_;
  mutable int reads_ = 0;
};

std::shared_ptr<const Model> Global(std::vector<float> values) {
  auto m = std::make_shared<Model>(
      ModelSpec({{.name = "w", .shape = {static_cast<int64_t>(values.size())}}}));
  std::copy(values.begin(), values.end(), m->data().begin());
  return m;
}

std::string_view Bytes(const std::vector<float>& v) {
  return {reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)};
}

// An upload of `payload` staged through `input` in wire chunks (kMaxChunkBytes each), as the
// engine's upload does, ready to fold.
std::unique_ptr<UploadState> Staged(const RoundInput& input, std::string_view payload,
                                    int64_t examples, int fail_read_at = 0) {
  auto owned = std::make_unique<UploadState>();
  UploadState& up = *owned;
  up.client_id = "site-a";
  up.num_examples = examples;
  up.staged = std::make_unique<MemoryStaging>(fail_read_at);
  std::vector<float> scratch(input.scratch_values(static_cast<int64_t>(payload.size())));
  for (size_t off = 0; off < payload.size(); off += kMaxChunkBytes) {
    absl::StatusOr<StagedChunk> chunk =
        input.Stage(static_cast<int64_t>(off), payload.substr(off, kMaxChunkBytes), scratch);
    EXPECT_TRUE(chunk.ok()) << chunk.status();
    if (!chunk.ok()) break;
    EXPECT_TRUE(up.staged
                    ->Write(chunk->offset, std::as_bytes(std::span<const char>(chunk->data.data(),
                                                                               chunk->data.size())))
                    .ok());
    up.staged_bytes += static_cast<int64_t>(chunk->data.size());
  }
  return owned;
}

UpdateMeta Meta(Encoding encoding, int64_t payload_bytes, int64_t examples = 10) {
  UpdateMeta meta;
  meta.round = 3;
  meta.num_examples = examples;
  meta.payload_bytes = payload_bytes;
  meta.encoding = encoding;
  return meta;
}

TEST(PlainInputTest, AFloat16ChangeIsStagedAsWeightsAndCommittedAsTheirMean) {
  std::unique_ptr<aggregation::Strategy> fedavg = aggregation::MakeFedAvg();
  std::shared_ptr<const Model> global = Global({1, 2, 3, 4});
  std::unique_ptr<RoundInput> input = MakePlainInput(*fedavg, global, UpdateEncoding::kFloat16);
  EXPECT_EQ(input->value_bytes(), 2);
  std::mt19937_64 rng(1);
  absl::StatusOr<std::vector<std::byte>> change =
      EncodeUpdate(UpdateEncoding::kFloat16, std::vector<float>{0.5f, -0.5f, 0.25f, 0}, rng);
  ASSERT_TRUE(change.ok());
  std::string_view payload(reinterpret_cast<const char*>(change->data()), change->size());
  ASSERT_TRUE(input->CheckUpdate(Meta(Encoding::kFloat16, 8)).ok());

  std::unique_ptr<UploadState> up = Staged(*input, payload, 10);
  EXPECT_EQ(up->staged_bytes, 16);  // four float32 weights, the global model added back
  bool spoiled = true;
  ASSERT_TRUE(input->Fold(*up, spoiled).ok());
  EXPECT_FALSE(spoiled);
  EXPECT_EQ(input->num_accepted(), 1);
  std::optional<Model> state;
  absl::StatusOr<Model> next = input->Finish({}, state);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_THAT(next->data(), ElementsAre(1.5f, 1.5f, 3.25f, 4.0f));
  EXPECT_FALSE(state.has_value());  // FedAvg keeps no server state
  EXPECT_EQ(input->RecordJson(false), "");
  EXPECT_FALSE(input->revealed());
  input->DropModels();
  EXPECT_EQ(input->num_accepted(), 0);
}

TEST(PlainInputTest, RefusesWhatTheRoundDoesNotTakeNamingIt) {
  std::unique_ptr<aggregation::Strategy> fedavg = aggregation::MakeFedAvg();
  std::unique_ptr<RoundInput> input =
      MakePlainInput(*fedavg, Global({0, 0, 0, 0}), UpdateEncoding::kFloat32);
  auto refused = [&](UpdateMeta meta) {
    absl::Status s = input->CheckUpdate(meta);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    return std::string(s.message());
  };
  EXPECT_THAT(refused(Meta(Encoding::kMaskedUint32, 20)),
              HasSubstr("MASKED_UINT32 is for secure aggregation; round 3 is not secure"));
  EXPECT_THAT(refused(Meta(Encoding::kFloat16, 8)), HasSubstr("is not the run's"));
  EXPECT_THAT(refused(Meta(Encoding::kFloat32, 12)),
              HasSubstr("update payload is 12 bytes but the model has 4"));
  EXPECT_THAT(refused(Meta(Encoding::kFloat32, 16, /*examples=*/0)),
              HasSubstr("update claims 0 examples"));
  UpdateMeta nan_metric = Meta(Encoding::kFloat32, 16);
  nan_metric.metrics["loss"] = std::nan("");
  EXPECT_THAT(refused(nan_metric), HasSubstr("update metric 'loss' is not finite"));

  const std::vector<float> bad = {1, 2, std::numeric_limits<float>::infinity(), 4};
  std::vector<float> scratch(input->scratch_values(16));
  absl::StatusOr<StagedChunk> staged = input->Stage(0, Bytes(bad), scratch);
  EXPECT_EQ(staged.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(staged.status().message(), HasSubstr("non-finite value (inf) at parameter 2"));
  // A later chunk names the parameter counted from the model's start.
  const std::vector<float> later = {5, std::nanf("")};
  staged = input->Stage(8, Bytes(later), scratch);
  EXPECT_THAT(staged.status().message(), HasSubstr("non-finite value (nan) at parameter 3"));
}

TEST(PlainInputTest, TheStrategysOwnCheckIsAskedBeforeThePayload) {
  absl::StatusOr<std::unique_ptr<aggregation::Strategy>> qfedavg = aggregation::MakeQFedAvg({});
  ASSERT_TRUE(qfedavg.ok());
  std::unique_ptr<RoundInput> input =
      MakePlainInput(**qfedavg, Global({0, 0}), UpdateEncoding::kFloat32);
  UpdateMeta meta = Meta(Encoding::kFloat32, 8);
  absl::Status s = input->CheckUpdate(meta);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(aggregation::kInitialLossMetric));
  meta.metrics[aggregation::kInitialLossMetric] = 0.7;
  EXPECT_TRUE(input->CheckUpdate(meta).ok());
}

TEST(PlainInputTest, AnInt8ChangeIsDecodedWithItsScaleAndTheGlobalModelAddedBack) {
  std::unique_ptr<aggregation::Strategy> fedavg = aggregation::MakeFedAvg();
  std::unique_ptr<RoundInput> input =
      MakePlainInput(*fedavg, Global({10, 20, 30, 40}), UpdateEncoding::kInt8);
  EXPECT_EQ(input->value_bytes(), 1);
  std::mt19937_64 rng(7);
  absl::StatusOr<std::vector<std::byte>> change =
      EncodeUpdate(UpdateEncoding::kInt8, std::vector<float>{1.27f, -1.27f, 0, 0.5f}, rng);
  ASSERT_TRUE(change.ok());
  EXPECT_TRUE(input->CheckUpdate(Meta(Encoding::kInt8, static_cast<int64_t>(change->size()))).ok());
  std::string_view payload(reinterpret_cast<const char*>(change->data()), change->size());
  std::unique_ptr<UploadState> up = Staged(*input, payload, 10);
  EXPECT_EQ(up->staged_bytes, 16);
  bool spoiled = false;
  ASSERT_TRUE(input->Fold(*up, spoiled).ok());
  std::optional<Model> state;
  absl::StatusOr<Model> next = input->Finish({}, state);
  ASSERT_TRUE(next.ok()) << next.status();
  // int8 rounds stochastically to 1/127 of the largest change: within one step of it.
  EXPECT_THAT(next->data(), ElementsAre(FloatNear(11.27f, 0.011f), FloatNear(18.73f, 0.011f),
                                        FloatNear(30.0f, 0.011f), FloatNear(40.5f, 0.011f)));
}

TEST(PlainInputTest, EachChangeIsClippedToTheStrategysNormBound) {
  absl::StatusOr<std::unique_ptr<aggregation::Strategy>> bounded =
      aggregation::MakeNormBound(aggregation::MakeFedAvg(), 1.0);
  ASSERT_TRUE(bounded.ok());
  std::unique_ptr<RoundInput> input =
      MakePlainInput(**bounded, Global({1, 1, 1, 1}), UpdateEncoding::kFloat32);
  const std::vector<float> weights = {4, 5, 1, 1};  // a change of (3, 4, 0, 0): norm 5
  std::unique_ptr<UploadState> up = Staged(*input, Bytes(weights), 10);
  bool spoiled = true;
  ASSERT_TRUE(input->Fold(*up, spoiled).ok());
  std::optional<Model> state;
  absl::StatusOr<Model> next = input->Finish({}, state);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_THAT(next->data(),
              ElementsAre(FloatNear(1.6f, 1e-6f), FloatNear(1.8f, 1e-6f), 1.0f, 1.0f));
}

TEST(PlainInputTest, AStagingThatFailsMidFoldSpoilsAStreamingAggregateButNotBefore) {
  std::unique_ptr<aggregation::Strategy> fedavg = aggregation::MakeFedAvg();
  // Two pieces of staging: 1 MiB of weights and a few more.
  const size_t n = static_cast<size_t>(kMaxChunkBytes / sizeof(float)) + 3;
  std::unique_ptr<RoundInput> input =
      MakePlainInput(*fedavg, Global(std::vector<float>(n, 0)), UpdateEncoding::kFloat32);
  const std::vector<float> weights(n, 1);

  std::unique_ptr<UploadState> first_read_fails =
      Staged(*input, Bytes(weights), 10, /*fail_read_at=*/1);
  bool spoiled = true;
  absl::Status s = input->Fold(*first_read_fails, spoiled);
  EXPECT_THAT(s.message(), HasSubstr("disk gone"));
  EXPECT_FALSE(spoiled);  // nothing reached the aggregate

  std::unique_ptr<UploadState> second_read_fails =
      Staged(*input, Bytes(weights), 10, /*fail_read_at=*/2);
  s = input->Fold(*second_read_fails, spoiled);
  EXPECT_THAT(s.message(), HasSubstr("disk gone"));
  EXPECT_TRUE(spoiled);  // the first piece is in the sum and cannot come out
  EXPECT_EQ(input->num_accepted(), 0);
}

TEST(PlainInputTest, TheCommitTellsTheStrategyOfTheSitesThatFailed) {
  std::unique_ptr<aggregation::Strategy> strict =
      aggregation::MakeRequireEverySite(aggregation::MakeFedAvg());
  std::unique_ptr<RoundInput> input =
      MakePlainInput(*strict, Global({0, 0}), UpdateEncoding::kFloat32);
  std::unique_ptr<UploadState> up = Staged(*input, Bytes({1, 1}), 10);
  bool spoiled = false;
  ASSERT_TRUE(input->Fold(*up, spoiled).ok());
  std::optional<Model> state;
  const std::vector<aggregation::SiteFailure> failures = {
      {.site = "site-b", .kind = aggregation::SiteFailure::Kind::kDropped, .reason = "silent"}};
  absl::StatusOr<Model> next = input->Finish(failures, state);
  EXPECT_EQ(next.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(next.status().message(), HasSubstr("site-b"));
}

// A secure round with three sites at the masked-input stage, without a session: what it checks
// needs none.
std::unique_ptr<SecAggRound> SecureRound(aggregation::Strategy& strategy, int modulus_bits) {
  auto s = std::make_unique<SecAggRound>(strategy, Global({0, 0, 0, 0}));
  s->params.modulus_bits = modulus_bits;
  s->client_of = {"site-a", "site-b", "site-c"};
  for (int i = 0; i < 3; ++i) s->id_of[s->client_of[i]] = i;
  return s;
}

TEST(SecAggInputTest, TakesOnlyWholeMaskedWordsOfTheRoundsWidthAndNothingInTheClear) {
  std::unique_ptr<aggregation::Strategy> fedavg = aggregation::MakeFedAvg();
  std::unique_ptr<SecAggRound> s = SecureRound(*fedavg, 64);
  const RoundInput& input = *s;
  EXPECT_TRUE(input.CheckUpdate(Meta(Encoding::kMaskedUint64, 40, 0)).ok());  // (4 + 1) x 8
  EXPECT_THAT(input.CheckUpdate(Meta(Encoding::kFloat32, 16, 0)).message(),
              HasSubstr("round 3 uses secure aggregation; send MASKED_UINT64"));
  EXPECT_THAT(input.CheckUpdate(Meta(Encoding::kMaskedUint64, 32, 0)).message(),
              HasSubstr("masked update payload is 32 bytes"));
  EXPECT_THAT(input.CheckUpdate(Meta(Encoding::kMaskedUint64, 40, 10)).message(),
              HasSubstr("must not carry num_examples or metrics in the clear"));
  EXPECT_EQ(input.scratch_values(40), 0u);
  absl::StatusOr<StagedChunk> torn = input.Stage(8, std::string(12, 'x'), {});
  EXPECT_THAT(torn.status().message(),
              HasSubstr("chunk at offset 8 has 12 bytes, not whole 8-byte words"));
  const std::string words(16, 'x');
  absl::StatusOr<StagedChunk> whole = input.Stage(8, words, {});
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->offset, 8);
  EXPECT_EQ(whole->data.data(), words.data());  // staged as it came
}

TEST(SecAggInputTest,
     AMessageWithoutItsBodyIsRefusedAndADroppedSiteStaysDroppedWithItsFirstReason) {
  std::unique_ptr<aggregation::Strategy> fedavg = aggregation::MakeFedAvg();
  std::unique_ptr<SecAggRound> s = SecureRound(*fedavg, 32);
  bool misdirected = true;
  absl::Status refused = s->Receive(0, SecAggMessage{}, misdirected);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.message(), "stage advertise keys takes keys");
  EXPECT_FALSE(misdirected);  // a protocol violation: the engine drops the site
  EXPECT_TRUE(s->answered.empty());

  s->stage = SecAggStage::kMaskedInput;
  refused = s->Receive(0, SecAggMessage{}, misdirected);
  EXPECT_TRUE(misdirected);  // the input comes as an upload: told, not dropped
  EXPECT_THAT(refused.message(), HasSubstr("through SubmitUpdate"));

  EXPECT_EQ(s->DroppedWhy("site-b", 3), std::nullopt);
  s->Drop("site-b", aggregation::SiteFailure::Kind::kDeclined, "the client declined: busy");
  s->Drop("site-b", aggregation::SiteFailure::Kind::kMissing, "no masked input");
  EXPECT_EQ(s->DroppedWhy("site-b", 3),
            "dropped from round 3 at stage masked input: the client declined: busy");
  const std::string failed = s->RecordJson(/*failed=*/true);
  EXPECT_THAT(failed, HasSubstr("\"failed_at\":\"masked input\""));
  EXPECT_THAT(failed, HasSubstr("\"refused\":true"));  // declined counts as refused
  EXPECT_THAT(s->RecordJson(false), ::testing::Not(HasSubstr("failed_at")));
  EXPECT_FALSE(s->revealed());
}

}  // namespace
}  // namespace fl::server::internal
