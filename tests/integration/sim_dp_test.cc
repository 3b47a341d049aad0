// `fl sim` with central differential privacy: RunSimulation hands PrivacyOptions to the real
// server, reports the epsilon the store records with every committed round and the epsilon the
// run spent, and a budget ends the run early with the engine's reason; the `fl sim --dp-*` flags
// print an epsilon column and the epsilon spent.
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "fl/aggregation/dp/rdp_accountant.h"
#include "fl/simulation/simulation.h"
#include "gtest/gtest.h"
#include "tests/integration/test_federation.h"

namespace fl::testing {
namespace {

constexpr int32_t kClients = 3;
constexpr double kNoise = 1.0;
constexpr double kDelta = 1e-5;

simulation::SimulationOptions SmallDpSimulation(const std::string& dir, int32_t rounds) {
  simulation::SimulationOptions o;
  o.work_dir = dir;
  o.dataset_dir = FL_FASHION_MNIST_DIR;
  o.num_clients = kClients;
  o.num_rounds = rounds;
  o.max_examples_per_client = 300;
  o.model = "softmax";
  o.backend = "cpu";
  o.seed = 7;
  o.round_timeout = absl::Seconds(60);
  o.privacy.mode = "central";
  o.privacy.noise_multiplier = kNoise;
  o.privacy.clip_norm = 1.0;
  o.privacy.delta = kDelta;
  return o;
}

// Epsilon after `steps` rounds that each sampled every client (q = 1).
double EpsilonAfter(int64_t steps) {
  absl::StatusOr<aggregation::dp::PrivacySpent> spent =
      aggregation::dp::ComputeEpsilon(1.0, kNoise, steps, kDelta);
  EXPECT_TRUE(spent.ok()) << spent.status();
  return spent.ok() ? spent->epsilon : 0;
}

TEST(SimDpTest, EveryCommittedRoundRecordsTheEpsilonSpentSoFar) {
  TempDir dir;
  absl::StatusOr<simulation::SimulationResult> result =
      simulation::RunSimulation(SmallDpSimulation(dir.path(), 3));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->finish_reason, "");
  ASSERT_EQ(result->rounds.size(), 3u);
  double previous = 0;
  for (const simulation::SimulationRound& r : result->rounds) {
    ASSERT_TRUE(r.summary.committed) << "round " << r.summary.round << ": " << r.summary.reason;
    EXPECT_GT(r.dp_epsilon, previous) << "round " << r.summary.round;
    EXPECT_NEAR(r.dp_epsilon, EpsilonAfter(r.summary.round), 1e-9 * r.dp_epsilon)
        << "round " << r.summary.round;
    previous = r.dp_epsilon;
  }
  EXPECT_DOUBLE_EQ(result->dp_epsilon, result->rounds.back().dp_epsilon);
  // The noised model is still evaluated. Its accuracy is near chance (0.1) with this much noise
  // and falls below it in about one run in ten, so only the evaluation's having run is checked.
  EXPECT_GT(result->final_test_accuracy, 0.0);
}

TEST(SimDpTest, TinyBudgetStopsTheRunBeforeTheRoundThatWouldExceedIt) {
  TempDir dir;
  simulation::SimulationOptions o = SmallDpSimulation(dir.path(), 3);
  // Room for one round, not for two.
  o.privacy.epsilon_budget = EpsilonAfter(1) * 1.01;
  absl::StatusOr<simulation::SimulationResult> result = simulation::RunSimulation(o);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->rounds.size(), 1u);
  EXPECT_TRUE(result->rounds[0].summary.committed);
  EXPECT_TRUE(absl::StartsWith(result->finish_reason, "privacy budget spent: round 2 would bring"))
      << result->finish_reason;
  EXPECT_GT(result->dp_epsilon, 0);
  EXPECT_LE(result->dp_epsilon, o.privacy.epsilon_budget);
}

TEST(SimDpTest, RefusesBadPrivacyOptionsNamingTheKey) {
  TempDir dir;
  simulation::SimulationOptions o = SmallDpSimulation(dir.path(), 1);
  o.privacy.delta = 0;
  absl::StatusOr<simulation::SimulationResult> result = simulation::RunSimulation(o);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(result.status().message(), "delta")) << result.status();
}

std::string RunCommand(const std::string& command, int* exit_code) {
  std::string out;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  const int status = pclose(pipe);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

TEST(SimDpTest, CommandLinePrintsEpsilonPerRoundAndSpent) {
  TempDir dir;
  int code = -1;
  const std::string out = RunCommand(
      absl::StrCat("'", FL_BINARY, "' sim --work-dir '", dir.path(), "' --dataset-dir '",
                   FL_FASHION_MNIST_DIR, "' --clients 2 --rounds 2 --examples-per-client 200 ",
                   "--backend cpu --insecure-plaintext --dp-noise-multiplier 1 --dp-clip-norm 1 ",
                   "--dp-delta 1e-5 --dp-epsilon-budget 100"),
      &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "Central differential privacy")) << out;
  EXPECT_TRUE(absl::StrContains(out, "epsilon\n")) << out;  // the table's last column
  EXPECT_TRUE(absl::StrContains(out, ", epsilon spent ")) << out;

  const std::string bad = RunCommand(
      absl::StrCat("'", FL_BINARY, "' sim --work-dir '", dir.path(), "' --dp-delta 2"), &code);
  EXPECT_NE(code, 0);
  EXPECT_TRUE(absl::StrContains(bad, "delta")) << bad;
}

}  // namespace
}  // namespace fl::testing
