// fl::client::CheckSiteLimits: what a site agrees to do, whatever the server asks; and
// CheckSecureRoundLimits: the noise it enforces in secure rounds against the server.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fl/client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fl::client {
namespace {

FitConfig Task(int32_t epochs, std::string model, bool dp) {
  FitConfig c;
  c.local_epochs = epochs;
  c.model_name = std::move(model);
  c.differential_privacy = dp;
  return c;
}

TEST(SiteLimitsTest, DefaultsAllowEverything) {
  EXPECT_TRUE(CheckSiteLimits({}, Task(1000, "", false)).ok());
  EXPECT_TRUE(CheckSiteLimits({}, Task(1, "simple_cnn", true)).ok());
}

TEST(SiteLimitsTest, TooManyLocalEpochsNamesTheLimitAndTheTasksValue) {
  SiteLimits limits;
  limits.max_local_epochs = 2;
  EXPECT_TRUE(CheckSiteLimits(limits, Task(2, "mlp", false)).ok());
  absl::Status s = CheckSiteLimits(limits, Task(5, "mlp", false));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            "task asks for 5 local epochs; this site allows at most 2 (limits.max_local_epochs)");
}

TEST(SiteLimitsTest, AModelOutsideTheAllowedListIsRefusedByName) {
  SiteLimits limits;
  limits.allowed_models = {"softmax", "mlp"};
  EXPECT_TRUE(CheckSiteLimits(limits, Task(1, "mlp", false)).ok());
  absl::Status s = CheckSiteLimits(limits, Task(1, "simple_cnn", false));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            "task asks for model 'simple_cnn'; this site allows only softmax, mlp "
            "(limits.allowed_models)");
  // A task that names no built-in model is not in the list either.
  s = CheckSiteLimits(limits, Task(1, "", false));
  EXPECT_EQ(s.message(),
            "task asks for a model it does not name; this site allows only softmax, mlp "
            "(limits.allowed_models)");
}

TEST(SiteLimitsTest, LogisticAndSoftmaxAreOneModel) {
  SiteLimits limits;
  limits.allowed_models = {"logistic"};
  EXPECT_TRUE(CheckSiteLimits(limits, Task(1, "softmax", false)).ok());
  limits.allowed_models = {"softmax"};
  EXPECT_TRUE(CheckSiteLimits(limits, Task(1, "logistic", false)).ok());
  EXPECT_FALSE(CheckSiteLimits(limits, Task(1, "mlp", false)).ok());
}

TEST(SiteLimitsTest, RequiredDifferentialPrivacy) {
  SiteLimits limits;
  limits.require_differential_privacy = true;
  EXPECT_TRUE(CheckSiteLimits(limits, Task(1, "mlp", true)).ok());
  absl::Status s = CheckSiteLimits(limits, Task(1, "mlp", false));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            "task runs without differential privacy; this site requires it "
            "(limits.require_differential_privacy)");
}

TEST(SiteLimitsTest, RequiredSecureAggregation) {
  SiteLimits limits;
  limits.require_secure_aggregation = true;
  FitConfig secure = Task(1, "softmax", false);
  secure.secure_aggregation = true;
  EXPECT_TRUE(CheckSiteLimits(limits, secure).ok());
  absl::Status s = CheckSiteLimits(limits, Task(1, "softmax", false));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            "task runs without secure aggregation; this site requires it "
            "(limits.require_secure_aggregation)");
  // Off by default: a secure task passes a site that does not ask for it, a plain one too.
  EXPECT_TRUE(CheckSiteLimits({}, secure).ok());
}

TEST(SiteLimitsTest, EveryLimitIsCheckedWithSecureAggregationToo) {
  SiteLimits limits;
  limits.require_secure_aggregation = true;
  limits.require_differential_privacy = true;
  FitConfig secure = Task(1, "softmax", false);
  secure.secure_aggregation = true;
  EXPECT_EQ(CheckSiteLimits(limits, secure).message(),
            "task runs without differential privacy; this site requires it "
            "(limits.require_differential_privacy)");
}

// A round of n sites, each clipping to C and adding noise of stddev sigma.
SecureRoundNoise Round(int32_t n, double c, double sigma) {
  return {.num_sites = n, .clip_norm = c, .noise_stddev = sigma};
}

TEST(SecureRoundLimitsTest, TheSiteCountsOnlyItsOwnNoise) {
  // A server with more colluders than the round's corrupt_fraction (or its own CA) can still
  // isolate one input: sigma / C.
  EXPECT_DOUBLE_EQ(WorstCaseNoiseMultiplier(Round(20, 2.0, 0.5)), 0.25);
  EXPECT_EQ(WorstCaseNoiseMultiplier(Round(20, 0, 0.5)), 0);  // no distributed DP
  EXPECT_EQ(WorstCaseNoiseMultiplier(Round(20, 2.0, 0)), 0);
}

TEST(SecureRoundLimitsTest, TooLittleNoiseOrNoneOrTooFewSitesAreRefusedWithTheFigures) {
  SiteLimits limits;
  EXPECT_TRUE(CheckSecureRoundLimits(limits, Round(20, 0, 0), {}).ok());  // no limits set
  limits.min_noise_multiplier = 1.0;
  EXPECT_TRUE(CheckSecureRoundLimits(limits, Round(20, 1.0, 1.0), {}).ok());  // z = 1
  absl::Status s = CheckSecureRoundLimits(limits, Round(20, 2.0, 1.0), {});
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            "the round's noise gives this site's input a noise multiplier of 0.5 against the "
            "server (stddev 1 / clip norm 2); this site requires at least 1 "
            "(limits.min_noise_multiplier)");
  s = CheckSecureRoundLimits(limits, Round(20, 0, 0), {});
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(s.message()),
              ::testing::StartsWith("the round adds no distributed noise"));
  limits.min_sum_size = 25;
  s = CheckSecureRoundLimits(limits, Round(20, 1.0, 1.0), {});
  EXPECT_EQ(s.message(),
            "the round has 20 sites; this site takes part only in sums of at least 25 "
            "(limits.min_sum_size)");
  limits = SiteLimits();
  limits.min_sum_size = -1;
  EXPECT_EQ(CheckSecureRoundLimits(limits, Round(20, 1.0, 0.5), {}).code(),
            absl::StatusCode::kInvalidArgument);
  limits = SiteLimits();
  limits.max_epsilon = 1;
  limits.epsilon_delta = 0;
  EXPECT_EQ(CheckSecureRoundLimits(limits, Round(20, 1.0, 0.5), {}).code(),
            absl::StatusCode::kInvalidArgument);
}

// A site that wants the consistency check to hold against a share of colluding sites declines a
// round sized for fewer, naming both figures; a limit out of range is refused as such.
TEST(SecureRoundLimitsTest, ARoundSizedForFewerColludingSitesThanTheSiteWantsIsDeclined) {
  SiteLimits limits;
  limits.min_corrupt_fraction = 0.25;
  SecureRoundNoise round = Round(20, 0, 0);
  round.corrupt_fraction = 0.2;
  absl::Status s = CheckSecureRoundLimits(limits, round, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            "the round's consistency check holds with up to 0.2 of its sites colluding with the "
            "server; this site requires at least 0.25 (limits.min_corrupt_fraction)");
  round.corrupt_fraction = 1.0 / 3;
  EXPECT_TRUE(CheckSecureRoundLimits(limits, round, {}).ok());
  limits.min_corrupt_fraction = 0.5;
  s = CheckSecureRoundLimits(limits, round, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "limits.min_corrupt_fraction must be in [0, 0.5), got 0.5");
}

// With a noise limit a plain round is declined: the server would read the update.
// A server need not grind directories to surround a site with colluders: it can send a small k.
// The site judges the graph as the server's defaults are judged.
TEST(SecureRoundLimitsTest, AGraphThatLeavesASiteToItsColludingNeighboursIsDeclined) {
  SiteLimits limits;  // grinding_bits 40: at most 2^-80 per graph
  SecureRoundNoise round{.num_sites = 20,
                         .num_neighbors = 4,
                         .threshold = 3,
                         .corrupt_fraction = 1.0 / 3};  // 6 colluders
  absl::Status s = CheckSecureRoundLimits(limits, round, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(
      std::string(s.message()),
      ::testing::HasSubstr("the round's graph (4 neighbours, threshold 3, 20 sites) leaves some "
                           "site with that many colluding neighbours (corrupt_fraction 0.333333)"));
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("(2^-80, limits.grinding_bits 40)"));
  // Every pair with t above the 6 colluders exposes no one.
  round.num_neighbors = 19;
  round.threshold = 10;
  EXPECT_TRUE(CheckSecureRoundLimits(limits, round, {}).ok());
  // Without colluders admitted, the graph cannot expose anyone; min_corrupt_fraction is how a
  // site keeps the server from claiming that.
  round = {.num_sites = 20, .num_neighbors = 4, .threshold = 3, .corrupt_fraction = 0};
  EXPECT_TRUE(CheckSecureRoundLimits(limits, round, {}).ok());
  limits.min_corrupt_fraction = 0.2;
  EXPECT_THAT(std::string(CheckSecureRoundLimits(limits, round, {}).message()),
              ::testing::HasSubstr("limits.min_corrupt_fraction"));
  EXPECT_EQ(CheckSecureRoundLimits(SiteLimits{.grinding_bits = 101}, round, {}).code(),
            absl::StatusCode::kInvalidArgument);
}

// An earlier input without noise (a ledger kept from before the budget was set) leaves nothing
// to spend: every round is declined, saying why, instead of failing on the accountant's z = 0.
TEST(SecureRoundLimitsTest, AnEarlierInputWithoutNoiseSpentTheWholeBudget) {
  SiteLimits limits;
  limits.max_epsilon = 100;
  const std::vector<double> earlier = {0.5, 0.0};
  absl::Status s = CheckSecureRoundLimits(limits, Round(20, 1.0, 1.0), earlier);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(s.message()),
              ::testing::HasSubstr("already masked an input without distributed noise"));
}

TEST(SecureRoundLimitsTest, ANoiseLimitDeclinesPlainRounds) {
  SiteLimits limits;
  limits.max_epsilon = 8;
  FitConfig plain = Task(1, "mlp", true);
  absl::Status s = CheckSiteLimits(limits, plain);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            "task runs without secure aggregation, so the server would read this update; this "
            "site limits what the server learns (limits.max_epsilon)");
  plain.secure_aggregation = true;
  EXPECT_TRUE(CheckSiteLimits(limits, plain).ok());
}

// Epsilon against the server after m sums at noise multiplier z, derived here from the Gaussian
// mechanism's RDP, m a / (2 z^2) at order a (no sampling), and Balle et al. 2020's conversion
// over Opacus's orders.
double EpsilonOfSums(int m, double z, double delta) {
  std::vector<double> orders;
  for (int i = 11; i <= 109; ++i) orders.push_back(i / 10.0);
  for (int a = 12; a <= 63; ++a) orders.push_back(a);
  double best = std::numeric_limits<double>::infinity();
  for (double a : orders) {
    const double rdp = m * a / (2 * z * z);
    best = std::min(best, rdp - (std::log(delta) + std::log(a)) / (a - 1) + std::log((a - 1) / a));
  }
  return std::max(0.0, best);
}

TEST(SecureRoundLimitsTest, EpsilonAgainstTheServerComposesTheMaskedInputsWithoutAmplification) {
  SiteLimits limits;
  limits.max_epsilon = (EpsilonOfSums(3, 2.0, 1e-5) + EpsilonOfSums(4, 2.0, 1e-5)) / 2;
  const SecureRoundNoise round = Round(10, 0.5, 1.0);  // z = 2 per input
  ASSERT_DOUBLE_EQ(WorstCaseNoiseMultiplier(round), 2.0);
  EXPECT_TRUE(CheckSecureRoundLimits(limits, round, {}).ok());
  EXPECT_TRUE(CheckSecureRoundLimits(limits, round, std::vector<double>{2.0, 2.0}).ok());
  absl::Status s = CheckSecureRoundLimits(limits, round, std::vector<double>{2.0, 2.0, 2.0});
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(
      std::string(s.message()),
      ::testing::HasSubstr(absl::StrCat("would bring this site's epsilon against the server to ",
                                        EpsilonOfSums(4, 2.0, 1e-5))));
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("after 4 masked inputs"));
  // Without noise no epsilon is finite.
  EXPECT_EQ(CheckSecureRoundLimits(limits, Round(10, 0, 0), {}).code(),
            absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace fl::client
