// The round engine driven step by step with a fake clock, over a real SQLite store: rounds,
// aggregation and refused updates. Deadlines, liveness, restarts, evaluation and the run's end are
// in engine_policy_test.cc.
#include <limits>
#include <map>
#include <thread>

#include "nlohmann/json.hpp"
#include "tests/unit/engine_test_fixture.h"

namespace fl::server {
namespace {

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

// A training metric is averaged over the sites that reported it: the operator's complaint was
// train_accuracy=0.2815 where the only site reporting it had 0.6333.
TEST_F(EngineTest, ATrainingMetricIsAveragedOverTheSitesThatReportedIt) {
  StartEngine();
  JoinAll();
  const std::vector<std::map<std::string, double>> reported = {
      {{"loss", 1.0}, {"accuracy", 0.6333}}, {{"loss", 2.0}}, {{"loss", 4.0}}};
  const std::vector<int64_t> examples = {100, 300, 600};
  for (size_t i = 0; i < clients_.size(); ++i) {
    Task task = engine_->Poll(clients_[i]);
    ASSERT_TRUE(Submit(clients_[i], task, RandomModel(i), examples[i], reported[i]).ok());
  }
  ASSERT_EQ(engine_->committed_round(), 1);
  absl::StatusOr<std::vector<RoundRecord>> rounds = store_->Rounds(engine_->run_id());
  ASSERT_TRUE(rounds.ok());
  const nlohmann::json metrics = nlohmann::json::parse((*rounds)[0].metrics_json);
  EXPECT_NEAR(metrics.at("train_accuracy").get<double>(), 0.6333, 1e-12);
  EXPECT_NEAR(metrics.at("train_loss").get<double>(), (100 * 1.0 + 300 * 2.0 + 600 * 4.0) / 1000,
              1e-12);
}

// A second start on the same store does not make a run with a name already taken.
TEST_F(EngineTest, ANewRunWithATakenNameIsNumbered) {
  options_.num_rounds = 1;
  options_.run_name = "study";
  for (const char* expected : {"study", "study-2", "study-3"}) {
    StartEngine();
    JoinAll();
    RunRound();
    ASSERT_TRUE(engine_->finished());
    absl::StatusOr<RunRecord> run = store_->GetRun(engine_->run_id());
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_EQ(run->name, expected);
    engine_.reset();
  }
}

// LAST_SEEN was set only at join. Polls and heartbeats now reach the store too, in one
// transaction a minute (last_seen_flush).
TEST_F(EngineTest, PollsAndHeartbeatsMoveLastSeenInTheStoreEveryMinute) {
  for (const std::string& c : clients_) ASSERT_TRUE(store_->EnrollClient(c, c, 1).ok());
  StartEngine();
  const absl::Time joined = clock_.Now();
  JoinAll();
  auto last_seen_ms = [&](const std::string& id) -> int64_t {
    absl::StatusOr<std::optional<ClientRecord>> c = store_->Client(id);
    EXPECT_TRUE(c.ok() && c->has_value());
    return c.ok() && c->has_value() ? (*c)->last_seen_ms : -1;
  };
  EXPECT_EQ(last_seen_ms("client-a"), absl::ToUnixMillis(joined));
  clock_.Advance(absl::Seconds(30));
  const absl::Time polled = clock_.Now();
  Task t = engine_->Poll("client-a");
  engine_->Tick();  // 30 s after the last write: not yet
  EXPECT_EQ(last_seen_ms("client-a"), absl::ToUnixMillis(joined));
  clock_.Advance(absl::Seconds(31));
  ASSERT_TRUE(engine_->Heartbeat("client-b", t.round, engine_->Poll("client-b").task_id));
  engine_->Tick();
  EXPECT_EQ(last_seen_ms("client-a"), absl::ToUnixMillis(polled));
  EXPECT_EQ(last_seen_ms("client-b"), absl::ToUnixMillis(clock_.Now()));
  EXPECT_EQ(last_seen_ms("client-c"), absl::ToUnixMillis(joined));  // not seen since
}

TEST_F(EngineTest, TooFewReportsFailTheAttemptThenTheRun) {
  StartEngine();
  JoinAll();
  ASSERT_TRUE(Submit("client-a", engine_->Poll("client-a"), RandomModel(1), 10).ok());
  clock_.Advance(absl::Minutes(6));
  engine_->Tick();  // attempt 0 of round 1 fails: 1 < min_fit_clients
  EXPECT_EQ(engine_->committed_round(), 0);
  EXPECT_FALSE(engine_->finished());
  EXPECT_EQ(engine_->Poll("client-a").kind, Task::Kind::kWait);  // the retry waits retry_backoff
  clock_.Advance(options_.retry_backoff);
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

// Retries of a failed round back off: retry_backoff, then twice that for each further failure,
// never more than a minute.
TEST_F(EngineTest, RetriesOfAFailedRoundBackOffExponentiallyUpToAMinute) {
  options_.max_round_retries = 6;
  options_.retry_backoff = absl::Seconds(5);
  StartEngine();
  JoinAll();
  int32_t attempt = 0;
  for (int64_t delay_s : {5, 10, 20, 40, 60, 60}) {
    Task t = engine_->Poll("client-a");
    ASSERT_EQ(t.kind, Task::Kind::kFit);
    clock_.Advance(options_.round_timeout);
    engine_->Tick();  // nobody reported: the attempt fails
    ++attempt;
    clock_.Advance(absl::Seconds(delay_s) - absl::Milliseconds(1));
    for (const std::string& c : clients_) (void)engine_->Poll(c);
    EXPECT_EQ(engine_->Poll("client-a").kind, Task::Kind::kWait)
        << "attempt " << attempt << " started before its " << delay_s << " s";
    clock_.Advance(absl::Milliseconds(1));
    for (const std::string& c : clients_) (void)engine_->Poll(c);
  }
  Task last = engine_->Poll("client-a");
  EXPECT_EQ(last.kind, Task::Kind::kFit);
  EXPECT_FALSE(engine_->finished());
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
  clock_.Advance(options_.retry_backoff);
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
  ASSERT_TRUE(
      ForEachChunk(a.bytes(), kMaxChunkBytes, [&](int64_t off, std::span<const std::byte> x) {
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

// Streams `model` chunk by chunk through an upload that the caller finishes.
absl::Status StreamChunks(Upload& upload, const Model& model) {
  return ForEachChunk(
      model.bytes(), kMaxChunkBytes, [&](int64_t offset, std::span<const std::byte> bytes) {
        return upload.AddChunk(
            offset, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
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
        results[i] = t.kind == Task::Kind::kFit ? Submit(clients_[i], t, models[i], 10 * (i + 1))
                                                : absl::InternalError("no fit task");
      });
    }
    for (std::thread& t : uploaders) t.join();
    done = true;
    ticker.join();
    for (const absl::Status& r : results) EXPECT_TRUE(r.ok()) << r;
    ASSERT_EQ(engine_->committed_round(), round);
  }
  ExpectModelsNear(
      *engine_->global_model(),
      *aggregation::WeightedAverage({&models[0], &models[1], &models[2]}, {10, 20, 30}));
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
  EXPECT_FALSE(back->strategy.has_value()) << "none given, none recorded";
  o.strategy.emplace();
  o.strategy->name = "scaffold";
  o.strategy->server_learning_rate = 0.5;
  o.strategy->num_parties = 12;
  back = EngineOptions::FromJson(o.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->strategy.has_value());
  EXPECT_EQ(back->strategy->name, "scaffold");
  EXPECT_DOUBLE_EQ(back->strategy->server_learning_rate, 0.5);
  EXPECT_EQ(back->strategy->num_parties, 12);
  o.strategy->name = "qfedavg";
  o.strategy->q = 3;
  o.strategy->qffl_learning_rate = 0.02;
  o.strategy->root_examples = 7;
  o.strategy->trim_beta = 0.3;
  o.strategy->num_malicious = 4;
  o.strategy->num_to_keep = 5;
  back = EngineOptions::FromJson(o.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_DOUBLE_EQ(back->strategy->q, 3);
  EXPECT_DOUBLE_EQ(back->strategy->qffl_learning_rate, 0.02);
  EXPECT_EQ(back->strategy->root_examples, 7);
  EXPECT_DOUBLE_EQ(back->strategy->trim_beta, 0.3);
  EXPECT_EQ(back->strategy->num_malicious, 4);
  EXPECT_EQ(back->strategy->num_to_keep, 5);
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

// Each fit task names the last round in which the client's update was accepted and the round
// committed (SCAFFOLD clients promote their c_i by it): a refused update, a failed round or a
// restart never names a round whose update the global model does not hold.
// The round closes (and the next opens) inside the last upload's call, which still holds the
// round's state: the previous global model must go at the commit all the same, or it would sit
// beside the next round's model and sum (4x the model in server memory instead of 3x).
TEST_F(EngineTest, ThePreviousGlobalModelIsFreedAtTheCommitWhileTheLastUploadIsStillOpen) {
  StartEngine();
  JoinAll();
  std::weak_ptr<const Model> round1_global = engine_->global_model();
  std::vector<std::unique_ptr<Upload>> still_open;
  for (size_t i = 0; i < clients_.size(); ++i) {
    Task task = engine_->Poll(clients_[i]);
    ASSERT_EQ(task.kind, Task::Kind::kFit);
    const Model model = RandomModel(i);
    absl::StatusOr<std::unique_ptr<Upload>> upload =
        engine_->BeginUpload(clients_[i], MetaFor(task, 1));
    ASSERT_TRUE(upload.ok()) << upload.status();
    ASSERT_TRUE(ForEachChunk(model.bytes(), kMaxChunkBytes,
                             [&](int64_t offset, std::span<const std::byte> bytes) {
                               return (*upload)->AddChunk(
                                   offset,
                                   std::string_view(reinterpret_cast<const char*>(bytes.data()),
                                                    bytes.size()));
                             })
                    .ok());
    ASSERT_TRUE((*upload)->Finish(model.Sha256Hex()).ok());
    still_open.push_back(*std::move(upload));
  }
  ASSERT_EQ(engine_->committed_round(), 1);
  EXPECT_TRUE(round1_global.expired()) << "round 1's global model outlived its commit";
}

TEST_F(EngineTest, FitTasksNameTheClientsLastCommittedAcceptedRound) {
  StartEngine();
  JoinAll();
  auto committed_round_of = [&](const std::string& client) {
    Task t = engine_->Poll(client);
    EXPECT_EQ(t.kind, Task::Kind::kFit) << client;
    return t.client_committed_round;
  };
  // Round 1: a and c accepted, b refused (NaN); the round commits with a and c.
  std::map<std::string, Task> tasks;
  for (const std::string& c : clients_) {
    tasks[c] = engine_->Poll(c);
    EXPECT_EQ(tasks[c].client_committed_round, 0) << c;
  }
  Model poisoned = RandomModel(9);
  poisoned.data()[0] = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(Submit("client-a", tasks["client-a"], RandomModel(1), 10).ok());
  EXPECT_EQ(Submit("client-b", tasks["client-b"], poisoned, 10).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(Submit("client-c", tasks["client-c"], RandomModel(3), 10).ok());
  ASSERT_EQ(engine_->committed_round(), 1);
  EXPECT_EQ(committed_round_of("client-a"), 1);
  EXPECT_EQ(committed_round_of("client-b"), 0);
  EXPECT_EQ(committed_round_of("client-c"), 1);

  // Round 2's first attempt fails (only a reports): a's accepted update there does not count.
  ASSERT_TRUE(Submit("client-a", engine_->Poll("client-a"), RandomModel(4), 10).ok());
  clock_.Advance(absl::Minutes(6));
  engine_->Tick();
  ASSERT_EQ(engine_->committed_round(), 1);
  clock_.Advance(options_.retry_backoff);
  for (const std::string& c : clients_) (void)engine_->Poll(c);  // online: the retry starts
  EXPECT_EQ(committed_round_of("client-a"), 1);

  // A restart rebuilds the same answers from the store.
  engine_.reset();
  store_.reset();
  OpenStore();
  StartEngine();
  JoinAll();
  EXPECT_EQ(committed_round_of("client-a"), 1);
  EXPECT_EQ(committed_round_of("client-b"), 0);
  EXPECT_EQ(committed_round_of("client-c"), 1);
  RunRound();  // round 2 commits with everyone
  ASSERT_EQ(engine_->committed_round(), 2);
  for (const std::string& c : clients_) EXPECT_EQ(committed_round_of(c), 2) << c;
}

}  // namespace
}  // namespace fl::server

namespace fl::server {
namespace {

// A sampled site that never asks for its fit task (it only joins, or holds streams) is dropped
// after task_pickup_timeout, and the round goes on with the others; a site still heartbeating an
// older task is at work, not absent: its pickup time runs from its last such heartbeat.
TEST_F(EngineTest, ASampledSiteThatNeverAsksForItsTaskIsDroppedButABusyOneIsNot) {
  options_.task_pickup_timeout = absl::Seconds(30);
  options_.client_timeout = absl::Minutes(10);
  StartEngine();
  JoinAll();
  const Task a = engine_->Poll("client-a");
  ASSERT_EQ(a.kind, Task::Kind::kFit);
  ASSERT_TRUE(Submit("client-a", a, RandomModel(1), 10).ok());
  // client-b works on a task of an earlier round (its heartbeats name it); client-c is silent
  // about tasks but keeps joining, which keeps it online.
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(absl::Seconds(10));
    engine_->Heartbeat("client-b", a.round - 1, "r0.a0.stale");
    ASSERT_TRUE(engine_->Join("client-c", "client-c").ok());
    engine_->Tick();
  }
  // 40 s in: client-b, heard at work 0 s ago, is still owed its update: once free it asks,
  // delivers, and the round commits with a and b, without waiting for client-c.
  const Task b = engine_->Poll("client-b");
  ASSERT_EQ(b.kind, Task::Kind::kFit);
  ASSERT_TRUE(Submit("client-b", b, RandomModel(2), 10).ok());
  engine_->Tick();
  EXPECT_EQ(engine_->committed_round(), 1);
  // client-c was dropped at 30 s, saying why.
  absl::StatusOr<std::vector<ParticipationRecord>> parts = store_->Participations(1, a.round);
  ASSERT_TRUE(parts.ok());
  std::map<std::string, ParticipationRecord> by_client;
  for (const ParticipationRecord& p : *parts) by_client[p.client_id] = p;
  EXPECT_EQ(by_client["client-c"].status, ParticipationStatus::kDropped);
  EXPECT_NE(by_client["client-c"].reason.find("did not ask for its task within 30s"),
            std::string::npos)
      << by_client["client-c"].reason;
  EXPECT_EQ(by_client["client-b"].status, ParticipationStatus::kAccepted);
}

}  // namespace
}  // namespace fl::server
