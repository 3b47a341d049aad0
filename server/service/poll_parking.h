// Long polls that wait for a task without a thread. A client's PollTask that finds nothing to do
// is parked here until its engine changes (a round opens, a stage moves on, the run ends), its
// wait is over or its call is cancelled; then its `resume` runs on the service's WorkPool, polls
// the engine again and either answers or parks again.
//
// One thread watches every parked poll. It waits on the engines' change signal (at most
// kCheckEvery, to see new engines, deadlines and cancellations), and resumes at most once every
// kMinSweep: an engine changes on every join and every accepted update, and re-polling thousands
// of parked clients on each would spend the server's CPU on polls that only park again.
#ifndef FL_SERVER_SERVICE_POLL_PARKING_H_
#define FL_SERVER_SERVICE_POLL_PARKING_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "fl/server/engine.h"
#include "grpcpp/server_context.h"
#include "server/service/work_pool.h"

namespace fl::server {

class PollParking {
 public:
  static constexpr absl::Duration kCheckEvery = absl::Milliseconds(250);
  static constexpr absl::Duration kMinSweep = absl::Milliseconds(50);
  static constexpr absl::Duration kNoteSeenEvery = absl::Seconds(1);

  // `pool` is not owned and must outlive this.
  explicit PollParking(WorkPool* pool);
  // Joins the thread. Polls still parked are dropped: destroy it only once the gRPC server has
  // shut down (every call ended).
  ~PollParking();
  PollParking(const PollParking&) = delete;
  PollParking& operator=(const PollParking&) = delete;

  // Parks the poll of `client_id` that saw `engine` at `seen_version`; `resume` is posted to the
  // pool once the engine's version is no longer `seen_version` (at the next sweep), `deadline`
  // has passed or `ctx` is cancelled (at once when one of these two is so already). While parked,
  // the client counts as seen by its engine (RoundEngine::NoteSeen, every kNoteSeenEvery). `ctx`
  // must stay valid until `resume` runs. Thread-safe.
  void Park(std::shared_ptr<RoundEngine> engine, std::string client_id, uint64_t seen_version,
            absl::Time deadline, grpc::ServerContextBase* ctx, std::function<void()> resume);

  // Polls parked now.
  size_t parked() const;

 private:
  struct Parked {
    std::shared_ptr<RoundEngine> engine;
    std::string client_id;
    uint64_t seen_version = 0;
    absl::Time deadline;
    grpc::ServerContextBase* ctx = nullptr;
    std::function<void()> resume;
  };
  struct Swept {
    absl::Time next;                      // when the next check is due
    std::shared_ptr<RoundEngine> engine;  // of the newest poll still parked; null: none
    uint64_t version = 0;                 // the version of `engine` the sweep saw
  };
  void Loop();
  // Posts the resumes of the parked polls that are due.
  Swept Sweep() ABSL_LOCKS_EXCLUDED(mu_);

  WorkPool* const pool_;
  mutable absl::Mutex mu_;
  std::vector<Parked> parked_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time noted_seen_ = absl::InfinitePast();  // the sweep's thread only
  std::thread thread_;
};

}  // namespace fl::server

#endif  // FL_SERVER_SERVICE_POLL_PARKING_H_
