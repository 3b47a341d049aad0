#include <cmath>
#include <cstdint>
#include <vector>

#include "fl/client/metrics.h"
#include "gtest/gtest.h"

namespace fl::client {
namespace {

TEST(AucTest, PerfectAndReversedRankings) {
  const std::vector<float> scores = {0.1f, 0.2f, 0.8f, 0.9f};
  EXPECT_DOUBLE_EQ(*BinaryAuc(scores, std::vector<uint8_t>{0, 0, 1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(*BinaryAuc(scores, std::vector<uint8_t>{1, 1, 0, 0}), 0.0);
}

TEST(AucTest, CountsPairsAndTiesByHalf) {
  // Positives score 0.5 and 0.9; negatives 0.5, 0.3, 0.7. Pairs (pos > neg): 0.9 beats all three;
  // 0.5 beats 0.3, ties 0.5 (one half), loses to 0.7. (3 + 1 + 0.5) / 6.
  const std::vector<float> scores = {0.5f, 0.9f, 0.5f, 0.3f, 0.7f};
  const std::vector<uint8_t> positive = {1, 1, 0, 0, 0};
  EXPECT_DOUBLE_EQ(*BinaryAuc(scores, positive), 4.5 / 6.0);
}

TEST(AucTest, UndefinedWithoutBothClasses) {
  const std::vector<float> scores = {0.1f, 0.2f};
  EXPECT_FALSE(BinaryAuc(scores, std::vector<uint8_t>{1, 1}).has_value());
  EXPECT_FALSE(BinaryAuc(scores, std::vector<uint8_t>{0, 0}).has_value());
  EXPECT_FALSE(BinaryAuc({}, {}).has_value());
}

TEST(AucTest, ANanScoreGivesNoAucAndInfinitiesRank) {
  // A diverged model's logits (inf - inf) give NaN scores: no AUC, and no hang.
  const std::vector<uint8_t> positive = {0, 1, 1, 0};
  EXPECT_FALSE(BinaryAuc(std::vector<float>{0.1f, NAN, 0.7f, 0.3f}, positive).has_value());
  EXPECT_DOUBLE_EQ(*BinaryAuc(std::vector<float>{-INFINITY, INFINITY, 0.7f, 0.3f}, positive), 1.0);
}

}  // namespace
}  // namespace fl::client
