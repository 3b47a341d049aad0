// The federation service's parts that keep one client from holding the server: its thread pool
// (work_pool.h), the watch that cuts idle streams (stream_watch.h) and the per-client call quota
// (client_calls.h).
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/service/client_calls.h"
#include "server/service/stream_watch.h"
#include "server/service/work_pool.h"

namespace fl::server {
namespace {

// The steps of calls already taken run before new calls, and new calls past the bound are refused
// while steps are always taken.
TEST(WorkPoolTest, StepsOfCallsTakenRunFirstAndOnlyNewCallsAreBounded) {
  std::vector<std::string> order;
  std::mutex mu;
  absl::Notification release;
  {
    WorkPool pool(/*threads=*/1, /*max_queued=*/2);
    absl::Notification started;
    ASSERT_TRUE(pool.Post([&] {
      started.Notify();
      release.WaitForNotification();
    }));
    started.WaitForNotification();  // the one thread is busy from here on
    auto note = [&](std::string what) {
      return [&, what] {
        std::lock_guard<std::mutex> lock(mu);
        order.push_back(what);
      };
    };
    EXPECT_TRUE(pool.Post(note("new 1")));
    EXPECT_TRUE(pool.Post(note("new 2")));
    EXPECT_FALSE(pool.Post(note("new 3"))) << "past max_queued";
    EXPECT_EQ(pool.queued(), 2u);
    pool.Continue(note("step 1"));
    pool.Continue(note("step 2"));
    release.Notify();
  }  // the destructor runs what is queued
  // The first pick of the pool was the blocking call; the next seven prefer steps.
  EXPECT_EQ(order, (std::vector<std::string>{"step 1", "step 2", "new 1", "new 2"}));
}

// Only the time a stream waits on its client counts: one that has waited past its idle time is
// cut (once, with why), one whose server side is at work is not, however long that takes.
TEST(StreamWatchTest, OnlyTheTimeSpentWaitingOnTheClientCounts) {
  StreamWatch watch;
  std::atomic<int> waiting_cuts{0};
  std::atomic<int> busy_cuts{0};
  std::shared_ptr<StreamWatch::Watched> waiting =
      watch.Watch(absl::Milliseconds(300), [&] { ++waiting_cuts; });
  std::shared_ptr<StreamWatch::Watched> busy =
      watch.Watch(absl::Milliseconds(300), [&] { ++busy_cuts; });
  waiting->WaitForPeer();
  busy->WaitForPeer();
  EXPECT_TRUE(busy->PeerMoved());  // its message came; the server works on it from here
  absl::SleepFor(absl::Seconds(1));
  EXPECT_EQ(waiting_cuts.load(), 1);
  EXPECT_EQ(busy_cuts.load(), 0);
  EXPECT_NE(waiting->cut_reason().find("no data moved for"), std::string::npos)
      << waiting->cut_reason();
  EXPECT_NE(waiting->cut_reason().find("(limits.stream_idle_timeout_s is 300ms)"),
            std::string::npos)
      << waiting->cut_reason();
  EXPECT_FALSE(waiting->PeerMoved()) << "a message that comes after the cut is not to be handled";
  EXPECT_TRUE(busy->cut_reason().empty());
  busy->Release();
  waiting->Release();
}

// A stream whose content is no longer wanted (an upload whose round closed) is cut at the next
// check while it waits on its client, but never while the server is at work on it.
TEST(StreamWatchTest, AnUnwantedStreamIsCutOnlyWhileItWaits) {
  StreamWatch watch;
  std::atomic<bool> closed{true};
  std::atomic<int> cuts{0};
  std::shared_ptr<StreamWatch::Watched> s = watch.Watch(
      absl::Hours(1), [&] { ++cuts; }, [&] { return closed.load(); });
  absl::SleepFor(absl::Milliseconds(600));
  EXPECT_EQ(cuts.load(), 0) << "cut while not waiting on its client";
  s->WaitForPeer();
  absl::SleepFor(absl::Milliseconds(600));
  EXPECT_EQ(cuts.load(), 1);
  EXPECT_EQ(s->cut_reason(), "its round closed while it was open");
  s->Release();
}

// `cut` may end the stream on the watch's own thread (gRPC runs a reactor's callbacks inline
// when a call is cancelled), which releases it from within the cut: no deadlock, and a release
// from another thread waits for a cut under way.
TEST(StreamWatchTest, ReleaseFromWithinTheCutDoesNotDeadlock) {
  StreamWatch watch;
  std::shared_ptr<StreamWatch::Watched> s;
  absl::Notification cut_done;
  s = watch.Watch(absl::Milliseconds(100), [&] {
    s->Release();
    cut_done.Notify();
  });
  s->WaitForPeer();
  EXPECT_TRUE(cut_done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  s->Release();  // idempotent
}

// A client past its quota is refused naming the option; the refusal is audited once a minute,
// even when the client's calls drain to none between floods; its calls come back as they end.
TEST(ClientCallsTest, TheQuotaRefusesNamingTheOptionAndAuditsOnceAMinute) {
  ClientInputLimits limits;
  limits.max_streams_per_client = 2;
  limits.max_uploads_per_client = 1;
  ClientCalls calls(limits);
  int audited = 0;
  for (int flood = 0; flood < 3; ++flood) {
    absl::StatusOr<ClientCalls::Lease> a = calls.Open("site", /*upload=*/true);
    ASSERT_TRUE(a.ok());
    bool audit = false;
    absl::StatusOr<ClientCalls::Lease> upload = calls.Open("site", /*upload=*/true, &audit);
    ASSERT_EQ(upload.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(upload.status().message().find("(limits.max_uploads_per_client)"), std::string::npos);
    audited += audit;
    absl::StatusOr<ClientCalls::Lease> b = calls.Open("site", /*upload=*/false);
    ASSERT_TRUE(b.ok());
    absl::StatusOr<ClientCalls::Lease> c = calls.Open("site", /*upload=*/false, &audit);
    ASSERT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(c.status().message().find("this client has 2 calls in progress; the server takes "
                                        "at most 2 at once from one client "
                                        "(limits.max_streams_per_client)"),
              std::string::npos)
        << c.status().message();
    audited += audit;
    EXPECT_TRUE(calls.Open("other", /*upload=*/true).ok()) << "another client is not affected";
    EXPECT_EQ(calls.open(), 2);
  }  // the leases end: the client has no call in progress
  EXPECT_EQ(audited, 1);
  EXPECT_EQ(calls.open(), 0);
}

}  // namespace
}  // namespace fl::server
