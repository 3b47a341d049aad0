// A site's own model, end to end: the real `fl server` starts from a safetensors file written by
// the custom-model example's trainer (examples/custom_model/two_layer_trainer.h), two SDK clients
// train it, and every committed round that `fl admin export` writes equals FedAvg of the sites'
// updates computed here, independently, from the same trainers. A site whose model differs is
// refused at join, naming the tensor.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "examples/custom_model/two_layer_trainer.h"
#include "fl/common/file_util.h"
#include "fl/common/safetensors.h"
#include "fl/server/store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_federation.h"

namespace fl::testing {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kHidden = 16;
constexpr int kRounds = 2;

custom_model::TwoLayerTrainer SiteTrainer(int site, int64_t hidden = kHidden) {
  return custom_model::TwoLayerTrainer(FashionTrainSlice(site * 300, 300), FashionTestSlice(100),
                                       784, hidden, 10, /*seed=*/site + 1);
}

int ExportRound(const std::string& data_dir, int round, const std::string& out) {
  std::vector<std::string> argv = {FL_BINARY, "admin", "--data-dir", data_dir, "export",
                                   "--round", absl::StrCat(round), "--out", out};
  ChildProcess child(argv, out + ".log");
  return child.Wait();
}

// FedAvg of each site's Fit from `global`, weighted by the examples it trained on.
Model FedAvg(std::vector<custom_model::TwoLayerTrainer>& sites, const Model& global, int round) {
  client::FitConfig config;
  config.round = round;
  config.local_epochs = 1;
  config.batch_size = 32;
  config.learning_rate = 0.1f;
  std::vector<double> sum(global.data().size(), 0.0);
  double weight = 0;
  for (custom_model::TwoLayerTrainer& site : sites) {
    absl::StatusOr<client::FitResult> fit = site.Fit(global, config);
    EXPECT_TRUE(fit.ok()) << fit.status();
    if (!fit.ok()) continue;
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += fit->num_examples * fit->model.data()[i];
    weight += static_cast<double>(fit->num_examples);
  }
  Model mean(global.spec());
  for (size_t i = 0; i < sum.size(); ++i) mean.data()[i] = static_cast<float>(sum[i] / weight);
  return mean;
}

TEST(CustomModelTest, ExportedRoundsAreTheFedAvgOfTheSitesOwnModel) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "site-1", "site-2"});
  const std::string init = dir.path() + "/init.safetensors";
  const Model initial = SiteTrainer(0).InitialModel(/*seed=*/5);
  ASSERT_TRUE(WriteSafetensors(init, initial).ok());
  const std::string data_dir = dir.path() + "/server";
  const int port = FreeLoopbackPort();
  ChildProcess server(
      ServerCommand(pki, data_dir, port,
                    {"--initial-model", init, "--rounds", absl::StrCat(kRounds), "--min-clients",
                     "2", "--min-fit-clients", "2", "--local-epochs", "1", "--batch-size", "32",
                     "--lr", "0.1", "--grace", "2"}),
      dir.path() + "/server.log");

  // A site whose hidden layer is wider is refused at join, before it can take part.
  {
    custom_model::TwoLayerTrainer wide = SiteTrainer(2, /*hidden=*/32);
    client::ClientOptions options = TlsClientOptions(pki, 2, port);
    absl::StatusOr<std::unique_ptr<client::Client>> c = client::Client::Create(options, &wide);
    ASSERT_TRUE(c.ok()) << c.status();
    absl::Status refused = (*c)->Run();
    EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
    EXPECT_THAT(refused.message(),
                HasSubstr("tensor 0 'fc1.weight' is [16, 784] in the server's model but "
                          "[32, 784] in this site's model"));
  }

  std::vector<std::unique_ptr<ClientThread>> clients;
  for (int site = 0; site < 2; ++site) {
    clients.push_back(std::make_unique<ClientThread>(
        TlsClientOptions(pki, site, port),
        std::make_unique<custom_model::TwoLayerTrainer>(SiteTrainer(site))));
  }
  for (auto& c : clients) EXPECT_TRUE(c->Join().ok());
  ASSERT_EQ(server.Wait(), 0) << ReadFile(dir.path() + "/server.log").value_or("");

  // Round 0 is the file the server started from, unchanged.
  const std::string r0 = dir.path() + "/round0.safetensors";
  ASSERT_EQ(ExportRound(data_dir, 0, r0), 0) << ReadFile(r0 + ".log").value_or("");
  absl::StatusOr<Model> exported0 = ReadSafetensors(r0);
  ASSERT_TRUE(exported0.ok()) << exported0.status();
  EXPECT_EQ(exported0->Sha256Hex(), initial.Sha256Hex());

  std::vector<custom_model::TwoLayerTrainer> sites = {SiteTrainer(0), SiteTrainer(1)};
  Model expected = initial.Clone();
  for (int round = 1; round <= kRounds; ++round) {
    expected = FedAvg(sites, expected, round);
    const std::string path = absl::StrCat(dir.path(), "/round", round, ".safetensors");
    ASSERT_EQ(ExportRound(data_dir, round, path), 0) << ReadFile(path + ".log").value_or("");
    absl::StatusOr<SafetensorsFile> exported = ReadSafetensorsFile(path);
    ASSERT_TRUE(exported.ok()) << exported.status();
    ASSERT_EQ(exported->model.spec(), initial.spec());
    EXPECT_EQ(exported->metadata["fl.round"], absl::StrCat(round));
    for (size_t i = 0; i < expected.data().size(); ++i) {
      ASSERT_NEAR(exported->model.data()[i], expected.data()[i], 1e-5)
          << "round " << round << ", parameter " << i;
    }
    expected = exported->model.Clone();  // the next round starts from what the server committed
  }

  // A round the run never committed is refused, naming those it did.
  const std::string missing = dir.path() + "/round9.safetensors";
  EXPECT_NE(ExportRound(data_dir, 9, missing), 0);
  EXPECT_THAT(ReadFile(missing + ".log").value_or(""),
              HasSubstr("run 1 has no committed round 9; its committed rounds are 1-2"));
}

}  // namespace
}  // namespace fl::testing
