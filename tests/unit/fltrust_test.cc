// FLTrust (fltrust.h): trust by agreement with the server's own change, every change scaled to
// the server's length; the refusals.
#include "fl/aggregation/fltrust.h"

#include <cmath>
#include <filesystem>
#include <vector>

#include "fl/aggregation/strategies.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/temp_dir.h"

namespace fl::aggregation {
namespace {

using ::testing::HasSubstr;

ModelSpec Spec() { return ModelSpec({{"w", {4}}}); }

Model Values(std::vector<float> v) {
  Model m(Spec());
  std::copy(v.begin(), v.end(), m.data().begin());
  return m;
}

class FLTrustTest : public ::testing::Test {
 protected:
  // A strategy whose root training moves the model by `g0`.
  std::unique_ptr<Strategy> Make(std::vector<float> g0) {
    absl::StatusOr<std::unique_ptr<Strategy>> s =
        MakeStrategy({.name = "fltrust"}, {}, MakeFileSpill(dir_),
                     [g0](const Model& global, int32_t) -> absl::StatusOr<Model> {
                       Model m = global.Clone();
                       for (size_t i = 0; i < g0.size(); ++i) m.data()[i] += g0[i];
                       return m;
                     });
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }

  static absl::StatusOr<Model> Round(Strategy& s, const Model& x,
                                     const std::vector<std::vector<float>>& models) {
    std::unique_ptr<RoundAggregator> agg = s.BeginRound(x);
    for (const auto& m : models) {
      absl::StatusOr<std::unique_ptr<UpdateSink>> sink = agg->BeginUpdate({.weight = 500});
      if (!sink.ok()) return sink.status();
      if (absl::Status st = (*sink)->Write(0, m); !st.ok()) return st;
      if (absl::Status st = (*sink)->Accept(); !st.ok()) return st;
    }
    return agg->Finish();
  }

  fl::testing::TempDir tmp_;
  const std::string& dir_ = tmp_.path();
};

TEST_F(FLTrustTest, ChangesAreTrustedByTheirCosineAndScaledToTheServersLength) {
  // x = 1; the server's change g0 = (1, 0, 0, 0), length 1.
  std::unique_ptr<Strategy> s = Make({1, 0, 0, 0});
  const Model x = Values({1, 1, 1, 1});
  // g1 = (3, 0, 0, 0): cos 1, scaled to (1, 0, 0, 0).
  // g2 = (-5, 0, 0, 0): cos -1, trust 0.
  // g3 = (1, 1, 0, 0): cos 1/sqrt2, scaled to (1, 1, 0, 0) / sqrt2.
  absl::StatusOr<Model> got = Round(*s, x, {{4, 1, 1, 1}, {-4, 1, 1, 1}, {2, 2, 1, 1}});
  ASSERT_TRUE(got.ok()) << got.status();
  const double t3 = 1 / std::sqrt(2.0);
  const double total = 1 + t3;
  const double want0 = 1 + (1 * 1 + t3 * t3) / total;
  const double want1 = 1 + (t3 * t3) / total;
  EXPECT_NEAR(got->data()[0], want0, 1e-6);
  EXPECT_NEAR(got->data()[1], want1, 1e-6);
  EXPECT_NEAR(got->data()[2], 1.0, 1e-6);
}

TEST_F(FLTrustTest, ARoundWhereNoSiteAgreesFailsWithTheReason) {
  std::unique_ptr<Strategy> s = Make({1, 0, 0, 0});
  absl::StatusOr<Model> got = Round(*s, Values({0, 0, 0, 0}), {{-1, 0, 0, 0}, {0, 1, 0, 0}});
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(got.status().message(),
              HasSubstr("no site's change agreed with the server's (every trust score is 0 "
                        "among 2 updates)"));
}

TEST_F(FLTrustTest, ARootTrainingThatDoesNotMoveTheModelFailsTheRound) {
  std::unique_ptr<Strategy> s = Make({0, 0, 0, 0});
  EXPECT_THAT(Round(*s, Values({0, 0, 0, 0}), {{1, 0, 0, 0}}).status().message(),
              HasSubstr("training on the root data did not move the model"));
}

TEST_F(FLTrustTest, TheRootTrainersFailureFailsTheRoundWithItsMessage) {
  absl::StatusOr<std::unique_ptr<Strategy>> s =
      MakeStrategy({.name = "fltrust"}, {}, MakeFileSpill(dir_),
                   [](const Model&, int32_t) -> absl::StatusOr<Model> {
                     return absl::AbortedError("training diverged");
                   });
  ASSERT_TRUE(s.ok());
  absl::StatusOr<Model> got = Round(**s, Values({0, 0, 0, 0}), {{1, 0, 0, 0}});
  EXPECT_THAT(got.status().message(),
              HasSubstr("fltrust: training on the server's root data failed: training diverged"));
}

TEST_F(FLTrustTest, WithoutARootDatasetOrWithSecureAggregationItIsRefused) {
  EXPECT_THAT(MakeStrategy({.name = "fltrust"}).status().message(),
              HasSubstr("strategy 'fltrust' needs a root dataset on the server"));
  std::unique_ptr<Strategy> s = Make({1, 0, 0, 0});
  EXPECT_THAT(s->CheckPlan({.min_updates = 3, .secure_aggregation = true}).message(),
              HasSubstr("'fltrust' compares each site's change with the server's"));
}

}  // namespace
}  // namespace fl::aggregation
