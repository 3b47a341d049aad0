// The simulation's in-process transport and virtual sites, run on the real engine, store and
// Fashion-MNIST: results equal the gRPC path's bit for bit and do not depend on the number of
// workers; ten thousand sites run; stragglers, deadlines and dropouts act on the simulated clock.
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fl/server/store.h"
#include "fl/simulation/simulation.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fl::simulation {
namespace {

// The SHA-256 of every committed round's global model, by round.
std::vector<std::string> CommittedCheckpoints(const SimulationResult& result) {
  absl::StatusOr<std::unique_ptr<server::Store>> store =
      server::Store::Open(std::filesystem::path(result.db_path).parent_path().string());
  EXPECT_TRUE(store.ok()) << store.status();
  if (!store.ok()) return {};
  absl::StatusOr<std::vector<server::RoundRecord>> rounds = (*store)->Rounds(result.run_id);
  EXPECT_TRUE(rounds.ok()) << rounds.status();
  std::vector<std::string> out;
  for (const server::RoundRecord& r : *rounds) {
    if (r.status == server::RoundStatus::kCommitted) out.push_back(r.checkpoint);
  }
  return out;
}

class VirtualFederationTest : public ::testing::Test {
 protected:
  SimulationOptions Options(const std::string& name) {
    SimulationOptions o;
    o.work_dir = (std::filesystem::path(::testing::TempDir()) /
                  absl::StrCat("vf-", name, "-", ::testing::UnitTest::GetInstance()->random_seed()))
                     .string();
    std::filesystem::remove_all(o.work_dir);
    o.num_clients = 6;
    o.num_rounds = 2;
    o.max_examples_per_client = 100;
    o.seed = 7;
    o.round_timeout = absl::Seconds(60);
    return o;
  }
  // "inproc"; "grpc": the real server, mutual TLS on loopback; "plaintext": gRPC, one connection.
  static void UseTransport(SimulationOptions& o, const std::string& transport) {
    o.transport = transport == "inproc" ? "inproc" : "grpc";
    o.tls = transport == "grpc";
  }
};

TEST_F(VirtualFederationTest, InprocGivesTheModelOfTheGrpcPath) {
  // Sampling a quarter of the sites: the same sites are drawn although the server knows them by
  // certificate fingerprints over gRPC and by name hashes in process.
  SimulationOptions inproc = Options("inproc");
  inproc.num_clients = 16;
  inproc.sample_fraction = 0.25;
  inproc.num_rounds = 3;
  SimulationOptions grpc = inproc;
  grpc.work_dir = Options("grpc").work_dir;
  UseTransport(grpc, "grpc");
  SimulationOptions plaintext = inproc;
  plaintext.work_dir = Options("plaintext").work_dir;
  UseTransport(plaintext, "plaintext");
  absl::StatusOr<SimulationResult> a = RunSimulation(inproc);
  absl::StatusOr<SimulationResult> b = RunSimulation(grpc);
  absl::StatusOr<SimulationResult> c = RunSimulation(plaintext);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(c.ok()) << c.status();
  const std::vector<std::string> ca = CommittedCheckpoints(*a);
  ASSERT_EQ(ca.size(), 3u);
  EXPECT_EQ(ca, CommittedCheckpoints(*b));
  EXPECT_EQ(ca, CommittedCheckpoints(*c));
  EXPECT_EQ(a->final_test_accuracy, b->final_test_accuracy);
  EXPECT_EQ(b->rounds.front().summary.num_sampled, 4);
}

TEST_F(VirtualFederationTest, DropoutsAreTheSameSitesOverEitherTransport) {
  // Which sites drop out is drawn from the site and the round attempt, not from ids that differ
  // between transports (a certificate's fingerprint, a name's hash, "plain:" and the name).
  std::vector<std::vector<std::string>> models;
  for (const char* transport : {"inproc", "grpc", "plaintext"}) {
    SimulationOptions o = Options(absl::StrCat("dropouts-", transport));
    o.num_clients = 12;
    o.sample_fraction = 0.5;
    o.min_fit_clients = 2;
    o.num_rounds = 3;
    o.heterogeneity.dropout_fraction = 0.3;
    UseTransport(o, transport);
    absl::StatusOr<SimulationResult> r = RunSimulation(o);
    ASSERT_TRUE(r.ok()) << transport << ": " << r.status();
    models.push_back(CommittedCheckpoints(*r));
    int accepted = 0;
    for (const SimulationRound& round : r->rounds) accepted += round.summary.num_accepted;
    EXPECT_LT(accepted, 3 * 6) << transport << ": some sampled sites should have dropped out";
  }
  EXPECT_EQ(models[0], models[1]);
  EXPECT_EQ(models[0], models[2]);
}

TEST_F(VirtualFederationTest, SitesAwayInARoundAreDroppedByTheClientTimeout) {
  // About 30 % of the sites are away in each round (drawn per site and round): sampled, they
  // never answer, the client timeout drops them on the simulated clock, and the round commits
  // with the rest; the same sites are away over either transport and with any number of workers.
  std::vector<std::vector<std::string>> models;
  for (const char* variant : {"inproc-1", "inproc-3", "plaintext"}) {
    SimulationOptions o = Options(absl::StrCat("away-", variant));
    o.num_clients = 20;
    o.sample_fraction = 0.5;
    o.min_fit_clients = 3;
    o.num_rounds = 4;
    o.heterogeneity.availability = 0.7;
    o.workers = std::string(variant) == "inproc-3" ? 3 : 1;
    UseTransport(o, std::string(variant) == "plaintext" ? "plaintext" : "inproc");
    absl::StatusOr<SimulationResult> r = RunSimulation(o);
    ASSERT_TRUE(r.ok()) << variant << ": " << r.status();
    models.push_back(CommittedCheckpoints(*r));
    ASSERT_EQ(models.back().size(), 4u) << variant;
    int sampled = 0, accepted = 0;
    for (const SimulationRound& round : r->rounds) {
      sampled += round.summary.num_sampled;
      accepted += round.summary.num_accepted;
    }
    EXPECT_LT(accepted, sampled) << variant << ": some sampled sites should have been away";
    EXPECT_GT(accepted, sampled / 2) << variant;
  }
  EXPECT_EQ(models[0], models[1]);
  EXPECT_EQ(models[0], models[2]);
}

TEST_F(VirtualFederationTest, WorkerCountDoesNotChangeTheModel) {
  std::vector<std::vector<std::string>> models;
  for (int workers : {1, 3, 8}) {
    SimulationOptions o = Options(absl::StrCat("workers", workers));
    o.num_clients = 20;
    o.sample_fraction = 0.5;
    o.num_rounds = 3;
    o.max_examples_per_client = 50;
    o.workers = workers;
    absl::StatusOr<SimulationResult> r = RunSimulation(o);
    ASSERT_TRUE(r.ok()) << r.status();
    models.push_back(CommittedCheckpoints(*r));
    ASSERT_EQ(models.back().size(), 3u);
  }
  EXPECT_EQ(models[0], models[1]);
  EXPECT_EQ(models[0], models[2]);
}

TEST_F(VirtualFederationTest, TenThousandSitesRunWithAHundredSampled) {
  SimulationOptions o = Options("10k");
  o.num_clients = 10000;  // 6 Fashion-MNIST examples each
  o.sample_fraction = 0.01;
  o.num_rounds = 3;
  o.max_examples_per_client = 0;
  absl::StatusOr<SimulationResult> r = RunSimulation(o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->rounds.size(), 3u);
  for (const SimulationRound& round : r->rounds) {
    EXPECT_TRUE(round.summary.committed) << round.summary.reason;
    EXPECT_EQ(round.summary.num_sampled, 100);
    EXPECT_EQ(round.summary.num_accepted, 100);
  }
  EXPECT_GT(r->final_test_accuracy, 0.3);
}

TEST_F(VirtualFederationTest, SlowSitesMissTheDeadlineOnTheSimulatedClock) {
  SimulationOptions o = Options("slow");
  o.num_clients = 10;
  o.num_rounds = 2;
  o.max_examples_per_client = 20;
  o.min_fit_clients = 1;
  o.round_timeout = absl::Seconds(60);
  // A normal site takes 20 s for its 20 examples, a slow one 200 s: past the 60 s deadline.
  o.heterogeneity.compute_per_example = absl::Seconds(1);
  o.heterogeneity.slow_fraction = 0.3;
  o.heterogeneity.slow_factor = 10;
  absl::StatusOr<SimulationResult> r = RunSimulation(o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->rounds.size(), 2u);
  for (const SimulationRound& round : r->rounds) {
    EXPECT_TRUE(round.summary.committed) << round.summary.reason;
    EXPECT_EQ(round.summary.num_sampled, 10);
    // The slow sites heartbeat, so the round waits for them until its deadline (the engine
    // ticks every heartbeat interval of simulated time, 10 s).
    EXPECT_LT(round.summary.num_accepted, 10);
    EXPECT_GT(round.summary.num_accepted, 0);
    EXPECT_GE(round.summary.duration, absl::Seconds(60));
    EXPECT_LT(round.summary.duration, absl::Seconds(70));
  }
  // The seed fixes which sites are slow: both rounds lose the same ones.
  EXPECT_EQ(r->rounds[0].summary.num_accepted, r->rounds[1].summary.num_accepted);
}

TEST_F(VirtualFederationTest, DroppedSitesAreClosedOutByTheClientTimeout) {
  SimulationOptions o = Options("dropout");
  o.num_clients = 20;
  o.num_rounds = 3;
  o.max_examples_per_client = 20;
  o.min_fit_clients = 1;
  o.round_timeout = absl::Minutes(10);
  o.heterogeneity.dropout_fraction = 0.3;
  absl::StatusOr<SimulationResult> r = RunSimulation(o);
  ASSERT_TRUE(r.ok()) << r.status();
  int lost = 0;
  for (const SimulationRound& round : r->rounds) {
    EXPECT_TRUE(round.summary.committed) << round.summary.reason;
    lost += round.summary.num_sampled - round.summary.num_accepted;
    if (round.summary.num_accepted < round.summary.num_sampled) {
      // Silent sites are offline after client_timeout (90 s), long before the deadline.
      EXPECT_GE(round.summary.duration, absl::Seconds(90));
      EXPECT_LT(round.summary.duration, absl::Minutes(10));
    }
  }
  EXPECT_GT(lost, 0);
}

TEST_F(VirtualFederationTest, RefusesAnUnknownTransportAndBadHeterogeneity) {
  SimulationOptions o = Options("bad");
  o.transport = "udp";
  EXPECT_THAT(RunSimulation(o).status().message(), ::testing::HasSubstr("choose inproc or grpc"));
  o = Options("bad2");
  o.heterogeneity.slow_factor = 0.5;
  absl::Status s = RunSimulation(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("slow_factor must be >= 1"));
}

}  // namespace
}  // namespace fl::simulation
