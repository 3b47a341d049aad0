// The data of `fl sim` (simulation/src/sim_data.cc): a CSV file with a natural split by a key
// column, FedProx's Synthetic with a site per device, the partitioners by name, the test set
// held out for the server, and the refusals a researcher meets; then whole runs on each.
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fl/simulation/simulation.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "simulation/internal/sim_setup.h"

namespace fl::simulation {
namespace {

using ::testing::HasSubstr;

class SimDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("fl_sim_data_test_", ::getpid(), "_", info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A CSV of `rows` patients in 3 hospitals (A holds half), 2 features and a label that a
  // linear model can learn.
  std::string WritePatients(int rows) {
    const std::string path = (dir_ / "patients.csv").string();
    std::ofstream out(path);
    out << "hospital,age,bmi,label\n";
    for (int i = 0; i < rows; ++i) {
      const char* hospital = i % 2 == 0 ? "A" : i % 4 == 1 ? "B" : "C";
      const double age = 20 + (i * 37) % 60;
      const double bmi = 18 + (i * 13) % 20;
      out << hospital << "," << age << "," << bmi << "," << (age + bmi > 70 ? 1 : 0) << "\n";
    }
    return path;
  }

  SimulationOptions CsvOptions(int rows) {
    SimulationOptions o;
    o.work_dir = (dir_ / "run").string();
    o.data = "csv";
    o.csv_path = WritePatients(rows);
    o.csv.key_column = "hospital";
    o.num_clients = 0;
    return o;
  }

  std::filesystem::path dir_;
};

TEST_F(SimDataTest, ACsvKeyColumnGivesOneSitePerKeyAndIsNotAFeature) {
  absl::StatusOr<internal::SimulationData> data = internal::PrepareSimulation(CsvOptions(200));
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->partition_name, "natural");
  ASSERT_EQ(data->parts.size(), 3u);  // A, B, C in key order
  EXPECT_EQ(data->train->num_features, 2);
  // 20 % of the rows are the server's test set; the sites hold the rest, A about half.
  EXPECT_EQ(data->test->num_examples(), 40);
  EXPECT_EQ(data->train->num_examples(), 160);
  EXPECT_EQ(data->summary.parties[0].num_examples + data->summary.parties[1].num_examples +
                data->summary.parties[2].num_examples,
            160);
  EXPECT_GT(data->summary.parties[0].num_examples, 60);
  for (int64_t row : data->parts[1]) EXPECT_EQ(data->train->keys[static_cast<size_t>(row)], "B");
}

TEST_F(SimDataTest, TheSameSeedHoldsOutTheSameTestRows) {
  SimulationOptions o = CsvOptions(100);
  absl::StatusOr<internal::SimulationData> a = internal::PrepareSimulation(o);
  absl::StatusOr<internal::SimulationData> b = internal::PrepareSimulation(o);
  o.seed = 9;
  absl::StatusOr<internal::SimulationData> c = internal::PrepareSimulation(o);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->test->features, b->test->features);
  EXPECT_NE(a->test->features, c->test->features);
}

TEST_F(SimDataTest, ACsvCanBeSplitByAnyPartitionerInstead) {
  SimulationOptions o = CsvOptions(200);
  o.partition.name = "dirichlet";
  o.partition.beta = 0.5;
  o.num_clients = 4;
  absl::StatusOr<internal::SimulationData> data = internal::PrepareSimulation(o);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->partition_name, "dirichlet");
  EXPECT_EQ(data->parts.size(), 4u);
  // Without a number of sites, a split that is not the data's own has 10.
  o.num_clients = 0;
  o.partition.name = "iid";
  data = internal::PrepareSimulation(o);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->parts.size(), 10u);
}

TEST_F(SimDataTest, RefusalsSayWhatToChange) {
  auto refusal = [](const SimulationOptions& o) {
    absl::StatusOr<internal::SimulationData> data = internal::PrepareSimulation(o);
    EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument) << data.status();
    return std::string(data.status().message());
  };
  SimulationOptions o = CsvOptions(100);
  o.num_clients = 5;
  EXPECT_THAT(refusal(o), HasSubstr("the natural split has 3 sites but num_clients is 5: set "
                                    "--clients 3 (or 0)"));
  o = CsvOptions(100);
  o.csv.key_column.clear();
  o.csv.drop_columns = {"hospital"};
  o.partition.name = "natural";
  EXPECT_THAT(refusal(o), HasSubstr("needs data with a split of its own"));
  o = CsvOptions(100);
  o.model = "simple_cnn";
  EXPECT_THAT(refusal(o), HasSubstr("model 'simple_cnn' on CSV"));
  o = CsvOptions(100);
  o.csv_path.clear();
  EXPECT_THAT(refusal(o), HasSubstr("needs csv_path (--csv FILE)"));
  o = CsvOptions(100);
  o.data = "mnist";
  EXPECT_THAT(refusal(o), HasSubstr("unknown data 'mnist'; choose fashion-mnist, csv or"));
  o = CsvOptions(100);
  o.data = "fashion-mnist";  // a CSV file and key column given, but not the CSV source
  EXPECT_THAT(refusal(o), HasSubstr("set data.source = \"csv\""));
  o = CsvOptions(100);
  o.partition.name = "sampled";
  o.num_clients = 10;
  EXPECT_THAT(refusal(o), HasSubstr("set --examples-per-client"));
  o = CsvOptions(100);
  o.test_fraction = 1;
  EXPECT_THAT(refusal(o), HasSubstr("test_fraction must be in (0, 1)"));
}

TEST_F(SimDataTest, SyntheticDataGivesASitePerDeviceWithItsOwnTestRows) {
  SimulationOptions o;
  o.data = "synthetic";
  o.num_clients = 6;
  o.synthetic.max_examples_per_device = 200;
  absl::StatusOr<internal::SimulationData> data = internal::PrepareSimulation(o);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->partition_name, "natural");
  ASSERT_EQ(data->parts.size(), 6u);
  EXPECT_EQ(data->train->num_features, kSyntheticNumFeatures);
  int64_t train = 0;
  for (const auto& part : data->parts) train += static_cast<int64_t>(part.size());
  EXPECT_EQ(train, data->train->num_examples());
  // About a fifth of each device's rows are tested on by the server.
  EXPECT_NEAR(
      static_cast<double>(data->test->num_examples()) / (data->test->num_examples() + train), 0.2,
      0.05);
}

TEST_F(SimDataTest, WholeRunsOnACsvAndOnSyntheticData) {
  SimulationOptions o = CsvOptions(300);
  o.num_rounds = 3;
  o.fit.learning_rate = 0.01f;
  absl::StatusOr<SimulationResult> csv = RunSimulation(o);
  ASSERT_TRUE(csv.ok()) << csv.status();
  EXPECT_EQ(csv->rounds.size(), 3u);
  EXPECT_EQ(csv->partition.parties.size(), 3u);
  EXPECT_GT(csv->final_test_accuracy, 0);

  SimulationOptions s;
  s.work_dir = (dir_ / "synthetic").string();
  s.data = "synthetic";
  s.num_clients = 0;  // the paper's 30 devices
  s.synthetic.max_examples_per_device = 300;
  s.num_rounds = 2;
  s.sample_fraction = 0.2;
  s.min_fit_clients = 1;
  absl::StatusOr<SimulationResult> synthetic = RunSimulation(s);
  ASSERT_TRUE(synthetic.ok()) << synthetic.status();
  EXPECT_EQ(synthetic->partition.parties.size(), 30u);
  EXPECT_EQ(synthetic->rounds.size(), 2u);
  EXPECT_EQ(synthetic->rounds[0].summary.num_sampled, 6);
}

}  // namespace
}  // namespace fl::simulation
