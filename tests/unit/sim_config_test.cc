// `fl sim`'s configuration: presets, a TOML file over them, the errors a user sees, and the
// reference that lists every key.
#include "cli/sim_config.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "fl/common/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/config_file_fixture.h"

namespace fl::cli {
namespace {

using ::testing::HasSubstr;

class SimConfigTest : public fl::testing::ConfigFileTest {};

TEST_F(SimConfigTest, ThePresetsSetTheirWorkloads) {
  SimConfig throughput;
  ASSERT_TRUE(ApplySimPreset("throughput", throughput).ok());
  EXPECT_EQ(throughput.sim.num_clients, 1000);
  EXPECT_EQ(throughput.sim.num_rounds, 100);
  EXPECT_DOUBLE_EQ(throughput.sim.sample_fraction, 0.01);
  EXPECT_EQ(throughput.sim.max_examples_per_client, 60);
  EXPECT_EQ(throughput.sim.fit.batch_size, 10);

  SimConfig niid;
  ASSERT_TRUE(ApplySimPreset("niid-bench-fmnist", niid).ok());
  EXPECT_EQ(niid.sim.model, "simple_cnn");
  EXPECT_EQ(niid.sim.partition.name, "dirichlet");
  EXPECT_DOUBLE_EQ(niid.sim.partition.beta, 0.5);
  EXPECT_EQ(niid.sim.fit.local_epochs, 10);
  EXPECT_EQ(niid.sim.fit.batch_size, 64);
  EXPECT_FLOAT_EQ(niid.sim.fit.learning_rate, 0.01f);
  EXPECT_DOUBLE_EQ(niid.sim.strategy.momentum, 0.9);
  EXPECT_DOUBLE_EQ(niid.sim.strategy.weight_decay, 1e-5);

  SimConfig scale;
  ASSERT_TRUE(ApplySimPreset("scale", scale).ok());
  EXPECT_EQ(scale.sim.num_clients, 100000);
  EXPECT_EQ(scale.sim.partition.name, "sampled");
  for (const std::string& name : SimPresetNames()) {
    SimConfig c;
    EXPECT_TRUE(ApplySimPreset(name, c).ok()) << name;
    EXPECT_FALSE(SimPresetDoc(name).empty()) << name;
  }
}

TEST_F(SimConfigTest, AnUnknownPresetListsTheKnownOnes) {
  SimConfig c;
  const absl::Status s = ApplySimPreset("fast", c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("unknown preset 'fast'; choose one of demo, "
                                     "niid-bench-fmnist, throughput, scale"));
}

TEST_F(SimConfigTest, AFileOverAPresetSetsOnlyItsKeys) {
  SimConfig c;
  ASSERT_TRUE(ApplySimPreset("throughput", c).ok());
  const std::string path = Write("sim.toml",
                                 "[run]\nrounds = 7\n"
                                 "[data]\nsource = \"csv\"\ncsv = \"patients.csv\"\n"
                                 "key_column = \"hospital\"\n"
                                 "[partition]\nname = \"label_k\"\nk = 3\n"
                                 "[strategy]\nname = \"fedprox\"\nproximal_mu = 0.1\n"
                                 "[privacy]\nmode = \"central\"\n");
  ASSERT_TRUE(ApplySimConfig(path, c).ok());
  EXPECT_EQ(c.sim.num_rounds, 7);
  EXPECT_EQ(c.sim.num_clients, 1000);  // the preset's
  EXPECT_EQ(c.sim.data, "csv");
  EXPECT_EQ(c.sim.csv_path, "patients.csv");
  EXPECT_EQ(c.sim.csv.key_column, "hospital");
  EXPECT_EQ(c.sim.partition.name, "label_k");
  EXPECT_EQ(c.sim.partition.k, 3);
  EXPECT_EQ(c.sim.strategy.name, "fedprox");
  EXPECT_DOUBLE_EQ(c.sim.strategy.proximal_mu, 0.1);
  EXPECT_EQ(c.sim.privacy.mode, "central");
}

TEST_F(SimConfigTest, CsvReadingKeysBecomeTheLoadersOptions) {
  SimConfig c;
  ASSERT_TRUE(ApplySimConfig(Write("sim.toml",
                                   "[data]\nsource = \"csv\"\ncsv = \"p.csv\"\n"
                                   "delimiter = \";\"\nmissing_values = \"impute\"\n"
                                   "impute_value = -1\nlabel_column = \"y\"\n"
                                   "key_column = \"site\"\ndrop_columns = [\"id\"]\n"),
                             c)
                  .ok());
  ASSERT_TRUE(FinishSimConfig(c).ok());
  EXPECT_EQ(c.sim.csv.delimiter, ';');
  EXPECT_EQ(c.sim.csv.missing_values, client::MissingValues::kImpute);
  EXPECT_FLOAT_EQ(c.sim.csv.impute_value, -1.0f);
  EXPECT_EQ(c.sim.csv.label_column, "y");
  EXPECT_EQ(c.sim.csv.key_column, "site");
  EXPECT_EQ(c.sim.csv.drop_columns, std::vector<std::string>{"id"});
  SimConfig bad;
  bad.sim.data = "csv";
  bad.csv.delimiter = "ab";
  const absl::Status s = FinishSimConfig(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("data.delimiter (--delimiter)"));
  // A CSV's reading options with other data are refused, not ignored.
  SimConfig not_csv;
  not_csv.csv.missing_values = "impute";
  EXPECT_THAT(FinishSimConfig(not_csv).message(), HasSubstr("are for a CSV file, but the data is "
                                                            "'fashion-mnist'"));
}

TEST_F(SimConfigTest, ErrorsNameTheFileTheLineAndTheKey) {
  struct Case {
    std::string text;
    std::string error;
  };
  const Case cases[] = {
      {"[run]\nrounds = 3\n[partition]\nbetaa = 0.1\n",
       "sim.toml:4: unknown key 'partition.betaa'"},
      {"[run]\nsites = -5\n", "sim.toml:2: key 'run.sites' must be >= 0, got -5"},
      {"[run]\nrounds = \"ten\"\n", "sim.toml:2: key 'run.rounds' must be an integer"},
      {"[partition]\nname = \"dirichlett\"\n", "key 'partition.name' must be one of"},
      {"[data]\nsource = \"mnist\"\n",
       "key 'data.source' must be one of fashion-mnist, csv, synthetic, got \"mnist\""},
      {"[strategy]\nname = \"fedavgx\"\n", "key 'strategy.name' must be one of"},
      {"[sites]\ntransport = \"tcp\"\n", "key 'sites.transport' must be one of inproc, grpc"},
      {"[runn]\nrounds = 3\n", "sim.toml:1: unknown table 'runn'"},
      {"[run\nrounds = 3\n", "sim.toml:1:"},
  };
  for (const Case& c : cases) {
    SimConfig config;
    const absl::Status s = ApplySimConfig(Write("sim.toml", c.text), config);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(s.message(), HasSubstr(c.error)) << c.text;
  }
  SimConfig config;
  EXPECT_EQ(ApplySimConfig(Path("missing.toml"), config).code(), absl::StatusCode::kNotFound);
}

TEST_F(SimConfigTest, TheReferenceListsEveryTableAndReadsBackToTheDefaults) {
  const std::string reference = SimConfigReference();
  for (const char* table : {"[run]", "[data]", "[partition]", "[model]", "[sites]", "[fit]",
                            "[strategy]", "[privacy]", "[secure_aggregation]"}) {
    EXPECT_THAT(reference, HasSubstr(table));
  }
  SimConfig changed;
  ASSERT_TRUE(ApplySimPreset("niid-bench-fmnist", changed).ok());
  ASSERT_TRUE(ApplySimConfig(Write("reference.toml", reference), changed).ok());
  // Every key is in the reference, so reading it back undoes the preset entirely.
  EXPECT_EQ(SimConfigToToml(changed), SimConfigToToml(SimConfig{}));
}

TEST_F(SimConfigTest, TheExampleFileInDeployIsTheReference) {
  const std::string path = std::string(FL_SOURCE_DIR) + "/deploy/sim.example.toml";
  absl::StatusOr<std::string> example = ReadFile(path);
  ASSERT_TRUE(example.ok()) << example.status();
  EXPECT_EQ(*example, SimConfigReference())
      << "regenerate it: fl sim --print-config-reference > deploy/sim.example.toml";
}

}  // namespace
}  // namespace fl::cli
