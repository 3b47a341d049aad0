// fl::client::CheckSiteLimits: what a site agrees to do, whatever the server asks.
#include <string>

#include "absl/status/status.h"
#include "fl/client/client.h"
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

}  // namespace
}  // namespace fl::client
