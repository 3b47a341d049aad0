// The engine with secure aggregation: fake sites drive real fl::secagg::ClientSession objects
// through the engine's API (Poll, SubmitSecAgg, BeginUpload with masked words in chunks, as the
// service would), with a fake clock and a real SQLite store. A dropout is a site that stops
// answering at a stage; the clock then passes the stage's deadline.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "fl/aggregation/dp/gaussian_noise.h"
#include "fl/aggregation/dp/rdp_accountant.h"
#include "fl/aggregation/scaffold.h"
#include "fl/aggregation/secagg/protocol.h"
#include "fl/aggregation/secagg/quantization.h"
#include "fl/common/crypto.h"
#include "gmock/gmock.h"
#include "nlohmann/json.hpp"
#include "server/service/secagg_serde.h"
#include "tests/unit/engine_test_fixture.h"

namespace fl::server {
namespace {

using ::fl::secagg::ClientSession;

// 1000 parameters: small enough that a round of 10 sites takes milliseconds.
ModelSpec SmallSpec() { return ModelSpec({{"w", {10, 99}}, {"b", {10}}}); }
constexpr int kStages = 4;  // advertise, share, masked input, unmask
constexpr int kNoStop = kStages;

struct Site {
  std::string id;
  int index = 0;
  int64_t examples = 1;
  int stop_at = kNoStop;  // the stage (0..3) at which it stops answering
  std::string task_id;
  std::unique_ptr<ClientSession> session;
  std::vector<secagg::Key32> public_keys;  // every key it advertised
  std::vector<secagg::Bytes> ciphertexts;  // every share ciphertext it sent
  std::set<std::string> uploaded;          // task ids whose masked input it sent
};

int StageOf(Task::Kind kind) {
  switch (kind) {
    case Task::Kind::kSecAggAdvertise:
      return 0;
    case Task::Kind::kSecAggShare:
      return 1;
    case Task::Kind::kSecAggMaskedInput:
      return 2;
    case Task::Kind::kSecAggUnmask:
      return 3;
    default:
      return -1;
  }
}

class EngineSecAggTest : public EngineTest {
 protected:
  void SetUp() override {
    EngineTest::SetUp();
    options_.num_rounds = 1;
    options_.min_clients = 10;
    options_.min_fit_clients = 5;
    options_.max_round_retries = 1;
    options_.client_timeout = absl::Hours(10);  // dropouts come from the stage deadlines
    options_.wait_timeout = absl::Hours(100);
    options_.secure_aggregation.enabled = true;
    options_.secure_aggregation.clip_range = 1.0;
    options_.secure_aggregation.stage_timeout = absl::Seconds(60);
    hooks_.on_round_end = [this](const RoundSummary& s) { summaries_.push_back(s); };
    clients_.clear();
    for (int i = 0; i < 10; ++i) {
      Site s;
      s.id = absl::StrFormat("site-%02d-%s", i, std::string(20, 'a' + i));
      s.index = i;
      s.examples = i + 1;
      clients_.push_back(s.id);
      sites_.push_back(std::move(s));
    }
  }

  void StartSecure() {
    absl::StatusOr<std::unique_ptr<RoundEngine>> engine =
        RoundEngine::Create(options_, store_.get(), strategy_.get(), &clock_, Model(spec_), hooks_);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
  }

  absl::Status CreateWith(EngineOptions options, aggregation::Strategy* strategy = nullptr) {
    return RoundEngine::Create(std::move(options), store_.get(),
                               strategy ? strategy : strategy_.get(), &clock_, Model(SmallSpec()),
                               hooks_)
        .status();
  }

  // The change a site trains: N(0.1 * index - 0.4, 0.6), so that some coordinates clip at c = 1.
  std::vector<float> ChangeOf(const Site& s, int32_t round) const {
    std::vector<float> d(spec_.NumFloats());
    std::mt19937_64 rng(1000 * s.index + round);
    std::normal_distribution<float> normal(0.1f * s.index - 0.4f, 0.6f);
    for (float& x : d) x = normal(rng);
    return d;
  }

  // Streams masked `words` (little-endian, `word` bytes each) as the site's update for `task`.
  absl::Status UploadWords(const std::string& client, const Task& task,
                           const std::vector<uint64_t>& words, int word,
                           UpdateMeta::Encoding encoding, int64_t examples = 0,
                           int64_t payload_bytes = -1) {
    std::string bytes;
    for (uint64_t w : words) {
      for (int b = 0; b < word; ++b) bytes.push_back(static_cast<char>((w >> (8 * b)) & 0xff));
    }
    UpdateMeta meta;
    meta.run_id = task.run_id;
    meta.round = task.round;
    meta.task_id = task.task_id;
    meta.num_examples = examples;
    meta.payload_bytes = payload_bytes >= 0 ? payload_bytes : static_cast<int64_t>(bytes.size());
    meta.spec = spec_;
    meta.encoding = encoding;
    absl::StatusOr<std::unique_ptr<Upload>> upload = engine_->BeginUpload(client, meta);
    if (!upload.ok()) return upload.status();
    for (size_t off = 0; off < bytes.size(); off += chunk_bytes_) {
      absl::Status s = (*upload)->AddChunk(static_cast<int64_t>(off),
                                           std::string_view(bytes).substr(off, chunk_bytes_));
      if (!s.ok()) return s;
    }
    return (*upload)->Finish(Sha256Hex(bytes));
  }

  SecAggMessage MessageFor(const Task& t) {
    SecAggMessage m;
    m.run_id = t.run_id;
    m.round = t.round;
    m.task_id = t.task_id;
    m.stage = t.kind;
    return m;
  }

  // The site's answer to its task; false when it had nothing to do (or stopped).
  bool Act(Site& site, const Task& t) {
    const int stage = StageOf(t.kind);
    if (stage < 0 || stage >= site.stop_at) return false;
    if (t.task_id != site.task_id) {
      site.task_id = t.task_id;
      site.session.reset();
    }
    SecAggMessage m = MessageFor(t);
    switch (t.kind) {
      case Task::Kind::kSecAggAdvertise: {
        absl::StatusOr<std::unique_ptr<ClientSession>> session = ClientSession::Create(
            t.secagg.params, t.secagg.secagg_id, spec_.NumFloats(),
            secagg::MakeDeterministicRandomSource(std::hash<std::string>()(t.task_id) ^
                                                  (1234567u * site.index)));
        EXPECT_TRUE(session.ok()) << session.status();
        if (!session.ok()) return false;
        site.session = *std::move(session);
        absl::StatusOr<secagg::KeyAdvertisement> keys = site.session->AdvertiseKeys();
        EXPECT_TRUE(keys.ok()) << keys.status();
        site.public_keys.push_back(keys->cipher_public);
        site.public_keys.push_back(keys->mask_public);
        m.keys = *keys;
        break;
      }
      case Task::Kind::kSecAggShare: {
        EXPECT_NE(site.session, nullptr);
        // Its own entry and its neighbours' only: k = n - 1 = 9 here, so everyone's.
        EXPECT_EQ(t.secagg.directory.keys.count(t.secagg.secagg_id), 1u);
        directory_sizes_.push_back(t.secagg.directory.keys.size());
        absl::StatusOr<secagg::EncryptedShares> shares =
            site.session->ShareKeys(t.secagg.directory);
        EXPECT_TRUE(shares.ok()) << shares.status();
        for (const auto& [to, c] : shares->ciphertexts) site.ciphertexts.push_back(c);
        m.shares = *shares;
        break;
      }
      case Task::Kind::kSecAggMaskedInput: {
        EXPECT_NE(site.session, nullptr);
        absl::StatusOr<GlobalModel> global =
            engine_->ModelForTask(site.id, t.run_id, t.round, t.task_id);
        EXPECT_TRUE(global.ok()) << global.status();
        EXPECT_EQ(global->sha256, t.model_sha256);
        std::vector<float> change = ChangeOf(site, t.round);
        const int64_t unit = t.secagg.example_unit;
        uint32_t weight = static_cast<uint32_t>(
            std::clamp<int64_t>((site.examples + unit - 1) / unit, 1, t.secagg.params.max_weight));
        if (t.secagg.dp_noise_stddev > 0) weight = 1;
        absl::StatusOr<secagg::MaskedInput> masked =
            site.session->MaskUpdate(t.secagg.bundle, change, weight);
        EXPECT_TRUE(masked.ok()) << masked.status();
        const bool wide = t.secagg.params.modulus_bits == 64;
        absl::Status s = UploadWords(
            site.id, t, masked->words, wide ? 8 : 4,
            wide ? UpdateMeta::Encoding::kMaskedUint64 : UpdateMeta::Encoding::kMaskedUint32);
        EXPECT_TRUE(s.ok()) << s;
        site.uploaded.insert(t.task_id);
        return true;
      }
      case Task::Kind::kSecAggUnmask: {
        absl::StatusOr<secagg::UnmaskResponse> unmask = site.session->Unmask(t.secagg.unmask);
        EXPECT_TRUE(unmask.ok()) << unmask.status();
        m.unmask = *unmask;
        break;
      }
      default:
        return false;
    }
    absl::Status s = engine_->SubmitSecAgg(site.id, m);
    EXPECT_TRUE(s.ok()) << s;
    return true;
  }

  // Polls every site and lets it answer, passing stage deadlines when nobody has anything to do,
  // until the current attempt ends. Returns its summary.
  RoundSummary DriveAttempt() {
    const size_t before = summaries_.size();
    for (int step = 0; step < 200 && summaries_.size() == before; ++step) {
      bool acted = false;
      for (Site& site : sites_) {
        Task t = engine_->Poll(site.id);
        if (t.kind == Task::Kind::kDone) continue;
        acted |= Act(site, t);
        if (summaries_.size() != before) break;
      }
      if (!acted && summaries_.size() == before) {
        clock_.Advance(std::max(options_.round_timeout, options_.secure_aggregation.stage_timeout) +
                       absl::Seconds(1));
        engine_->Tick();
      }
    }
    EXPECT_GT(summaries_.size(), before) << "the attempt did not end";
    return summaries_.size() > before ? summaries_.back() : RoundSummary{};
  }

  // global + the weighted mean of the survivors' clipped changes.
  std::vector<double> Expected(const Model& global, const std::vector<int>& survivors,
                               int32_t round, bool equal_weights = false) {
    const double c = options_.secure_aggregation.clip_range;
    std::vector<double> sum(global.data().size(), 0.0);
    double total = 0;
    for (int i : survivors) {
      const double w = equal_weights ? 1.0 : static_cast<double>(sites_[i].examples);
      std::vector<float> d = ChangeOf(sites_[i], round);
      for (size_t j = 0; j < d.size(); ++j) sum[j] += w * std::clamp<double>(d[j], -c, c);
      total += w;
    }
    for (size_t j = 0; j < sum.size(); ++j) sum[j] = global.data()[j] + sum[j] / total;
    return sum;
  }

  void ExpectModelNear(const Model& got, const std::vector<double>& want, double tolerance) {
    ASSERT_EQ(got.data().size(), want.size());
    double worst = 0;
    for (size_t j = 0; j < want.size(); ++j) {
      worst = std::max(worst, std::abs(got.data()[j] - want[j]));
    }
    EXPECT_LE(worst, tolerance);
  }

  // The record of (round, attempt); the next attempt may already be running.
  RoundRecord RoundAt(int32_t round, int32_t attempt) {
    absl::StatusOr<std::vector<RoundRecord>> rounds = store_->Rounds(engine_->run_id());
    EXPECT_TRUE(rounds.ok());
    if (!rounds.ok()) return RoundRecord{};
    for (const RoundRecord& r : *rounds) {
      if (r.round == round && r.attempt == attempt) return r;
    }
    ADD_FAILURE() << "no round " << round << " attempt " << attempt;
    return RoundRecord{};
  }

  void ResetStops() {
    for (Site& s : sites_) s.stop_at = kNoStop;
  }

  std::vector<Site> sites_;
  std::vector<RoundSummary> summaries_;
  ModelSpec spec_ = SmallSpec();
  std::vector<size_t> directory_sizes_;  // of every share-keys task answered
  size_t chunk_bytes_ = 1024;            // several chunks per update, each of whole words
};

// 0 %, 10 % and 30 % of 10 sites stop answering at each of the four stages, one round each: every
// round commits global + the example-weighted mean of U3's clipped changes, within one
// quantization step; U3 is who sent a masked input.
TEST_F(EngineSecAggTest, DropoutsAtEveryStageStillCommitTheSurvivorsMean) {
  struct Case {
    int stage;
    int dropped;
  };
  std::vector<Case> cases = {{0, 0}};
  for (int stage = 0; stage < kStages; ++stage) {
    for (int dropped : {1, 3}) cases.push_back({stage, dropped});
  }
  options_.num_rounds = static_cast<int32_t>(cases.size());
  StartSecure();
  JoinAll();
  for (size_t r = 0; r < cases.size(); ++r) {
    SCOPED_TRACE(absl::StrFormat("round %d: %d sites stop at stage %d", r + 1, cases[r].dropped,
                                 cases[r].stage));
    ResetStops();
    // Spread the dropouts: sites 1, 4, 7.
    for (int i = 0; i < cases[r].dropped; ++i) sites_[1 + 3 * i].stop_at = cases[r].stage;
    std::shared_ptr<const Model> before = engine_->global_model();
    const int32_t round = static_cast<int32_t>(r + 1);
    RoundSummary summary = DriveAttempt();
    ASSERT_TRUE(summary.committed) << summary.reason;
    std::vector<int> survivors;
    for (const Site& s : sites_) {
      if (s.stop_at > 2) survivors.push_back(s.index);
    }
    EXPECT_EQ(summary.num_accepted, static_cast<int32_t>(survivors.size()));
    absl::StatusOr<secagg::SecAggParams> params = options_.secure_aggregation.ParamsFor(10, 0);
    ASSERT_TRUE(params.ok());
    ExpectModelNear(*engine_->global_model(), Expected(*before, survivors, round),
                    secagg::QuantizationErrorBound(1.0, params->quantization_bits) + 1e-6);
    // Participations: U3 accepted with their masked upload's bytes; the others dropped, naming
    // the stage.
    absl::StatusOr<std::vector<ParticipationRecord>> parts =
        store_->Participations(engine_->run_id(), round);
    ASSERT_TRUE(parts.ok());
    ASSERT_EQ(parts->size(), 10u);
    for (const ParticipationRecord& p : *parts) {
      const Site& s = *std::find_if(sites_.begin(), sites_.end(),
                                    [&](const Site& x) { return x.id == p.client_id; });
      if (s.stop_at > 2) {
        EXPECT_EQ(p.status, ParticipationStatus::kAccepted) << p.reason;
        EXPECT_EQ(p.bytes_received, (SmallSpec().NumFloats() + 1) * 4);
      } else {
        EXPECT_EQ(p.status, ParticipationStatus::kDropped);
        const char* names[] = {"advertise keys", "share keys", "masked input"};
        EXPECT_THAT(p.reason, ::testing::HasSubstr(absl::StrCat("stage ", names[s.stop_at])));
      }
    }
  }
  EXPECT_TRUE(engine_->finished());
}

// Six of ten sites stop at unmasking: a survivor's self mask has fewer than t = 5 shares, so the
// attempt fails with the library's message (naming the client and the counts); the retry samples
// again with fresh sessions (other public keys) and commits.
TEST_F(EngineSecAggTest, TooManyDropoutsFailTheAttemptAndTheRetryUsesFreshKeys) {
  StartSecure();
  JoinAll();
  for (int i = 0; i < 6; ++i) sites_[i].stop_at = 3;
  RoundSummary failed = DriveAttempt();
  ASSERT_FALSE(failed.committed);
  EXPECT_THAT(failed.reason, ::testing::HasSubstr("of its neighbours revealed shares"));
  EXPECT_THAT(failed.reason, ::testing::HasSubstr("5 needed"));
  RoundRecord rec = RoundAt(1, 0);
  EXPECT_EQ(rec.status, RoundStatus::kFailed);
  nlohmann::json j = nlohmann::json::parse(rec.secagg_json);
  EXPECT_EQ(j["failed_at"], "unmask");
  EXPECT_EQ(j["u3"], 10);
  EXPECT_EQ(j["u4"], 4);

  std::set<secagg::Key32> first_keys;
  for (const Site& s : sites_) first_keys.insert(s.public_keys.begin(), s.public_keys.end());
  ResetStops();
  RoundSummary retry = DriveAttempt();
  ASSERT_TRUE(retry.committed) << retry.reason;
  EXPECT_EQ(retry.attempt, 1);
  for (const Site& s : sites_) {
    ASSERT_EQ(s.public_keys.size(), 4u);
    EXPECT_EQ(first_keys.count(s.public_keys[2]), 0u);
    EXPECT_EQ(first_keys.count(s.public_keys[3]), 0u);
  }
  EXPECT_NE(nlohmann::json::parse(RoundAt(1, 1).secagg_json)["params"]["graph_seed"],
            j["params"]["graph_seed"]);
}

// Too few sites advertise keys (4 < t + 1 = 6): the library refuses at the first close.
TEST_F(EngineSecAggTest, TooFewKeysFailAtTheFirstStage) {
  options_.max_round_retries = 0;
  StartSecure();
  JoinAll();
  for (int i = 0; i < 6; ++i) sites_[i].stop_at = 0;
  RoundSummary failed = DriveAttempt();
  ASSERT_FALSE(failed.committed);
  EXPECT_THAT(failed.reason, ::testing::HasSubstr("only 4 clients advertised keys"));
  EXPECT_TRUE(engine_->finished());
  Task t = engine_->Poll(sites_[0].id);
  EXPECT_EQ(t.kind, Task::Kind::kDone);
}

TEST_F(EngineSecAggTest, RefusesMessagesAndUpdatesByCodeAndMessage) {
  StartSecure();
  JoinAll();
  Site& a = sites_[0];
  Task t = engine_->Poll(a.id);
  ASSERT_EQ(t.kind, Task::Kind::kSecAggAdvertise);
  EXPECT_EQ(t.round, 1);
  EXPECT_EQ(t.secagg.secagg_id, 0);  // sorted client ids
  EXPECT_EQ(t.secagg.params.num_clients, 10);
  EXPECT_EQ(t.secagg.params.num_neighbors, 9);
  EXPECT_EQ(t.secagg.params.threshold, 5);

  // Wrong stage: shares while keys are advertised.
  SecAggMessage wrong = MessageFor(t);
  wrong.stage = Task::Kind::kSecAggShare;
  wrong.shares = secagg::EncryptedShares{};
  absl::Status s = engine_->SubmitSecAgg(a.id, wrong);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("round 1 is at stage advertise keys"));
  // An update before the masked-input stage.
  s = UploadWords(a.id, t, std::vector<uint64_t>(1001, 0), 4, UpdateMeta::Encoding::kMaskedUint32);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("round 1 is at stage advertise keys"));
  // A second message in one stage.
  ASSERT_TRUE(Act(a, t));
  SecAggMessage again = MessageFor(t);
  again.keys = secagg::KeyAdvertisement{};
  s = engine_->SubmitSecAgg(a.id, again);
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
  // Not this client's task.
  SecAggMessage foreign = MessageFor(engine_->Poll(sites_[1].id));
  foreign.keys = secagg::KeyAdvertisement{};
  EXPECT_EQ(engine_->SubmitSecAgg(a.id, foreign).code(), absl::StatusCode::kFailedPrecondition);

  for (size_t i = 1; i < sites_.size(); ++i)
    ASSERT_TRUE(Act(sites_[i], engine_->Poll(sites_[i].id)));
  // Stage 2: site 9 declines; it waits, naming the stage, and its heartbeat says the task is over.
  Task share9 = engine_->Poll(sites_[9].id);
  ASSERT_EQ(share9.kind, Task::Kind::kSecAggShare);
  SecAggMessage decline = MessageFor(share9);
  decline.decline_reason = "disk full";
  EXPECT_TRUE(engine_->SubmitSecAgg(sites_[9].id, decline).ok());
  Task waiting = engine_->Poll(sites_[9].id);
  EXPECT_EQ(waiting.kind, Task::Kind::kWait);
  EXPECT_THAT(waiting.message, ::testing::HasSubstr("dropped from round 1 at stage share keys"));
  EXPECT_THAT(waiting.message, ::testing::HasSubstr("disk full"));
  EXPECT_FALSE(engine_->Heartbeat(sites_[9].id, 1, share9.task_id));
  EXPECT_TRUE(engine_->Heartbeat(sites_[0].id, 1, t.task_id));
  sites_[9].stop_at = 1;
  for (size_t i = 0; i < 9; ++i) ASSERT_TRUE(Act(sites_[i], engine_->Poll(sites_[i].id)));

  // Stage 3: refusals of masked updates (each spends that site's one update).
  Task m1 = engine_->Poll(sites_[1].id);
  ASSERT_EQ(m1.kind, Task::Kind::kSecAggMaskedInput);
  EXPECT_EQ(m1.secagg.bundle.ciphertexts.size(), 8u);  // from the 8 other sharers
  EXPECT_EQ(m1.model_bytes, SmallSpec().NumFloats() * 4);
  {
    UpdateMeta meta;
    meta.run_id = m1.run_id;
    meta.round = 1;
    meta.task_id = m1.task_id;
    meta.num_examples = 5;
    meta.payload_bytes = SmallSpec().NumFloats() * 4;
    absl::StatusOr<std::unique_ptr<Upload>> up = engine_->BeginUpload(sites_[1].id, meta);
    EXPECT_EQ(up.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(up.status().message(),
                ::testing::HasSubstr("round 1 uses secure aggregation; send MASKED_UINT32"));
  }
  Task m2 = engine_->Poll(sites_[2].id);
  s = UploadWords(sites_[2].id, m2, std::vector<uint64_t>(1001, 7), 4,
                  UpdateMeta::Encoding::kMaskedUint32, /*examples=*/3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("must not carry num_examples or metrics in the "
                                                "clear"));
  Task m3 = engine_->Poll(sites_[3].id);
  s = UploadWords(sites_[3].id, m3, std::vector<uint64_t>(1000, 7), 4,
                  UpdateMeta::Encoding::kMaskedUint32);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("1001 words of 4 bytes"));
  // A second update from a refused site.
  s = UploadWords(sites_[3].id, m3, std::vector<uint64_t>(1001, 7), 4,
                  UpdateMeta::Encoding::kMaskedUint32);
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
  for (int i : {1, 2, 3}) sites_[i].stop_at = 2;

  RoundSummary done = DriveAttempt();
  ASSERT_TRUE(done.committed) << done.reason;
  EXPECT_EQ(done.num_accepted, 6);  // sites 0, 4, 5, 6, 7, 8
  absl::StatusOr<std::vector<ParticipationRecord>> parts =
      store_->Participations(engine_->run_id(), 1);
  ASSERT_TRUE(parts.ok());
  std::map<std::string, ParticipationRecord> by_client;
  for (const ParticipationRecord& p : *parts) by_client[p.client_id] = p;
  EXPECT_EQ(by_client[sites_[9].id].status, ParticipationStatus::kRefused);
  EXPECT_THAT(by_client[sites_[9].id].reason,
              ::testing::HasSubstr("dropped at stage share keys: the client declined: disk full"));
  EXPECT_EQ(by_client[sites_[2].id].status, ParticipationStatus::kRefused);
  EXPECT_THAT(by_client[sites_[2].id].reason, ::testing::HasSubstr("stage masked input"));
  absl::StatusOr<std::vector<AuditRecord>> audit = store_->AuditLog(100);
  ASSERT_TRUE(audit.ok());
  std::set<std::string> events;
  for (const AuditRecord& r : *audit) events.insert(r.event);
  EXPECT_TRUE(events.count("task_declined"));
  EXPECT_TRUE(events.count("update_refused"));
  EXPECT_TRUE(events.count("secagg_refused"));
}

// A plain round refuses masked words, naming the encoding.
TEST_F(EngineSecAggTest, PlainRoundRefusesAMaskedUpdate) {
  options_.secure_aggregation.enabled = false;
  StartSecure();
  JoinAll();
  Task t = engine_->Poll(sites_[0].id);
  ASSERT_EQ(t.kind, Task::Kind::kFit);
  absl::Status s = UploadWords(sites_[0].id, t, std::vector<uint64_t>(1001, 1), 4,
                               UpdateMeta::Encoding::kMaskedUint32);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("MASKED_UINT32 is for secure aggregation"));
  SecAggMessage m = MessageFor(engine_->Poll(sites_[1].id));
  m.stage = Task::Kind::kSecAggAdvertise;
  m.keys = secagg::KeyAdvertisement{};
  s = engine_->SubmitSecAgg(sites_[1].id, m);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("does not use secure aggregation"));
}

TEST_F(EngineSecAggTest, SixtyFourBitWordsWork) {
  options_.secure_aggregation.modulus_bits = 64;
  StartSecure();
  JoinAll();
  std::shared_ptr<const Model> before = engine_->global_model();
  RoundSummary summary = DriveAttempt();
  ASSERT_TRUE(summary.committed) << summary.reason;
  absl::StatusOr<secagg::SecAggParams> p = options_.secure_aggregation.ParamsFor(10, 0);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->modulus_bits, 64);
  std::vector<int> all = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  ExpectModelNear(*engine_->global_model(), Expected(*before, all, 1),
                  secagg::QuantizationErrorBound(1.0, p->quantization_bits) + 1e-6);
}

// Distributed DP: tasks carry the clip norm and each site's share of the noise, planned for
// n_min = max(min_fit_clients, floor(0.7 * 10)) = 7 survivors; the round commits with its
// epsilon. Then four sites drop after sharing: 6 < 7 fails the attempt.
TEST_F(EngineSecAggTest, DistributedDpCommitsWithEpsilonAndFailsWithTooFewSurvivors) {
  options_.num_rounds = 2;
  options_.max_round_retries = 0;
  options_.privacy.mode = "distributed";
  options_.privacy.noise_multiplier = 1.0;
  options_.privacy.clip_norm = 2.0;
  StartSecure();
  JoinAll();
  Task t = engine_->Poll(sites_[0].id);
  ASSERT_EQ(t.kind, Task::Kind::kSecAggAdvertise);
  absl::StatusOr<double> stddev = aggregation::dp::DistributedNoiseStddev(1.0, 2.0, 7);
  ASSERT_TRUE(stddev.ok());
  EXPECT_DOUBLE_EQ(t.secagg.dp_noise_stddev, *stddev);
  EXPECT_EQ(t.secagg.dp_clip_norm, 2.0);
  std::shared_ptr<const Model> before = engine_->global_model();
  RoundSummary first = DriveAttempt();
  ASSERT_TRUE(first.committed) << first.reason;
  std::vector<int> all = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  absl::StatusOr<secagg::SecAggParams> p = options_.secure_aggregation.ParamsFor(10, 0);
  ASSERT_TRUE(p.ok());
  ExpectModelNear(*engine_->global_model(), Expected(*before, all, 1, /*equal_weights=*/true),
                  secagg::QuantizationErrorBound(1.0, p->quantization_bits) + 1e-6);
  RoundRecord rec = RoundAt(1, 0);
  absl::StatusOr<aggregation::dp::PrivacySpent> spent =
      aggregation::dp::ComputeEpsilon(1.0, 1.0, 1, options_.privacy.delta);
  ASSERT_TRUE(spent.ok());
  EXPECT_NEAR(rec.dp_epsilon, spent->epsilon, 1e-9);
  EXPECT_EQ(rec.dp_sampling_rate, 1.0);

  for (int i = 0; i < 4; ++i) sites_[i].stop_at = 2;
  RoundSummary second = DriveAttempt();
  ASSERT_FALSE(second.committed);
  EXPECT_EQ(second.reason, "distributed DP: 6 survived, noise planned for 7");
  EXPECT_TRUE(engine_->finished());
}

TEST_F(EngineSecAggTest, RefusesConfigurationsAtCreate) {
  auto refused = [&](EngineOptions o, const std::string& want,
                     aggregation::Strategy* strategy = nullptr) {
    absl::Status s = CreateWith(std::move(o), strategy);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << want;
    EXPECT_THAT(s.message(), ::testing::HasSubstr(want));
  };
  EngineOptions o = options_;
  o.min_clients = 2;
  o.min_fit_clients = 2;
  refused(o, "secure aggregation needs min_clients >= 3");
  std::unique_ptr<aggregation::Strategy> scaffold = aggregation::MakeScaffold({});
  refused(options_, "cannot run strategy 'scaffold'", scaffold.get());
  o = options_;
  o.stop_metric = "train_loss";
  refused(o, "stop_metric 'train_loss' cannot be used with secure aggregation");
  o = options_;
  o.privacy.mode = "central";
  refused(o, "privacy.mode central needs the server to read updates; use distributed");
  o = options_;
  o.secure_aggregation.enabled = false;
  o.privacy.mode = "distributed";
  refused(o, "privacy.mode distributed needs secure aggregation");
  o = options_;
  o.secure_aggregation.threshold = 2;  // k = 9: t <= k/2 gives no privacy
  refused(o, "secure aggregation for 10 clients");
  o = options_;
  o.secure_aggregation.modulus_bits = 48;
  refused(o, "secure_aggregation.modulus_bits must be 32 or 64, got 48");
}

// secagg_json after a round with one dropout at sharing and one at the masked input: the
// parameters, |U1|..|U3|, who dropped where, relayed bytes and their digest; neither it nor the
// SQLite file holds any relayed ciphertext.
TEST_F(EngineSecAggTest, RecordsTheRoundWithoutKeyMaterial) {
  StartSecure();
  JoinAll();
  sites_[3].stop_at = 1;
  sites_[6].stop_at = 2;
  RoundSummary summary = DriveAttempt();
  ASSERT_TRUE(summary.committed) << summary.reason;
  const RoundRecord rec = RoundAt(1, 0);
  nlohmann::json j = nlohmann::json::parse(rec.secagg_json);
  EXPECT_EQ(j["params"]["n"], 10);
  EXPECT_EQ(j["params"]["k"], 9);
  EXPECT_EQ(j["params"]["t"], 5);
  EXPECT_EQ(j["params"]["c"], 1.0);
  EXPECT_EQ(j["params"]["m"], 32);
  EXPECT_EQ(j["params"]["max_weight"], 1000);
  EXPECT_EQ(j["params"]["example_unit"], 1);
  EXPECT_EQ(j["u1"], 10);
  EXPECT_EQ(j["u2"], 9);
  EXPECT_EQ(j["u3"], 8);
  EXPECT_EQ(j["u4"], 8);
  ASSERT_EQ(j["dropped"].size(), 2u);
  EXPECT_EQ(j["dropped"][0]["client"], sites_[3].id.substr(0, 16));
  EXPECT_EQ(j["dropped"][0]["stage"], "share keys");
  EXPECT_EQ(j["dropped"][1]["client"], sites_[6].id.substr(0, 16));
  EXPECT_EQ(j["dropped"][1]["stage"], "masked input");
  EXPECT_THAT(j["dropped"][1]["reason"].get<std::string>(),
              ::testing::HasSubstr("no masked input before the stage closed"));
  int64_t relayed = 0;
  std::vector<secagg::Bytes> sent;
  for (const Site& s : sites_) {
    if (s.stop_at <= 1) continue;
    for (const secagg::Bytes& c : s.ciphertexts) sent.push_back(c);
  }
  // Each of the 9 sharers sent 9 ciphertexts; those to site 3 were not relayed.
  for (size_t i = 0; i < sent.size(); ++i) relayed += static_cast<int64_t>(sent[i].size());
  EXPECT_GT(j["relay_bytes"].get<int64_t>(), 0);
  EXPECT_LT(j["relay_bytes"].get<int64_t>(), relayed);
  EXPECT_EQ(j["relay_sha256"].get<std::string>().size(), 64u);
  // No ciphertext, in raw bytes or hex, in the record or anywhere in the database file.
  engine_.reset();
  store_.reset();
  std::string db;
  for (const char* f : {"/federation.db", "/federation.db-wal"}) {
    std::ifstream in(dir_ + f, std::ios::binary);
    db.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  ASSERT_FALSE(db.empty());
  for (const secagg::Bytes& c : sent) {
    ASSERT_GE(c.size(), 32u);
    const std::string window(c.begin() + 8, c.begin() + 40);
    EXPECT_FALSE(absl::StrContains(db, window));
    EXPECT_FALSE(absl::StrContains(rec.secagg_json, window));
    std::string hex;
    for (uint8_t b : std::string_view(window).substr(0, 16)) {
      absl::StrAppendFormat(&hex, "%02x", b);
    }
    EXPECT_FALSE(absl::StrContains(rec.secagg_json, hex));
    EXPECT_FALSE(absl::StrContains(db, hex));
  }
}

// A run killed mid-way through a secure round (the engine destroyed after the keys were shared)
// aborts that attempt on restart and runs the round again as a new attempt with fresh keys.
TEST_F(EngineSecAggTest, ResumeRerunsAnInterruptedSecureRoundAsANewAttempt) {
  StartSecure();
  JoinAll();
  for (Site& s : sites_) ASSERT_TRUE(Act(s, engine_->Poll(s.id)));  // keys
  for (Site& s : sites_) ASSERT_TRUE(Act(s, engine_->Poll(s.id)));  // shares
  ASSERT_EQ(engine_->Poll(sites_[0].id).kind, Task::Kind::kSecAggMaskedInput);
  engine_.reset();  // killed: nothing of the session survives

  StartSecure();
  JoinAll();
  RoundSummary summary = DriveAttempt();
  ASSERT_TRUE(summary.committed) << summary.reason;
  EXPECT_EQ(summary.round, 1);
  EXPECT_EQ(summary.attempt, 1);
  absl::StatusOr<std::vector<RoundRecord>> rounds = store_->Rounds(engine_->run_id());
  ASSERT_TRUE(rounds.ok());
  ASSERT_EQ(rounds->size(), 2u);
  EXPECT_EQ((*rounds)[0].status, RoundStatus::kAborted);
  EXPECT_EQ((*rounds)[1].status, RoundStatus::kCommitted);
  for (const Site& s : sites_) {
    ASSERT_EQ(s.public_keys.size(), 4u);
    EXPECT_NE(s.public_keys[0], s.public_keys[2]);
  }
}

// Abort (SIGTERM) mid-round records the attempt aborted with its secure-aggregation summary.
TEST_F(EngineSecAggTest, AbortEndsASecureRoundInFlight) {
  StartSecure();
  JoinAll();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Act(sites_[i], engine_->Poll(sites_[i].id)));
  engine_->Abort("server shutting down");
  RoundRecord rec = RoundAt(1, 0);
  EXPECT_EQ(rec.status, RoundStatus::kAborted);
  nlohmann::json j = nlohmann::json::parse(rec.secagg_json);
  EXPECT_EQ(j["u1"], 0);  // stage 1 had not closed
  EXPECT_EQ(engine_->Poll(sites_[0].id).kind, Task::Kind::kWait);
}

// With k = 4 neighbours of 10, a site's share-keys task carries its own keys and its 4
// neighbours', not the whole directory; the round still sums everyone.
TEST_F(EngineSecAggTest, ShareTasksCarryOnlyTheNeighboursKeys) {
  options_.secure_aggregation.num_neighbors = 4;
  StartSecure();
  JoinAll();
  std::shared_ptr<const Model> before = engine_->global_model();
  RoundSummary summary = DriveAttempt();
  ASSERT_TRUE(summary.committed) << summary.reason;
  EXPECT_EQ(directory_sizes_, std::vector<size_t>(10, 5));
  nlohmann::json j = nlohmann::json::parse(RoundAt(1, 0).secagg_json);
  EXPECT_EQ(j["params"]["k"], 4);
  EXPECT_EQ(j["params"]["t"], 3);
  absl::StatusOr<secagg::SecAggParams> p = options_.secure_aggregation.ParamsFor(10, 0);
  ASSERT_TRUE(p.ok());
  ExpectModelNear(*engine_->global_model(), Expected(*before, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 1),
                  secagg::QuantizationErrorBound(1.0, p->quantization_bits) + 1e-6);
}

// A model of 1.2 MB: the masked words arrive in 1 MiB chunks and are folded from the spill in two
// pieces.
TEST_F(EngineSecAggTest, LargeModelFoldsInPieces) {
  spec_ = TestSpec();
  chunk_bytes_ = kMaxChunkBytes;
  options_.min_clients = 3;
  options_.min_fit_clients = 3;
  sites_.resize(3);
  clients_.resize(3);
  StartSecure();
  JoinAll();
  std::shared_ptr<const Model> before = engine_->global_model();
  RoundSummary summary = DriveAttempt();
  ASSERT_TRUE(summary.committed) << summary.reason;
  absl::StatusOr<secagg::SecAggParams> p = options_.secure_aggregation.ParamsFor(3, 0);
  ASSERT_TRUE(p.ok());
  ExpectModelNear(*engine_->global_model(), Expected(*before, {0, 1, 2}, 1),
                  secagg::QuantizationErrorBound(1.0, p->quantization_bits) + 1e-6);
}

// A site silent for client_timeout is dropped as offline (the stage then closes without waiting
// for its deadline); a revoked one as removed; both wait, naming the stage, and are dropped.
TEST_F(EngineSecAggTest, OfflineAndRevokedSitesAreDroppedFromTheOpenStage) {
  options_.client_timeout = absl::Seconds(30);
  StartSecure();
  JoinAll();
  for (Site& s : sites_) ASSERT_TRUE(Act(s, engine_->Poll(s.id)));  // keys
  Task share1 = engine_->Poll(sites_[1].id);
  ASSERT_EQ(share1.kind, Task::Kind::kSecAggShare);
  engine_->ForgetClient(sites_[1].id, "revoked");
  EXPECT_FALSE(engine_->Heartbeat(sites_[1].id, 1, share1.task_id));
  EXPECT_EQ(engine_->ModelForTask(sites_[1].id, share1.run_id, 1, share1.task_id).status().code(),
            absl::StatusCode::kFailedPrecondition);
  for (size_t i = 2; i < sites_.size(); ++i)
    ASSERT_TRUE(Act(sites_[i], engine_->Poll(sites_[i].id)));
  clock_.Advance(absl::Seconds(31));  // site 0 never shared, nor polled; the others keep alive
  for (size_t i = 2; i < sites_.size(); ++i) {
    EXPECT_TRUE(engine_->Heartbeat(sites_[i].id, 1, sites_[i].task_id));
  }
  engine_->Tick();
  Task t = engine_->Poll(sites_[2].id);
  EXPECT_EQ(t.kind, Task::Kind::kSecAggMaskedInput);  // before the stage's 60 s deadline
  Task waiting = engine_->Poll(sites_[0].id);
  EXPECT_EQ(waiting.kind, Task::Kind::kWait);
  EXPECT_THAT(waiting.message, ::testing::HasSubstr("dropped from round 1 at stage share keys: "
                                                    "offline"));
  sites_[0].stop_at = 1;
  sites_[1].stop_at = 1;
  RoundSummary summary = DriveAttempt();
  ASSERT_TRUE(summary.committed) << summary.reason;
  EXPECT_EQ(summary.num_accepted, 8);
  nlohmann::json j = nlohmann::json::parse(RoundAt(1, 0).secagg_json);
  EXPECT_EQ(j["u2"], 8);
  absl::StatusOr<std::vector<AuditRecord>> audit = store_->AuditLog(100);
  ASSERT_TRUE(audit.ok());
  std::set<std::string> events;
  for (const AuditRecord& r : *audit) events.insert(r.event);
  EXPECT_TRUE(events.count("client_offline"));
  EXPECT_TRUE(events.count("client_removed"));
}

// The service's serde: stage tasks to proto, submissions from proto with their size checks.
TEST(SecAggSerdeTest, TranslatesTasksAndRefusesMalformedSubmissions) {
  SecAggTaskInfo info;
  info.params.num_clients = 5;
  info.params.num_neighbors = 4;
  info.params.threshold = 3;
  info.params.graph_seed = 99;
  info.example_unit = 10;
  info.dp_noise_stddev = 0.5;
  info.secagg_id = 2;
  info.directory.keys[2].cipher_public.fill(7);
  info.bundle.ciphertexts[4] = {1, 2, 3};
  info.unmask.survivors = {0, 2};
  info.unmask.dropped = {4};
  fl::v1::SecAggTask task;
  SecAggTaskToProto(info, &task);
  EXPECT_EQ(task.params().num_clients(), 5);
  EXPECT_EQ(task.params().graph_seed(), 99u);
  EXPECT_EQ(task.params().example_unit(), 10);
  EXPECT_EQ(task.params().dp_noise_stddev(), 0.5);
  EXPECT_EQ(task.secagg_id(), 2);
  ASSERT_EQ(task.directory_size(), 1);
  EXPECT_EQ(task.directory(0).cipher_public(), std::string(32, '\x07'));
  ASSERT_EQ(task.bundle_size(), 1);
  EXPECT_EQ(task.bundle(0).peer(), 4);
  EXPECT_EQ(task.bundle(0).ciphertext(), std::string("\x01\x02\x03", 3));
  EXPECT_EQ(task.survivors_size(), 2);
  EXPECT_EQ(task.dropped(0), 4);
  EXPECT_EQ(ToProtoKind(Task::Kind::kSecAggUnmask), fl::v1::Task::SECAGG_UNMASK);

  fl::v1::SecAggSubmission sub;
  sub.set_run_id(1);
  sub.set_round(3);
  sub.set_task_id("r3.a0.x");
  sub.set_stage(fl::v1::Task::SECAGG_ADVERTISE_KEYS);
  sub.mutable_keys()->set_cipher_public(std::string(32, 'c'));
  sub.mutable_keys()->set_mask_public(std::string(31, 'm'));
  absl::StatusOr<SecAggMessage> m = SecAggMessageFromProto(sub);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), ::testing::HasSubstr("keys.mask_public must be 32 bytes"));
  sub.mutable_keys()->set_mask_public(std::string(32, 'm'));
  m = SecAggMessageFromProto(sub);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->stage, Task::Kind::kSecAggAdvertise);
  EXPECT_EQ(m->keys->mask_public[0], 'm');
  EXPECT_EQ(m->keys->client, -1);

  sub.set_stage(fl::v1::Task::SECAGG_UNMASK);
  fl::v1::SecAggShare* share = sub.mutable_unmask()->add_self_seed_shares();
  share->set_owner(1);
  share->set_x(3);
  for (int i = 0; i < secagg::kShamirPieces - 1; ++i) share->add_y(i);
  m = SecAggMessageFromProto(sub);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), ::testing::HasSubstr("self_seed_shares of owner 1 has 4 y"));
  share->add_y(9);
  m = SecAggMessageFromProto(sub);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->unmask->self_seed_shares.at(1).y[4], 9u);

  sub.set_stage(fl::v1::Task::FIT);
  EXPECT_EQ(SecAggMessageFromProto(sub).status().code(), absl::StatusCode::kInvalidArgument);
  sub.set_stage(fl::v1::Task::SECAGG_SHARE_KEYS);
  sub.clear_body();
  EXPECT_EQ(SecAggMessageFromProto(sub).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fl::server
