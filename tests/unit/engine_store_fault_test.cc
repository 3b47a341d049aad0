// The round engine over a store that cannot write (a full disk), with a fake clock: the run is
// not retried for ever but fails once the store has kept it from its rounds for wait_timeout,
// counted from the store's first refusal, saying what the store said and what to do.
#include <signal.h>
#include <sys/resource.h>

#include "gmock/gmock.h"
#include "tests/unit/engine_test_fixture.h"

namespace fl::server {
namespace {

using ::testing::HasSubstr;

// While it lives, no file of this process may grow past 1 byte (what a full disk does to every
// write that extends a file; SIGXFSZ ignored, as a full disk sends none). Regular files only:
// the test's output is a pipe or a terminal.
class FullDisk {
 public:
  FullDisk() {
    getrlimit(RLIMIT_FSIZE, &saved_);
    old_handler_ = signal(SIGXFSZ, SIG_IGN);
    const rlimit full{1, saved_.rlim_max};
    EXPECT_EQ(setrlimit(RLIMIT_FSIZE, &full), 0);
  }
  ~FullDisk() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit saved_{};
  sighandler_t old_handler_ = SIG_DFL;
};

TEST_F(EngineTest, AStoreThatStaysFullFailsTheRunAfterWaitTimeoutSayingWhy) {
  options_.wait_timeout = absl::Minutes(10);
  options_.retry_backoff = absl::Seconds(30);
  StartEngine();
  // Two sites come at once and wait 9 minutes for the third, polling: the 10 minutes count from
  // the store's first refusal, not from when the run began to wait for its sites.
  ASSERT_TRUE(engine_->Join(clients_[0], clients_[0]).ok());
  ASSERT_TRUE(engine_->Join(clients_[1], clients_[1]).ok());
  for (int i = 0; i < 18; ++i) {
    ASSERT_EQ(engine_->Poll(clients_[0]).kind, Task::Kind::kWait);
    ASSERT_EQ(engine_->Poll(clients_[1]).kind, Task::Kind::kWait);
    clock_.Advance(absl::Seconds(30));
  }
  {
    FullDisk full;
    // The third site makes the round: its join is not stored (the engine goes on without it).
    ASSERT_TRUE(engine_->Join(clients_[2], clients_[2]).ok());
    // Round 1 cannot be recorded: the sites wait, and are told so again after each backoff.
    // The three sites poll every 31 s, so that all stay online.
    auto poll_all = [&] {
      Task task;
      for (const std::string& c : clients_) task = engine_->Poll(c);
      return task;
    };
    for (int i = 0; i < 19; ++i) {
      const Task task = poll_all();
      ASSERT_EQ(task.kind, Task::Kind::kWait) << "try " << i << ": " << task.message;
      clock_.Advance(absl::Seconds(31));
    }
    // Past wait_timeout (10 min): the next try fails the run, with the store's own error.
    for (int i = 0; i < 3 && poll_all().kind != Task::Kind::kDone; ++i) {
      clock_.Advance(absl::Seconds(31));
    }
  }
  const Task done = engine_->Poll(clients_[1]);
  ASSERT_EQ(done.kind, Task::Kind::kDone);
  EXPECT_EQ(done.run_status, RunStatus::kFailed);
  EXPECT_THAT(done.message, HasSubstr("the store could not record round 1 for longer than "
                                      "wait_timeout (10m)"));
  EXPECT_THAT(done.message, HasSubstr("make room in the data directory"));
  EXPECT_TRUE(engine_->finished());
  // /healthz reads the failure from the engine: the store could not record it either, so the
  // run is still running there, and a restart once there is room resumes it.
  const RunActivity activity = engine_->Activity();
  EXPECT_EQ(activity.phase, RunActivity::Phase::kFailed);
  EXPECT_THAT(activity.failure, HasSubstr("the store could not record round 1"));
  absl::StatusOr<RunRecord> run = store_->GetRun(1);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->status, RunStatus::kRunning);
}

}  // namespace
}  // namespace fl::server
