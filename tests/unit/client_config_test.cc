// `fl client`'s TOML configuration (cli/client_config.h) and the checks of a site's data against
// its model (cli/client_site.h).
#include "cli/client_config.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cli/client_site.h"
#include "fl/common/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/config_file_fixture.h"

namespace fl::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class ClientConfigTest : public fl::testing::ConfigFileTest {
 protected:
  // Applies `contents` (as site.toml) over a default config and returns the error.
  absl::Status ApplyText(const std::string& contents) {
    ClientConfig config;
    return ApplyClientConfig(Write("site.toml", contents), config);
  }
};

constexpr char kFullFile[] = R"(# every key, none at its default
[server]
address = "fl.example.org:9443"
ca = "ca.pem"
cert = "site.pem"
key = "site.key"
name = "hospital-a"
insecure_plaintext = true

[data]
format = "idx"
path = "train.csv"
label_column = "outcome"
delimiter = ";"
drop_columns = ["patient_id", "admitted"]
feature_columns = ["age", "bmi"]
missing_values = "impute"
impute_value = -1
images = "train-images.gz"
labels = "train-labels.gz"
test_path = "test.csv"
test_images = "test-images.gz"
test_labels = "test-labels.gz"
test_fraction = 0.25
split_seed = 7
shard = 1
num_shards = 4

[model]
kind = "simple_cnn"
features = 3072
classes = 100
hidden = [256, 128]
image_height = 32
image_width = 32
image_channels = 3

[training]
backend = "cpu"
cpu_threads = 2
momentum = 0.9
weight_decay = 0.0005
proximal_mu = 0.01
clip_norm = 5
scaffold = true
seed = 11

[limits]
max_local_epochs = 2
allowed_models = ["mlp", "simple_cnn"]
require_differential_privacy = true
require_secure_aggregation = true

[client]
heartbeat_s = 2.5
reconnect_timeout_s = 600
poll_wait_s = 5
)";

TEST_F(ClientConfigTest, FullFileSetsEveryKey) {
  ClientConfig c;
  absl::Status s = ApplyClientConfig(Write("site.toml", kFullFile), c);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(c.client.server_address, "fl.example.org:9443");
  EXPECT_EQ(c.client.ca_cert_path, "ca.pem");
  EXPECT_EQ(c.client.cert_path, "site.pem");
  EXPECT_EQ(c.client.key_path, "site.key");
  EXPECT_EQ(c.client.name, "hospital-a");
  EXPECT_TRUE(c.client.insecure_plaintext);
  EXPECT_EQ(c.data.format, "idx");
  EXPECT_EQ(c.data.path, "train.csv");
  EXPECT_EQ(c.data.label_column, "outcome");
  EXPECT_EQ(c.data.delimiter, ";");
  EXPECT_THAT(c.data.drop_columns, ElementsAre("patient_id", "admitted"));
  EXPECT_THAT(c.data.feature_columns, ElementsAre("age", "bmi"));
  EXPECT_EQ(c.data.missing_values, "impute");
  EXPECT_EQ(c.data.impute_value, -1.0f);
  EXPECT_EQ(c.data.images, "train-images.gz");
  EXPECT_EQ(c.data.labels, "train-labels.gz");
  EXPECT_EQ(c.data.test_path, "test.csv");
  EXPECT_EQ(c.data.test_images, "test-images.gz");
  EXPECT_EQ(c.data.test_labels, "test-labels.gz");
  EXPECT_EQ(c.data.test_fraction, 0.25);
  EXPECT_EQ(c.data.split_seed, 7u);
  EXPECT_EQ(c.data.shard, 1);
  EXPECT_EQ(c.data.num_shards, 4);
  EXPECT_EQ(c.model.kind, "simple_cnn");
  EXPECT_EQ(c.model.features, 3072);
  EXPECT_EQ(c.model.classes, 100);
  EXPECT_THAT(c.model.hidden, ElementsAre(256, 128));
  EXPECT_EQ(c.model.image_height, 32);
  EXPECT_EQ(c.model.image_width, 32);
  EXPECT_EQ(c.model.image_channels, 3);
  EXPECT_EQ(c.training.backend, "cpu");
  EXPECT_EQ(c.training.cpu_threads, 2);
  EXPECT_EQ(c.training.momentum, 0.9f);
  EXPECT_EQ(c.training.weight_decay, 0.0005f);
  EXPECT_EQ(c.training.proximal_mu, 0.01f);
  EXPECT_EQ(c.training.clip_norm, 5.0f);
  EXPECT_TRUE(c.training.scaffold);
  EXPECT_EQ(c.training.seed, 11u);
  EXPECT_EQ(c.client.limits.max_local_epochs, 2);
  EXPECT_THAT(c.client.limits.allowed_models, ElementsAre("mlp", "simple_cnn"));
  EXPECT_TRUE(c.client.limits.require_differential_privacy);
  EXPECT_TRUE(c.client.limits.require_secure_aggregation);
  EXPECT_EQ(c.client.heartbeat_interval, absl::Milliseconds(2500));
  EXPECT_EQ(c.client.reconnect_timeout, absl::Seconds(600));
  EXPECT_EQ(c.client.poll_wait, absl::Seconds(5));

  // The effective configuration reads back to the same values.
  ClientConfig again;
  ASSERT_TRUE(ApplyClientConfig(Write("again.toml", ClientConfigToToml(c)), again).ok());
  EXPECT_EQ(ClientConfigToToml(again), ClientConfigToToml(c));
}

TEST_F(ClientConfigTest, DefaultsAndAbsentKeys) {
  ClientConfig c;
  ASSERT_TRUE(ApplyClientConfig(Write("empty.toml", ""), c).ok());
  EXPECT_EQ(ClientConfigToToml(c), ClientConfigToToml(ClientConfig{}));
  EXPECT_EQ(c.client.server_address, "127.0.0.1:7443");
  EXPECT_EQ(c.data.format, "csv");
  EXPECT_EQ(c.data.label_column, "label");
  EXPECT_EQ(c.data.delimiter, ",");
  EXPECT_TRUE(c.data.drop_columns.empty() && c.data.feature_columns.empty());
  EXPECT_EQ(c.data.missing_values, "refuse");
  EXPECT_EQ(c.model.kind, "softmax");
  EXPECT_EQ(c.model.classes, 0);
  EXPECT_EQ(c.training.backend, "auto");
  EXPECT_EQ(c.client.limits.max_local_epochs, 0);
  EXPECT_TRUE(c.client.limits.allowed_models.empty());
  EXPECT_FALSE(c.client.limits.require_differential_privacy);
  EXPECT_FALSE(c.client.limits.require_secure_aggregation);
  EXPECT_EQ(c.client.heartbeat_interval, absl::Seconds(10));

  // A key the file does not set keeps the value given before (e.g. a caller's own default).
  ClientConfig d;
  d.client.name = "set-before";
  ASSERT_TRUE(ApplyClientConfig(Write("one.toml", "[limits]\nmax_local_epochs = 3\n"), d).ok());
  EXPECT_EQ(d.client.name, "set-before");
  EXPECT_EQ(d.client.limits.max_local_epochs, 3);
}

TEST_F(ClientConfigTest, UnknownKeysAndTablesAreRefusedByName) {
  const std::string file = Path("site.toml");
  absl::Status s = ApplyText("[data]\nformat = \"csv\"\n\npathh = \"a.csv\"\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), absl::StrCat(file, ":4: unknown key 'data.pathh'"));

  s = ApplyText("[limits]\nmax_local_epochs = 1\n[limit]\nmax_local_epochs = 1\n");
  EXPECT_EQ(s.message(), absl::StrCat(file, ":3: unknown table 'limit'"));

  s = ApplyText("address = \"x:1\"\n");
  EXPECT_EQ(s.message(), absl::StrCat(file, ":1: unknown key 'address'"));

  // The first problem in the file is the one reported.
  s = ApplyText("[model]\nzzz = 1\naaa = 2\n");
  EXPECT_EQ(s.message(), absl::StrCat(file, ":2: unknown key 'model.zzz'"));
}

TEST_F(ClientConfigTest, WrongTypesAndValuesNameFileLineAndKey) {
  const std::string file = Path("site.toml");
  auto expect = [&](const std::string& text, const std::string& message) {
    absl::Status s = ApplyText(text);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_EQ(s.message(), absl::StrCat(file, ":", message)) << text;
  };
  expect("[model]\nclasses = \"10\"\n", "2: key 'model.classes' must be an integer, got a string");
  expect("[model]\nclasses = -1\n", "2: key 'model.classes' must be >= 0, got -1");
  expect("[model]\nkind = \"cnn\"\n",
         "2: key 'model.kind' must be one of softmax, logistic, mlp, simple_cnn, got \"cnn\"");
  expect("[model]\nhidden = [64, 0]\n", "2: key 'model.hidden[1]' must be >= 1, got 0");
  expect("[model]\nhidden = 64\n",
         "2: key 'model.hidden' must be an array of integers, got an "
         "integer");
  expect("[data]\nformat = \"parquet\"\n",
         "2: key 'data.format' must be one of csv, idx, got \"parquet\"");
  expect("[data]\ntest_fraction = 1\n", "2: key 'data.test_fraction' must be in [0, 1), got 1.0");
  expect("\n[training]\nbackend = \"gpu\"\n",
         "3: key 'training.backend' must be one of auto, cpu, cuda, got \"gpu\"");
  expect("[training]\nmomentum = -0.5\n", "2: key 'training.momentum' must be >= 0, got -0.5");
  expect("[training]\nscaffold = \"yes\"\n",
         "2: key 'training.scaffold' must be a boolean, got a string");
  expect("[limits]\nmax_local_epochs = -1\n",
         "2: key 'limits.max_local_epochs' must be >= 0, got -1");
  expect("[limits]\nallowed_models = [\"mlp\", 3]\n",
         "2: key 'limits.allowed_models[1]' must be a string, got an integer");
  expect("[client]\nheartbeat_s = 0\n", "2: key 'client.heartbeat_s' must be > 0, got 0.0");
  expect("[server]\naddress = \"\"\n", "2: key 'server.address' must not be empty");
  expect("[data]\ndelimiter = \";;\"\n",
         "2: key 'data.delimiter' must be one character (\"\\t\" or \"tab\" for a tab), got "
         "\";;\"");
  expect("[data]\ndelimiter = \"\\\"\"\n",
         "2: key 'data.delimiter' must be usable: delimiter '\"' cannot separate CSV fields (not "
         "a quote, line break, space, digit, letter, '.', '+', '-' or non-ASCII byte): use ',', "
         "';', '\\t' or '|'");
  expect("[data]\ndelimiter = 59\n", "2: key 'data.delimiter' must be a string, got an integer");
  expect("[data]\nmissing_values = \"zero\"\n",
         "2: key 'data.missing_values' must be one of refuse, drop_row, impute, got \"zero\"");
  expect("[data]\ndrop_columns = \"id\"\n",
         "2: key 'data.drop_columns' must be an array of strings, got a string");
  expect("[data]\nfeature_columns = [\"a\", 1]\n",
         "2: key 'data.feature_columns[1]' must be a string, got an integer");
  expect("[data]\nimpute_value = \"0\"\n",
         "2: key 'data.impute_value' must be a number, got a string");
}

TEST_F(ClientConfigTest, ATabDelimiterReadsAndWritesBack) {
  ClientConfig c;
  ASSERT_TRUE(ApplyClientConfig(Write("tab.toml", "[data]\ndelimiter = \"\\t\"\n"), c).ok());
  EXPECT_EQ(c.data.delimiter, "\t");
  EXPECT_THAT(ClientConfigToToml(c), HasSubstr("delimiter = \"\\t\"\n"));
  ClientConfig again;
  ASSERT_TRUE(ApplyClientConfig(Write("again.toml", ClientConfigToToml(c)), again).ok());
  EXPECT_EQ(again.data.delimiter, "\t");
  // As typed on a command line: backslash-t or "tab".
  for (const char* text : {"\t", "\\t", "tab"}) {
    absl::StatusOr<char> d = ParseDelimiter(text);
    ASSERT_TRUE(d.ok()) << text;
    EXPECT_EQ(*d, '\t');
  }
  EXPECT_EQ(*ParseDelimiter(";"), ';');
  for (const char* bad : {"", "5", ";;"}) EXPECT_FALSE(ParseDelimiter(bad).ok()) << bad;
}

TEST_F(ClientConfigTest, SyntaxErrorAndMissingFile) {
  absl::Status s = ApplyText("[server]\naddress = \"x\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr(absl::StrCat(Path("site.toml"), ":2:")));

  ClientConfig c;
  s = ApplyClientConfig(Path("absent.toml"), c);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr(Path("absent.toml")));
}

TEST_F(ClientConfigTest, ValidationNamesTheKeysThatDoNotGoTogether) {
  ClientConfig c;
  c.client.insecure_plaintext = true;
  absl::Status s = ValidateClientConfig(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("data.path"));

  c.data.path = "site.csv";
  EXPECT_TRUE(ValidateClientConfig(c).ok());

  c.data.format = "idx";
  s = ValidateClientConfig(c);
  EXPECT_THAT(std::string(s.message()), HasSubstr("data.images and data.labels"));
  c.data.images = "i";
  c.data.labels = "l";
  c.data.path.clear();
  EXPECT_TRUE(ValidateClientConfig(c).ok());
  c.data.test_images = "ti";
  EXPECT_THAT(std::string(ValidateClientConfig(c).message()),
              HasSubstr("data.test_images and data.test_labels go together"));
  c.data.test_labels = "tl";
  c.data.test_fraction = 0.2;
  EXPECT_THAT(std::string(ValidateClientConfig(c).message()), HasSubstr("choose one"));
  c.data.test_fraction = 0;

  c.data.num_shards = 3;
  c.data.shard = 3;
  EXPECT_THAT(std::string(ValidateClientConfig(c).message()),
              HasSubstr("data.shard (--shard) must be in [0, 3), got 3"));
  c.data.shard = 2;
  EXPECT_TRUE(ValidateClientConfig(c).ok());

  c.model.kind = "simple_cnn";
  c.model.features = 100;
  EXPECT_THAT(std::string(ValidateClientConfig(c).message()),
              HasSubstr("model.features is 100 but simple_cnn's image is 28x28x1 = 784"));
  c.model.features = 0;

  c.client.insecure_plaintext = false;
  EXPECT_THAT(std::string(ValidateClientConfig(c).message()),
              HasSubstr("mutual TLS needs server.ca, server.cert and server.key"));
}

TEST_F(ClientConfigTest, ValidationChecksTheCsvOptionsAsFlagsSetThem) {
  ClientConfig c;
  c.client.insecure_plaintext = true;
  c.data.path = "site.csv";
  auto message = [&c] { return std::string(ValidateClientConfig(c).message()); };
  c.data.delimiter = "ab";
  EXPECT_EQ(message(),
            "data.delimiter (--delimiter) must be one character (\"\\t\" or \"tab\" for a tab), "
            "got \"ab\"");
  c.data.delimiter = "\\t";
  EXPECT_TRUE(ValidateClientConfig(c).ok());
  c.data.missing_values = "zero";
  EXPECT_EQ(message(),
            "data.missing_values (--missing-values) must be one of refuse, drop_row, impute, got "
            "\"zero\"");
  c.data.missing_values = "drop_row";
  c.data.drop_columns = {"label"};
  EXPECT_EQ(message(),
            "data.drop_columns names the label column 'label' (the label is never a feature)");
  c.data.drop_columns = {"id"};
  c.data.feature_columns = {"id"};
  EXPECT_EQ(message(), "data.feature_columns and drop_columns both name 'id'");
  c.data.feature_columns.clear();
  EXPECT_TRUE(ValidateClientConfig(c).ok());

  c.data.format = "idx";
  c.data.path.clear();
  c.data.images = "i";
  c.data.labels = "l";
  EXPECT_THAT(message(), HasSubstr("are for CSV files, but data.format is \"idx\""));
  c.data.delimiter = ",";
  c.data.drop_columns.clear();
  c.data.missing_values = "refuse";
  EXPECT_TRUE(ValidateClientConfig(c).ok());
}

TEST_F(ClientConfigTest, TheExampleFileIsTheReference) {
  const std::string path = absl::StrCat(FL_SOURCE_DIR, "/deploy/client.example.toml");
  absl::StatusOr<std::string> example = ReadFile(path);
  ASSERT_TRUE(example.ok()) << example.status();
  EXPECT_EQ(*example, ClientConfigReference())
      << "regenerate it: fl client --print-config-reference > deploy/client.example.toml";
  ClientConfig c;
  absl::Status s = ApplyClientConfig(path, c);
  EXPECT_TRUE(s.ok()) << s;
}

// --- The site's data against its model.

class SiteDataTest : public ClientConfigTest {
 protected:
  // A CSV site: `label` plus `features` feature columns, `rows` rows with labels 0..2.
  std::string Csv(const std::string& name, int features, int rows) {
    std::string text;
    for (int f = 0; f < features; ++f) absl::StrAppend(&text, "x", f, ",");
    text += "label\n";
    for (int r = 0; r < rows; ++r) {
      for (int f = 0; f < features; ++f) absl::StrAppend(&text, r * 0.5 + f, ",");
      absl::StrAppend(&text, r % 3, "\n");
    }
    return Write(name, text);
  }

  ClientConfig CsvConfig(const std::string& path) {
    ClientConfig c;
    c.data.path = path;
    c.client.insecure_plaintext = true;
    return c;
  }
};

TEST_F(SiteDataTest, AFeatureCountTheModelDoesNotTakeIsRefusedNamingTheFile) {
  ClientConfig c = CsvConfig(Csv("site.csv", 12, 10));
  c.model.kind = "mlp";
  c.model.features = 30;
  absl::StatusOr<SiteData> data = LoadSiteData(c);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(data.status().message(),
            absl::StrCat(Path("site.csv"), " has 12 feature columns but model mlp expects 30"));

  c.model.features = 12;
  data = LoadSiteData(c);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->train.num_features, 12);
  EXPECT_EQ(data->train.num_examples(), 10);
  EXPECT_EQ(data->train.num_classes, 3);  // 1 + the largest label
  EXPECT_EQ(data->test.num_examples(), 0);
  c.model.classes = 10;
  data = LoadSiteData(c);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->train.num_classes, 10);  // the model's

  // Features 0: the data's count, and the test file must have the same.
  c.model.features = 0;
  c.data.test_path = Csv("test.csv", 11, 4);
  data = LoadSiteData(c);
  EXPECT_EQ(data.status().message(),
            absl::StrCat(Path("test.csv"), " has 11 feature columns but model mlp expects 12"));

  // The CNN expects height * width * channels.
  c = CsvConfig(Csv("img.csv", 16, 5));
  c.model.kind = "simple_cnn";
  data = LoadSiteData(c);
  EXPECT_EQ(data.status().message(),
            absl::StrCat(Path("img.csv"),
                         " has 16 feature columns but model simple_cnn expects 784 (28x28x1)"));
}

TEST_F(SiteDataTest, ALabelOutsideTheModelsClassesNamesRowAndColumn) {
  ClientConfig c = CsvConfig(Write("site.csv", "a,b,label\n1,2,0\n3,4,1\n\n5,6,2\n"));
  c.model.classes = 2;
  absl::StatusOr<SiteData> data = LoadSiteData(c);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(data.status().message(),
            absl::StrCat(Path("site.csv"),
                         ": row 5, column 'label': label 2 is outside the model's 2 classes "
                         "[0, 2)"));
  c.model.classes = 3;
  EXPECT_TRUE(LoadSiteData(c).ok());

  // Classes taken from the training data (0..1) bind the test data too.
  c = CsvConfig(Write("train.csv", "a,label\n1,0\n2,1\n"));
  c.data.test_path = Write("test.csv", "a,label\n1,1\n2,2\n");
  data = LoadSiteData(c);
  EXPECT_EQ(data.status().message(),
            absl::StrCat(Path("test.csv"),
                         ": row 3, column 'label': label 2 is outside the model's 2 classes "
                         "[0, 2)"));
  // One class only cannot be a model's classes.
  c = CsvConfig(Write("zeros.csv", "a,label\n1,0\n2,0\n"));
  data = LoadSiteData(c);
  EXPECT_EQ(data.status().message(),
            absl::StrCat(Path("zeros.csv"),
                         ": every label is 0, so the number of classes cannot be taken from the "
                         "data; set model.classes (--classes)"));
}

TEST_F(SiteDataTest, CsvErrorsNameFileRowAndColumn) {
  auto refused = [&](const std::string& text) {
    ClientConfig c = CsvConfig(Write("bad.csv", text));
    absl::StatusOr<SiteData> data = LoadSiteData(c);
    EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument) << text;
    return std::string(data.status().message());
  };
  const std::string file = Path("bad.csv");
  EXPECT_EQ(refused("a,b,outcome\n1,2,0\n"),
            absl::StrCat(file, ": row 1: no label column named 'label' (columns: a, b, outcome)"));
  EXPECT_EQ(refused("a,b,label\n1,2,0\n1,x,1\n"),
            absl::StrCat(file, ": row 3, column 'b': not a number: 'x'"));
  EXPECT_EQ(refused("a,b,label\n1,nan,0\n"),
            absl::StrCat(file,
                         ": row 2, column 'b': missing value 'nan' is refused: missing_values = "
                         "drop_row skips such rows, impute replaces the value"));
  EXPECT_EQ(refused("a,b,label\n-inf,1,0\n"),
            absl::StrCat(file, ": row 2, column 'a': infinity is not allowed: '-inf'"));
  EXPECT_EQ(refused("a,b,label\n1,2,0\n1,2\n"),
            absl::StrCat(file,
                         ": row 3: expected 3 fields, found 2: column 'label' and after are "
                         "missing"));
  EXPECT_EQ(refused("a,b,label\n1,2,0,9\n"),
            absl::StrCat(file,
                         ": row 2: expected 3 fields, found 4: value 4 ('9') is past the last "
                         "column 'label'"));
  EXPECT_EQ(
      refused("a,b,label\n1,2,0.5\n"),
      absl::StrCat(file, ": row 2, column 'label': label must be a non-negative integer: '0.5'"));
}

TEST_F(SiteDataTest, CsvOptionsReachTheLoader) {
  const std::string text =
      "patient_id;age;bmi;label\nP1;51;22;0\nP2;NA;30;1\nP3;60;;2\nP4;70;25;1\n";
  ClientConfig c = CsvConfig(Write("site.csv", text));
  absl::StatusOr<SiteData> data = LoadSiteData(c);
  EXPECT_EQ(data.status().message(),
            absl::StrCat(Path("site.csv"),
                         ": row 1: the header has 1 column; it looks ';'-separated: set "
                         "data.delimiter (CsvOptions::delimiter)"));
  c.data.delimiter = ";";
  c.data.drop_columns = {"patient_id"};
  c.data.missing_values = "drop_row";
  data = LoadSiteData(c);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->train.dropped_rows, 2);
  EXPECT_THAT(data->train.feature_names, ElementsAre("age", "bmi"));
  EXPECT_THAT(data->train.features, ElementsAre(51, 22, 70, 25));

  c.data.missing_values = "impute";
  c.data.impute_value = 40;
  c.data.feature_columns = {"bmi", "age"};
  c.data.drop_columns.clear();
  data = LoadSiteData(c);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->train.imputed_values, 2);
  EXPECT_THAT(data->train.feature_names, ElementsAre("bmi", "age"));
  EXPECT_THAT(data->train.features, ElementsAre(22, 51, 30, 40, 40, 60, 25, 70));
}

TEST_F(SiteDataTest, TestColumnsMustBeTheTrainingColumnsInOrder) {
  ClientConfig c = CsvConfig(Write("train.csv", "a,b,label\n1,2,0\n3,4,1\n"));
  c.data.test_path = Write("test.csv", "b,a,label\n2,1,0\n");
  absl::StatusOr<SiteData> data = LoadSiteData(c);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(data.status().message(),
            absl::StrCat(Path("test.csv"), "'s feature columns (b, a) are not those of ",
                         Path("train.csv"), " (a, b), in the same order"));
  // Naming the features puts both files' columns in one order.
  c.data.feature_columns = {"a", "b"};
  data = LoadSiteData(c);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_THAT(data->test.features, ElementsAre(1, 2));
}

TEST_F(SiteDataTest, AMissingFileIsNotFoundAndNamed) {
  ClientConfig c = CsvConfig(Path("absent.csv"));
  absl::StatusOr<SiteData> data = LoadSiteData(c);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(data.status().message()), HasSubstr(Path("absent.csv")));
}

TEST_F(SiteDataTest, TestFractionHoldsOutShuffledRowsReproducibly) {
  ClientConfig c = CsvConfig(Csv("site.csv", 3, 20));
  c.data.test_fraction = 0.25;
  c.data.split_seed = 5;
  absl::StatusOr<SiteData> a = LoadSiteData(c);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->train.num_examples(), 15);
  EXPECT_EQ(a->test.num_examples(), 5);
  // Every row is in exactly one part: the first feature (r * 0.5) identifies row r.
  std::vector<int> seen(20, 0);
  for (const auto* part : {&a->train, &a->test}) {
    for (int64_t i = 0; i < part->num_examples(); ++i)
      ++seen[static_cast<int>(part->row(i)[0] * 2)];
  }
  EXPECT_THAT(seen, ::testing::Each(1));
  // Not simply the last rows, and the same seed gives the same split.
  std::vector<float> held_out;
  for (int64_t i = 0; i < a->test.num_examples(); ++i) held_out.push_back(a->test.row(i)[0]);
  EXPECT_NE(held_out, (std::vector<float>{7.5f, 8.0f, 8.5f, 9.0f, 9.5f}));
  absl::StatusOr<SiteData> b = LoadSiteData(c);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->test.features, a->test.features);

  c.data.test_fraction = 0.01;  // rounds to no test rows
  absl::StatusOr<SiteData> none = LoadSiteData(c);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("leaves 0 test and 20 training"));
}

TEST_F(SiteDataTest, ShardsSplitTheTrainingRows) {
  ClientConfig c = CsvConfig(Csv("site.csv", 2, 10));
  c.data.num_shards = 3;
  int64_t total = 0;
  for (int k = 0; k < 3; ++k) {
    c.data.shard = k;
    absl::StatusOr<SiteData> d = LoadSiteData(c);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_GE(d->train.num_examples(), 3);
    total += d->train.num_examples();
  }
  EXPECT_EQ(total, 10);
}

TEST_F(SiteDataTest, IdxLabelsOutsideTheModelsClassesNameTheItem) {
  // Two 2x2 images, labels 1 and 4.
  std::string images = std::string("\0\0\x08\x03\0\0\0\x02\0\0\0\x02\0\0\0\x02", 16);
  images += std::string(8, '\x10');
  std::string labels = std::string("\0\0\x08\x01\0\0\0\x02", 8) + std::string("\x01\x04", 2);
  ClientConfig c;
  c.client.insecure_plaintext = true;
  c.data.format = "idx";
  c.data.images = Write("images.idx", images);
  c.data.labels = Write("labels.idx", labels);
  c.model.classes = 4;
  absl::StatusOr<SiteData> d = LoadSiteData(c);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(d.status().message(),
            absl::StrCat(Path("labels.idx"),
                         ": item 1: label 4 is outside the model's 4 classes [0, 4)"));
  c.model.classes = 5;
  c.model.features = 9;
  d = LoadSiteData(c);
  EXPECT_EQ(d.status().message(),
            absl::StrCat(Path("images.idx"),
                         " has 4 features (pixels) per image but model softmax expects 9"));
  c.model.features = 4;
  d = LoadSiteData(c);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->train.num_classes, 5);
}

}  // namespace
}  // namespace fl::cli
