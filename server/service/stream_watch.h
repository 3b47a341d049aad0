// Ends the streams the server waits on in vain. An upload whose client stops sending, or a
// download whose client stops reading, would otherwise stay open until the client's own
// deadline, holding its chunk buffers, its per-client stream quota and (before the callback API)
// a thread. Each watched stream is cut when it has moved no data for its idle time, or when what
// it carries is no longer wanted (an upload whose round closed), whichever comes first.
//
// Only the time the server waits on the client counts: a stream is watched from WaitForPeer()
// (before a read or write is started) to PeerMoved() (in its completion), so the server's own
// queueing and processing of a message never count as the client's silence. The idle time is per
// message (an upload's or download's chunk of up to 1 MiB): the default 30 s implies a link of at
// least 35 KB/s. Times are on a monotonic clock.
//
// One thread checks every watched stream four times a second; cutting one calls its `cut` there,
// once. `cut` is expected to cancel the call (grpc::ServerContextBase::TryCancel) and record why;
// the stream's reactor then ends it as usual.
#ifndef FL_SERVER_SERVICE_STREAM_WATCH_H_
#define FL_SERVER_SERVICE_STREAM_WATCH_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace fl::server {

class StreamWatch {
 public:
  // One watched stream. Touch() on every message moved; Release() before the stream finishes.
  class Watched {
   public:
    // The server now waits on the client (a read or write is about to start): the idle clock
    // starts.
    void WaitForPeer();
    // The read or write completed: the idle clock stops. False when the stream was cut first
    // (the message that came is then not to be handled: the call is being cancelled).
    bool PeerMoved();
    // Stops watching. When it returns, `cut` is not running on another thread and will not be
    // called again (called from within `cut` itself, it does not wait). Idempotent.
    void Release();
    // Why the stream was cut, or empty when it was not.
    std::string cut_reason() const;

   private:
    friend class StreamWatch;
    Watched(absl::Duration idle, std::function<void()> cut, std::function<bool()> unwanted);
    // Calls `cut_` if the stream is due at `now_ns` (steady clock); true when it is done with
    // (cut or released).
    bool CutIfDue(int64_t now_ns);

    const absl::Duration idle_;
    mutable absl::Mutex mu_;
    bool waiting_ ABSL_GUARDED_BY(mu_) = false;
    int64_t waiting_since_ns_ ABSL_GUARDED_BY(mu_) = 0;
    std::function<void()> cut_ ABSL_GUARDED_BY(mu_);
    std::function<bool()> unwanted_ ABSL_GUARDED_BY(mu_);
    bool released_ ABSL_GUARDED_BY(mu_) = false;
    std::thread::id cutting_on_ ABSL_GUARDED_BY(mu_);  // the watch's thread, while `cut` runs
    std::string cut_reason_ ABSL_GUARDED_BY(mu_);
  };

  StreamWatch();
  // Stops the thread; streams still watched are left alone.
  ~StreamWatch();
  StreamWatch(const StreamWatch&) = delete;
  StreamWatch& operator=(const StreamWatch&) = delete;

  // Watches a stream: `cut` runs once when it has waited on its client for `idle` since the last
  // WaitForPeer(), or when `unwanted` (may be empty) says true while it waits. `unwanted` is asked
  // on the watch's thread, only while the stream waits, never after Release() returned.
  // Thread-safe.
  std::shared_ptr<Watched> Watch(absl::Duration idle, std::function<void()> cut,
                                 std::function<bool()> unwanted = nullptr);

  // Streams watched now.
  size_t watched() const;

 private:
  void Loop();

  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<Watched>> streams_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace fl::server

#endif  // FL_SERVER_SERVICE_STREAM_WATCH_H_
