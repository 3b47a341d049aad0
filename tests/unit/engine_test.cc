// The round engine driven step by step with a fake clock, over a real SQLite store.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "fl/aggregation/fedavg.h"
#include "fl/common/chunking.h"
#include "fl/server/engine.h"
#include "fl/server/store.h"
#include "gtest/gtest.h"
#include "sqlite3.h"

namespace fl::server {
namespace {

class FakeClock final : public Clock {
 public:
  absl::Time Now() override {
    std::lock_guard<std::mutex> lock(mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ += d;
  }

 private:
  std::mutex mu_;
  absl::Time now_ = absl::FromUnixSeconds(1'800'000'000);
};

// 300,000 floats: 1.2 MB, so every update travels in two chunks.
ModelSpec TestSpec() { return ModelSpec({{"w", {1000, 299}}, {"b", {1000}}}); }

Model RandomModel(uint64_t seed) {
  Model m(TestSpec());
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (float& x : m.data()) x = normal(rng);
  return m;
}

std::string TempDir() {
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
  absl::Status Submit(const std::string& client, const Task& task, const Model& model,
                      int64_t examples) {
    absl::StatusOr<std::unique_ptr<Upload>> upload =
        engine_->BeginUpload(client, MetaFor(task, examples));
    if (!upload.ok()) return upload.status();
    absl::Status s = ForEachChunk(model.bytes(), kMaxChunkBytes,
                                  [&](int64_t offset, std::span<const std::byte> bytes) {
                                    return (*upload)->AddChunk(
                                        offset, std::string_view(
                                                    reinterpret_cast<const char*>(bytes.data()),
                                                    bytes.size()));
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

void ExpectModelsNear(const Model& a, const Model& b) {
  ASSERT_EQ(a.spec(), b.spec());
  for (size_t i = 0; i < a.data().size(); ++i) {
    ASSERT_NEAR(a.data()[i], b.data()[i], 1e-5) << "parameter " << i;
  }
}

TEST_F(EngineTest, WaitsForMinClientsThenHandsOutFitTasks) {
  StartEngine();
  ASSERT_TRUE(engine_->Join("client-a", "a").ok());
  ASSERT_TRUE(engine_->Join("client-b", "b").ok());
  Task t = engine_->Poll("client-a");
  EXPECT_EQ(t.kind, Task::Kind::kWait);
  EXPECT_NE(t.message.find("waiting for clients"), std::string::npos);
  ASSERT_TRUE(engine_->Join("client-c", "c").ok());
  for (const std::string& c : clients_) {
    Task task = engine_->Poll(c);
    ASSERT_EQ(task.kind, Task::Kind::kFit) << c;
    EXPECT_EQ(task.round, 1);
    EXPECT_EQ(task.spec, TestSpec());
    EXPECT_EQ(task.model_bytes, Model(TestSpec()).NumBytes());
    EXPECT_EQ(task.model_sha256, Model(TestSpec()).Sha256Hex());
  }
}

TEST_F(EngineTest, CommitsTheWeightedAverageOfStreamedUpdates) {
  StartEngine();
  JoinAll();
  std::vector<Model> models;
  std::vector<double> weights = {100, 300, 600};
  for (size_t i = 0; i < clients_.size(); ++i) {
    models.push_back(RandomModel(i));
    Task task = engine_->Poll(clients_[i]);
    ASSERT_TRUE(Submit(clients_[i], task, models[i], static_cast<int64_t>(weights[i])).ok());
  }
  ASSERT_EQ(engine_->committed_round(), 1);
  absl::StatusOr<Model> expected =
      aggregation::WeightedAverage({&models[0], &models[1], &models[2]}, weights);
  ASSERT_TRUE(expected.ok());
  ExpectModelsNear(*engine_->global_model(), *expected);

  absl::StatusOr<std::vector<RoundRecord>> rounds = store_->Rounds(engine_->run_id());
  ASSERT_TRUE(rounds.ok());
  ASSERT_EQ(rounds->size(), 2u);  // round 1 committed, round 2 running
  EXPECT_EQ((*rounds)[0].status, RoundStatus::kCommitted);
  EXPECT_EQ((*rounds)[0].num_reported, 3);
  EXPECT_EQ((*rounds)[0].checkpoint, engine_->global_model()->Sha256Hex());
  absl::StatusOr<Model> checkpoint = store_->ReadCheckpoint((*rounds)[0].checkpoint);
  ASSERT_TRUE(checkpoint.ok());
  ExpectModelsNear(*checkpoint, *expected);
  EXPECT_EQ((*rounds)[1].status, RoundStatus::kRunning);
  EXPECT_EQ((*rounds)[1].round, 2);
}

TEST_F(EngineTest, DeadlineClosesTheRoundWithWhoeverReported) {
  StartEngine();
  JoinAll();
  Model a = RandomModel(1), b = RandomModel(2);
  ASSERT_TRUE(Submit("client-a", engine_->Poll("client-a"), a, 10).ok());
  ASSERT_TRUE(Submit("client-b", engine_->Poll("client-b"), b, 30).ok());
  Task tc = engine_->Poll("client-c");  // sampled, alive, but never reports
  engine_->Tick();
  EXPECT_EQ(engine_->committed_round(), 0);
  for (int minute = 1; minute <= 5; ++minute) {
    clock_.Advance(absl::Minutes(1));
    (void)engine_->Heartbeat("client-c", 1, tc.task_id);
    engine_->Tick();
  }
  ASSERT_EQ(engine_->committed_round(), 1);
  absl::StatusOr<Model> expected = aggregation::WeightedAverage({&a, &b}, {10, 30});
  ExpectModelsNear(*engine_->global_model(), *expected);
  absl::StatusOr<std::vector<ParticipationRecord>> parts =
      store_->Participations(engine_->run_id(), 1);
  ASSERT_TRUE(parts.ok());
  int dropped = 0;
  for (const ParticipationRecord& p : *parts) {
    if (p.client_id == "client-c") {
      EXPECT_EQ(p.status, ParticipationStatus::kDropped);
      EXPECT_NE(p.reason.find("deadline"), std::string::npos) << p.reason;
      ++dropped;
    }
  }
  EXPECT_EQ(dropped, 1);
}

TEST_F(EngineTest, TooFewReportsFailTheAttemptThenTheRun) {
  StartEngine();
  JoinAll();
  ASSERT_TRUE(Submit("client-a", engine_->Poll("client-a"), RandomModel(1), 10).ok());
  clock_.Advance(absl::Minutes(6));
  engine_->Tick();  // attempt 0 of round 1 fails: 1 < min_fit_clients
  EXPECT_EQ(engine_->committed_round(), 0);
  EXPECT_FALSE(engine_->finished());
  for (const std::string& c : clients_) (void)engine_->Poll(c);  // still online: attempt 1 starts
  Task retry = engine_->Poll("client-a");
  ASSERT_EQ(retry.kind, Task::Kind::kFit);
  EXPECT_EQ(retry.round, 1);
  clock_.Advance(absl::Minutes(6));
  engine_->Tick();  // attempt 1 fails too; max_round_retries = 1
  EXPECT_TRUE(engine_->finished());
  absl::StatusOr<RunRecord> run = store_->GetRun(engine_->run_id());
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->status, RunStatus::kFailed);
  EXPECT_NE(run->reason.find("min_fit_clients"), std::string::npos) << run->reason;
  EXPECT_EQ(engine_->Poll("client-a").kind, Task::Kind::kDone);
}

TEST_F(EngineTest, RefusesBadUpdatesWithPreciseCodesAndTheRoundGoesOn) {
  StartEngine();
  JoinAll();
  Task ta = engine_->Poll("client-a");
  Task tb = engine_->Poll("client-b");
  Task tc = engine_->Poll("client-c");
  Model a = RandomModel(1), b = RandomModel(2);

  UpdateMeta stale = MetaFor(ta, 5);
  stale.round = 7;
  absl::StatusOr<std::unique_ptr<Upload>> u = engine_->BeginUpload("client-a", stale);
  EXPECT_EQ(u.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(u.status().message().find("round 7"), absl::string_view::npos);

  UpdateMeta foreign = MetaFor(ta, 5);
  foreign.task_id = tb.task_id;
  EXPECT_EQ(engine_->BeginUpload("client-a", foreign).status().code(),
            absl::StatusCode::kFailedPrecondition);

  UpdateMeta other_run = MetaFor(ta, 5);
  other_run.run_id = 99;
  EXPECT_EQ(engine_->BeginUpload("client-a", other_run).status().code(),
            absl::StatusCode::kFailedPrecondition);

  // client-a: a NaN in the second chunk, after the first chunk was already folded in.
  Model poisoned = RandomModel(9);
  poisoned.data()[poisoned.data().size() - 1] = std::numeric_limits<float>::quiet_NaN();
  absl::Status nan = Submit("client-a", ta, poisoned, 50);
  EXPECT_EQ(nan.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(nan.message().find("non-finite"), absl::string_view::npos) << nan;
  // A second update for the same task is refused even after a refusal.
  EXPECT_EQ(Submit("client-a", ta, a, 50).code(), absl::StatusCode::kAlreadyExists);

  // client-b: accepted, then a duplicate.
  ASSERT_TRUE(Submit("client-b", tb, b, 20).ok());
  EXPECT_EQ(Submit("client-b", tb, b, 20).code(), absl::StatusCode::kAlreadyExists);

  // client-c: a stream that ends after the first chunk.
  {
    absl::StatusOr<std::unique_ptr<Upload>> upload =
        engine_->BeginUpload("client-c", MetaFor(tc, 40));
    ASSERT_TRUE(upload.ok());
    ASSERT_TRUE((*upload)->AddChunk(0, std::string(kMaxChunkBytes, '\0')).ok());
    absl::Status truncated = (*upload)->Abandon();
    EXPECT_EQ(truncated.code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(truncated.message().find("ended after 1048576 of 1200000 bytes"),
              absl::string_view::npos)
        << truncated;
  }
  // Every sampled client reported; only b's update was accepted: 1 < min_fit_clients.
  EXPECT_EQ(engine_->committed_round(), 0);

  // The retry commits exactly the accepted updates: refused ones left nothing behind.
  for (const std::string& c : clients_) (void)engine_->Poll(c);
  Task ra = engine_->Poll("client-a"), rb = engine_->Poll("client-b");
  ASSERT_EQ(ra.kind, Task::Kind::kFit);
  ASSERT_TRUE(Submit("client-a", ra, a, 50).ok());
  // Wrong size and bad SHA-256 from client-c.
  Task rc = engine_->Poll("client-c");
  UpdateMeta wrong_size = MetaFor(rc, 40);
  wrong_size.payload_bytes = 12;
  absl::StatusOr<std::unique_ptr<Upload>> small = engine_->BeginUpload("client-c", wrong_size);
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(small.status().message().find("300000 float32 parameters"), absl::string_view::npos)
      << small.status();
  ASSERT_TRUE(Submit("client-b", rb, b, 20).ok());
  ASSERT_EQ(engine_->committed_round(), 1);
  absl::StatusOr<Model> expected = aggregation::WeightedAverage({&a, &b}, {50, 20});
  ExpectModelsNear(*engine_->global_model(), *expected);

  absl::StatusOr<std::vector<AuditRecord>> audit = store_->AuditLog(100);
  ASSERT_TRUE(audit.ok());
  std::string all;
  for (const AuditRecord& r : *audit) all += r.event + ": " + r.detail + "\n";
  EXPECT_NE(all.find("non-finite"), std::string::npos) << all;
  EXPECT_NE(all.find("ALREADY_EXISTS"), std::string::npos) << all;
  EXPECT_NE(all.find("DATA_LOSS"), std::string::npos) << all;
  EXPECT_NE(all.find("round 7"), std::string::npos) << all;
}

TEST_F(EngineTest, BadShaIsRefusedAndFoldedOut) {
  StartEngine();
  JoinAll();
  Task ta = engine_->Poll("client-a"), tb = engine_->Poll("client-b"),
       tc = engine_->Poll("client-c");
  Model a = RandomModel(1), b = RandomModel(2), c = RandomModel(3);
  absl::StatusOr<std::unique_ptr<Upload>> upload = engine_->BeginUpload("client-a", MetaFor(ta, 9));
  ASSERT_TRUE(upload.ok());
  ASSERT_TRUE(ForEachChunk(a.bytes(), kMaxChunkBytes, [&](int64_t off, std::span<const std::byte> x) {
                return (*upload)->AddChunk(
                    off, std::string_view(reinterpret_cast<const char*>(x.data()), x.size()));
              }).ok());
  absl::Status bad = (*upload)->Finish(std::string(64, '0'));
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("SHA-256 mismatch"), absl::string_view::npos) << bad;
  ASSERT_TRUE(Submit("client-b", tb, b, 2).ok());
  ASSERT_TRUE(Submit("client-c", tc, c, 3).ok());
  ASSERT_EQ(engine_->committed_round(), 1);
  ExpectModelsNear(*engine_->global_model(), *aggregation::WeightedAverage({&b, &c}, {2, 3}));
}

TEST_F(EngineTest, DeadlineCutsOffAnUploadInFlight) {
  StartEngine();
  JoinAll();
  Task ta = engine_->Poll("client-a"), tb = engine_->Poll("client-b"),
       tc = engine_->Poll("client-c");
  Model a = RandomModel(1), b = RandomModel(2), c = RandomModel(3);
  ASSERT_TRUE(Submit("client-a", ta, a, 1).ok());
  ASSERT_TRUE(Submit("client-b", tb, b, 1).ok());
  absl::StatusOr<std::unique_ptr<Upload>> slow = engine_->BeginUpload("client-c", MetaFor(tc, 5));
  ASSERT_TRUE(slow.ok());
  ASSERT_TRUE((*slow)->AddChunk(0, std::string_view(reinterpret_cast<const char*>(c.bytes().data()),
                                                    kMaxChunkBytes))
                  .ok());
  clock_.Advance(absl::Minutes(5));
  engine_->Tick();
  ASSERT_EQ(engine_->committed_round(), 1);
  ExpectModelsNear(*engine_->global_model(), *aggregation::WeightedAverage({&a, &b}, {1, 1}));
  absl::Status late = (*slow)->AddChunk(
      kMaxChunkBytes, std::string_view(reinterpret_cast<const char*>(c.bytes().data()) +
                                           kMaxChunkBytes,
                                       c.bytes().size() - kMaxChunkBytes));
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(late.message().find("round closed"), absl::string_view::npos) << late;
}

TEST_F(EngineTest, ResumesAfterRestartAtTheNextUncommittedRound) {
  StartEngine();
  JoinAll();
  std::vector<Model> models;
  for (uint64_t seed : {1, 2, 3}) models.push_back(RandomModel(seed));
  for (size_t i = 0; i < clients_.size(); ++i) {
    ASSERT_TRUE(Submit(clients_[i], engine_->Poll(clients_[i]), models[i], 1).ok());
  }
  ASSERT_EQ(engine_->committed_round(), 1);
  const int64_t run_id = engine_->run_id();
  Model after_round_1 = engine_->global_model()->Clone();
  // Round 2 is in flight with a partial upload when the server "dies".
  Task t2 = engine_->Poll("client-a");
  ASSERT_EQ(t2.round, 2);
  {
    absl::StatusOr<std::unique_ptr<Upload>> partial =
        engine_->BeginUpload("client-a", MetaFor(t2, 1));
    ASSERT_TRUE(partial.ok());
    ASSERT_TRUE((*partial)->AddChunk(0, std::string(kMaxChunkBytes, '\0')).ok());
    (*partial)->Refuse(absl::CancelledError("test")).IgnoreError();
  }
  engine_.reset();
  store_.reset();
  OpenStore();
  options_.num_rounds = 99;  // a restarted server keeps the run's recorded configuration
  StartEngine();
  EXPECT_EQ(engine_->run_id(), run_id);
  EXPECT_EQ(engine_->committed_round(), 1);
  ExpectModelsNear(*engine_->global_model(), after_round_1);
  absl::StatusOr<std::vector<RoundRecord>> rounds = store_->Rounds(run_id);
  ASSERT_TRUE(rounds.ok());
  ASSERT_EQ(rounds->size(), 2u);
  EXPECT_EQ((*rounds)[1].status, RoundStatus::kAborted);

  // Rounds 2 and 3 run to the end of the recorded configuration (3 rounds).
  for (int round = 2; round <= 3; ++round) {
    JoinAll();
    for (size_t i = 0; i < clients_.size(); ++i) {
      Task t = engine_->Poll(clients_[i]);
      ASSERT_EQ(t.kind, Task::Kind::kFit);
      ASSERT_EQ(t.round, round);
      ASSERT_TRUE(Submit(clients_[i], t, models[i], 1).ok());
    }
  }
  EXPECT_TRUE(engine_->finished());
  EXPECT_EQ(engine_->committed_round(), 3);
  rounds = store_->Rounds(run_id);
  ASSERT_TRUE(rounds.ok());
  int committed = 0;
  for (const RoundRecord& r : *rounds) committed += r.status == RoundStatus::kCommitted;
  EXPECT_EQ(committed, 3);
  EXPECT_EQ(store_->GetRun(run_id)->status, RunStatus::kFinished);
}

TEST_F(EngineTest, SamplesAFractionReproduciblyFromTheSeed) {
  clients_ = {"c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9"};
  options_.min_clients = 10;
  options_.min_fit_clients = 2;
  options_.sample_fraction = 0.3;
  auto sampled_in_round_1 = [&] {
    std::vector<std::string> sampled;
    for (const std::string& c : clients_) {
      if (engine_->Poll(c).kind == Task::Kind::kFit) sampled.push_back(c);
    }
    return sampled;
  };
  StartEngine();
  JoinAll();
  std::vector<std::string> first = sampled_in_round_1();
  EXPECT_EQ(first.size(), 3u);  // ceil(0.3 * 10)

  // The same seed over a fresh store samples the same clients; another seed, others.
  auto fresh_engine = [&](uint64_t seed) {
    engine_.reset();
    store_.reset();
    for (const char* f : {"/federation.db", "/federation.db-wal", "/federation.db-shm"}) {
      std::filesystem::remove(dir_ + f);
    }
    options_.seed = seed;
    OpenStore();
    StartEngine();
    JoinAll();
  };
  fresh_engine(7);
  EXPECT_EQ(sampled_in_round_1(), first);

  std::vector<std::vector<std::string>> others;
  for (uint64_t seed : {8, 9, 10}) {
    fresh_engine(seed);
    others.push_back(sampled_in_round_1());
  }
  bool any_differs = false;
  for (const auto& o : others) any_differs |= o != first;
  EXPECT_TRUE(any_differs);
}

// Streams `model` chunk by chunk through an upload that the caller finishes.
absl::Status StreamChunks(Upload& upload, const Model& model) {
  return ForEachChunk(model.bytes(), kMaxChunkBytes,
                      [&](int64_t offset, std::span<const std::byte> bytes) {
                        return upload.AddChunk(
                            offset, std::string_view(reinterpret_cast<const char*>(bytes.data()),
                                                     bytes.size()));
                      });
}

TEST_F(EngineTest, RefusedUpdateOfHugeValuesLeavesNoTraceInTheSameRound) {
  StartEngine();
  JoinAll();
  Task ta = engine_->Poll("client-a"), tb = engine_->Poll("client-b"),
       tc = engine_->Poll("client-c");
  Model b = RandomModel(2), c = RandomModel(3);
  ASSERT_TRUE(Submit("client-b", tb, b, 100).ok());
  // The largest weight and values a client may send, refused at the very end.
  Model huge(TestSpec());
  for (float& x : huge.data()) x = 3e38f;
  absl::StatusOr<std::unique_ptr<Upload>> upload =
      engine_->BeginUpload("client-a", MetaFor(ta, int64_t{1} << 40));
  ASSERT_TRUE(upload.ok()) << upload.status();
  ASSERT_TRUE(StreamChunks(**upload, huge).ok());
  EXPECT_EQ((*upload)->Finish(std::string(64, 'f')).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(Submit("client-c", tc, c, 300).ok());
  ASSERT_EQ(engine_->committed_round(), 1);
  ExpectModelsNear(*engine_->global_model(), *aggregation::WeightedAverage({&b, &c}, {100, 300}));
}

TEST_F(EngineTest, ExampleCountsBeyondTheLimitAreRefused) {
  StartEngine();
  JoinAll();
  Task ta = engine_->Poll("client-a");
  absl::StatusOr<std::unique_ptr<Upload>> upload =
      engine_->BeginUpload("client-a", MetaFor(ta, (int64_t{1} << 40) + 1));
  EXPECT_EQ(upload.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(upload.status().message().find("must be in [1, 1099511627776]"),
            absl::string_view::npos)
      << upload.status();
}

TEST_F(EngineTest, InterleavedUploadsOfClientsWithACommonIdPrefixStayApart) {
  // Plaintext identities share long prefixes; their staged updates must not.
  clients_ = {"plain:hospital-01", "plain:hospital-02", "plain:hospital-03"};
  StartEngine();
  JoinAll();
  Task t1 = engine_->Poll(clients_[0]), t2 = engine_->Poll(clients_[1]),
       t3 = engine_->Poll(clients_[2]);
  Model m1 = RandomModel(1), m2 = RandomModel(2), m3 = RandomModel(3);
  auto u1 = engine_->BeginUpload(clients_[0], MetaFor(t1, 10));
  auto u2 = engine_->BeginUpload(clients_[1], MetaFor(t2, 20));
  ASSERT_TRUE(u1.ok() && u2.ok());
  ASSERT_TRUE(StreamChunks(**u1, m1).ok());
  ASSERT_TRUE(StreamChunks(**u2, m2).ok());
  ASSERT_TRUE((*u2)->Finish(m2.Sha256Hex()).ok());
  ASSERT_TRUE((*u1)->Finish(m1.Sha256Hex()).ok());
  ASSERT_TRUE(Submit(clients_[2], t3, m3, 30).ok());
  ASSERT_EQ(engine_->committed_round(), 1);
  ExpectModelsNear(*engine_->global_model(),
                   *aggregation::WeightedAverage({&m1, &m2, &m3}, {10, 20, 30}));
}

TEST_F(EngineTest, DeclinedTaskEndsTheWaitAndIsAudited) {
  StartEngine();
  JoinAll();
  Task ta = engine_->Poll("client-a"), tb = engine_->Poll("client-b"),
       tc = engine_->Poll("client-c");
  ASSERT_TRUE(engine_->Decline("client-a", MetaFor(ta, 0), "trainer ran out of memory").ok());
  EXPECT_EQ(engine_->Poll("client-a").kind, Task::Kind::kWait);  // not offered again
  // A second decline, or an update after it, is a second answer to the same task.
  EXPECT_EQ(engine_->Decline("client-a", MetaFor(ta, 0), "again").code(),
            absl::StatusCode::kAlreadyExists);
  Model b = RandomModel(2), c = RandomModel(3);
  ASSERT_TRUE(Submit("client-b", tb, b, 1).ok());
  ASSERT_TRUE(Submit("client-c", tc, c, 1).ok());
  ASSERT_EQ(engine_->committed_round(), 1);  // no need to wait for the deadline
  absl::StatusOr<std::vector<ParticipationRecord>> parts =
      store_->Participations(engine_->run_id(), 1);
  ASSERT_TRUE(parts.ok());
  bool declined = false;
  for (const ParticipationRecord& p : *parts) {
    if (p.client_id == "client-a") {
      declined = p.status == ParticipationStatus::kRefused &&
                 p.reason.find("declined the task: trainer ran out of memory") != std::string::npos;
    }
  }
  EXPECT_TRUE(declined);
  absl::StatusOr<std::vector<AuditRecord>> audit = store_->AuditLog(100);
  ASSERT_TRUE(audit.ok());
  bool audited = false;
  for (const AuditRecord& r : *audit) audited |= r.event == "task_declined";
  EXPECT_TRUE(audited);
}

TEST_F(EngineTest, ARestartDoesNotSpendARetry) {
  StartEngine();  // max_round_retries = 1
  JoinAll();
  ASSERT_EQ(engine_->Poll("client-a").kind, Task::Kind::kFit);
  // Two restarts abort two attempts of round 1.
  for (int i = 0; i < 2; ++i) {
    engine_.reset();
    store_.reset();
    OpenStore();
    StartEngine();
    JoinAll();
  }
  // One real failure: within the single allowed retry.
  clock_.Advance(absl::Minutes(6));
  engine_->Tick();
  EXPECT_FALSE(engine_->finished());
  for (const std::string& c : clients_) (void)engine_->Poll(c);
  Task t = engine_->Poll("client-a");
  EXPECT_EQ(t.kind, Task::Kind::kFit);
  EXPECT_EQ(t.round, 1);
}

TEST_F(EngineTest, ConcurrentUploadsWhileTheClockTicks) {
  options_.num_rounds = 2;
  StartEngine();
  JoinAll();
  std::vector<Model> models;
  for (uint64_t seed : {1, 2, 3}) models.push_back(RandomModel(seed));
  for (int round = 1; round <= 2; ++round) {
    std::atomic<bool> done{false};
    std::thread ticker([&] {
      while (!done) engine_->Tick();
    });
    std::vector<std::thread> uploaders;
    std::vector<absl::Status> results(3);
    for (size_t i = 0; i < 3; ++i) {
      uploaders.emplace_back([&, i] {
        Task t = engine_->Poll(clients_[i]);
        results[i] = t.kind == Task::Kind::kFit
                         ? Submit(clients_[i], t, models[i], 10 * (i + 1))
                         : absl::InternalError("no fit task");
      });
    }
    for (std::thread& t : uploaders) t.join();
    done = true;
    ticker.join();
    for (const absl::Status& r : results) EXPECT_TRUE(r.ok()) << r;
    ASSERT_EQ(engine_->committed_round(), round);
  }
  ExpectModelsNear(*engine_->global_model(),
                   *aggregation::WeightedAverage({&models[0], &models[1], &models[2]},
                                                 {10, 20, 30}));
}

TEST_F(EngineTest, WaitingForClientsTimesOutWithAReason) {
  options_.wait_timeout = absl::Minutes(10);
  StartEngine();
  ASSERT_TRUE(engine_->Join("client-a", "a").ok());
  ASSERT_TRUE(engine_->Join("client-b", "b").ok());
  // Two clients keep polling; the third never comes.
  for (int minute = 1; minute <= 10; ++minute) {
    clock_.Advance(absl::Minutes(1));
    (void)engine_->Poll("client-a");
    (void)engine_->Poll("client-b");
    ASSERT_FALSE(engine_->finished()) << "minute " << minute;
  }
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(engine_->Poll("client-a").kind, Task::Kind::kDone);
  ASSERT_TRUE(engine_->finished());
  absl::StatusOr<RunRecord> run = store_->GetRun(engine_->run_id());
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->status, RunStatus::kFailed);
  EXPECT_NE(run->reason.find("only 2 of the 3 clients needed (min_clients) came online within 10m"),
            std::string::npos)
      << run->reason;
}

TEST_F(EngineTest, StoppingRuleEndsTheRunEarly) {
  options_.num_rounds = 5;
  options_.stop_metric = "test_accuracy";
  options_.stop_threshold = 0.5;
  int evaluations = 0;
  hooks_.evaluate = [&evaluations](const Model&) -> std::map<std::string, double> {
    return {{"test_accuracy", 0.3 * ++evaluations}};
  };
  StartEngine();
  JoinAll();
  for (int round = 1; round <= 2; ++round) {
    for (size_t i = 0; i < clients_.size(); ++i) {
      Task t = engine_->Poll(clients_[i]);
      ASSERT_EQ(t.kind, Task::Kind::kFit) << "round " << round;
      ASSERT_TRUE(Submit(clients_[i], t, RandomModel(i), 1).ok());
    }
  }
  ASSERT_TRUE(engine_->finished());
  EXPECT_EQ(engine_->committed_round(), 2);
  absl::StatusOr<RunRecord> run = store_->GetRun(engine_->run_id());
  EXPECT_EQ(run->status, RunStatus::kFinished);
  EXPECT_NE(run->reason.find("stopping rule met after round 2: test_accuracy = 0.6 >= 0.5"),
            std::string::npos)
      << run->reason;
  EXPECT_EQ(engine_->Poll("client-a").kind, Task::Kind::kDone);
}

TEST_F(EngineTest, AbortRecordsTheRoundAndARestartRunsItAgain) {
  StartEngine();
  JoinAll();
  Task ta = engine_->Poll("client-a");
  absl::StatusOr<std::unique_ptr<Upload>> upload = engine_->BeginUpload("client-a", MetaFor(ta, 1));
  ASSERT_TRUE(upload.ok());
  ASSERT_TRUE((*upload)->AddChunk(0, std::string(kMaxChunkBytes, '\0')).ok());
  engine_->Abort("server shutting down");
  absl::Status late = (*upload)->AddChunk(kMaxChunkBytes, std::string(1200000 - kMaxChunkBytes, 0));
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition) << late;
  Task t = engine_->Poll("client-b");
  EXPECT_EQ(t.kind, Task::Kind::kWait);
  EXPECT_EQ(t.message, "the server is shutting down");
  absl::StatusOr<std::vector<RoundRecord>> rounds = store_->Rounds(engine_->run_id());
  ASSERT_TRUE(rounds.ok());
  ASSERT_EQ(rounds->size(), 1u);
  EXPECT_EQ((*rounds)[0].status, RoundStatus::kAborted);
  EXPECT_EQ((*rounds)[0].reason, "server shutting down");

  upload->reset();
  engine_.reset();
  store_.reset();
  OpenStore();
  StartEngine();
  JoinAll();
  Task again = engine_->Poll("client-a");
  ASSERT_EQ(again.kind, Task::Kind::kFit);
  EXPECT_EQ(again.round, 1);
  EXPECT_NE(again.task_id, ta.task_id);  // a new attempt
}

TEST_F(EngineTest, ASilentClientIsDroppedFromItsRound) {
  StartEngine();  // client_timeout 90 s, round_timeout 5 min
  JoinAll();
  Task ta = engine_->Poll("client-a"), tb = engine_->Poll("client-b"),
       tc = engine_->Poll("client-c");
  Model a = RandomModel(1), b = RandomModel(2);
  ASSERT_TRUE(Submit("client-a", ta, a, 1).ok());
  ASSERT_TRUE(Submit("client-b", tb, b, 1).ok());
  clock_.Advance(absl::Seconds(60));
  engine_->Tick();
  EXPECT_EQ(engine_->committed_round(), 0);  // client-c may still be training
  clock_.Advance(absl::Seconds(31));
  engine_->Tick();  // 91 s without a word from client-c: dropped, the round closes
  ASSERT_EQ(engine_->committed_round(), 1);
  ExpectModelsNear(*engine_->global_model(), *aggregation::WeightedAverage({&a, &b}, {1, 1}));
  absl::StatusOr<std::vector<ParticipationRecord>> parts =
      store_->Participations(engine_->run_id(), 1);
  ASSERT_TRUE(parts.ok());
  for (const ParticipationRecord& p : *parts) {
    if (p.client_id != "client-c") continue;
    EXPECT_EQ(p.status, ParticipationStatus::kDropped);
    EXPECT_NE(p.reason.find("offline: no poll or heartbeat for 1m31s"), std::string::npos)
        << p.reason;
  }
  absl::StatusOr<std::vector<AuditRecord>> audit = store_->AuditLog(100);
  bool audited = false;
  for (const AuditRecord& r : *audit) audited |= r.event == "client_offline";
  EXPECT_TRUE(audited);
  EXPECT_FALSE(engine_->Heartbeat("client-c", 1, tc.task_id));
}

TEST_F(EngineTest, HeartbeatsKeepALongTrainingInTheRound) {
  options_.round_timeout = absl::Minutes(30);
  StartEngine();
  JoinAll();
  Task ta = engine_->Poll("client-a"), tb = engine_->Poll("client-b"),
       tc = engine_->Poll("client-c");
  Model a = RandomModel(1), b = RandomModel(2), c = RandomModel(3);
  ASSERT_TRUE(Submit("client-a", ta, a, 1).ok());
  ASSERT_TRUE(Submit("client-b", tb, b, 1).ok());
  for (int i = 0; i < 20; ++i) {  // ten minutes of training, a heartbeat every 30 s
    clock_.Advance(absl::Seconds(30));
    EXPECT_TRUE(engine_->Heartbeat("client-c", 1, tc.task_id));
    engine_->Tick();
  }
  EXPECT_EQ(engine_->committed_round(), 0);
  ASSERT_TRUE(Submit("client-c", tc, c, 1).ok());
  ASSERT_EQ(engine_->committed_round(), 1);
  ExpectModelsNear(*engine_->global_model(),
                   *aggregation::WeightedAverage({&a, &b, &c}, {1, 1, 1}));
  EXPECT_FALSE(engine_->Heartbeat("client-c", 1, tc.task_id));  // that round is closed
}

TEST_F(EngineTest, FederatedEvaluationEveryKRoundsIsWeightedAndRecorded) {
  options_.num_rounds = 2;
  options_.eval_every = 1;
  StartEngine();
  JoinAll();
  auto run_round = [&](int round) {
    for (size_t i = 0; i < clients_.size(); ++i) {
      Task t = engine_->Poll(clients_[i]);
      ASSERT_EQ(t.kind, Task::Kind::kFit) << "round " << round;
      ASSERT_TRUE(Submit(clients_[i], t, RandomModel(i), 1).ok());
    }
  };
  run_round(1);
  // Every client evaluates round 1's model before round 2 starts.
  std::map<std::string, Task> tasks;
  for (const std::string& c : clients_) {
    Task t = engine_->Poll(c);
    ASSERT_EQ(t.kind, Task::Kind::kEvaluate);
    EXPECT_EQ(t.round, 1);
    EXPECT_EQ(t.model_sha256, engine_->global_model()->Sha256Hex());
    ASSERT_TRUE(engine_->ModelForTask(c, t.run_id, t.round, t.task_id).ok());
    tasks[c] = t;
  }
  auto report = [&](const std::string& c, int64_t n, double loss, double acc) {
    EvaluationReport r;
    r.run_id = tasks[c].run_id;
    r.round = 1;
    r.task_id = tasks[c].task_id;
    r.num_examples = n;
    r.loss = loss;
    r.metrics = {{"accuracy", acc}};
    return r;
  };
  ASSERT_TRUE(engine_->SubmitEvaluation("client-a", report("client-a", 100, 1.0, 0.5)).ok());
  EXPECT_EQ(engine_->SubmitEvaluation("client-a", report("client-a", 100, 1.0, 0.5)).code(),
            absl::StatusCode::kAlreadyExists);
  EvaluationReport nan = report("client-b", 300, std::nan(""), 0.9);
  EXPECT_EQ(engine_->SubmitEvaluation("client-b", nan).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(engine_->SubmitEvaluation("client-b", report("client-b", 300, 2.0, 0.9)).ok());
  EXPECT_EQ(engine_->Poll("client-a").kind, Task::Kind::kWait);  // round 2 waits
  EvaluationReport declined = report("client-c", 0, 0, 0);
  declined.error = "no held-out data at this site";
  ASSERT_TRUE(engine_->SubmitEvaluation("client-c", declined).ok());
  run_round(2);  // the evaluation ended; round 2 runs
  EXPECT_EQ(engine_->committed_round(), 2);
  for (const std::string& c : clients_) EXPECT_EQ(engine_->Poll(c).kind, Task::Kind::kEvaluate);
  EXPECT_FALSE(engine_->finished());  // the run ends after the final evaluation
  clock_.Advance(absl::Minutes(6));   // nobody reports: eval_timeout
  engine_->Tick();
  EXPECT_TRUE(engine_->finished());

  absl::StatusOr<std::unique_ptr<Store>> reader = Store::Open(dir_);
  ASSERT_TRUE(reader.ok());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ + "/federation.db").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db,
                               "SELECT round, loss, accuracy, num_examples FROM evaluations "
                               "WHERE source = 'federated'",
                               -1, &st, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(st, 0), 1);
  EXPECT_DOUBLE_EQ(sqlite3_column_double(st, 1), (100 * 1.0 + 300 * 2.0) / 400);
  EXPECT_DOUBLE_EQ(sqlite3_column_double(st, 2), (100 * 0.5 + 300 * 0.9) / 400);
  EXPECT_EQ(sqlite3_column_int64(st, 3), 400);
  EXPECT_EQ(sqlite3_step(st), SQLITE_DONE);  // round 2's evaluation got no result
  sqlite3_finalize(st);
  sqlite3_close(db);
  absl::StatusOr<std::vector<AuditRecord>> audit = store_->AuditLog(100);
  bool declined_audited = false;
  for (const AuditRecord& r : *audit) {
    declined_audited |= r.event == "evaluation_declined" &&
                        r.detail.find("no held-out data") != std::string::npos;
  }
  EXPECT_TRUE(declined_audited);
}

TEST_F(EngineTest, AFinishedRunIsFollowedByANewRunWithItsOwnConfiguration) {
  options_.num_rounds = 1;
  StartEngine();
  JoinAll();
  for (size_t i = 0; i < clients_.size(); ++i) {
    ASSERT_TRUE(Submit(clients_[i], engine_->Poll(clients_[i]), RandomModel(i), 1).ok());
  }
  ASSERT_TRUE(engine_->finished());
  const int64_t first = engine_->run_id();
  engine_.reset();
  options_.num_rounds = 2;
  options_.run_name = "second";
  StartEngine();
  EXPECT_NE(engine_->run_id(), first);
  EXPECT_FALSE(engine_->finished());
  absl::StatusOr<RunRecord> run = store_->GetRun(engine_->run_id());
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->name, "second");
  absl::StatusOr<EngineOptions> recorded = EngineOptions::FromJson(run->config_json);
  ASSERT_TRUE(recorded.ok());
  EXPECT_EQ(recorded->num_rounds, 2);
  EXPECT_EQ(store_->GetRun(first)->status, RunStatus::kFinished);
}

TEST(EngineOptionsTest, JsonRoundTripAndRefusals) {
  EngineOptions o;
  o.num_rounds = 42;
  o.round_timeout = absl::Seconds(90);
  o.fit.learning_rate = 0.25f;
  absl::StatusOr<EngineOptions> back = EngineOptions::FromJson(o.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->num_rounds, 42);
  EXPECT_EQ(back->round_timeout, absl::Seconds(90));
  EXPECT_FLOAT_EQ(back->fit.learning_rate, 0.25f);
  EXPECT_EQ(EngineOptions::FromJson("{").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EngineOptions::FromJson("{}").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EngineOptions::FromJson("{\"num_rounds\": \"ten\"}").status().code(),
            absl::StatusCode::kInvalidArgument);
  // Keys a run recorded before they existed keep their defaults.
  absl::StatusOr<EngineOptions> old = EngineOptions::FromJson("{\"num_rounds\": 4}");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->wait_timeout, EngineOptions().wait_timeout);
  EXPECT_TRUE(old->stop_metric.empty());
}

}  // namespace
}  // namespace fl::server
