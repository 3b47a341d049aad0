// Attacking sites in `fl sim` (fl/simulation/attacks.h) on Fashion-MNIST, through the real engine:
// a third of the sites sending noise instead of training ruin FedAvg's model and not the
// coordinate-wise median's; every attack runs; what cannot be simulated is refused.
#include <string>

#include "absl/strings/match.h"
#include "fl/simulation/simulation.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_federation.h"

namespace fl::testing {
namespace {

using ::testing::HasSubstr;

simulation::SimulationOptions AttackedSimulation(const std::string& dir, const std::string& attack,
                                                 const std::string& strategy) {
  simulation::SimulationOptions o;
  o.work_dir = dir;
  o.dataset_dir = FL_FASHION_MNIST_DIR;
  o.num_clients = 9;
  o.num_rounds = 3;
  o.max_examples_per_client = 300;
  o.model = "softmax";
  o.backend = "cpu";
  o.seed = 3;
  o.round_timeout = absl::Seconds(60);
  o.strategy.name = strategy;
  o.attack = {.kind = attack, .fraction = 0.34, .scale = 5};
  return o;
}

TEST(AttackSimTest, NoiseFromAThirdOfTheSitesRuinsFedAvgButNotTheMedian) {
  TempDir a, b;
  absl::StatusOr<simulation::SimulationResult> fedavg =
      simulation::RunSimulation(AttackedSimulation(a.path(), "gaussian", "fedavg"));
  ASSERT_TRUE(fedavg.ok()) << fedavg.status();
  absl::StatusOr<simulation::SimulationResult> median =
      simulation::RunSimulation(AttackedSimulation(b.path(), "gaussian", "fedmedian"));
  ASSERT_TRUE(median.ok()) << median.status();
  EXPECT_GT(median->final_test_accuracy, 0.6);
  EXPECT_LT(fedavg->final_test_accuracy, median->final_test_accuracy - 0.2)
      << "fedavg " << fedavg->final_test_accuracy << ", fedmedian " << median->final_test_accuracy;
}

// FLTrust's server trains on 100 rows of its own: sign-flipped changes point away from its change
// and count for nothing. Over gRPC too (the root trainer reaches the real server), where the
// attack rewrites what the sites recorded before it goes over the wire.
TEST(AttackSimTest, FLTrustIgnoresSignFlippedChangesInProcessAndOverGrpc) {
  for (const char* transport : {"inproc", "grpc"}) {
    TempDir dir;
    simulation::SimulationOptions o = AttackedSimulation(dir.path(), "sign_flip", "fltrust");
    o.transport = transport;
    o.tls = false;
    if (std::string(transport) == "grpc") o.num_rounds = 1;
    absl::StatusOr<simulation::SimulationResult> r = simulation::RunSimulation(o);
    ASSERT_TRUE(r.ok()) << transport << ": " << r.status();
    EXPECT_EQ(r->poisoned_updates, 3 * o.num_rounds) << transport;
    if (std::string(transport) == "inproc") {
      EXPECT_GT(r->final_test_accuracy, 0.6) << transport;
      TempDir avg_dir;
      absl::StatusOr<simulation::SimulationResult> fedavg =
          simulation::RunSimulation(AttackedSimulation(avg_dir.path(), "sign_flip", "fedavg"));
      ASSERT_TRUE(fedavg.ok()) << fedavg.status();
      EXPECT_LT(fedavg->final_test_accuracy, r->final_test_accuracy - 0.2)
          << "the same attack against FedAvg";
    } else {
      ASSERT_EQ(r->rounds.size(), 1u);
      EXPECT_TRUE(r->rounds[0].summary.committed) << r->rounds[0].summary.reason;
    }
  }
}

// Each attack changes what FedAvg commits (against the same run without it: same seed, same
// sites, same rows), rewrites one update per attacker per round (label flipping poisons data,
// not updates), and a robust strategy's round commits under it.
TEST(AttackSimTest, EveryAttackChangesFedAvgsModelAndKrumRunsUnderIt) {
  TempDir clean_dir;
  simulation::SimulationOptions clean = AttackedSimulation(clean_dir.path(), "none", "fedavg");
  clean.num_rounds = 1;
  absl::StatusOr<simulation::SimulationResult> base = simulation::RunSimulation(clean);
  ASSERT_TRUE(base.ok()) << base.status();
  EXPECT_EQ(base->poisoned_updates, 0);
  for (const char* attack : {"sign_flip", "scale", "label_flip", "alie"}) {
    TempDir dir;
    simulation::SimulationOptions o = AttackedSimulation(dir.path(), attack, "fedavg");
    o.num_rounds = 1;
    absl::StatusOr<simulation::SimulationResult> r = simulation::RunSimulation(o);
    ASSERT_TRUE(r.ok()) << attack << ": " << r.status();
    EXPECT_EQ(r->poisoned_updates, std::string(attack) == "label_flip" ? 0 : 3) << attack;
    EXPECT_NE(r->final_test_accuracy, base->final_test_accuracy) << attack;

    TempDir krum_dir;
    o = AttackedSimulation(krum_dir.path(), attack, "krum");
    o.num_rounds = 1;
    o.strategy.num_malicious = 3;
    r = simulation::RunSimulation(o);
    ASSERT_TRUE(r.ok()) << attack << ": " << r.status();
    ASSERT_EQ(r->rounds.size(), 1u) << attack;
    EXPECT_TRUE(r->rounds[0].summary.committed) << attack << ": " << r->rounds[0].summary.reason;
  }
}

TEST(AttackSimTest, AttacksOnUpdatesNotInTheClearAreRefused) {
  TempDir dir;
  simulation::SimulationOptions o = AttackedSimulation(dir.path(), "sign_flip", "fedavg");
  o.update_encoding = "int8";
  absl::StatusOr<simulation::SimulationResult> r = simulation::RunSimulation(o);
  EXPECT_THAT(r.status().message(),
              HasSubstr("attack 'sign_flip' rewrites float32 updates in the clear between training "
                        "and delivery: not with secure aggregation, update_encoding 'int8'"));
  o.attack.kind = "label_flip";  // poisons the data: any encoding
  EXPECT_TRUE(simulation::RunSimulation(o).ok());
  o.attack = {.kind = "alie", .fraction = 1.0};
  EXPECT_THAT(simulation::RunSimulation(o).status().message(),
              HasSubstr("attack fraction must be in [0, 1), got 1"));
}

}  // namespace
}  // namespace fl::testing
