// The round engine's policies, driven with a fake clock over a real SQLite store: deadlines,
// dropping silent clients, heartbeats, waiting for clients, the stopping rule, aborts and restarts,
// federated evaluation, sampling, and a new run after a finished one.
#include <cmath>
#include <filesystem>

#include "sqlite3.h"
#include "tests/unit/engine_test_fixture.h"

namespace fl::server {
namespace {

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
  ASSERT_TRUE((*slow)
                  ->AddChunk(0, std::string_view(reinterpret_cast<const char*>(c.bytes().data()),
                                                 kMaxChunkBytes))
                  .ok());
  clock_.Advance(absl::Minutes(5));
  engine_->Tick();
  ASSERT_EQ(engine_->committed_round(), 1);
  ExpectModelsNear(*engine_->global_model(), *aggregation::WeightedAverage({&a, &b}, {1, 1}));
  absl::Status late = (*slow)->AddChunk(
      kMaxChunkBytes,
      std::string_view(reinterpret_cast<const char*>(c.bytes().data()) + kMaxChunkBytes,
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
  clock_.Advance(options_.retry_backoff);
  for (const std::string& c : clients_) (void)engine_->Poll(c);
  Task t = engine_->Poll("client-a");
  EXPECT_EQ(t.kind, Task::Kind::kFit);
  EXPECT_EQ(t.round, 1);
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

// The engine skips looking for silent clients until the earliest one could be; a heartbeat
// moves that time on, and a wall clock stepped back makes it look again rather than wait.
TEST_F(EngineTest, SilenceIsFoundOnTimeAfterHeartbeatsAndAClockSteppedBack) {
  StartEngine();  // client_timeout 90 s
  JoinAll();
  Task ta = engine_->Poll("client-a"), tb = engine_->Poll("client-b"),
       tc = engine_->Poll("client-c");
  ASSERT_TRUE(Submit("client-a", ta, RandomModel(1), 1).ok());
  clock_.Advance(absl::Seconds(80));
  ASSERT_TRUE(engine_->Heartbeat("client-b", 1, tb.task_id));
  engine_->Tick();  // nobody silent yet; client-c could be first, at 90 s
  clock_.Advance(absl::Seconds(11));
  engine_->Tick();  // 91 s: client-c is dropped, client-b (heard at 80 s) is not
  EXPECT_FALSE(engine_->Heartbeat("client-c", 1, tc.task_id));
  EXPECT_TRUE(engine_->Heartbeat("client-b", 1, tb.task_id));  // heard again at 91 s
  EXPECT_EQ(engine_->committed_round(), 0);

  clock_.Advance(absl::Seconds(-60));  // the wall clock steps back: now 31 s
  ASSERT_TRUE(engine_->Heartbeat("client-b", 1, tb.task_id));  // heard at 31 s
  engine_->Tick();
  clock_.Advance(absl::Seconds(91));  // 122 s: 91 s after client-b was last heard
  engine_->Tick();
  EXPECT_FALSE(engine_->Heartbeat("client-b", 1, tb.task_id)) << "dropped on time";
  EXPECT_EQ(engine_->committed_round(), 0);  // 1 of min_fit_clients 2: the attempt fails
}

// One site whose data cannot fit the model used to fail the whole run in a second (every
// attempt declined). A decline that this run's model and settings will not change leaves the
// site out of the draw, audited; the run goes on with the others.
TEST_F(EngineTest, ASiteThatCanNeverTrainIsLeftOutAndTheRunGoesOn) {
  clients_.push_back("client-d");
  options_.num_rounds = 2;
  StartEngine();
  JoinAll();
  for (const std::string c : {"client-a", "client-b", "client-c"}) {
    ASSERT_TRUE(Submit(c, engine_->Poll(c), RandomModel(1), 1).ok());
  }
  Task td = engine_->Poll("client-d");
  ASSERT_EQ(td.kind, Task::Kind::kFit);
  ASSERT_TRUE(engine_
                  ->Decline("client-d", MetaFor(td, 0),
                            "INVALID_ARGUMENT: site.csv has 2 feature columns but model softmax "
                            "expects 30")
                  .ok());
  ASSERT_EQ(engine_->committed_round(), 1);
  // Round 2 draws from the three others only, and commits with them.
  EXPECT_EQ(engine_->Poll("client-d").kind, Task::Kind::kWait);
  for (const std::string c : {"client-a", "client-b", "client-c"}) {
    Task t = engine_->Poll(c);
    ASSERT_EQ(t.kind, Task::Kind::kFit) << c;
    EXPECT_EQ(t.round, 2);
    ASSERT_TRUE(Submit(c, t, RandomModel(2), 1).ok());
  }
  EXPECT_EQ(engine_->committed_round(), 2);
  EXPECT_TRUE(engine_->finished());
  absl::StatusOr<std::vector<AuditRecord>> audit = store_->AuditLog(100);
  ASSERT_TRUE(audit.ok());
  int excluded = 0;
  for (const AuditRecord& r : *audit) {
    if (r.event != "client_excluded") continue;
    ++excluded;
    EXPECT_EQ(r.client_id, "client-d");
    EXPECT_NE(r.detail.find("left out of sampling until the run ends"), std::string::npos)
        << r.detail;
    EXPECT_NE(r.detail.find("2 feature columns"), std::string::npos) << r.detail;
  }
  EXPECT_EQ(excluded, 1);
}

// A decline that may pass (the site is busy, out of memory) keeps the site in the draw.
TEST_F(EngineTest, ATransientDeclineKeepsTheSiteInTheDraw) {
  options_.num_rounds = 2;
  StartEngine();
  JoinAll();
  ASSERT_TRUE(Submit("client-a", engine_->Poll("client-a"), RandomModel(1), 1).ok());
  ASSERT_TRUE(Submit("client-b", engine_->Poll("client-b"), RandomModel(1), 1).ok());
  Task tc = engine_->Poll("client-c");
  ASSERT_TRUE(
      engine_->Decline("client-c", MetaFor(tc, 0), "RESOURCE_EXHAUSTED: out of GPU memory").ok());
  ASSERT_EQ(engine_->committed_round(), 1);
  Task again = engine_->Poll("client-c");
  EXPECT_EQ(again.kind, Task::Kind::kFit);
  EXPECT_EQ(again.round, 2);
}

// Sites left out still count as online for min_clients, but a round needs min_fit_clients
// others to draw: with too few the run waits, then fails saying who was left out and why.
TEST_F(EngineTest, TooFewSitesLeftAfterExclusionsFailsTheRunSayingWhy) {
  options_.num_rounds = 3;
  options_.min_fit_clients = 3;
  options_.wait_timeout = absl::Minutes(10);
  clients_.push_back("client-d");
  StartEngine();
  JoinAll();
  for (const std::string c : {"client-a", "client-b", "client-c"}) {
    ASSERT_TRUE(Submit(c, engine_->Poll(c), RandomModel(1), 1).ok());
  }
  Task td = engine_->Poll("client-d");
  ASSERT_TRUE(engine_->Decline("client-d", MetaFor(td, 0), "UNIMPLEMENTED: encoding INT4").ok());
  ASSERT_EQ(engine_->committed_round(), 1);
  // Round 2 draws the other three; client-c then goes the same way.
  Task tc = engine_->Poll("client-c");
  ASSERT_EQ(tc.kind, Task::Kind::kFit);
  ASSERT_TRUE(
      engine_->Decline("client-c", MetaFor(tc, 0), "PERMISSION_DENIED: 3 epochs, limit 2").ok());
  for (int minute = 0; minute < 16 && !engine_->finished(); ++minute) {
    for (const std::string& c : clients_) (void)engine_->Poll(c);
    clock_.Advance(absl::Minutes(1));
    engine_->Tick();
  }
  ASSERT_TRUE(engine_->finished());
  absl::StatusOr<RunRecord> run = store_->GetRun(engine_->run_id());
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->status, RunStatus::kFailed);
  EXPECT_NE(run->reason.find("only 2 of the 4 clients online may still be sampled, fewer than "
                             "the 3 a round needs (min_fit_clients)"),
            std::string::npos)
      << run->reason;
  EXPECT_NE(run->reason.find("left out for declining this run's tasks: client-c "
                             "(PERMISSION_DENIED: 3 epochs, limit 2); client-d (UNIMPLEMENTED: "
                             "encoding INT4)"),
            std::string::npos)
      << run->reason;
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
    declined_audited |=
        r.event == "evaluation_declined" && r.detail.find("no held-out data") != std::string::npos;
  }
  EXPECT_TRUE(declined_audited);
}

// Every metric the sites report is recorded; one that only some report (auc: binary models only)
// is their example-weighted mean, not diluted by the sites without it; and the stopping rule
// sees the federated results as "eval_<name>".
TEST_F(EngineTest, FederatedEvaluationKeepsEveryMetricAndTheStoppingRuleCanUseThem) {
  options_.num_rounds = 5;
  options_.eval_every = 1;
  options_.stop_metric = "eval_auc";
  options_.stop_threshold = 0.8;
  StartEngine();
  JoinAll();
  // Each site's (examples, loss, metrics) for the evaluation of one round.
  struct Site {
    int64_t examples;
    double loss;
    std::map<std::string, double> metrics;
  };
  auto evaluate = [&](int32_t round, const std::map<std::string, Site>& sites) {
    for (const std::string& c : clients_) {
      Task t = engine_->Poll(c);
      ASSERT_EQ(t.kind, Task::Kind::kEvaluate) << c << " round " << round;
      const Site& site = sites.at(c);
      EvaluationReport r;
      r.run_id = t.run_id;
      r.round = round;
      r.task_id = t.task_id;
      r.num_examples = site.examples;
      r.loss = site.loss;
      r.metrics = site.metrics;
      ASSERT_TRUE(engine_->SubmitEvaluation(c, r).ok()) << c;
    }
  };
  RunRound();
  evaluate(1, {{"client-a", {100, 1.0, {{"accuracy", 0.5}, {"auc", 0.6}}}},
               {"client-b", {300, 2.0, {{"accuracy", 0.9}, {"f1", 0.4}}}},
               {"client-c", {100, 3.0, {{"accuracy", 0.7}, {"auc", 0.9}}}}});
  // auc over a and c only: (100 * 0.6 + 100 * 0.9) / 200 = 0.75 < 0.8, the run goes on.
  EXPECT_FALSE(engine_->finished());
  absl::StatusOr<std::vector<EvaluationRecord>> evals = store_->Evaluations(engine_->run_id());
  ASSERT_TRUE(evals.ok()) << evals.status();
  ASSERT_EQ(evals->size(), 4u);  // the federation's mean, then each site's own (plain run)
  const EvaluationRecord& first = (*evals)[0];
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_EQ((*evals)[i].source, absl::StrCat(kSiteEvaluationSource, clients_[i - 1]));
  }
  EXPECT_DOUBLE_EQ((*evals)[2].loss, 2.0);  // client-b's own
  EXPECT_EQ((*evals)[2].num_examples, 300);
  EXPECT_DOUBLE_EQ((*evals)[2].metrics.at("f1"), 0.4);
  EXPECT_EQ(first.source, "federated");
  EXPECT_EQ(first.num_examples, 500);
  EXPECT_DOUBLE_EQ(first.loss, (100 * 1.0 + 300 * 2.0 + 100 * 3.0) / 500);
  EXPECT_DOUBLE_EQ(first.accuracy, (100 * 0.5 + 300 * 0.9 + 100 * 0.7) / 500);
  ASSERT_EQ(first.metrics.size(), 3u);
  EXPECT_DOUBLE_EQ(first.metrics.at("accuracy"), first.accuracy);
  EXPECT_DOUBLE_EQ(first.metrics.at("auc"), (100 * 0.6 + 100 * 0.9) / 200);
  EXPECT_DOUBLE_EQ(first.metrics.at("f1"), 0.4);  // only b reported it

  RunRound();
  ASSERT_EQ(engine_->committed_round(), 2);
  evaluate(2, {{"client-a", {100, 0.5, {{"accuracy", 0.8}, {"auc", 0.8}}}},
               {"client-b", {300, 0.5, {{"accuracy", 0.9}}}},
               {"client-c", {100, 0.5, {{"accuracy", 0.8}, {"auc", 0.9}}}}});
  ASSERT_TRUE(engine_->finished());
  EXPECT_EQ(engine_->committed_round(), 2);
  absl::StatusOr<RunRecord> run = store_->GetRun(engine_->run_id());
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->status, RunStatus::kFinished);
  EXPECT_NE(run->reason.find("stopping rule met after round 2: eval_auc = 0.85 >= 0.8"),
            std::string::npos)
      << run->reason;
  EXPECT_EQ(engine_->Poll("client-a").kind, Task::Kind::kDone);
}

TEST_F(EngineTest, AMetricWhoseMeanOverflowsIsDroppedAndTheRowIsStillRecorded) {
  options_.num_rounds = 2;
  options_.eval_every = 1;
  StartEngine();
  JoinAll();
  RunRound();
  for (const std::string& c : clients_) {
    Task t = engine_->Poll(c);
    ASSERT_EQ(t.kind, Task::Kind::kEvaluate) << c;
    EvaluationReport r;
    r.run_id = t.run_id;
    r.round = 1;
    r.task_id = t.task_id;
    r.num_examples = 1000;
    r.loss = 0.5;
    // Finite on its own, 1000 * 1e306 is not: the weighted sum overflows a double.
    r.metrics = {{"accuracy", 0.75}, {"huge", 1e306}};
    ASSERT_TRUE(engine_->SubmitEvaluation(c, r).ok()) << c;
  }
  absl::StatusOr<std::vector<EvaluationRecord>> evals = store_->Evaluations(engine_->run_id());
  ASSERT_TRUE(evals.ok()) << evals.status();
  ASSERT_EQ(evals->size(), 1u + clients_.size());  // the mean, then each site's own
  EXPECT_EQ((*evals)[0].source, "federated");
  EXPECT_DOUBLE_EQ((*evals)[0].loss, 0.5);
  EXPECT_DOUBLE_EQ((*evals)[0].accuracy, 0.75);
  EXPECT_EQ((*evals)[0].metrics.count("huge"), 0u);
  EXPECT_EQ((*evals)[0].metrics.count("accuracy"), 1u);
}

TEST_F(EngineTest, TheFederatedLossCanStopTheRunFromBelowAndResumeHonoursIt) {
  options_.num_rounds = 5;
  options_.eval_every = 1;
  options_.stop_metric = "eval_loss";
  options_.stop_threshold = 0.25;
  options_.stop_when_below = true;
  StartEngine();
  JoinAll();
  RunRound();
  for (const std::string& c : clients_) {
    Task t = engine_->Poll(c);
    ASSERT_EQ(t.kind, Task::Kind::kEvaluate);
    EvaluationReport r;
    r.run_id = t.run_id;
    r.round = 1;
    r.task_id = t.task_id;
    r.num_examples = 10;
    r.loss = 0.2;
    ASSERT_TRUE(engine_->SubmitEvaluation(c, r).ok());
  }
  ASSERT_TRUE(engine_->finished());
  absl::StatusOr<RunRecord> run = store_->GetRun(engine_->run_id());
  ASSERT_TRUE(run.ok());
  EXPECT_NE(run->reason.find("eval_loss = 0.2 <= 0.25"), std::string::npos) << run->reason;

  // Had the server died between recording the evaluation and ending the run, a restart would
  // still end it: the resumed engine checks the recorded federated evaluation too.
  engine_.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ + "/federation.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE runs SET status = 'running', reason = '', ended_at_ms = 0",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  store_.reset();
  OpenStore();
  StartEngine();
  EXPECT_TRUE(engine_->finished());
  run = store_->GetRun(engine_->run_id());
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->status, RunStatus::kFinished);
  EXPECT_NE(run->reason.find("stopping rule met after round 1: eval_loss = 0.2 <= 0.25"),
            std::string::npos)
      << run->reason;
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

TEST_F(EngineTest, AnEvaluatorThatGoesSilentDoesNotHoldTheNextRound) {
  options_.eval_every = 1;
  options_.eval_timeout = absl::Minutes(30);
  StartEngine();
  JoinAll();
  RunRound();
  std::map<std::string, Task> tasks;
  for (const std::string& c : clients_) tasks[c] = engine_->Poll(c);
  EXPECT_TRUE(engine_->Heartbeat("client-a", 1, tasks["client-a"].task_id));
  for (const char* c : {"client-a", "client-b"}) {
    EvaluationReport r;
    r.run_id = tasks[c].run_id;
    r.round = 1;
    r.task_id = tasks[c].task_id;
    r.num_examples = 10;
    r.loss = 1;
    ASSERT_TRUE(engine_->SubmitEvaluation(c, r).ok());
  }
  // client-c evaluates forever without a word; a and b keep polling.
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(absl::Seconds(30));
    (void)engine_->Poll("client-a");
    (void)engine_->Poll("client-b");
  }
  // After client_timeout client-c counts as declined: the evaluation ends, round 2 starts
  // without it online.
  EXPECT_EQ(engine_->Poll("client-a").kind, Task::Kind::kWait);
  JoinAll();
  EXPECT_EQ(engine_->Poll("client-a").kind, Task::Kind::kFit);
}

TEST_F(EngineTest, AbortDuringAnEvaluationHandsOutNoMoreTasks) {
  options_.eval_every = 1;
  StartEngine();
  JoinAll();
  RunRound();
  ASSERT_EQ(engine_->Poll("client-a").kind, Task::Kind::kEvaluate);
  engine_->Abort("server shutting down");
  Task t = engine_->Poll("client-b");
  EXPECT_EQ(t.kind, Task::Kind::kWait);
  EXPECT_EQ(t.message, "the server is shutting down");
}

TEST_F(EngineTest, AStoppingRuleMetBeforeACrashEndsTheRunOnResume) {
  options_.num_rounds = 5;
  options_.eval_every = 1;  // the run would end after round 1's evaluation...
  options_.stop_metric = "test_accuracy";
  options_.stop_threshold = 0.5;
  hooks_.evaluate = [](const Model&) -> std::map<std::string, double> {
    return {{"test_accuracy", 0.9}};
  };
  StartEngine();
  JoinAll();
  RunRound();
  EXPECT_FALSE(engine_->finished());  // ...but the server dies during that evaluation
  engine_.reset();
  store_.reset();
  OpenStore();
  StartEngine();
  EXPECT_TRUE(engine_->finished());
  absl::StatusOr<RunRecord> run = store_->GetRun(engine_->run_id());
  ASSERT_TRUE(run.ok());
  EXPECT_NE(run->reason.find("stopping rule met after round 1"), std::string::npos) << run->reason;
}

TEST_F(EngineTest, InvalidOptionsAreRefusedNamingThem) {
  options_.fit.batch_size = 0;
  absl::StatusOr<std::unique_ptr<RoundEngine>> engine =
      RoundEngine::Create(options_, store_.get(), strategy_.get(), &clock_, Model(TestSpec()), {});
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(engine.status().message().find("batch_size >= 1"), absl::string_view::npos);
  options_.fit.batch_size = 32;
  options_.round_timeout = absl::Seconds(-5);
  engine =
      RoundEngine::Create(options_, store_.get(), strategy_.get(), &clock_, Model(TestSpec()), {});
  EXPECT_NE(engine.status().message().find("round_timeout must be positive"),
            absl::string_view::npos)
      << engine.status();
}

TEST_F(EngineTest, AForgottenClientIsDroppedFromItsRoundAtOnce) {
  StartEngine();
  JoinAll();
  Task ta = engine_->Poll("client-a"), tb = engine_->Poll("client-b");
  (void)engine_->Poll("client-c");
  Model a = RandomModel(1), b = RandomModel(2);
  ASSERT_TRUE(Submit("client-a", ta, a, 1).ok());
  ASSERT_TRUE(Submit("client-b", tb, b, 1).ok());
  EXPECT_EQ(engine_->committed_round(), 0);
  EXPECT_EQ(engine_->clients_online(), 3);
  engine_->ForgetClient("client-c", "revoked or not enrolled");
  ASSERT_EQ(engine_->committed_round(), 1);  // no wait for the deadline or client_timeout
  EXPECT_EQ(engine_->clients_online(), 2);
  ExpectModelsNear(*engine_->global_model(), *aggregation::WeightedAverage({&a, &b}, {1, 1}));
  absl::StatusOr<std::vector<ParticipationRecord>> parts =
      store_->Participations(engine_->run_id(), 1);
  ASSERT_TRUE(parts.ok());
  for (const ParticipationRecord& p : *parts) {
    if (p.client_id == "client-c") {
      EXPECT_EQ(p.status, ParticipationStatus::kDropped);
      EXPECT_EQ(p.reason, "revoked or not enrolled");
    }
  }
}

}  // namespace
}  // namespace fl::server
