// The engine with secure aggregation under test: fake sites that drive real
// fl::secagg::ClientSession objects through the engine's API (Poll, SubmitSecAgg, BeginUpload
// with masked words in chunks, as the service would), with a fake clock and a real SQLite store.
// Shared by engine_secagg_test.cc and engine_ddg_test.cc.
#ifndef FL_TESTS_UNIT_ENGINE_SECAGG_FIXTURE_H_
#define FL_TESTS_UNIT_ENGINE_SECAGG_FIXTURE_H_

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_format.h"
#include "fl/aggregation/secagg/protocol.h"
#include "fl/aggregation/secagg/quantization.h"
#include "fl/common/crypto.h"
#include "gtest/gtest.h"
#include "server/service/secagg_serde.h"
#include "tests/unit/engine_test_fixture.h"

namespace fl::server {

using ::fl::secagg::ClientSession;

// 1000 parameters: small enough that a round of 10 sites takes milliseconds.
inline ModelSpec SmallSpec() { return ModelSpec({{"w", {10, 99}}, {"b", {10}}}); }
constexpr int kStages = 5;  // advertise, share, masked input, consistency, unmask
constexpr int kNoStop = kStages;

struct Site {
  std::string id;
  int index = 0;
  int64_t examples = 1;
  int stop_at = kNoStop;  // the stage (0..4) at which it stops answering
  std::string task_id;
  std::unique_ptr<ClientSession> session;
  std::vector<secagg::Key32> public_keys;  // every key it advertised
  std::vector<secagg::Bytes> ciphertexts;  // every share ciphertext it sent
  std::set<std::string> uploaded;          // task ids whose masked input it sent
  std::optional<float> constant_change;    // every coordinate of its change, else ChangeOf's draw
  bool record = false;                     // keep its last encoding and masked words
  std::vector<uint64_t> encoding;          // what it masked (EncodeWeightedUpdate), when recorded
  std::vector<uint64_t> masked;            // what it uploaded, when recorded
  // A word of its encoding it adds 2^31 to before masking (a malicious site; needs `record`).
  std::optional<size_t> poison_word;
};

inline int StageOf(Task::Kind kind) {
  switch (kind) {
    case Task::Kind::kSecAggAdvertise:
      return 0;
    case Task::Kind::kSecAggShare:
      return 1;
    case Task::Kind::kSecAggMaskedInput:
      return 2;
    case Task::Kind::kSecAggConsistency:
      return 3;
    case Task::Kind::kSecAggUnmask:
      return 4;
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

  // Distributed DP, z = 1 and C = 2, on the secure rounds StartSecure makes.
  void UseDistributedDp() {
    options_.privacy.mode = "distributed";
    options_.privacy.noise_multiplier = 1.0;
    options_.privacy.clip_norm = 2.0;
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
    if (s.constant_change.has_value()) {
      std::fill(d.begin(), d.end(), *s.constant_change);
      return d;
    }
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
      if (off == 0 && after_first_chunk_) after_first_chunk_(client);
    }
    return (*upload)->Finish(Sha256Hex(bytes));
  }

  // The 300,000-float TestSpec (uploads of two 1 MiB chunks) with sites 0..2 only.
  void UseLargeModelAndThreeSites() {
    spec_ = TestSpec();
    chunk_bytes_ = kMaxChunkBytes;
    options_.min_clients = 3;
    options_.min_fit_clients = 3;
    sites_.resize(3);
    clients_.resize(3);
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
        secagg::SessionIdentity identity;
        identity.context = secagg::SessionContext(t.run_id, t.round, t.task_id);
        absl::StatusOr<std::unique_ptr<ClientSession>> session = ClientSession::Create(
            t.secagg.round.secagg, t.secagg.secagg_id, spec_.NumFloats(),
            secagg::MakeDeterministicRandomSource(std::hash<std::string>()(t.task_id) ^
                                                  (1234567u * site.index) ^ key_salt_),
            std::move(identity));
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
        const int64_t unit = t.secagg.round.example_unit;
        uint32_t weight = static_cast<uint32_t>(std::clamp<int64_t>(
            (site.examples + unit - 1) / unit, 1, t.secagg.round.secagg.max_weight));
        if (t.secagg.round.dp_noise_stddev > 0) weight = 1;
        absl::StatusOr<secagg::MaskedInput> masked = absl::UnknownError("not masked");
        if (site.record) {
          // Encoded here, so that the test knows exactly what was masked.
          std::unique_ptr<secagg::RandomSource> rounding =
              secagg::MakeDeterministicRandomSource(77 + site.index);
          absl::StatusOr<std::vector<uint64_t>> encoding =
              secagg::EncodeWeightedUpdate(t.secagg.round.secagg, change, weight, *rounding);
          EXPECT_TRUE(encoding.ok()) << encoding.status();
          if (!encoding.ok()) return false;
          site.encoding = *encoding;
          if (site.poison_word.has_value()) site.encoding[*site.poison_word] += uint64_t{1} << 31;
          masked = site.session->MaskEncodedInput(t.secagg.bundle, site.encoding);
          if (masked.ok()) site.masked = masked->words;
        } else {
          masked = site.session->MaskUpdate(t.secagg.bundle, change, weight);
        }
        EXPECT_TRUE(masked.ok()) << masked.status();
        if (!masked.ok()) return false;
        const bool wide = t.secagg.round.secagg.modulus_bits == 64;
        absl::Status s = UploadWords(
            site.id, t, masked->words, wide ? 8 : 4,
            wide ? UpdateMeta::Encoding::kMaskedUint64 : UpdateMeta::Encoding::kMaskedUint32);
        EXPECT_TRUE(s.ok()) << s;
        site.uploaded.insert(t.task_id);
        return true;
      }
      case Task::Kind::kSecAggConsistency: {
        absl::StatusOr<secagg::SurvivorSignature> signature =
            site.session->SignSurvivors(t.secagg.survivors);
        EXPECT_TRUE(signature.ok()) << signature.status();
        m.survivor_signature = *signature;
        break;
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
  uint64_t key_salt_ = 0;                // mixed into every session's seed: other keys
  // Called by UploadWords after the first chunk of an upload was accepted, with the client's id.
  std::function<void(const std::string&)> after_first_chunk_;
};

}  // namespace fl::server

#endif  // FL_TESTS_UNIT_ENGINE_SECAGG_FIXTURE_H_
