// The engine with secure aggregation: fake sites drive real fl::secagg::ClientSession objects
// through the engine's API (Poll, SubmitSecAgg, BeginUpload with masked words in chunks, as the
// service would), with a fake clock and a real SQLite store. A dropout is a site that stops
// answering at a stage; the clock then passes the stage's deadline.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "fl/aggregation/dp/gaussian_noise.h"
#include "fl/aggregation/dp/rdp_accountant.h"
#include "fl/aggregation/fedavg.h"
#include "fl/aggregation/scaffold.h"
#include "fl/aggregation/secagg/protocol.h"
#include "fl/aggregation/secagg/quantization.h"
#include "fl/common/crypto.h"
#include "gmock/gmock.h"
#include "nlohmann/json.hpp"
#include "server/service/secagg_serde.h"
#include "tests/unit/engine_secagg_fixture.h"
#include "tests/unit/engine_test_fixture.h"

namespace fl::server {
namespace {

// Words as little-endian bytes, `word` bytes each.
std::string LittleEndian(const std::vector<uint64_t>& words, int word) {
  std::string out;
  out.reserve(words.size() * word);
  for (uint64_t w : words) {
    for (int b = 0; b < word; ++b) out.push_back(static_cast<char>((w >> (8 * b)) & 0xff));
  }
  return out;
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Pearson's chi-square statistic of the 256 byte-value counts against the uniform distribution.
double ByteChiSquare(std::string_view bytes) {
  std::vector<double> counts(256, 0.0);
  for (char c : bytes) counts[static_cast<uint8_t>(c)] += 1;
  const double expected = static_cast<double>(bytes.size()) / 256;
  double chi2 = 0;
  for (double n : counts) chi2 += (n - expected) * (n - expected) / expected;
  return chi2;
}

// The upper 1e-6 quantile of chi-square with 255 degrees of freedom: 377.08 (bisection on the
// regularized upper incomplete gamma function Q(127.5, x / 2); Wilson-Hilferty gives 377.2). A
// statistic below it means p > 1e-6.
constexpr double kChiSquare255AtOneInAMillion = 377.0;

double Pearson(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  double ma = 0, mb = 0;
  for (size_t i = 0; i < n; ++i) {
    ma += static_cast<double>(a[i]) / n;
    mb += static_cast<double>(b[i]) / n;
  }
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = static_cast<double>(a[i]) - ma, y = static_cast<double>(b[i]) - mb;
    sab += x * y;
    saa += x * x;
    sbb += y * y;
  }
  return sab / std::sqrt(saa * sbb);
}

// Every 64-byte window of a byte string (at every offset), to look for any of them in a file.
class Windows {
 public:
  static constexpr size_t kSize = 64;
  explicit Windows(std::string bytes) : bytes_(std::move(bytes)) {
    for (size_t off = 0; off + kSize <= bytes_.size(); ++off) {
      set_.insert(std::string_view(bytes_).substr(off, kSize));
    }
  }
  Windows(const Windows&) = delete;
  Windows& operator=(const Windows&) = delete;
  // The first offset of `data` where one of the windows starts, or npos.
  size_t FindIn(std::string_view data) const {
    for (size_t off = 0; off + kSize <= data.size(); ++off) {
      if (set_.count(data.substr(off, kSize)) != 0) return off;
    }
    return std::string_view::npos;
  }

 private:
  std::string bytes_;
  std::unordered_set<std::string_view> set_;
};

// 0 %, 10 % and 30 % of 10 sites stop answering at each of the four stages, one round each: every
// round commits global + the example-weighted mean of U3's clipped changes, within one
// quantization step; U3 is who sent a masked input.
// With secure aggregation the server keeps a federated evaluation only in the aggregate, except
// for a site that allows its own row.
TEST_F(EngineSecAggTest, SiteEvaluationsAreKeptOnlyForSitesThatAllowIt) {
  options_.num_rounds = 2;
  options_.eval_every = 1;
  StartSecure();
  JoinAll();
  ASSERT_TRUE(DriveAttempt().committed);
  for (size_t i = 0; i < sites_.size(); ++i) {
    Task t = engine_->Poll(sites_[i].id);
    ASSERT_EQ(t.kind, Task::Kind::kEvaluate) << sites_[i].id;
    EvaluationReport r;
    r.run_id = t.run_id;
    r.round = 1;
    r.task_id = t.task_id;
    r.num_examples = 10;
    r.loss = 1.0 + static_cast<double>(i);
    r.metrics = {{"accuracy", 0.5}};
    r.share_site_result = i == 0;
    ASSERT_TRUE(engine_->SubmitEvaluation(sites_[i].id, r).ok());
  }
  absl::StatusOr<std::vector<EvaluationRecord>> evals = store_->Evaluations(engine_->run_id());
  ASSERT_TRUE(evals.ok()) << evals.status();
  ASSERT_EQ(evals->size(), 2u);
  EXPECT_EQ((*evals)[0].source, "federated");
  EXPECT_EQ((*evals)[1].source, absl::StrCat(kSiteEvaluationSource, sites_[0].id));
  EXPECT_DOUBLE_EQ((*evals)[1].loss, 1.0);
}

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
// A secure round's decline for a reason the run will not change leaves the site out of the next
// rounds' draws too, as a plain round's does; the round commits with the others.
TEST_F(EngineSecAggTest, ASiteThatDeclinesForGoodIsLeftOutOfTheNextSecureRounds) {
  options_.num_rounds = 2;
  StartSecure();
  JoinAll();
  Site& odd = sites_[3];
  Task advertise = engine_->Poll(odd.id);
  ASSERT_EQ(advertise.kind, Task::Kind::kSecAggAdvertise);
  SecAggMessage decline = MessageFor(advertise);
  decline.decline_reason = "FAILED_PRECONDITION: the site's model has tensor w of shape [3]";
  ASSERT_TRUE(engine_->SubmitSecAgg(odd.id, decline).ok());
  odd.stop_at = 0;
  RoundSummary first = DriveAttempt();
  ASSERT_TRUE(first.committed) << first.reason;
  EXPECT_EQ(first.num_accepted, 9);
  // Round 2: the other nine get their keys task; site 3 is not drawn.
  EXPECT_EQ(engine_->Poll(odd.id).kind, Task::Kind::kWait);
  EXPECT_EQ(engine_->Poll(sites_[0].id).kind, Task::Kind::kSecAggAdvertise);
  RoundSummary second = DriveAttempt();
  ASSERT_TRUE(second.committed) << second.reason;
  EXPECT_EQ(second.num_accepted, 9);
  absl::StatusOr<std::vector<AuditRecord>> audit = store_->AuditLog(1000);
  ASSERT_TRUE(audit.ok());
  int excluded = 0;
  for (const AuditRecord& r : *audit) excluded += r.event == "client_excluded" ? 1 : 0;
  EXPECT_EQ(excluded, 1);
}

TEST_F(EngineSecAggTest, TooManyDropoutsFailTheAttemptAndTheRetryUsesFreshKeys) {
  StartSecure();
  JoinAll();
  for (int i = 0; i < 6; ++i) sites_[i].stop_at = 4;
  RoundSummary failed = DriveAttempt();
  ASSERT_FALSE(failed.committed);
  EXPECT_THAT(failed.reason, ::testing::HasSubstr("of its neighbours revealed shares"));
  EXPECT_THAT(failed.reason, ::testing::HasSubstr("5 needed"));
  RoundRecord rec = RoundAt(1, 0);
  EXPECT_EQ(rec.status, RoundStatus::kFailed);
  nlohmann::json j = nlohmann::json::parse(rec.secagg_json);
  EXPECT_EQ(j["failed_at"], "unmask");
  EXPECT_EQ(j["u3"], 10);
  EXPECT_EQ(j["signed"], 10);
  EXPECT_EQ(j["u4"], 4);
  // The graph's risks are recorded: every pair of 10 with t = 5 above the 3 colluders exposes no
  // site, and with 3 of 10 dropping (max_dropout 0.3) 6 live neighbours remain for t = 5.
  EXPECT_EQ(j["params"]["corrupt_fraction"], 1.0 / 3);
  EXPECT_EQ(j["params"]["privacy_risk"], 0.0);
  EXPECT_EQ(j["params"]["stall_risk"], 0.0);

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

// A strategy whose rounds cannot finish (as when the next model cannot be made or stored).
class UnfinishableStrategy final : public aggregation::Strategy {
 public:
  std::string name() const override { return "unfinishable"; }
  std::unique_ptr<aggregation::RoundAggregator> BeginRound(const Model& global) override {
    class Aggregator final : public aggregation::RoundAggregator {
     public:
      void Fold(int64_t, std::span<const float>, double) override {}
      void Accept(double) override { ++accepted_; }
      int num_accepted() const override { return accepted_; }
      absl::StatusOr<Model> Finish() override {
        return absl::InternalError("cannot write the next model (test)");
      }

     private:
      int accepted_ = 0;
    };
    return std::make_unique<Aggregator>();
  }
};

// Once the survivors' sum is unmasked the attempt commits or the run ends: a retry from the same
// model over other sites would let the difference of two sums reveal one site's update. Retries
// are left (max_round_retries = 1), yet the run fails at once, saying why.
TEST_F(EngineSecAggTest, ASumUnmaskedButNotCommittedEndsTheRunInsteadOfARetry) {
  strategy_ = std::make_unique<UnfinishableStrategy>();
  StartSecure();
  JoinAll();
  RoundSummary failed = DriveAttempt();
  ASSERT_FALSE(failed.committed);
  EXPECT_THAT(failed.reason, ::testing::HasSubstr("cannot write the next model (test)"));
  EXPECT_TRUE(engine_->finished());
  absl::StatusOr<std::optional<RunRecord>> active = store_->ActiveRun();
  ASSERT_TRUE(active.ok());
  EXPECT_FALSE(active->has_value()) << "the run must not be resumable";
  absl::StatusOr<std::vector<RunRecord>> runs = store_->Runs();
  ASSERT_TRUE(runs.ok() && runs->size() == 1u);
  EXPECT_EQ(runs->front().status, RunStatus::kFailed);
  EXPECT_THAT(runs->front().reason,
              ::testing::HasSubstr("the secure sum was unmasked but could not be committed"));
  EXPECT_EQ(RoundAt(1, 0).status, RoundStatus::kFailed);
  Task t = engine_->Poll(sites_[0].id);
  EXPECT_EQ(t.kind, Task::Kind::kDone);
}

// One site masks a word far outside what quantization gives: the checks after unmasking refuse
// the sum, but the server has held it. The run stops (no second sum over other sites from the
// same model), the release is counted by the accountant and recorded with the round, and no
// message carries a value of the sum.
TEST_F(EngineSecAggTest, AnOutOfRangeSumIsRefusedCountedAndNeverUnmaskedTwice) {
  options_.num_rounds = 3;
  UseDistributedDp();
  StartSecure();
  JoinAll();
  sites_[3].record = true;
  sites_[3].poison_word = 5;
  RoundSummary failed = DriveAttempt();
  ASSERT_FALSE(failed.committed);
  EXPECT_THAT(failed.reason,
              ::testing::HasSubstr("the unmasked sum is out of range at coordinate 5"));
  EXPECT_TRUE(engine_->finished());
  absl::StatusOr<std::vector<RunRecord>> runs = store_->Runs();
  ASSERT_TRUE(runs.ok() && runs->size() == 1u);
  EXPECT_EQ(runs->front().status, RunStatus::kFailed);
  EXPECT_THAT(runs->front().reason,
              ::testing::HasSubstr("the secure sum was unmasked but could not be committed"));
  absl::StatusOr<aggregation::dp::PrivacySpent> spent =
      aggregation::dp::ComputeEpsilon(1.0, 1.0, 1, options_.privacy.delta);
  ASSERT_TRUE(spent.ok());
  EXPECT_THAT(runs->front().reason, ::testing::HasSubstr(absl::StrCat(
                                        "the release is counted: epsilon ", spent->epsilon)));
  RoundRecord rec = RoundAt(1, 0);
  EXPECT_EQ(rec.status, RoundStatus::kFailed);
  EXPECT_EQ(rec.dp_sampling_rate, 1.0);
  EXPECT_NEAR(rec.dp_epsilon, spent->epsilon, 1e-9);
  // Against the server: ten inputs noised for seven, z = sqrt(10 / 7) for every site.
  absl::StatusOr<aggregation::dp::PrivacySpent> server =
      aggregation::dp::ComputeEpsilon(1.0, std::sqrt(10.0 / 7), 1, options_.privacy.delta);
  ASSERT_TRUE(server.ok());
  EXPECT_NEAR(rec.dp_epsilon_server, server->epsilon, 1e-9);
  EXPECT_EQ(nlohmann::json::parse(rec.secagg_json)["failed_at"], "unmask");
  EXPECT_EQ(nlohmann::json::parse(rec.secagg_json)["revealed"], true);
  absl::StatusOr<std::vector<RoundRecord>> rounds = store_->Rounds(engine_->run_id());
  ASSERT_TRUE(rounds.ok());
  EXPECT_EQ(rounds->size(), 1u) << "no second attempt";
  EXPECT_EQ(engine_->Poll(sites_[0].id).kind, Task::Kind::kDone);
  // What was unmasked is nowhere in the message: no number but the coordinate and the bound.
  EXPECT_THAT(failed.reason, ::testing::ContainsRegex("coordinate 5 \\(outside \\+-[0-9.]+\\)"));
}

// Epsilon of the Gaussian mechanism against one who knows who took part, for a site whose sums had
// noise multipliers z_i: RDP a / 2 * `exposure` (= sum of 1 / z_i^2) at order a, converted as
// Balle et al. 2020 do over Opacus's orders. Derived here, apart from the engine's accountant.
double EpsilonOfExposure(double exposure, double delta) {
  std::vector<double> orders;
  for (int i = 11; i <= 109; ++i) orders.push_back(i / 10.0);
  for (int a = 12; a <= 63; ++a) orders.push_back(a);
  double best = std::numeric_limits<double>::infinity();
  for (double a : orders) {
    best = std::min(
        best, a * exposure / 2 - (std::log(delta) + std::log(a)) / (a - 1) + std::log((a - 1) / a));
  }
  return std::max(0.0, best);
}

// Distributed DP against the server: a sum of u3 inputs noised for n_min = 7 survivors has
// z = sqrt(u3 / 7); the server knows who was in it, so each site's spending composes over its own
// sums without amplification, and the round records the most exposed site's. A restart between
// rounds replays the committed sums from the store.
TEST_F(EngineSecAggTest, EpsilonAgainstTheServerIsTheMostExposedSitesOverItsOwnSums) {
  options_.num_rounds = 3;
  UseDistributedDp();
  StartSecure();
  JoinAll();
  RoundSummary first = DriveAttempt();
  ASSERT_TRUE(first.committed) << first.reason;
  const double delta = options_.privacy.delta;
  EXPECT_NEAR(RoundAt(1, 0).dp_epsilon_server, EpsilonOfExposure(7.0 / 10, delta), 1e-9);
  engine_.reset();  // restarted between rounds

  StartSecure();
  JoinAll();
  sites_[0].stop_at = 2;  // two sites drop before their masked input: 8 summed
  sites_[1].stop_at = 2;
  RoundSummary second = DriveAttempt();
  ASSERT_TRUE(second.committed) << second.reason;
  EXPECT_EQ(second.num_accepted, 8);
  // Attempt 1: the restart aborted the attempt round 1's commit had started.
  const RoundRecord rec = RoundAt(2, 1);
  // Sites 2..9 were in both sums: 7/10 + 7/8.
  EXPECT_NEAR(rec.dp_epsilon_server, EpsilonOfExposure(7.0 / 10 + 7.0 / 8, delta), 1e-9);
  // Round 3, all ten again, without a restart: counted as the commit goes.
  ResetStops();
  RoundSummary third = DriveAttempt();
  ASSERT_TRUE(third.committed) << third.reason;
  EXPECT_NEAR(RoundAt(3, 0).dp_epsilon_server,
              EpsilonOfExposure(7.0 / 10 + 7.0 / 8 + 7.0 / 10, delta), 1e-9);
}

// A server that dies while a secure sum's masks come off, or after the attempt was recorded
// failed but before the run was: the restarted server stops the run instead of running the round
// again from the same model (two sums over different sites).
class EngineSecAggRestartTest : public EngineSecAggTest {
 protected:
  void ExpectTheRestartStopsTheRun(const std::string& secagg_json, bool recorded_failed) {
    StartSecure();
    const int64_t run = engine_->run_id();
    engine_.reset();
    ASSERT_TRUE(store_->BeginRound({.run_id = run, .round = 1, .attempt = 0}).ok());
    ASSERT_TRUE(store_->SetRoundSecAgg(run, 1, 0, secagg_json, {}).ok());
    if (recorded_failed) {
      ASSERT_TRUE(store_->EndRound(run, 1, 0, RoundStatus::kFailed, "out of range", 2).ok());
    }
    StartSecure();  // a running attempt is aborted at resume ("server restarted")
    EXPECT_TRUE(engine_->finished());
    absl::StatusOr<std::vector<RunRecord>> runs = store_->Runs();
    ASSERT_TRUE(runs.ok() && runs->size() == 1u);
    EXPECT_EQ(runs->front().status, RunStatus::kFailed);
    EXPECT_THAT(runs->front().reason,
                ::testing::HasSubstr("round 1 attempt 0: the secure sum was unmasked (or being "
                                     "unmasked when the server stopped) but not committed"));
    JoinAll();
    EXPECT_EQ(engine_->Poll(sites_[0].id).kind, Task::Kind::kDone);
  }
};

TEST_F(EngineSecAggRestartTest, DiedWhileUnmasking) {
  ExpectTheRestartStopsTheRun(R"({"u3":10,"unmasking":true})", /*recorded_failed=*/false);
}

TEST_F(EngineSecAggRestartTest, DiedAfterTheAttemptWasRecordedFailed) {
  ExpectTheRestartStopsTheRun(R"({"u3":10,"revealed":true})", /*recorded_failed=*/true);
}

// With distributed DP, the release the dead server was making is counted when it restarts: the
// users' epsilon of one round of all ten (q = 1, z = 1: RDP a / 2) and, against the server, the
// sum of the eight recorded as summed, noised for n_min = 7 (1 / z^2 = 7 / 8).
TEST_F(EngineSecAggRestartTest, DiedWhileUnmaskingCountsTheRelease) {
  UseDistributedDp();
  StartSecure();
  const int64_t run = engine_->run_id();
  engine_.reset();
  nlohmann::json summed = nlohmann::json::array();
  for (int i = 0; i < 8; ++i) summed.push_back(sites_[i].id);
  const nlohmann::json record = {{"params", {{"n", 10}, {"dp_min_survivors", 7}}},
                                 {"u3", 8},
                                 {"unmasking", true},
                                 {"summed", summed}};
  RoundRecord attempt;
  attempt.run_id = run;
  attempt.round = 1;
  attempt.num_sampled = 10;
  ASSERT_TRUE(store_->BeginRound(attempt).ok());
  ASSERT_TRUE(store_->SetRoundSecAgg(run, 1, 0, record.dump(), {.sampling_rate = 1.0}).ok());
  StartSecure();
  EXPECT_TRUE(engine_->finished());
  absl::StatusOr<std::vector<RunRecord>> runs = store_->Runs();
  ASSERT_TRUE(runs.ok() && runs->size() == 1u);
  EXPECT_EQ(runs->front().status, RunStatus::kFailed);
  EXPECT_THAT(runs->front().reason, ::testing::HasSubstr("; the release is counted: epsilon "));
  const RoundRecord rec = RoundAt(1, 0);
  EXPECT_EQ(rec.status, RoundStatus::kAborted);
  const double delta = options_.privacy.delta;
  EXPECT_NEAR(rec.dp_epsilon, EpsilonOfExposure(1.0, delta), 1e-9);
  EXPECT_NEAR(rec.dp_epsilon_server, EpsilonOfExposure(7.0 / 8, delta), 1e-9);
  EXPECT_EQ(rec.secagg_json, record.dump());  // the record itself stays
}

// FedAvg, calling `on_begin` when a round's aggregation begins: in a secure round, once the
// masks are off (the commit hands the strategy the unmasked mean).
class SpyStrategy final : public aggregation::Strategy {
 public:
  explicit SpyStrategy(std::function<void()> on_begin) : on_begin_(std::move(on_begin)) {}
  std::string name() const override { return "spy"; }
  std::unique_ptr<aggregation::RoundAggregator> BeginRound(const Model& global) override {
    on_begin_();
    return inner_->BeginRound(global);
  }

 private:
  std::function<void()> on_begin_;
  std::unique_ptr<aggregation::Strategy> inner_ = aggregation::MakeFedAvg();
};

// The commit records that the masks are coming off before they do; the attempt's own record
// replaces the marker once it ends.
TEST_F(EngineSecAggTest, TheCommitMarksTheAttemptBeforeTheMasksComeOff) {
  std::string seen_while_unmasked;
  double seen_rate_while_unmasked = 0;
  strategy_ = std::make_unique<SpyStrategy>([&] {
    absl::StatusOr<std::vector<RoundRecord>> rounds = store_->Rounds(engine_->run_id());
    if (rounds.ok() && !rounds->empty()) {
      seen_while_unmasked = rounds->back().secagg_json;
      seen_rate_while_unmasked = rounds->back().dp_sampling_rate;
    }
  });
  UseDistributedDp();
  StartSecure();
  JoinAll();
  sites_[4].stop_at = 2;  // not in the sum
  sites_[6].stop_at = 4;  // in the sum: it stops only at the unmasking
  RoundSummary done = DriveAttempt();
  ASSERT_TRUE(done.committed) << done.reason;
  ASSERT_FALSE(seen_while_unmasked.empty());
  const nlohmann::json marker = nlohmann::json::parse(seen_while_unmasked);
  EXPECT_EQ(marker["unmasking"], true);
  // What a restart needs to count the release: whose inputs the sum holds, and the sampling rate.
  std::vector<std::string> expected;
  for (int i = 0; i < 10; ++i) {
    if (i != 4) expected.push_back(sites_[i].id);
  }
  std::vector<std::string> listed = marker["summed"].get<std::vector<std::string>>();
  std::sort(listed.begin(), listed.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(listed, expected);
  EXPECT_EQ(seen_rate_while_unmasked, 1.0);
  EXPECT_FALSE(nlohmann::json::parse(RoundAt(1, 0).secagg_json).contains("unmasking"));
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
  // Four of the ten are refused before the survivors sign: 6 signers are a majority only with
  // the consistency check sized for no colluding site (with the default third, 7 are needed).
  options_.secure_aggregation.corrupt_fraction = 0;
  StartSecure();
  JoinAll();
  Site& a = sites_[0];
  Task t = engine_->Poll(a.id);
  ASSERT_EQ(t.kind, Task::Kind::kSecAggAdvertise);
  EXPECT_EQ(t.round, 1);
  EXPECT_EQ(t.secagg.secagg_id, 0);  // sorted client ids
  EXPECT_EQ(t.secagg.round.secagg.num_clients, 10);
  EXPECT_EQ(t.secagg.round.secagg.num_neighbors, 9);
  EXPECT_EQ(t.secagg.round.secagg.threshold, 5);

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
  // A client's text is kept to 500 bytes wherever it goes (WAIT messages, records, logs).
  decline.decline_reason = "disk full" + std::string(100000, '!');
  EXPECT_TRUE(engine_->SubmitSecAgg(sites_[9].id, decline).ok());
  Task waiting = engine_->Poll(sites_[9].id);
  EXPECT_EQ(waiting.kind, Task::Kind::kWait);
  EXPECT_THAT(waiting.message, ::testing::HasSubstr("dropped from round 1 at stage share keys"));
  EXPECT_THAT(waiting.message, ::testing::HasSubstr("disk full"));
  EXPECT_THAT(waiting.message, ::testing::HasSubstr("... (truncated)"));
  EXPECT_LT(waiting.message.size(), 700u);
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

// A message whose body the transport could not read (SecAggMessage::malformed) drops its client
// from the round at once, naming why, instead of leaving the stage to wait for its deadline.
TEST_F(EngineSecAggTest, AMalformedMessageDropsItsClientAtOnce) {
  StartSecure();
  JoinAll();
  Site& a = sites_[0];
  Task t = engine_->Poll(a.id);
  ASSERT_EQ(t.kind, Task::Kind::kSecAggAdvertise);
  SecAggMessage bad = MessageFor(t);
  bad.malformed = "SecAggSubmission.keys.cipher_public has 3 bytes, expected 32";
  absl::Status s = engine_->SubmitSecAgg(a.id, bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("cipher_public has 3 bytes"));
  Task after = engine_->Poll(a.id);
  EXPECT_EQ(after.kind, Task::Kind::kWait);
  EXPECT_THAT(after.message,
              ::testing::HasSubstr("dropped from round 1 at stage advertise keys: its advertise "
                                   "keys message could not be read: SecAggSubmission.keys."
                                   "cipher_public has 3 bytes"));
  // The round does not wait for it: the other nine commit.
  a.stop_at = 0;
  RoundSummary round = DriveAttempt();
  ASSERT_TRUE(round.committed) << round.reason;
  EXPECT_EQ(round.num_accepted, 9);
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
  UseDistributedDp();
  StartSecure();
  JoinAll();
  Task t = engine_->Poll(sites_[0].id);
  ASSERT_EQ(t.kind, Task::Kind::kSecAggAdvertise);
  absl::StatusOr<double> stddev = aggregation::dp::DistributedNoiseStddev(1.0, 2.0, 7);
  ASSERT_TRUE(stddev.ok());
  EXPECT_DOUBLE_EQ(t.secagg.round.dp_noise_stddev, *stddev);
  EXPECT_EQ(t.secagg.round.dp_clip_norm, 2.0);
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
  options_.secure_aggregation.corrupt_fraction = 0;  // else t = 4 (3 colluders of 10)
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
  UseLargeModelAndThreeSites();
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

// What the server holds of one site is indistinguishable from uniform, and its update cannot be
// read from anything the server stored. Site 0's change is 0.25 everywhere on a model of 300,000
// floats, so its masked upload (1.2 MB) travels in two 1 MiB chunks:
// - after its first chunk, the spill file the engine wrote mid-stream holds exactly those masked
//   bytes, and their 256 byte counts pass a chi-square test of uniformity (p > 1e-6), which the
//   site's unmasked encoding fails by far;
// - after the round (all four stages) commits, no file under the data directory (the SQLite file
//   and its -wal, spill, checkpoints) holds any 64-byte window of the unmasked encoding;
// - a second run (another store, other keys) masks the same change into words uncorrelated with
//   the first run's (|Pearson| < 5 / sqrt(N)).
TEST_F(EngineSecAggTest, WhatTheServerHoldsOfOneSiteLooksUniformAndHidesItsUpdate) {
  UseLargeModelAndThreeSites();
  Site& site = sites_[0];
  site.constant_change = 0.25f;
  site.record = true;
  std::vector<std::string> part_files;
  std::string spilled;  // the spill file after the first chunk
  after_first_chunk_ = [&](const std::string& client) {
    if (client != site.id) return;
    for (const auto& e : std::filesystem::directory_iterator(options_.spill_dir)) {
      if (e.path().extension() != ".part") continue;
      part_files.push_back(e.path().filename().string());
      spilled = ReadFile(e.path());
    }
  };
  StartSecure();
  JoinAll();
  std::shared_ptr<const Model> before = engine_->global_model();
  // The whole round; site 0's upload is read back mid-stream by after_first_chunk_.
  RoundSummary summary = DriveAttempt();

  // Mid-stream: one spill file (site 0 uploads first), holding the first chunk's masked bytes.
  ASSERT_EQ(part_files.size(), 1u);
  const std::string masked = LittleEndian(site.masked, 4);
  const std::string plain = LittleEndian(site.encoding, 4);
  ASSERT_EQ(masked.size(), (TestSpec().NumFloats() + 1) * 4);
  ASSERT_GT(masked.size(), kMaxChunkBytes);  // two chunks
  ASSERT_GE(spilled.size(), kMaxChunkBytes);
  spilled.resize(kMaxChunkBytes);
  EXPECT_EQ(spilled, masked.substr(0, kMaxChunkBytes));
  const double chi2_stored = ByteChiSquare(spilled);
  const double chi2_plain = ByteChiSquare(std::string_view(plain).substr(0, kMaxChunkBytes));
  RecordProperty("chi2_stored", absl::StrFormat("%.1f", chi2_stored));
  RecordProperty("chi2_unmasked", absl::StrFormat("%.1f", chi2_plain));
  EXPECT_LT(chi2_stored, kChiSquare255AtOneInAMillion);
  EXPECT_GT(chi2_plain, kChiSquare255AtOneInAMillion);  // the test has power

  // All four stages ran and the round committed global + the mean of the three changes.
  ASSERT_TRUE(summary.committed) << summary.reason;
  absl::StatusOr<secagg::SecAggParams> p = options_.secure_aggregation.ParamsFor(3, 0);
  ASSERT_TRUE(p.ok());
  ExpectModelNear(*engine_->global_model(), Expected(*before, {0, 1, 2}, 1),
                  secagg::QuantizationErrorBound(1.0, p->quantization_bits) + 1e-6);

  // After the round: no 64-byte window of the unmasked encoding in any file of the data
  // directory, which holds the database, its -wal, the spill and the checkpoints.
  const Windows windows(plain);
  ASSERT_NE(windows.FindIn("xyz" + plain.substr(1000, 100)), std::string_view::npos);
  for (const std::string& d : {options_.spill_dir, store_->checkpoint_dir(), store_->db_path()}) {
    EXPECT_TRUE(absl::StartsWith(d, dir_ + "/")) << d;
  }
  std::set<std::string> scanned;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir_)) {
    if (!e.is_regular_file()) continue;
    const std::string bytes = ReadFile(e.path());
    EXPECT_EQ(windows.FindIn(bytes), std::string_view::npos)
        << e.path() << " holds 64 bytes of site 0's unmasked encoding";
    scanned.insert(e.path().string());
  }
  EXPECT_EQ(scanned.count(store_->db_path()), 1u);
  EXPECT_EQ(scanned.count(store_->db_path() + "-wal"), 1u);
  EXPECT_TRUE(std::any_of(scanned.begin(), scanned.end(), [&](const std::string& f) {
    return absl::StartsWith(f, store_->checkpoint_dir() + "/");
  }));

  // A second run of the same sites in another store, with other keys.
  const std::vector<uint64_t> first_words = site.masked;
  const secagg::Key32 first_key = site.public_keys.at(0);
  engine_.reset();
  store_.reset();
  std::filesystem::remove_all(dir_);
  dir_ = TempDir();
  std::filesystem::create_directories(dir_ + "/spill");
  options_.spill_dir = dir_ + "/spill";
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  key_salt_ = 0x5eed;
  after_first_chunk_ = nullptr;
  StartSecure();
  JoinAll();
  ASSERT_TRUE(DriveAttempt().committed);
  ASSERT_EQ(site.public_keys.size(), 4u);
  EXPECT_NE(site.public_keys.at(2), first_key);
  ASSERT_EQ(site.masked.size(), first_words.size());
  const double r = Pearson(first_words, site.masked);
  RecordProperty("pearson_runs", absl::StrFormat("%.5f", r));
  EXPECT_LT(std::abs(r), 5 / std::sqrt(static_cast<double>(first_words.size())));
}

// In one round of 10, site 2 drops at the masked input (its pairwise masks are removed with its
// mask-key shares) and site 7 stops at unmasking (its input counts; its self mask is rebuilt from
// its neighbours' shares): the round commits global + the mean of the nine sites that sent input.
TEST_F(EngineSecAggTest, ADropoutAtMaskedInputAndOneAtUnmaskingInOneRound) {
  StartSecure();
  JoinAll();
  sites_[2].stop_at = 2;
  sites_[7].stop_at = 4;
  std::shared_ptr<const Model> before = engine_->global_model();
  RoundSummary summary = DriveAttempt();
  ASSERT_TRUE(summary.committed) << summary.reason;
  EXPECT_EQ(summary.num_accepted, 9);
  absl::StatusOr<secagg::SecAggParams> p = options_.secure_aggregation.ParamsFor(10, 0);
  ASSERT_TRUE(p.ok());
  ExpectModelNear(*engine_->global_model(), Expected(*before, {0, 1, 3, 4, 5, 6, 7, 8, 9}, 1),
                  secagg::QuantizationErrorBound(1.0, p->quantization_bits) + 1e-6);
  nlohmann::json j = nlohmann::json::parse(RoundAt(1, 0).secagg_json);
  EXPECT_EQ(j["u3"], 9);
  EXPECT_EQ(j["u4"], 8);
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
  info.round.secagg.num_clients = 5;
  info.round.secagg.num_neighbors = 4;
  info.round.secagg.threshold = 3;
  info.round.secagg.graph_seed = 99;
  info.round.example_unit = 10;
  info.round.dp_noise_stddev = 0.5;
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
  ASSERT_TRUE(m.ok()) << m.status();  // kept for the engine, which drops the client with it
  EXPECT_FALSE(m->keys.has_value());
  EXPECT_THAT(m->malformed,
              ::testing::HasSubstr("SecAggSubmission.keys.mask_public has 31 bytes, expected 32"));
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
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(m->malformed,
              ::testing::HasSubstr("SecAggSubmission.unmask.self_seed_shares[0].y holds 4 values"));
  share->add_y(secagg::kShamirPrime);  // outside the field: refused, naming the field
  m = SecAggMessageFromProto(sub);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(m->malformed,
              ::testing::HasSubstr("SecAggSubmission.unmask.self_seed_shares[0].y[4]"));
  EXPECT_THAT(m->malformed, ::testing::HasSubstr("= 2305843009213693951 is outside the field"));
  share->set_y(secagg::kShamirPieces - 1, 9);
  m = SecAggMessageFromProto(sub);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->unmask->self_seed_shares.at(1).y[4], 9u);

  sub.set_stage(fl::v1::Task::FIT);
  EXPECT_EQ(SecAggMessageFromProto(sub).status().code(), absl::StatusCode::kInvalidArgument);
  sub.set_stage(fl::v1::Task::SECAGG_SHARE_KEYS);
  sub.clear_body();
  EXPECT_THAT(SecAggMessageFromProto(sub)->malformed, ::testing::HasSubstr("carries no body"));
}

}  // namespace
}  // namespace fl::server
