// The fixture shared by the round engine's tests (engine_test.cc, engine_policy_test.cc): a fake
// clock, a real SQLite store in a temporary directory, FedAvg, and helpers that join clients and
// stream updates. Not in an anonymous namespace: both files' tests belong to one test suite,
// which GoogleTest requires to use one fixture class.
#ifndef FL_TESTS_UNIT_ENGINE_TEST_FIXTURE_H_
#define FL_TESTS_UNIT_ENGINE_TEST_FIXTURE_H_

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fl/aggregation/fedavg.h"
#include "fl/common/chunking.h"
#include "fl/server/engine.h"
#include "fl/server/store.h"
#include "gtest/gtest.h"
#include "tests/fake_clock.h"

namespace fl::server {

// 300,000 floats: 1.2 MB, so every update travels in two chunks.
inline ModelSpec TestSpec() { return ModelSpec({{"w", {1000, 299}}, {"b", {1000}}}); }

inline Model RandomModel(uint64_t seed) {
  Model m(TestSpec());
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (float& x : m.data()) x = normal(rng);
  return m;
}

inline std::string TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "engine_test_XXXXXX").string();
  char* dir = mkdtemp(tmpl.data());
  EXPECT_NE(dir, nullptr);
  return tmpl;
}

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir();
    std::filesystem::create_directories(dir_ + "/spill");
    options_.num_rounds = 3;
    options_.min_clients = 3;
    options_.min_fit_clients = 2;
    options_.round_timeout = absl::Minutes(5);
    options_.max_round_retries = 1;
    options_.seed = 7;
    options_.spill_dir = dir_ + "/spill";
    OpenStore();
  }
  void TearDown() override {
    engine_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  void OpenStore() {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(dir_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  void StartEngine() {
    absl::StatusOr<std::unique_ptr<RoundEngine>> engine = RoundEngine::Create(
        options_, store_.get(), strategy_.get(), &clock_, Model(TestSpec()), hooks_);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
  }

  void JoinAll() {
    for (const std::string& c : clients_) ASSERT_TRUE(engine_->Join(c, c).ok());
  }

  UpdateMeta MetaFor(const Task& task, int64_t examples) {
    UpdateMeta meta;
    meta.run_id = task.run_id;
    meta.round = task.round;
    meta.task_id = task.task_id;
    meta.num_examples = examples;
    meta.metrics = {{"loss", 1.0}};
    meta.payload_bytes = Model(TestSpec()).NumBytes();
    return meta;
  }

  // Streams `model` as the client's update for `task`; returns the first refusal, if any.
  // One round in which every client submits a random model with weight 1.
  void RunRound() {
    for (size_t i = 0; i < clients_.size(); ++i) {
      Task task = engine_->Poll(clients_[i]);
      ASSERT_EQ(task.kind, Task::Kind::kFit);
      ASSERT_TRUE(Submit(clients_[i], task, RandomModel(i), 1).ok());
    }
  }

  // `metrics` replaces MetaFor's {"loss": 1} when given.
  absl::Status Submit(const std::string& client, const Task& task, const Model& model,
                      int64_t examples, std::optional<std::map<std::string, double>> metrics = {}) {
    UpdateMeta meta = MetaFor(task, examples);
    if (metrics.has_value()) meta.metrics = *std::move(metrics);
    absl::StatusOr<std::unique_ptr<Upload>> upload = engine_->BeginUpload(client, meta);
    if (!upload.ok()) return upload.status();
    absl::Status s = ForEachChunk(
        model.bytes(), kMaxChunkBytes, [&](int64_t offset, std::span<const std::byte> bytes) {
          return (*upload)->AddChunk(
              offset, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
        });
    if (!s.ok()) return s;
    return (*upload)->Finish(model.Sha256Hex());
  }

  std::string dir_;
  FakeClock clock_;
  EngineOptions options_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<aggregation::Strategy> strategy_ = aggregation::MakeFedAvg();
  std::unique_ptr<RoundEngine> engine_;
  EngineHooks hooks_;
  std::vector<std::string> clients_ = {"client-a", "client-b", "client-c"};
};

inline void ExpectModelsNear(const Model& a, const Model& b) {
  ASSERT_EQ(a.spec(), b.spec());
  for (size_t i = 0; i < a.data().size(); ++i) {
    ASSERT_NEAR(a.data()[i], b.data()[i], 1e-5) << "parameter " << i;
  }
}

}  // namespace fl::server

#endif  // FL_TESTS_UNIT_ENGINE_TEST_FIXTURE_H_
