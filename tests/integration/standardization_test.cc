// Federated standardisation through the real `fl server` and SDK clients over mutual TLS: the
// sites' feature sums become the run's statistics (equal to those of the union of the sites'
// rows, computed here), the server stores them, every site standardises with them before it
// trains, and the run commits its rounds.
#include <chrono>
#include <cmath>
#include <csignal>
#include <memory>
#include <string>
#include <vector>

#include "fl/client/builtin_models.h"
#include "fl/client/dataset.h"
#include "fl/common/crypto.h"
#include "fl/common/file_util.h"
#include "fl/server/store.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sqlite3.h"
#include "tests/integration/test_federation.h"

namespace fl::testing {
namespace {

using ::testing::HasSubstr;

std::string StoredStatistics(const std::string& db) {
  sqlite3* handle = nullptr;
  std::string text;
  if (sqlite3_open_v2(db.c_str(), &handle, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(handle, "SELECT feature_stats_json FROM runs WHERE run_id = 1", -1,
                           &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
      text = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(handle);
  return text;
}

// A built-in trainer that remembers the statistics the SDK handed it.
class RecordingTrainer final : public client::Trainer {
 public:
  RecordingTrainer(std::unique_ptr<client::Trainer> inner, client::ColumnStats* applied)
      : inner_(std::move(inner)), applied_(applied) {}
  ModelSpec spec() const override { return inner_->spec(); }
  absl::StatusOr<client::FitResult> Fit(const Model& global,
                                        const client::FitConfig& config) override {
    return inner_->Fit(global, config);
  }
  absl::StatusOr<client::EvalResult> Evaluate(const Model& model) override {
    return inner_->Evaluate(model);
  }
  absl::StatusOr<client::FeatureSums> FeatureSumsForStatistics() override {
    return inner_->FeatureSumsForStatistics();
  }
  absl::Status ApplyFeatureStatistics(const client::ColumnStats& stats) override {
    *applied_ = stats;
    return inner_->ApplyFeatureStatistics(stats);
  }

 private:
  std::unique_ptr<client::Trainer> inner_;
  client::ColumnStats* applied_;
};

TEST(StandardizationTest, TheSitesStatisticsAreThoseOfTheirUnionAndEverySiteTrainsWithThem) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "site-1"});
  const std::string data_dir = dir.path() + "/server";
  const int port = FreeLoopbackPort();
  const std::string config = dir.path() + "/server.toml";
  ASSERT_TRUE(WriteFileAtomic(config, "[run]\nfederated_standardization = true\n").ok());
  ChildProcess server(
      ServerCommand(pki, data_dir, port,
                    {"--config", config, "--rounds", "2", "--min-clients", "2",
                     "--min-fit-clients", "2", "--model", "softmax", "--grace", "2"}),
      dir.path() + "/server.log");
  std::vector<client::Dataset> data = {FashionTrainSlice(0, 400), FashionTrainSlice(400, 250)};
  client::FeatureSums expected;
  for (const client::Dataset& d : data) ASSERT_TRUE(expected.Add(ComputeFeatureSums(d)).ok());
  absl::StatusOr<client::ColumnStats> union_stats = client::StatsFromSums(expected);
  ASSERT_TRUE(union_stats.ok());

  client::ModelArchitecture arch;
  arch.kind = client::ModelKind::kSoftmaxRegression;
  arch.num_features = 784;
  arch.num_classes = 10;
  client::BuiltinTrainerOptions training;
  training.backend = "cpu";
  training.cpu_threads = 1;
  std::vector<std::unique_ptr<ClientThread>> clients;
  std::vector<client::ColumnStats> applied(2);
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::unique_ptr<client::Trainer>> trainer =
        client::MakeBuiltinTrainer(arch, data[i], FashionTestSlice(50), training);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    clients.push_back(std::make_unique<ClientThread>(
        TlsClientOptions(pki, i, port),
        std::make_unique<RecordingTrainer>(*std::move(trainer), &applied[i])));
  }
  for (auto& c : clients) EXPECT_TRUE(c->Join().ok());
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(applied[i].mean.size(), 784u) << "site " << i << " was never given statistics";
    for (size_t j = 0; j < 784; ++j) {
      ASSERT_NEAR(applied[i].mean[j], union_stats->mean[j], 1e-9) << "site " << i;
      ASSERT_NEAR(applied[i].stddev[j], union_stats->stddev[j], 1e-7) << "site " << i;
    }
  }
  const std::string log = ReadFile(dir.path() + "/server.log").value_or("");
  ASSERT_EQ(server.Wait(), 0) << log;
  EXPECT_THAT(log, HasSubstr("statistics_finished sites=2 rows=650 features=784"));

  const nlohmann::json stats = nlohmann::json::parse(StoredStatistics(data_dir + "/federation.db"));
  ASSERT_EQ(stats["mean"].size(), 784u);
  EXPECT_EQ(stats["count"], 650);
  EXPECT_EQ(stats["sites"], 2);
  for (size_t j = 0; j < 784; ++j) {
    ASSERT_NEAR(stats["mean"][j].get<double>(), union_stats->mean[j], 1e-9) << "feature " << j;
    ASSERT_NEAR(stats["stddev"][j].get<double>(), union_stats->stddev[j], 1e-7) << "feature " << j;
  }
  absl::StatusOr<std::unique_ptr<server::Store>> store = server::Store::OpenReadOnly(data_dir);
  ASSERT_TRUE(store.ok());
  absl::StatusOr<std::optional<server::RoundRecord>> last = (*store)->LastCommittedRound(1);
  ASSERT_TRUE(last.ok() && last->has_value());
  EXPECT_EQ((*last)->round, 2);
}

// The server recomputes the columns' hash: a join cannot fix the run's columns with a hash that
// is not that of the names it shows, nor send one without the other.
TEST(StandardizationTest, AJoinWhoseColumnHashIsNotItsColumnsIsRefused) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0"});
  const int port = FreeLoopbackPort();
  ChildProcess server(ServerCommand(pki, dir.path() + "/server", port, {"--rounds", "1"}),
                      dir.path() + "/server.log");
  RawClient raw(pki, 0, port);
  auto join = [&](const std::vector<std::string>& columns, const std::string& sha) {
    v1::JoinRequest req;
    for (const std::string& c : columns) req.add_feature_columns(c);
    req.set_feature_schema_sha256(sha);
    v1::JoinReply reply;
    grpc::ClientContext ctx;
    ctx.set_wait_for_ready(true);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return raw.stub().Join(&ctx, req, &reply);
  };
  grpc::Status lying = join({"age", "bmi"}, NameListSha256({"x"}));
  EXPECT_EQ(lying.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(lying.error_message(), HasSubstr("is not the SHA-256 of the feature columns"));
  grpc::Status no_hash = join({"age"}, "");
  EXPECT_EQ(no_hash.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(no_hash.error_message(), HasSubstr("without their SHA-256"));
  EXPECT_TRUE(join({"age", "bmi"}, NameListSha256({"age", "bmi"})).ok());
  server.Kill(SIGTERM);
  server.Wait();
}

}  // namespace
}  // namespace fl::testing
