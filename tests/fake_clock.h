// A clock that tests move by hand, injected where the design takes a server::Clock (the engine,
// ServerOptions::clock). Thread-safe: the server's ticker reads it while a test advances it.
#ifndef FL_TESTS_FAKE_CLOCK_H_
#define FL_TESTS_FAKE_CLOCK_H_

#include <mutex>

#include "absl/time/time.h"
#include "fl/server/engine.h"

namespace fl::server {

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

}  // namespace fl::server

#endif  // FL_TESTS_FAKE_CLOCK_H_
