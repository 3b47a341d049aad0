#include "server/daemon/config.h"

#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "fl/aggregation/secagg/params.h"
#include "fl/common/file_util.h"
#include "fl/server/engine.h"
#include "gmock/gmock.h"
#include "grpc/impl/codegen/grpc_types.h"
#include "gtest/gtest.h"
#include "tests/unit/config_file_fixture.h"

namespace fl::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class ConfigTest : public fl::testing::ConfigFileTest {
 protected:
  // Applies `contents` (as server.toml) over a default config and returns the error.
  absl::Status ApplyText(const std::string& contents) {
    ServerConfig config;
    return ApplyServerConfig(Write("server.toml", contents), config);
  }
};

constexpr char kFullFile[] = R"(# every key, none at its default
[server]
listen = "0.0.0.0:9443"
data_dir = "/var/lib/fl"
ca = "ca.pem"
cert = "server.pem"
key = "server.key"
enroll = ["site-0.pem", "site-1.pem"]
insecure_plaintext = true
max_poll_wait_s = 5.5
stream_window_mib = 16
grace_s = 2

[run]
name = "mnist-1"
rounds = 25
min_clients = 8
min_fit_clients = 6
sample_fraction = 0.5
round_timeout_s = 120
client_timeout_s = 30.25
max_round_retries = 0
seed = 42

[fit]
local_epochs = 3
batch_size = 64
learning_rate = 0.01

[model]
features = 3072
classes = 100
)";

// 0 is not a zero-byte window but gRPC's own probe-tuned one (ServerOptions::stream_window_mib).
TEST_F(ConfigTest, StreamWindowZeroSelectsGrpcsAutoTunedWindow) {
  ServerConfig c;
  absl::Status s = ApplyServerConfig(Write("server.toml", "[server]\nstream_window_mib = 0\n"), c);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(c.server.stream_window_mib, 0);
}

// The defaults, from a named object: GCC 12 warns (-Wmaybe-uninitialized, wrongly) about
// ServerConfig{} temporaries.
const ServerConfig& Defaults() {
  static const ServerConfig defaults;
  return defaults;
}

// What the server hands gRPC for each window: the probe off and a fixed window, or nothing.
TEST(UploadWindowChannelArgsTest, FixedWindowsTurnTheProbeOffAndZeroLeavesGrpcsOwn) {
  using Args = std::vector<std::pair<std::string, int>>;
  EXPECT_EQ(UploadWindowChannelArgs(4), (Args{{GRPC_ARG_HTTP2_BDP_PROBE, 0},
                                              {GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 4 << 20}}));
  EXPECT_EQ(UploadWindowChannelArgs(0), Args{});
  EXPECT_EQ(UploadWindowChannelArgs(-3), (Args{{GRPC_ARG_HTTP2_BDP_PROBE, 0},
                                               {GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 1 << 20}}));
  EXPECT_EQ(
      UploadWindowChannelArgs(5000),
      (Args{{GRPC_ARG_HTTP2_BDP_PROBE, 0}, {GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 1024 << 20}}));
}

TEST_F(ConfigTest, FullFileSetsEveryKey) {
  ServerConfig c;
  absl::Status s = ApplyServerConfig(Write("server.toml", kFullFile), c);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(c.server.listen_address, "0.0.0.0:9443");
  EXPECT_EQ(c.server.data_dir, "/var/lib/fl");
  EXPECT_EQ(c.server.ca_cert_path, "ca.pem");
  EXPECT_EQ(c.server.cert_path, "server.pem");
  EXPECT_EQ(c.server.key_path, "server.key");
  EXPECT_THAT(c.server.enroll_cert_paths, ElementsAre("site-0.pem", "site-1.pem"));
  EXPECT_TRUE(c.server.insecure_plaintext);
  EXPECT_EQ(c.server.max_poll_wait, absl::Milliseconds(5500));
  EXPECT_EQ(c.server.stream_window_mib, 16);
  EXPECT_EQ(c.grace, absl::Seconds(2));
  EXPECT_EQ(c.server.engine.run_name, "mnist-1");
  EXPECT_EQ(c.server.engine.num_rounds, 25);
  EXPECT_EQ(c.server.engine.min_clients, 8);
  EXPECT_EQ(c.server.engine.min_fit_clients, 6);
  EXPECT_EQ(c.server.engine.sample_fraction, 0.5);
  EXPECT_EQ(c.server.engine.round_timeout, absl::Seconds(120));
  EXPECT_EQ(c.server.engine.client_timeout, absl::Milliseconds(30250));
  EXPECT_EQ(c.server.engine.max_round_retries, 0);
  EXPECT_EQ(c.server.engine.seed, 42u);
  EXPECT_EQ(c.server.engine.fit.local_epochs, 3);
  EXPECT_EQ(c.server.engine.fit.batch_size, 64);
  EXPECT_EQ(c.server.engine.fit.learning_rate, 0.01f);
  EXPECT_EQ(c.model.features, 3072);
  EXPECT_EQ(c.model.classes, 100);
}

TEST_F(ConfigTest, AbsentKeysKeepTheirValues) {
  ServerConfig c;
  c.server.listen_address = "127.0.0.1:0";  // set before, e.g. by a caller's own default
  absl::Status s = ApplyServerConfig(Write("server.toml", "[run]\nrounds = 3\n"), c);
  ASSERT_TRUE(s.ok()) << s;
  ServerConfig want;
  want.server.listen_address = "127.0.0.1:0";
  want.server.engine.num_rounds = 3;
  EXPECT_EQ(ServerConfigToToml(c), ServerConfigToToml(want));

  ServerConfig empty;
  ASSERT_TRUE(ApplyServerConfig(Write("empty.toml", ""), empty).ok());
  EXPECT_EQ(ServerConfigToToml(empty), ServerConfigToToml(Defaults()));
}

TEST_F(ConfigTest, FloatKeysAcceptIntegersAndDottedKeysWork) {
  ServerConfig c;
  absl::Status s = ApplyServerConfig(
      Write("server.toml",
            "run.sample_fraction = 1\nrun.round_timeout_s = 30\nfit.learning_rate = 1\n"),
      c);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(c.server.engine.sample_fraction, 1.0);
  EXPECT_EQ(c.server.engine.round_timeout, absl::Seconds(30));
  EXPECT_EQ(c.server.engine.fit.learning_rate, 1.0f);
}

TEST_F(ConfigTest, UnknownKeyNamesFileLineAndKey) {
  const std::string text =
      "[server]\nlisten = \"127.0.0.1:7443\"\n\n[run]\nrounds = 3\n\nroundz = 4\n";
  absl::Status s = ApplyText(text);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), absl::StrCat(Path("server.toml"), ":7: unknown key 'run.roundz'"));
}

TEST_F(ConfigTest, UnknownTableAndTopLevelKey) {
  absl::Status s = ApplyText("[run]\nrounds = 3\n[runs]\nrounds = 3\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), absl::StrCat(Path("server.toml"), ":3: unknown table 'runs'"));

  s = ApplyText("rounds = 3\n");
  EXPECT_EQ(s.message(), absl::StrCat(Path("server.toml"), ":1: unknown key 'rounds'"));

  s = ApplyText("run = 3\n");
  EXPECT_EQ(s.message(),
            absl::StrCat(Path("server.toml"), ":1: key 'run' must be a table, got an integer"));
}

TEST_F(ConfigTest, WrongTypeNamesFileLineKeyAndType) {
  const std::string file = Path("server.toml");
  absl::Status s = ApplyText("[run]\nname = \"a\"\nrounds = \"10\"\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            absl::StrCat(file, ":3: key 'run.rounds' must be an integer, got a string"));

  s = ApplyText("[run]\nrounds = 2.5\n");
  EXPECT_EQ(s.message(),
            absl::StrCat(file, ":2: key 'run.rounds' must be an integer, got a float"));

  s = ApplyText("[fit]\nlearning_rate = \"0.1\"\n");
  EXPECT_EQ(s.message(),
            absl::StrCat(file, ":2: key 'fit.learning_rate' must be a number, got a string"));

  s = ApplyText("[server]\ninsecure_plaintext = 1\n");
  EXPECT_EQ(
      s.message(),
      absl::StrCat(file, ":2: key 'server.insecure_plaintext' must be a boolean, got an integer"));

  s = ApplyText("[server]\nlisten = 7443\n");
  EXPECT_EQ(s.message(),
            absl::StrCat(file, ":2: key 'server.listen' must be a string, got an integer"));
}

TEST_F(ConfigTest, ArrayElementOfWrongType) {
  const std::string file = Path("server.toml");
  absl::Status s = ApplyText("[server]\nenroll = [1]\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            absl::StrCat(file, ":2: key 'server.enroll[0]' must be a string, got an integer"));

  // The line is the element's own.
  s = ApplyText("[server]\nenroll = [\n  \"a.pem\",\n  false,\n]\n");
  EXPECT_EQ(s.message(),
            absl::StrCat(file, ":4: key 'server.enroll[1]' must be a string, got a boolean"));

  s = ApplyText("[server]\nenroll = \"a.pem\"\n");
  EXPECT_EQ(
      s.message(),
      absl::StrCat(file, ":2: key 'server.enroll' must be an array of strings, got a string"));
}

TEST_F(ConfigTest, OutOfRangeValuesNameTheRange) {
  struct Case {
    std::string line;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"run.sample_fraction = 1.5", "key 'run.sample_fraction' must be in (0, 1], got 1.5"},
      {"run.sample_fraction = 0", "key 'run.sample_fraction' must be in (0, 1], got 0.0"},
      {"run.rounds = 0", "key 'run.rounds' must be >= 1, got 0"},
      {"run.rounds = 3000000000", "key 'run.rounds' must be <= 2147483647, got 3000000000"},
      {"run.min_clients = 0", "key 'run.min_clients' must be >= 1, got 0"},
      {"run.min_fit_clients = 0", "key 'run.min_fit_clients' must be >= 1, got 0"},
      {"run.max_round_retries = -1", "key 'run.max_round_retries' must be >= 0, got -1"},
      {"run.seed = -1", "key 'run.seed' must be >= 0, got -1"},
      {"run.round_timeout_s = 0", "key 'run.round_timeout_s' must be > 0, got 0.0"},
      {"run.round_timeout_s = -2.5", "key 'run.round_timeout_s' must be > 0, got -2.5"},
      {"run.round_timeout_s = inf", "key 'run.round_timeout_s' must be finite, got inf"},
      {"run.client_timeout_s = nan", "key 'run.client_timeout_s' must be > 0, got nan"},
      {"server.max_poll_wait_s = 0", "key 'server.max_poll_wait_s' must be > 0, got 0.0"},
      {"server.stream_window_mib = -1", "key 'server.stream_window_mib' must be >= 0, got -1"},
      {"server.stream_window_mib = 2048",
       "key 'server.stream_window_mib' must be <= 1024, got 2048"},
      {"server.grace_s = -1", "key 'server.grace_s' must be >= 0, got -1.0"},
      {"server.listen = \"\"", "key 'server.listen' must not be empty"},
      {"fit.batch_size = 0", "key 'fit.batch_size' must be >= 1, got 0"},
      {"fit.local_epochs = 0", "key 'fit.local_epochs' must be >= 1, got 0"},
      {"fit.learning_rate = 0.0", "key 'fit.learning_rate' must be > 0, got 0.0"},
      {"model.features = 0", "key 'model.features' must be >= 1, got 0"},
      {"model.classes = 1", "key 'model.classes' must be >= 2, got 1"},
  };
  for (const Case& c : cases) {
    absl::Status s = ApplyText(absl::StrCat("# comment\n\n", c.line, "\n"));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.line;
    EXPECT_EQ(s.message(), absl::StrCat(Path("server.toml"), ":3: ", c.message)) << c.line;
  }
  EXPECT_TRUE(ApplyText("server.grace_s = 0\nrun.max_round_retries = 0\n").ok());
}

TEST_F(ConfigTest, StrategyAndModelKeysAreRead) {
  ServerConfig c;
  absl::Status s = ApplyServerConfig(Write("server.toml", R"([strategy]
name = "scaffold"
proximal_mu = 0.5
momentum = 0.9
weight_decay = 0.0001
clip_norm = 10
server_learning_rate = 0.5
num_parties = 40
[model]
kind = "mlp"
hidden = [128, 64]
image_height = 32
image_width = 32
image_channels = 3
init_seed = 77
)"),
                                     c);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(c.server.strategy.name, "scaffold");
  EXPECT_EQ(c.server.strategy.proximal_mu, 0.5);
  EXPECT_EQ(c.server.strategy.momentum, 0.9);
  EXPECT_EQ(c.server.strategy.weight_decay, 0.0001);
  EXPECT_EQ(c.server.strategy.clip_norm, 10.0);
  EXPECT_EQ(c.server.strategy.server_learning_rate, 0.5);
  EXPECT_EQ(c.server.strategy.num_parties, 40);
  EXPECT_EQ(c.model.kind, "mlp");
  EXPECT_THAT(c.model.hidden, ElementsAre(128, 64));
  EXPECT_EQ(c.model.image_height, 32);
  EXPECT_EQ(c.model.image_width, 32);
  EXPECT_EQ(c.model.image_channels, 3);
  EXPECT_EQ(c.model.init_seed, 77u);
  // And they survive the round trip through the effective configuration.
  ServerConfig back;
  ASSERT_TRUE(ApplyServerConfig(Write("back.toml", ServerConfigToToml(c)), back).ok());
  EXPECT_EQ(ServerConfigToToml(back), ServerConfigToToml(c));
}

TEST_F(ConfigTest, BadStrategyAndModelValuesNameFileLineAndKey) {
  struct Case {
    std::string text;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"[strategy]\nname = \"fedsgd\"\n",
       ":2: key 'strategy.name' must be one of fedavg, fedprox, scaffold, fedavgm, fedadagrad, "
       "fedadam, fedyogi, fedmedian, fedtrimmedavg, krum, multikrum, bulyan, qfedavg, fltrust, got "
       "\"fedsgd\""},
      {"[strategy]\nname = \"krum\"\nnum_malicious = 1\n",
       ":3: strategy 'krum' with num_malicious = 1 needs at least 5 updates in every round, and "
       "min_fit_clients is 2; raise min_fit_clients to 5 or lower num_malicious"},
      {"[strategy]\nname = \"fedmedian\"\n[secure_aggregation]\nenabled = true\n",
       ":2: strategy 'fedmedian' needs each site's update apart, and secure aggregation shows the "
       "server only their sum; turn secure aggregation off, or choose fedavg"},
      {"[strategy]\nname = \"fltrust\"\n",
       ":2: strategy 'fltrust' trains the built-in model on a root dataset of the server's own: "
       "set "
       "model.root_images and model.root_labels (IDX files, e.g. 100 labelled rows), with no "
       "model.initial"},
      {"[model]\nroot_images = \"a.idx\"\n",
       ":2: model.root_images and root_labels are FLTrust's root dataset; strategy 'fedavg' does "
       "not "
       "use them (set strategy.name = \"fltrust\" or remove them)"},
      {"[strategy]\nname = \"fedtrimmedavg\"\ntrim_beta = 0.5\n",
       ":3: trim_beta must be in [0, 0.5) (at 0.5 the trimmed mean trims every value), got 0.5"},
      {"[strategy]\nproximal_mu = -1\n", ":2: key 'strategy.proximal_mu' must be >= 0, got -1.0"},
      {"[strategy]\nmomentum = 1\n", ":2: key 'strategy.momentum' must be in [0, 1), got 1.0"},
      {"[strategy]\nweight_decay = -0.1\n",
       ":2: key 'strategy.weight_decay' must be >= 0, got -0.1"},
      {"[strategy]\nserver_learning_rate = -1\n",
       ":2: key 'strategy.server_learning_rate' must be >= 0, got -1.0"},
      {"[strategy]\ntau = 0\n", ":2: key 'strategy.tau' must be > 0, got 0.0"},
      {"[strategy]\nbeta_2 = 1\n", ":2: key 'strategy.beta_2' must be in [0, 1), got 1.0"},
      {"[strategy]\nnum_parties = -3\n", ":2: key 'strategy.num_parties' must be >= 0, got -3"},
      // FedProx needs mu > 0: the error points at mu when the file sets it, else at the name.
      {"[strategy]\nname = \"fedprox\"\nproximal_mu = 0\n",
       ":3: key 'strategy.proximal_mu' must be > 0 for strategy 'fedprox', got 0.0"},
      {"[strategy]\nproximal_mu = 0.0\n\nname = \"fedprox\"\n",
       ":2: key 'strategy.proximal_mu' must be > 0 for strategy 'fedprox', got 0.0"},
      {"[model]\nkind = \"resnet\"\n",
       ":2: key 'model.kind' must be one of softmax, logistic, mlp, simple_cnn, got \"resnet\""},
      {"[strategy]\nname = \"scaffold\"\nnum_parties = 1\n",
       ":3: key 'strategy.num_parties' (1) must be at least run.min_fit_clients (2): SCAFFOLD's N "
       "counts every party that can report in a round"},
      {"[model]\nhidden = [64, 0]\n", ":2: key 'model.hidden[1]' must be >= 1, got 0"},
      {"[model]\nhidden = []\n",
       ":2: key 'model.hidden' must be a non-empty array of integers, got an array"},
      {"[model]\nimage_channels = 0\n", ":2: key 'model.image_channels' must be >= 1, got 0"},
      {"[model]\nkind = \"simple_cnn\"\nimage_channels = 3\n",
       ":3: key 'model.features' must be image_height * image_width * image_channels = 2352 for "
       "kind 'simple_cnn', got 784"},
  };
  for (const Case& c : cases) {
    absl::Status s = ApplyText(c.text);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_EQ(s.message(), absl::StrCat(Path("server.toml"), c.message)) << c.text;
  }
  // A fedprox mu the file leaves at its default is fine; so is mu = 0 for another strategy.
  EXPECT_TRUE(ApplyText("[strategy]\nname = \"fedprox\"\n").ok());
  EXPECT_TRUE(ApplyText("[strategy]\nname = \"scaffold\"\nproximal_mu = 0\n").ok());
  EXPECT_TRUE(ApplyText("[model]\nkind = \"simple_cnn\"\nfeatures = 3072\nimage_height = 32\n"
                        "image_width = 32\nimage_channels = 3\n")
                  .ok());
}

TEST_F(ConfigTest, CheckServerConfigCatchesWhatFlagsPutTogether) {
  ServerConfig c;
  EXPECT_TRUE(CheckServerConfig(c).ok());
  c.server.strategy.name = "fedprox";
  c.server.strategy.proximal_mu = 0;
  EXPECT_EQ(CheckServerConfig(c).message(),
            "key 'strategy.proximal_mu' must be > 0 for strategy 'fedprox', got 0.0");
}

TEST_F(ConfigTest, FirstProblemInTheFileIsReported) {
  // toml++ iterates keys in order; the report follows the file.
  absl::Status s = ApplyText("[run]\nseed = \"x\"\nmin_clients = \"y\"\n");
  EXPECT_EQ(s.message(), absl::StrCat(Path("server.toml"),
                                      ":2: key 'run.seed' must be an integer, got a string"));
}

TEST_F(ConfigTest, SyntaxErrorGivesLineColumnAndDescription) {
  absl::Status s = ApplyText("[run]\nrounds = = 3\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr(absl::StrCat(Path("server.toml"), ":2:")));
  EXPECT_GT(s.message().size(), Path("server.toml").size() + 6);  // and a description

  s = ApplyText("[run]\nrounds = 3\nrounds = 4\n");  // redefinition is a syntax error too
  EXPECT_THAT(std::string(s.message()), HasSubstr(absl::StrCat(Path("server.toml"), ":3:")));
}

TEST_F(ConfigTest, MissingFileIsNotFoundAndNamesThePath) {
  ServerConfig c;
  absl::Status s = ApplyServerConfig(Path("absent.toml"), c);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr(Path("absent.toml")));
}

TEST_F(ConfigTest, ToTomlReadsBackToTheSameValues) {
  ServerConfig original;
  ASSERT_TRUE(ApplyServerConfig(Write("full.toml", kFullFile), original).ok());
  original.server.engine.run_name = "quote \" backslash \\ tab \t end";
  original.server.engine.fit.learning_rate = 0.1f;
  original.server.engine.seed = 1234567890123;
  const std::string text = ServerConfigToToml(original);
  ServerConfig back;
  absl::Status s = ApplyServerConfig(Write("back.toml", text), back);
  ASSERT_TRUE(s.ok()) << s << "\n" << text;
  EXPECT_EQ(ServerConfigToToml(back), text);
  EXPECT_EQ(back.server.engine.run_name, original.server.engine.run_name);
  EXPECT_EQ(back.server.engine.fit.learning_rate, 0.1f);
  EXPECT_EQ(back.server.engine.seed, 1234567890123u);
  EXPECT_EQ(back.server.max_poll_wait, original.server.max_poll_wait);
}

TEST_F(ConfigTest, PrivacySectionSetsCentralDifferentialPrivacy) {
  ServerConfig c;
  absl::Status s = ApplyServerConfig(Write("server.toml", R"([privacy]
mode = "central"
noise_multiplier = 1.1
clip_norm = 0.5
delta = 1e-6
epsilon_budget = 8
)"),
                                     c);
  ASSERT_TRUE(s.ok()) << s;
  const PrivacyOptions& p = c.server.engine.privacy;
  EXPECT_TRUE(p.enabled());
  EXPECT_EQ(p.noise_multiplier, 1.1);
  EXPECT_EQ(p.clip_norm, 0.5);
  EXPECT_EQ(p.delta, 1e-6);
  EXPECT_EQ(p.epsilon_budget, 8);
  EXPECT_FALSE(Defaults().server.engine.privacy.enabled());  // off by default
}

TEST_F(ConfigTest, PrivacySectionRefusesBadValuesByKeyAndLine) {
  EXPECT_THAT(ApplyText("[privacy]\nmode = \"local\"\n").message(), HasSubstr("privacy.mode"));
  EXPECT_THAT(ApplyText("[privacy]\nnoise_multiplier = 0\n").message(),
              HasSubstr("key 'privacy.noise_multiplier' must be > 0, got 0"));
  EXPECT_THAT(ApplyText("[privacy]\nclip_norm = -1\n").message(),
              HasSubstr("key 'privacy.clip_norm' must be > 0, got -1"));
  absl::Status s = ApplyText("[privacy]\nmode = \"central\"\ndelta = 1\n");
  EXPECT_THAT(s.message(), HasSubstr("server.toml:3"));
  EXPECT_THAT(s.message(), HasSubstr("privacy.delta must be in (0, 1), got 1"));
}

TEST_F(ConfigTest, SecureAggregationSectionIsReadWithDistributedPrivacy) {
  ServerConfig c;
  absl::Status s = ApplyServerConfig(Write("server.toml", R"([run]
min_clients = 5
min_fit_clients = 4
[privacy]
mode = "distributed"
[secure_aggregation]
enabled = true
num_neighbors = 4
threshold = 3
clip_range = 2.5
quantization_bits = 16
modulus_bits = 64
max_weight = 50
example_unit = 100
stage_timeout_s = 12.5
max_dropout = 0.2
corrupt_fraction = 0.2
)"),
                                     c);
  ASSERT_TRUE(s.ok()) << s;
  const SecureAggregationOptions& sa = c.server.engine.secure_aggregation;
  EXPECT_TRUE(sa.enabled);
  EXPECT_EQ(sa.num_neighbors, 4);
  EXPECT_EQ(sa.threshold, 3);
  EXPECT_EQ(sa.clip_range, 2.5);
  EXPECT_EQ(sa.quantization_bits, 16);
  EXPECT_EQ(sa.modulus_bits, 64);
  EXPECT_EQ(sa.max_weight, 50u);
  EXPECT_EQ(sa.example_unit, 100);
  EXPECT_EQ(sa.stage_timeout, absl::Milliseconds(12500));
  EXPECT_EQ(sa.max_dropout, 0.2);
  EXPECT_EQ(sa.corrupt_fraction, 0.2);
  EXPECT_EQ(Defaults().server.engine.secure_aggregation.corrupt_fraction, 1.0 / 3);
  EXPECT_TRUE(c.server.engine.privacy.distributed());
  EXPECT_FALSE(Defaults().server.engine.secure_aggregation.enabled);  // off by default
}

TEST_F(ConfigTest, SecureAggregationRefusesWhatCannotWorkTogether) {
  const std::string on = "[run]\nmin_clients = 4\n[secure_aggregation]\nenabled = true\n";
  EXPECT_THAT(ApplyText("[privacy]\nmode = \"distributed\"\n").message(),
              HasSubstr("privacy.mode 'distributed' needs secure_aggregation.enabled"));
  EXPECT_THAT(ApplyText(on + "[privacy]\nmode = \"central\"\n").message(),
              HasSubstr("privacy.mode 'central' needs the server to read each update"));
  EXPECT_THAT(ApplyText(on + "[strategy]\nname = \"scaffold\"\n").message(),
              HasSubstr("strategy 'scaffold' cannot run with secure aggregation"));
  EXPECT_THAT(ApplyText("[run]\nmin_clients = 2\n[secure_aggregation]\nenabled = true\n").message(),
              HasSubstr("secure aggregation needs run.min_clients >= 3"));
  EXPECT_THAT(ApplyText("[run]\nmin_clients = 4\nstop_metric = \"train_loss\"\n"
                        "[secure_aggregation]\nenabled = true\n")
                  .message(),
              HasSubstr("run.stop_metric 'train_loss' cannot be used with secure aggregation"));
  EXPECT_THAT(ApplyText("[secure_aggregation]\nmodulus_bits = 16\n").message(),
              HasSubstr("secure_aggregation.modulus_bits"));
  absl::Status s = ApplyText(on + "modulus_bits = 48\n");
  EXPECT_THAT(s.message(), HasSubstr("server.toml:5"));
  EXPECT_THAT(s.message(), HasSubstr("modulus_bits"));
  EXPECT_THAT(ApplyText(on + "max_dropout = 1\n").message(),
              HasSubstr("secure_aggregation.max_dropout"));
  EXPECT_THAT(ApplyText(on + "corrupt_fraction = 0.5\n").message(),
              HasSubstr("secure_aggregation.corrupt_fraction must be in [0, 0.5), got 0.5"));
}

TEST_F(ConfigTest, UpdateEncodingIsReadAndRefusedWithSecureAggregation) {
  ServerConfig c;
  absl::Status s = ApplyServerConfig(Write("enc.toml", "[run]\nupdate_encoding = \"int8\"\n"), c);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(c.server.engine.update_encoding, "int8");
  EXPECT_EQ(Defaults().server.engine.update_encoding, "float32");
  EXPECT_THAT(ApplyText("[run]\nupdate_encoding = \"int4\"\n").message(),
              HasSubstr("run.update_encoding"));
  EXPECT_THAT(ApplyText("[run]\nmin_clients = 4\nupdate_encoding = \"float16\"\n"
                        "[secure_aggregation]\nenabled = true\n")
                  .message(),
              HasSubstr("run.update_encoding 'float16' cannot run with secure aggregation"));
}

// A round uses n = the number of sampled clients, which may be more or fewer than min_clients.
TEST(SecureAggregationParamsForTest, ExplicitNeighboursAreClampedToTheSampledClients) {
  SecureAggregationOptions o;
  o.enabled = true;
  o.corrupt_fraction = 0;  // the clamping alone (colluders: the next test)
  o.num_neighbors = 10;
  absl::StatusOr<secagg::SecAggParams> p = o.ParamsFor(6, 0);  // k <= n - 1 = 5
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->num_neighbors, 5);
  EXPECT_EQ(p->threshold, 3);
  p = o.ParamsFor(7, 0);  // k = 6
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->num_neighbors, 6);
  o.num_neighbors = 5;  // odd: 5 x 9 clients has no 5-regular graph, 4 it is
  p = o.ParamsFor(9, 0);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->num_neighbors, 4);
  EXPECT_EQ(p->threshold, 3);
  p = o.ParamsFor(20, 0);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->num_neighbors, 5);
  // An explicit threshold above the lowered k is refused, naming both.
  o.num_neighbors = 10;
  o.threshold = 8;
  EXPECT_TRUE(o.ParamsFor(30, 0).ok());
  absl::Status s = o.ParamsFor(6, 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("secure_aggregation.threshold 8 exceeds num_neighbors 5 (10 "
                                     "lowered to fit 6 clients)"));
}

// With a third of the sites colluding (the default), an explicit k gets the least threshold that
// keeps a site from being exposed by its colluding neighbours (2^-40 for the round), and a graph
// that no threshold can make safe is refused with the figures; the defaults choose k for it.
TEST(SecureAggregationParamsForTest, ExplicitSettingsAreHeldToTheCollusionTheyMustSurvive) {
  SecureAggregationOptions o;
  o.enabled = true;
  o.grinding_bits = 0;  // each graph at 2^-40 (GrindingBitsTightenEachGraphsRisk: more)
  o.num_neighbors = 4;
  absl::StatusOr<secagg::SecAggParams> p = o.ParamsFor(9, 0);  // 3 colluders
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->threshold, 4);  // 3 would let the 3 colluders be 3 of a site's 4 neighbours
  o.num_neighbors = 5;
  absl::Status s = o.ParamsFor(20, 0).status();  // k 5 of 19 peers, 6 colluders
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("secure aggregation for 20 clients: num_neighbors 5 and "
                                     "threshold 3 leave a site with 3 or more colluding "
                                     "neighbours (corrupt_fraction 0.333333) with probability "
                                     "0.151445"));
  EXPECT_THAT(s.message(), HasSubstr("at most 9.09495e-13 (2^-40, with "
                                     "secure_aggregation.grinding_bits 0) is accepted"));
  EXPECT_THAT(s.message(), HasSubstr("no threshold up to 5 neighbours holds: raise "
                                     "num_neighbors to at least"));
  o.threshold = 5;  // all 5 colluding: 6 / C(19, 5) per site, still far too likely
  EXPECT_THAT(o.ParamsFor(20, 0).status().message(), HasSubstr("threshold 5 leave a site"));
  // A k that holds for the least sample may not for a larger one: checked for the round's n.
  o.num_neighbors = 20;
  o.threshold = 0;
  EXPECT_TRUE(o.ParamsFor(30, 0).ok());  // 10 colluders: t = 11 is above them all
  EXPECT_THAT(o.ParamsFor(100, 0).status().message(),
              HasSubstr("no threshold up to 20 neighbours holds"));
  // Structural mistakes are named as such, before any risk.
  o.num_neighbors = 1;
  EXPECT_THAT(o.ParamsFor(20, 0).status().message(), HasSubstr("num_neighbors must be in [2"));
  o.num_neighbors = 0;
  o.threshold = 0;
  p = o.ParamsFor(20, 0);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_LE(secagg::SecAggRiskOf(*p, o.max_dropout).privacy, secagg::kMaxPrivacyRisk);
  EXPECT_LE(secagg::SecAggRiskOf(*p, o.max_dropout).stall, secagg::kMaxStallRisk);
}

// A server that can try 2^g directories keeps the graph it likes: each graph must hold at
// 2^-(40 + g), so the defaults widen k, and settings that held at 2^-40 are refused.
TEST(SecureAggregationParamsForTest, GrindingBitsTightenEachGraphsRisk) {
  SecureAggregationOptions o;
  o.enabled = true;
  o.grinding_bits = 0;
  absl::StatusOr<secagg::SecAggParams> plain = o.ParamsFor(1000, 0);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->num_neighbors, 266);
  o.grinding_bits = 40;  // the default
  absl::StatusOr<secagg::SecAggParams> ground = o.ParamsFor(1000, 0);
  ASSERT_TRUE(ground.ok()) << ground.status();
  EXPECT_EQ(ground->num_neighbors, 332);
  EXPECT_LE(secagg::SecAggRiskOf(*ground, o.max_dropout).privacy, std::ldexp(1.0, -80));
  EXPECT_LE(secagg::SecAggRiskOf(*ground, o.max_dropout).stall, secagg::kMaxStallRisk);
  // The default graph of g = 0, given explicitly, no longer holds.
  o.num_neighbors = plain->num_neighbors;
  o.threshold = plain->threshold;
  absl::Status refused = o.ParamsFor(1000, 0).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("(2^-80, with secure_aggregation.grinding_bits 40)"));
  o.num_neighbors = 0;
  o.threshold = 0;
  o.grinding_bits = -1;
  EXPECT_THAT(o.Validate().message(), HasSubstr("secure_aggregation.grinding_bits must be in"));
}

TEST(SecureAggregationParamsForTest, ExplicitBitsThatWrapForTheSampledClientsAreRefused) {
  SecureAggregationOptions o;
  o.enabled = true;
  o.quantization_bits = 20;  // 4000 x 1000 x (2^20 - 1) >= 2^32; 4 x 1000 x (2^20 - 1) is not
  ASSERT_TRUE(o.ParamsFor(4, 0).ok());
  absl::Status s = o.ParamsFor(4000, 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("secure_aggregation.quantization_bits 20 lets the sum wrap "
                                     "the modulus (4000 clients x max_weight 1000 x (2^20 - 1) "
                                     ">= 2^32); lower quantization_bits"));
  o.modulus_bits = 64;
  EXPECT_TRUE(o.ParamsFor(4000, 0).ok());
}

TEST_F(ConfigTest, ReferenceListsEveryKeyWithACommentAndReadsBackToTheDefaults) {
  const std::string reference = ServerConfigReference();
  const std::vector<std::pair<std::string, std::vector<std::string>>> keys = {
      {"server",
       {"listen", "data_dir", "ca", "cert", "key", "enroll", "insecure_plaintext",
        "max_poll_wait_s", "grace_s"}},
      {"run",
       {"name", "rounds", "min_clients", "min_fit_clients", "sample_fraction", "round_timeout_s",
        "client_timeout_s", "max_round_retries", "seed", "update_encoding"}},
      {"fit", {"local_epochs", "batch_size", "learning_rate"}},
      {"strategy",
       {"name", "proximal_mu", "momentum", "weight_decay", "clip_norm", "server_learning_rate",
        "num_parties", "server_momentum", "beta_1", "beta_2", "tau"}},
      {"model",
       {"kind", "features", "classes", "hidden", "image_height", "image_width", "image_channels",
        "init_seed"}},
      {"secure_aggregation",
       {"enabled", "num_neighbors", "threshold", "clip_range", "quantization_bits", "modulus_bits",
        "max_weight", "example_unit", "stage_timeout_s", "max_dropout", "corrupt_fraction"}},
  };
  for (const auto& [table, names] : keys) {
    const size_t table_at = reference.find(absl::StrCat("\n[", table, "]\n"));
    ASSERT_NE(table_at, std::string::npos) << table;
    for (const std::string& name : names) {
      const size_t at = reference.find(absl::StrCat("\n", name, " = "), table_at);
      ASSERT_NE(at, std::string::npos) << table << "." << name;
      const size_t comment = reference.rfind('\n', at - 1);
      EXPECT_EQ(reference.substr(comment + 1, 2), "# ") << table << "." << name;
    }
  }
  ServerConfig c;
  absl::Status s = ApplyServerConfig(Write("reference.toml", reference), c);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(ServerConfigToToml(c), ServerConfigToToml(Defaults()));
}

TEST_F(ConfigTest, CheckedInExampleIsTheReference) {
  const std::string path = absl::StrCat(FL_SOURCE_DIR, "/deploy/server.example.toml");
  absl::StatusOr<std::string> example = ReadFile(path);
  ASSERT_TRUE(example.ok()) << example.status();
  EXPECT_EQ(*example, ServerConfigReference())
      << "regenerate it: fl server --print-config-reference > deploy/server.example.toml";
  ServerConfig c;
  absl::Status s = ApplyServerConfig(path, c);
  EXPECT_TRUE(s.ok()) << s;
}

// The real `fl` binary: `fl server --config FILE` and the flags over it.
class ServerCommandTest : public ConfigTest {
 protected:
  struct Result {
    int exit_code = -1;
    std::string out, err;
  };

  Result Run(const std::string& args) {
    const std::string out = Path("stdout"), err = Path("stderr");
    const std::string command = absl::StrCat(FL_BINARY, " ", args, " >", out, " 2>", err);
    const int status = std::system(command.c_str());
    Result r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = ReadFile(out).value_or("");
    r.err = ReadFile(err).value_or("");
    return r;
  }

  // The merged configuration `fl server <args> --print-effective-config` prints, read back.
  ServerConfig Effective(const std::string& args) {
    Result r = Run(absl::StrCat("server ", args, " --print-effective-config"));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    ServerConfig c;
    absl::Status s = ApplyServerConfig(Write("effective.toml", r.out), c);
    EXPECT_TRUE(s.ok()) << s << "\n" << r.out;
    return c;
  }
};

TEST_F(ServerCommandTest, BadConfigFailsNamingFileLineAndKey) {
  const std::string bad = Write("bad.toml", "[run]\nrounds = 3\nroundz = 4\n");
  Result r = Run(absl::StrCat("server --config ", bad, " --insecure-plaintext --listen 127.0.0.1:0",
                              " --data-dir ", Path("data")));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat(bad, ":3: unknown key 'run.roundz'")));
  EXPECT_FALSE(std::filesystem::exists(Path("data")));  // refused before starting

  const std::string wrong = Write("wrong.toml", "[fit]\nbatch_size = \"32\"\n");
  r = Run(absl::StrCat("server --config=", wrong));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat(wrong, ":2: key 'fit.batch_size' must be an integer")));

  r = Run(absl::StrCat("server --config ", Path("absent.toml")));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("NOT_FOUND"));
  EXPECT_THAT(r.err, HasSubstr(Path("absent.toml")));
}

TEST_F(ServerCommandTest, FlagsGivenOverrideTheFileAndOnlyThey) {
  const std::string good = Write("good.toml", R"([server]
listen = "127.0.0.1:9999"
data_dir = "from-file"
enroll = ["a.pem", "b.pem"]
insecure_plaintext = true
grace_s = 3
[run]
rounds = 7
min_clients = 4
min_fit_clients = 3
round_timeout_s = 42
sample_fraction = 0.5
seed = 9
[fit]
learning_rate = 0.2
batch_size = 16
[model]
features = 20
classes = 3
)");
  ServerConfig c = Effective(absl::StrCat("--config ", good, " --rounds 1 --lr 0.5 --classes 4"));
  // Given on the command line:
  EXPECT_EQ(c.server.engine.num_rounds, 1);
  EXPECT_EQ(c.server.engine.fit.learning_rate, 0.5f);
  EXPECT_EQ(c.model.classes, 4);
  // From the file, although each has a flag with a default:
  EXPECT_EQ(c.server.listen_address, "127.0.0.1:9999");
  EXPECT_EQ(c.server.data_dir, "from-file");
  EXPECT_THAT(c.server.enroll_cert_paths, ElementsAre("a.pem", "b.pem"));
  EXPECT_TRUE(c.server.insecure_plaintext);
  EXPECT_EQ(c.grace, absl::Seconds(3));
  EXPECT_EQ(c.server.engine.min_clients, 4);
  EXPECT_EQ(c.server.engine.min_fit_clients, 3);
  EXPECT_EQ(c.server.engine.round_timeout, absl::Seconds(42));
  EXPECT_EQ(c.server.engine.sample_fraction, 0.5);
  EXPECT_EQ(c.server.engine.seed, 9u);
  EXPECT_EQ(c.server.engine.fit.batch_size, 16);
  EXPECT_EQ(c.model.features, 20);

  // The duration flags and a repeated flag replace the file's values.
  c = Effective(absl::StrCat("--config ", good,
                             " --round-timeout 5 --grace 0 --enroll c.pem --listen 127.0.0.1:1"));
  EXPECT_EQ(c.server.engine.round_timeout, absl::Seconds(5));
  EXPECT_EQ(c.grace, absl::ZeroDuration());
  EXPECT_THAT(c.server.enroll_cert_paths, ElementsAre("c.pem"));
  EXPECT_EQ(c.server.listen_address, "127.0.0.1:1");
  EXPECT_EQ(c.server.engine.num_rounds, 7);
}

TEST_F(ServerCommandTest, PrivacyFlagsOverTheFile) {
  const std::string file =
      Write("p.toml", "[privacy]\nmode = \"central\"\nnoise_multiplier = 0.8\ndelta = 1e-6\n");
  ServerConfig c = Effective(
      absl::StrCat("--config ", file, " --dp-noise-multiplier 1.5 --dp-epsilon-budget 4"));
  EXPECT_EQ(c.server.engine.privacy.mode, "central");
  EXPECT_EQ(c.server.engine.privacy.noise_multiplier, 1.5);
  EXPECT_EQ(c.server.engine.privacy.delta, 1e-6);
  EXPECT_EQ(c.server.engine.privacy.epsilon_budget, 4);
  c = Effective("--dp-mode central --dp-clip-norm 0.25 --dp-delta 1e-7");
  EXPECT_EQ(c.server.engine.privacy.clip_norm, 0.25);
  EXPECT_EQ(c.server.engine.privacy.delta, 1e-7);
  // What the flags put together is checked before the server starts.
  Result r = Run(absl::StrCat("server --dp-mode central --dp-delta 1 --insecure-plaintext",
                              " --listen 127.0.0.1:0 --data-dir ", Path("data")));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("privacy.delta must be in (0, 1), got 1"));
}

TEST_F(ServerCommandTest, SecureAggregationFlags) {
  ServerConfig c = Effective("--min-clients 4 --secagg-threshold 3 --secagg-stage-timeout 7");
  EXPECT_TRUE(c.server.engine.secure_aggregation.enabled);  // a value flag turns it on
  EXPECT_EQ(c.server.engine.secure_aggregation.threshold, 3);
  EXPECT_EQ(c.server.engine.secure_aggregation.stage_timeout, absl::Seconds(7));
  c = Effective("--secagg --dp-mode distributed --min-clients 3");
  EXPECT_TRUE(c.server.engine.secure_aggregation.enabled);
  EXPECT_EQ(c.server.engine.secure_aggregation.num_neighbors, 0);
  EXPECT_TRUE(c.server.engine.privacy.distributed());
  Result r =
      Run(absl::StrCat("server --secagg --dp-mode central --min-clients 3",
                       " --insecure-plaintext --listen 127.0.0.1:0 --data-dir ", Path("data")));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("privacy.mode 'central' needs the server to read each update"));
}

// A boolean key's flag sets it either way over the file: `--x=false` turns off what the file
// turned on, `--no-x` (a key that defaults to true) turns it off, and its value is checked as
// the key's is.
TEST_F(ServerCommandTest, BooleanAndCheckedFlagsOverTheFile) {
  const std::string on = Write("on.toml", R"([run]
min_clients = 3
[secure_aggregation]
enabled = true
)");
  EXPECT_TRUE(Effective(absl::StrCat("--config ", on)).server.engine.secure_aggregation.enabled);
  EXPECT_FALSE(Effective(absl::StrCat("--config ", on, " --secagg=false"))
                   .server.engine.secure_aggregation.enabled);
  EXPECT_TRUE(Effective("").server.strategy.accept_failures);
  EXPECT_FALSE(Effective("--no-accept-failures").server.strategy.accept_failures);
  EXPECT_EQ(Effective("--norm-bound 2.5 --round-timeout 30").server.strategy.norm_bound, 2.5);
  Result r = Run("server --norm-bound -1 --print-effective-config");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("--norm-bound: key 'strategy.norm_bound' must be >= 0, got -1.0"));
  r = Run("server --rounds ten --print-effective-config");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("--rounds: expects an integer, got 'ten'"));
}

TEST_F(ServerCommandTest, StrategyAndModelFlags) {
  const std::string file = Write("s.toml", "[strategy]\nname = \"fedprox\"\nmomentum = 0.5\n");
  ServerConfig c = Effective(absl::StrCat(
      "--config ", file,
      " --proximal-mu 0.25 --weight-decay 0.001 --model mlp --hidden 32 16 --init-seed 5"));
  EXPECT_EQ(c.server.strategy.name, "fedprox");
  EXPECT_EQ(c.server.strategy.momentum, 0.5);
  EXPECT_EQ(c.server.strategy.proximal_mu, 0.25);
  EXPECT_EQ(c.server.strategy.weight_decay, 0.001);
  EXPECT_EQ(c.model.kind, "mlp");
  EXPECT_THAT(c.model.hidden, ElementsAre(32, 16));
  EXPECT_EQ(c.model.init_seed, 5u);
  c = Effective("--strategy scaffold --server-lr 0.5 --num-parties 12 --model simple_cnn");
  EXPECT_EQ(c.server.strategy.name, "scaffold");
  EXPECT_EQ(c.server.strategy.server_learning_rate, 0.5);
  EXPECT_EQ(c.server.strategy.num_parties, 12);
  EXPECT_EQ(c.model.kind, "simple_cnn");

  // What the flags put together is checked before the server starts.
  Result r = Run(absl::StrCat("server --strategy fedprox --proximal-mu 0 --insecure-plaintext",
                              " --listen 127.0.0.1:0 --data-dir ", Path("data")));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("key 'strategy.proximal_mu' must be > 0 for strategy 'fedprox'"));
  r = Run(absl::StrCat("server --strategy fedsgd --insecure-plaintext --listen 127.0.0.1:0",
                       " --data-dir ", Path("data")));
  EXPECT_NE(r.exit_code, 0);
  // A flag is checked as its key is, when parsed: the choices are named.
  EXPECT_THAT(r.err, HasSubstr("--strategy: key 'strategy.name' must be one of fedavg, fedprox"));
  EXPECT_THAT(r.err, HasSubstr("got \"fedsgd\""));
  r = Run(absl::StrCat("server --model resnet --insecure-plaintext --listen 127.0.0.1:0",
                       " --data-dir ", Path("data")));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("resnet"));
  EXPECT_FALSE(std::filesystem::exists(Path("data")));  // refused before starting
}

TEST_F(ServerCommandTest, WithoutAFileTheFlagsDefaultsAreTheConfigDefaults) {
  ServerConfig c = Effective("");
  EXPECT_EQ(ServerConfigToToml(c), ServerConfigToToml(Defaults()));
  c = Effective("--rounds 2 --insecure-plaintext");
  EXPECT_EQ(c.server.engine.num_rounds, 2);
  EXPECT_TRUE(c.server.insecure_plaintext);
}

TEST_F(ServerCommandTest, PrintConfigReference) {
  Result r = Run("server --print-config-reference");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, ServerConfigReference());
}

}  // namespace
}  // namespace fl::server

namespace fl::server {
namespace {

// A number is checked as the field holds it (found by the TOML fuzz target): a learning rate that
// a float rounds to 0, or past a float's range, and a duration under a nanosecond or past 31
// years, are refused naming the key, where they used to pass the range check and become 0 or
// infinity.
TEST_F(ConfigTest, NumbersAFieldCannotHoldAreRefusedNotRoundedToZeroOrInfinity) {
  struct Case {
    const char* text;
    const char* error;
  };
  for (const Case& c : {
           Case{"[fit]\nlearning_rate = 1e-127\n",
                "key 'fit.learning_rate' is 1e-127, out of the range a 32-bit float holds"},
           Case{"[fit]\nlearning_rate = 1e39\n",
                "key 'fit.learning_rate' is 1e+39, out of the range a 32-bit float holds"},
           Case{"[run]\nround_timeout_s = 1e-12\n",
                "key 'run.round_timeout_s' is 1e-12 seconds; a duration must be 0 or between "
                "1e-9 and 1e9"},
           Case{"[run]\nround_timeout_s = 1e300\n", "a duration must be 0 or between"},
       }) {
    absl::Status s = ApplyText(c.text);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.error)) << c.text;
  }
  EXPECT_TRUE(ApplyText("[fit]\nlearning_rate = 1e-30\n[run]\nround_timeout_s = 1e-3\n").ok());
}

}  // namespace
}  // namespace fl::server
