// The accountant for the server's fixed-size round draw (Sampling::kFixedSize). Reference values
// come from two independent computations: Google's dp_accounting 0.6.0
// (RdpAccountant(neighboring_relation=REPLACE_ONE) with SampledWithoutReplacementDpEvent, whose
// Theorem-27 bound is tighter than ours, so it equals ours only where Theorem 9's terms are the
// smaller ones) and a Python transcription of Theorem 9 written from the paper for these tests.
#include <cmath>
#include <vector>

#include "fl/aggregation/dp/rdp_accountant.h"
#include "gtest/gtest.h"

namespace fl::aggregation::dp {
namespace {

double FixedSizeRdp(double q, double z, double order) {
  const std::vector<double> orders = {order};
  absl::StatusOr<std::vector<double>> rdp = ComputeRdp(q, z, 1, orders, Sampling::kFixedSize);
  EXPECT_TRUE(rdp.ok()) << rdp.status();
  return rdp.ok() ? (*rdp)[0] : -1;
}

double FixedSizeEpsilon(double q, double z, int64_t steps, double delta) {
  absl::StatusOr<PrivacySpent> spent = ComputeEpsilon(q, z, steps, delta, {}, Sampling::kFixedSize);
  EXPECT_TRUE(spent.ok()) << spent.status();
  return spent.ok() ? spent->epsilon : -1;
}

TEST(FixedSizeSamplingTest, RdpMatchesDpAccountingWhereTheBoundsAgree) {
  // dp_accounting: 0.052939293727797626, 0.2564499269090088, 4.041123341758723.
  EXPECT_NEAR(FixedSizeRdp(0.1, 1.0, 2), 0.052939293727797626, 1e-12);
  EXPECT_NEAR(FixedSizeRdp(0.1, 1.0, 5), 0.2564499269090088, 1e-12);
  EXPECT_NEAR(FixedSizeRdp(0.05, 1.5, 32), 4.041123341758723, 1e-10);
  // Fractional orders interpolate (alpha - 1) rdp between the integers around them.
  EXPECT_NEAR(FixedSizeRdp(0.1, 1.0, 2.5), 0.07932682287795666, 1e-12);
  EXPECT_NEAR(FixedSizeRdp(0.1, 1.0, 1.5), 0.052939293727797626, 1e-12);
}

TEST(FixedSizeSamplingTest, WhereDpAccountingIsTighterOursIsTheTheorem9Value) {
  // Theorem 9 (the Python transcription); dp_accounting's Theorem 27 gives 0.05269026352905106
  // and 0.0004684162610720203 here: ours is an upper bound, never below theirs.
  EXPECT_NEAR(FixedSizeRdp(0.1, 2.0, 8), 0.07017425661056077, 1e-12);
  EXPECT_GE(FixedSizeRdp(0.1, 2.0, 8), 0.05269026352905106);
  EXPECT_NEAR(FixedSizeRdp(0.01, 2.0, 8), 0.0004883930419623885, 1e-14);
}

TEST(FixedSizeSamplingTest, NeverAboveTheUnsampledGaussian) {
  // q 0.9, z 10, order 4: Theorem 9 gives more than releasing everyone's sum (4 / 200); the
  // bound is capped there (dp_accounting reports 0.0655).
  EXPECT_NEAR(FixedSizeRdp(0.9, 10.0, 4), 0.02, 1e-15);
  for (double q : {0.01, 0.1, 0.5, 0.99}) {
    for (double order : {1.5, 2.0, 7.0, 63.0}) {
      EXPECT_LE(FixedSizeRdp(q, 1.3, order), order / (2 * 1.3 * 1.3) + 1e-15) << q << " " << order;
    }
  }
  // q = 1 takes everyone: the Gaussian mechanism itself, for both samplings.
  EXPECT_NEAR(FixedSizeRdp(1.0, 2.0, 20), 20 / 8.0, 1e-15);
}

TEST(FixedSizeSamplingTest, EpsilonOverRoundsMatchesDpAccounting) {
  // dp_accounting with Opacus's orders, delta 1e-5: 14.053750225346512, 1.482525669114427,
  // 13.947610396918066.
  EXPECT_NEAR(FixedSizeEpsilon(0.1, 1.0, 100, 1e-5), 14.053750225346512, 1e-9);
  EXPECT_NEAR(FixedSizeEpsilon(0.01, 1.0, 100, 1e-5), 1.482525669114427, 1e-9);
  EXPECT_NEAR(FixedSizeEpsilon(0.05, 1.1, 500, 1e-5), 13.947610396918066, 1e-8);
  // The Python transcription of Theorem 9 where the two bounds part (dp_accounting: 5.379).
  EXPECT_NEAR(FixedSizeEpsilon(0.1, 2.0, 100, 1e-5), 5.837854400859203, 1e-9);
}

TEST(FixedSizeSamplingTest, ReportsMoreThanThePoissonApproximationItReplaces) {
  // The example: z 1, q 0.1, 100 rounds reported 7.90 as Poisson sampling (7.899 over
  // Opacus's orders; dp_accounting, which drops orders 1.1 to 1.5 there, says 7.904).
  absl::StatusOr<PrivacySpent> poisson = ComputeEpsilon(0.1, 1.0, 100, 1e-5);
  ASSERT_TRUE(poisson.ok());
  EXPECT_NEAR(poisson->epsilon, 7.899, 1e-3);
  EXPECT_GT(FixedSizeEpsilon(0.1, 1.0, 100, 1e-5), 1.7 * poisson->epsilon);
}

TEST(FixedSizeSamplingTest, AccountantComposesFixedSizeRounds) {
  absl::StatusOr<RdpAccountant> acc = RdpAccountant::Create();
  ASSERT_TRUE(acc.ok());
  absl::StatusOr<PrivacySpent> planned = acc->SpentAfter(0.1, 1.0, 100, 1e-5, Sampling::kFixedSize);
  ASSERT_TRUE(planned.ok());
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(acc->AddSteps(0.1, 1.0, 1, Sampling::kFixedSize).ok());
  absl::StatusOr<PrivacySpent> spent = acc->Spent(1e-5);
  ASSERT_TRUE(spent.ok());
  EXPECT_NEAR(spent->epsilon, 14.053750225346512, 1e-9);
  EXPECT_NEAR(planned->epsilon, spent->epsilon, 1e-12);
  // Bad arguments are refused as for Poisson sampling.
  EXPECT_FALSE(acc->AddSteps(0.0, 1.0, 1, Sampling::kFixedSize).ok());
  EXPECT_FALSE(acc->AddSteps(0.1, -1.0, 1, Sampling::kFixedSize).ok());
}

TEST(FixedSizeSamplingTest, HugeOrdersFallBackToTheGaussianWithoutLooping) {
  EXPECT_NEAR(FixedSizeRdp(0.1, 1.0, 1e6), 1e6 / 2, 1e-6);
}

}  // namespace
}  // namespace fl::aggregation::dp
