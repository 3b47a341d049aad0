// The engine with distributed DP by the discrete Gaussian (privacy.distributed_noise =
// "discrete_gaussian"): the round's tasks carry the encoding, the sites' sessions encode with it,
// the committed model is the mean of the L2-clipped changes plus the sites' noise, and both
// epsilons are the discrete Gaussian's.
#include <cmath>
#include <string>
#include <vector>

#include "fl/aggregation/dp/ddg_accountant.h"
#include "fl/aggregation/dp/gaussian_noise.h"
#include "fl/aggregation/dp/rdp_accountant.h"
#include "fl/aggregation/secagg/ddg_encoding.h"
#include "gmock/gmock.h"
#include "nlohmann/json.hpp"
#include "tests/unit/engine_secagg_fixture.h"

namespace fl::server {
namespace {

using ::testing::HasSubstr;

class EngineDdgTest : public EngineSecAggTest {
 protected:
  void UseDiscreteGaussian() {
    UseDistributedDp();  // z 1, C 2
    options_.privacy.distributed_noise = "discrete_gaussian";
  }

  // The users' epsilon after `rounds` rounds of `e` over the 1,000 parameters, everyone sampled,
  // with the noise of n_min = 7 sites.
  double UsersEpsilon(const secagg::DdgEncoding& e, int64_t rounds) const {
    const std::vector<double> orders = aggregation::dp::DefaultRdpOrders();
    absl::StatusOr<std::vector<double>> rdp =
        aggregation::dp::ComputeDdgRdp(secagg::DdgReleaseOf(e, 1000, 7), 1.0, rounds, orders);
    EXPECT_TRUE(rdp.ok()) << rdp.status();
    if (!rdp.ok()) return -1;
    absl::StatusOr<aggregation::dp::PrivacySpent> spent =
        aggregation::dp::RdpToEpsilon(orders, *rdp, options_.privacy.delta);
    return spent.ok() ? spent->epsilon : -1;
  }

  // The mean of the sites' changes each clipped to L2 norm C.
  std::vector<double> ClippedMean(int32_t round, double clip) {
    std::vector<double> mean(spec_.NumFloats(), 0.0);
    for (const Site& s : sites_) {
      std::vector<float> d = ChangeOf(s, round);
      double norm = 0;
      for (float v : d) norm += static_cast<double>(v) * v;
      norm = std::sqrt(norm);
      const double scale = norm > clip ? clip / norm : 1.0;
      for (size_t j = 0; j < d.size(); ++j) mean[j] += d[j] * scale / sites_.size();
    }
    return mean;
  }
};

TEST_F(EngineDdgTest, ARoundCommitsTheClippedMeanPlusTheSitesNoiseAndItsEpsilons) {
  UseDiscreteGaussian();
  StartSecure();
  JoinAll();
  Task t = engine_->Poll(sites_[0].id);
  ASSERT_EQ(t.kind, Task::Kind::kSecAggAdvertise);
  // Each site's sigma is planned for n_min = 7 of the 10: z C / sqrt(7).
  const double sigma = 2.0 / std::sqrt(7.0);
  const secagg::DdgEncoding& e = t.secagg.round.secagg.ddg;
  EXPECT_DOUBLE_EQ(e.site_stddev, sigma);
  EXPECT_EQ(e.clip_norm, 2.0);
  EXPECT_DOUBLE_EQ(e.granularity, *secagg::DdgGranularity(2.0, sigma, 10, 1000, 32));
  EXPECT_NE(e.rotation_seed, 0u);
  std::shared_ptr<const Model> before = engine_->global_model();
  RoundSummary first = DriveAttempt();
  ASSERT_TRUE(first.committed) << first.reason;
  // What is left after the clipped mean is the noise of ten sites over ten: sigma / sqrt(10).
  const std::vector<double> mean = ClippedMean(1, 2.0);
  const Model& after = *engine_->global_model();
  double err_sq = 0;
  for (size_t j = 0; j < mean.size(); ++j) {
    err_sq += std::pow(after.data()[j] - before->data()[j] - mean[j], 2);
  }
  EXPECT_NEAR(std::sqrt(err_sq / mean.size()), sigma / std::sqrt(10.0), 0.1 * sigma);

  // The users' epsilon: the discrete Gaussian's sum of n_min = 7 sites, everyone sampled.
  const RoundRecord rec = RoundAt(1, 0);
  EXPECT_NEAR(rec.dp_epsilon, UsersEpsilon(e, 1), 1e-9);
  // A little above the Gaussian's at z 1: the rounding widens the norm bound.
  absl::StatusOr<aggregation::dp::PrivacySpent> gauss =
      aggregation::dp::ComputeEpsilon(1.0, 1.0, 1, options_.privacy.delta);
  EXPECT_GT(rec.dp_epsilon, gauss->epsilon);
  EXPECT_LT(rec.dp_epsilon, 1.05 * gauss->epsilon);
  // Against the server: the ten sites' sum, z = sqrt(10) sigma / D2 in integer steps.
  const aggregation::dp::DdgRelease ten = secagg::DdgReleaseOf(e, 1000, 10);
  const double z = std::sqrt(10.0) * ten.site_stddev / ten.l2_sensitivity;
  absl::StatusOr<aggregation::dp::PrivacySpent> server =
      aggregation::dp::ComputeEpsilon(1.0, z, 1, options_.privacy.delta);
  EXPECT_NEAR(rec.dp_epsilon_server, server->epsilon, 1e-9);
  // The record names the encoding, for the replay after a restart.
  nlohmann::json j = nlohmann::json::parse(rec.secagg_json);
  EXPECT_DOUBLE_EQ(j["params"]["ddg"]["granularity"].get<double>(), e.granularity);
  EXPECT_EQ(j["params"]["ddg"]["padded_dimension"].get<int>(), 1024);
}

TEST_F(EngineDdgTest, ARestartReplaysBothEpsilonsFromTheRecords) {
  UseDiscreteGaussian();
  options_.num_rounds = 2;
  StartSecure();
  JoinAll();
  ASSERT_TRUE(DriveAttempt().committed);
  const double first_users = RoundAt(1, 0).dp_epsilon;
  const double first_server = RoundAt(1, 0).dp_epsilon_server;
  engine_.reset();
  StartSecure();
  JoinAll();
  RoundSummary second = DriveAttempt();
  ASSERT_TRUE(second.committed) << second.reason;
  absl::StatusOr<std::vector<RoundRecord>> rounds = store_->Rounds(engine_->run_id());
  ASSERT_TRUE(rounds.ok());
  RoundRecord last;
  for (const RoundRecord& r : *rounds) {
    if (r.status == RoundStatus::kCommitted) last = r;
  }
  ASSERT_EQ(last.round, 2);
  // Two equal rounds: RDP doubles, so the epsilons grow, and as an uninterrupted run's would.
  EXPECT_GT(last.dp_epsilon, first_users);
  EXPECT_GT(last.dp_epsilon_server, first_server);
  nlohmann::json j = nlohmann::json::parse(last.secagg_json);
  ASSERT_TRUE(j["params"].contains("ddg")) << last.secagg_json;
  secagg::DdgEncoding e{.clip_norm = 2.0,
                        .granularity = j["params"]["ddg"]["granularity"].get<double>(),
                        .site_stddev = j["params"]["ddg"]["stddev"].get<double>()};
  EXPECT_NEAR(last.dp_epsilon, UsersEpsilon(e, 2), 1e-9);
  // Against the server: the ten sites were in both sums, each z = sqrt(10) sigma / D2 with the
  // tau d offset; the restarted server replayed the first from the record.
  const aggregation::dp::DdgRelease ten = secagg::DdgReleaseOf(e, 1000, 10);
  const double z = std::sqrt(10.0) * ten.site_stddev / ten.l2_sensitivity;
  const double offset = aggregation::dp::DdgTau(ten.site_stddev, 10) * 1024;
  const std::vector<double> orders = aggregation::dp::DefaultRdpOrders();
  std::vector<double> server_rdp;
  for (double a : orders) server_rdp.push_back(2 * (a / (2 * z * z) + offset));
  absl::StatusOr<aggregation::dp::PrivacySpent> server =
      aggregation::dp::RdpToEpsilon(orders, server_rdp, options_.privacy.delta);
  ASSERT_TRUE(server.ok());
  EXPECT_NEAR(last.dp_epsilon_server, server->epsilon, 1e-9);
}

TEST_F(EngineDdgTest, AnUploadOfTheUnpaddedSizeIsRefusedNamingThePadding) {
  UseDiscreteGaussian();
  StartSecure();
  JoinAll();
  // Every site advertises and shares its keys; then site 0 sends a quantized-size payload.
  for (int stage = 0; stage < 2; ++stage) {
    for (Site& site : sites_) ASSERT_TRUE(Act(site, engine_->Poll(site.id)));
  }
  Task t = engine_->Poll(sites_[0].id);
  ASSERT_EQ(t.kind, Task::Kind::kSecAggMaskedInput);
  absl::Status s = UploadWords(sites_[0].id, t, std::vector<uint64_t>(1001, 0), 4,
                               UpdateMeta::Encoding::kMaskedUint32);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("padded to a power of two"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("1025 words"));
}

TEST_F(EngineDdgTest, RefusesTheDiscreteGaussianOutsideDistributedMode) {
  EngineOptions o = options_;
  o.privacy.mode = "central";
  o.privacy.distributed_noise = "discrete_gaussian";
  absl::Status s = CreateWith(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("needs privacy.mode = \"distributed\""));
  o.privacy.mode = "distributed";
  o.privacy.distributed_noise = "discrete";
  EXPECT_THAT(std::string(CreateWith(o).message()), HasSubstr("privacy.distributed_noise"));
}

}  // namespace
}  // namespace fl::server
