// `fl sim --mpi` under a real `mpirun` (OpenMPI) with three ranks on this machine: rank 0 runs
// the server and the driver, ranks 1 and 2 run the sites over gRPC with mutual TLS. The run must
// commit the checkpoints that the same simulation gives in one process, round for round.
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fl/common/file_util.h"
#include "fl/server/store.h"
#include "fl/simulation/simulation.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fl::simulation {
namespace {

using ::testing::HasSubstr;

// The committed rounds' checkpoints of the newest run in the store under `data_dir`.
std::vector<std::string> CommittedCheckpoints(const std::string& data_dir) {
  absl::StatusOr<std::unique_ptr<server::Store>> store = server::Store::OpenReadOnly(data_dir);
  EXPECT_TRUE(store.ok()) << store.status();
  if (!store.ok()) return {};
  absl::StatusOr<std::vector<server::RunRecord>> runs = (*store)->Runs();
  if (!runs.ok() || runs->empty()) return {};
  absl::StatusOr<std::vector<server::RoundRecord>> rounds = (*store)->Rounds(runs->back().run_id);
  std::vector<std::string> out;
  for (const server::RoundRecord& r : rounds.value_or(std::vector<server::RoundRecord>{})) {
    if (r.status == server::RoundStatus::kCommitted) out.push_back(r.checkpoint);
  }
  return out;
}

class MpiSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / absl::StrCat("fl_mpi_sim_test_", ::getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs `mpirun -n ranks fl sim --mpi <args>`; returns its exit code, its output in `out`.
  int MpiRun(int ranks, const std::string& args, std::string& out) {
    const std::string log = (dir_ / "mpirun.log").string();
    // As root (CI) OpenMPI wants both variables; --oversubscribe: more ranks than cores.
    const std::string command =
        absl::StrCat("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 ",
                     FL_MPIEXEC, " -n ", ranks, " --oversubscribe ", FL_BINARY,
                     " sim --mpi --no-progress ", args, " >", log, " 2>&1");
    const int status = std::system(command.c_str());
    out = ReadFile(log).value_or("");
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  std::filesystem::path dir_;
};

TEST_F(MpiSimTest, ThreeRanksCommitTheModelsOfOneProcess) {
  const std::string common =
      "--clients 16 --sample-fraction 0.25 --rounds 3 --examples-per-client 100 --seed 7";
  std::string out;
  ASSERT_EQ(MpiRun(3, absl::StrCat(common, " --work-dir ", (dir_ / "mpi").string()), out), 0)
      << out;
  EXPECT_THAT(out, HasSubstr("on each MPI rank"));
  EXPECT_THAT(out, HasSubstr("Run 1 finished: 3 rounds committed"));
  // Only rank 0 reports.
  EXPECT_EQ(out.find("Simulated federation"), out.rfind("Simulated federation")) << out;

  std::vector<std::string> run_dirs;
  for (const auto& entry : std::filesystem::directory_iterator(dir_ / "mpi")) {
    run_dirs.push_back((entry.path() / "server").string());
  }
  ASSERT_EQ(run_dirs.size(), 1u) << "one run directory, made by rank 0";
  const std::vector<std::string> spread = CommittedCheckpoints(run_dirs.front());
  ASSERT_EQ(spread.size(), 3u);

  SimulationOptions o;
  o.work_dir = (dir_ / "one").string();
  o.num_clients = 16;
  o.sample_fraction = 0.25;
  o.num_rounds = 3;
  o.max_examples_per_client = 100;
  o.seed = 7;
  absl::StatusOr<SimulationResult> one = RunSimulation(o);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(spread, CommittedCheckpoints(std::filesystem::path(one->db_path).parent_path()));
}

TEST_F(MpiSimTest, ABadOptionStopsEveryRankWithItsError) {
  std::string out;
  EXPECT_NE(MpiRun(2,
                   absl::StrCat("--partition shards --shards-per-client 0 --work-dir ",
                                (dir_ / "bad").string()),
                   out),
            0);
  EXPECT_THAT(out, HasSubstr("shards_per_client"));
}

TEST_F(MpiSimTest, AnErrorOnRankZeroAloneEndsEveryRank) {
  // Only rank 0 writes the run directory: the workers wait for its setup, and must not wait on.
  std::string out;
  const int code = MpiRun(3, "--clients 6 --rounds 1 --work-dir /proc/fl-mpi-sim-test", out);
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(code, 124) << "the job hung: " << out;
  EXPECT_THAT(out, HasSubstr("/proc/fl-mpi-sim-test"));
}

TEST_F(MpiSimTest, AFailedRunSaysWhereItIsAndWritesItsReport) {
  // Every sampled site must report and most drop out: the run fails, as it would in one process.
  std::string out;
  const std::string dir = (dir_ / "failed").string();
  const int code = MpiRun(2,
                          absl::StrCat("--clients 4 --rounds 1 --examples-per-client 50 "
                                       "--dropout-fraction 0.6 --work-dir ",
                                       dir),
                          out);
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(code, 124) << "the job hung: " << out;
  EXPECT_THAT(out, HasSubstr("SQLite file with the run"));
  EXPECT_THAT(out, HasSubstr("report.html"));
}

TEST_F(MpiSimTest, AnErrorOnOneWorkerAloneEndsEveryRank) {
  // Rank 1 cannot read the data (as on a node without it); rank 0 must not wait for it forever.
  const std::string log = (dir_ / "mpmd.log").string();
  const std::string common =
      absl::StrCat(FL_BINARY,
                   " sim --mpi --no-progress --clients 4 --rounds 1 --examples-per-client 50 "
                   "--work-dir ",
                   (dir_ / "mpmd").string());
  const std::string command =
      absl::StrCat("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 ",
                   FL_MPIEXEC, " --oversubscribe -n 1 ", common, " : -n 1 ", common,
                   " --dataset-dir /nonexistent >", log, " 2>&1");
  const int status = std::system(command.c_str());
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  const std::string out = ReadFile(log).value_or("");
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(code, 124) << "the job hung: " << out;
  EXPECT_THAT(out, HasSubstr("error: rank 1:"));
  EXPECT_THAT(out, HasSubstr("/nonexistent"));
}

}  // namespace
}  // namespace fl::simulation
