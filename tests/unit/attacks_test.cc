// Attacks in simulation (fl/simulation/attacks.h): each attack's formula on a round's updates,
// which sites attack, and the refusals.
#include "fl/simulation/attacks.h"

#include <cmath>
#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fl::simulation {
namespace {

using ::testing::HasSubstr;

struct Round {
  std::vector<float> global;
  std::vector<std::vector<float>> models;
  std::vector<RoundUpdate> Updates(const std::vector<bool>& attacking) {
    std::vector<RoundUpdate> u;
    for (size_t i = 0; i < models.size(); ++i) {
      u.push_back({.site = static_cast<int32_t>(i),
                   .attacking = attacking[i],
                   .model = models[i],
                   .global = global});
    }
    return u;
  }
};

// Site i's model is global + (i + 1) in every parameter.
Round MakeRound(int sites, int size) {
  Round r;
  r.global.assign(static_cast<size_t>(size), 0.5f);
  for (int i = 0; i < sites; ++i) r.models.emplace_back(static_cast<size_t>(size), 0.5f + i + 1);
  return r;
}

TEST(AttacksTest, TheSeedChoosesTheAttackersTheSameWayEveryTime) {
  std::vector<bool> a = AttackingSites(20, 0.3, 5);
  EXPECT_EQ(std::count(a.begin(), a.end(), true), 6);
  EXPECT_EQ(a, AttackingSites(20, 0.3, 5));
  EXPECT_NE(a, AttackingSites(20, 0.3, 6));
  std::vector<bool> none = AttackingSites(20, 0.0, 5);
  EXPECT_EQ(std::count(none.begin(), none.end(), true), 0);
}

TEST(AttacksTest, SignFlipAndScaleMultiplyTheChange) {
  Round r = MakeRound(3, 4);
  std::vector<RoundUpdate> u = r.Updates({false, true, true});
  PoisonUpdates({.kind = "sign_flip", .fraction = 0.5}, 3, 1, u);
  EXPECT_FLOAT_EQ(r.models[0][0], 1.5f);      // honest: untouched
  EXPECT_FLOAT_EQ(r.models[1][0], 0.5f - 2);  // x - d
  EXPECT_FLOAT_EQ(r.models[2][3], 0.5f - 3);
  Round s = MakeRound(3, 4);
  u = s.Updates({false, true, false});
  PoisonUpdates({.kind = "scale", .fraction = 0.5}, 20, 1, u);
  EXPECT_FLOAT_EQ(s.models[1][2], 0.5f + 20 * 2);  // x + n d, n = the number of sites
  u = s.Updates({false, false, true});
  PoisonUpdates({.kind = "scale", .fraction = 0.5, .scale = 3}, 20, 1, u);
  EXPECT_FLOAT_EQ(s.models[2][0], 0.5f + 3 * 3);
}

TEST(AttacksTest, GaussianSendsNoiseOfTheScaleAroundTheGlobalModel) {
  Round r = MakeRound(2, 20000);
  std::vector<RoundUpdate> u = r.Updates({true, false});
  PoisonUpdates({.kind = "gaussian", .fraction = 0.5, .scale = 2}, 2, 9, u);
  double sum = 0, sum_sq = 0;
  for (float x : r.models[0]) {
    sum += x - 0.5;
    sum_sq += (x - 0.5) * (x - 0.5);
  }
  EXPECT_NEAR(sum / 20000, 0, 0.05);
  EXPECT_NEAR(std::sqrt(sum_sq / 20000), 2, 0.05);
  EXPECT_FLOAT_EQ(r.models[1][0], 2.5f);
}

// n = 10 updates, f = 2 attackers: s = floor(10 / 2 + 1) - 2 = 4, z = Phi^-1(6 / 10) = 0.2533.
TEST(AttacksTest, AlieSendsTheMeanLessZStandardDeviations) {
  Round r = MakeRound(10, 3);
  std::vector<bool> attacking(10, false);
  attacking[3] = attacking[7] = true;
  std::vector<RoundUpdate> u = r.Updates(attacking);
  PoisonUpdates({.kind = "alie", .fraction = 0.2}, 10, 1, u);
  // Before: values 1.5 .. 10.5, mean 6, population stddev sqrt(8.25).
  const float want = static_cast<float>(6.0 - 0.253347 * std::sqrt(8.25));
  EXPECT_NEAR(r.models[3][0], want, 1e-4);
  EXPECT_NEAR(r.models[7][2], want, 1e-4);
  EXPECT_FLOAT_EQ(r.models[0][0], 1.5f);
}

TEST(AttacksTest, LabelFlipReversesTheClassesAndLeavesUpdatesAlone) {
  client::Dataset d;
  d.num_classes = 10;
  d.labels = {0, 3, 9};
  FlipLabels(d);
  EXPECT_EQ(d.labels, (std::vector<int32_t>{9, 6, 0}));
  Round r = MakeRound(2, 2);
  std::vector<RoundUpdate> u = r.Updates({true, true});
  PoisonUpdates({.kind = "label_flip", .fraction = 0.5}, 2, 1, u);
  EXPECT_FLOAT_EQ(r.models[0][0], 1.5f);
}

TEST(AttacksTest, BadSettingsAreRefusedWithTheValue) {
  EXPECT_THAT(AttackOptions{.kind = "backdoor"}.Validate().message(),
              HasSubstr("unknown attack 'backdoor'; choose none, sign_flip"));
  EXPECT_THAT((AttackOptions{.kind = "scale", .fraction = 1.0}).Validate().message(),
              HasSubstr("attack fraction must be in [0, 1), got 1"));
  EXPECT_THAT((AttackOptions{.kind = "scale", .fraction = 0.1, .scale = -1}).Validate().message(),
              HasSubstr("attack scale must be >= 0"));
  EXPECT_THAT((AttackOptions{.kind = "alie", .fraction = 0.5}).Validate().message(),
              HasSubstr("attack 'alie' needs fewer than half the sites attacking"));
}

TEST(AttacksTest, AlieAloneInItsWaveIsReportedUntouched) {
  Round r = MakeRound(1, 2);
  std::vector<RoundUpdate> u = r.Updates({true});
  EXPECT_FALSE(PoisonUpdates({.kind = "alie", .fraction = 0.2}, 10, 1, u));
  EXPECT_FLOAT_EQ(r.models[0][0], 1.5f);
}

}  // namespace
}  // namespace fl::simulation
