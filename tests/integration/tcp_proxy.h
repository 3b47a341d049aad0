// A TCP proxy on loopback that a test controls, standing between a site and the server: it can
// make the link slow (a byte rate each way), make it stall now and then (what packet loss does to
// a TCP stream: the bytes come, late, after a retransmission), and cut every connection at once
// (a reset, as when the site's process dies or its network drops).
#ifndef FL_TESTS_INTEGRATION_TCP_PROXY_H_
#define FL_TESTS_INTEGRATION_TCP_PROXY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/time/time.h"

namespace fl::testing {

struct LinkOptions {
  int64_t bytes_per_second = 0;  // each way; 0: as fast as loopback
  // After each 16 KiB relayed, with this probability, a pause of `stall` (seeded).
  double stall_probability = 0;
  absl::Duration stall = absl::Milliseconds(300);
  uint64_t seed = 1;
};

class TcpProxy {
 public:
  // Listens on a free loopback port and relays each connection to 127.0.0.1:`target_port`.
  TcpProxy(int target_port, LinkOptions link);
  ~TcpProxy();  // cuts everything and joins its threads

  int port() const { return port_; }
  // Resets every connection open now (an RST to both ends, as a killed process or a dropped
  // network gives); new ones are still accepted.
  void CutAll();
  // Bytes relayed from the site to the server, and back, since the start.
  int64_t bytes_up() const { return bytes_up_.load(); }
  int64_t bytes_down() const { return bytes_down_.load(); }

 private:
  // One relayed connection: its two sockets, closed by the last of its two relay threads (so that
  // no fd is closed while the other thread may still use it, nor reused under CutAll).
  struct Connection {
    int site = -1;
    int server = -1;
    std::atomic<int> relays{2};
    std::atomic<bool> cut{false};
  };
  void Accept();
  void Relay(const std::shared_ptr<Connection>& c, bool up, uint64_t seed);

  const int target_port_;
  const LinkOptions link_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> bytes_up_{0};
  std::atomic<int64_t> bytes_down_{0};
  std::mutex mu_;
  std::vector<std::shared_ptr<Connection>> connections_;  // guarded by mu_: those open
  std::vector<std::thread> threads_;                      // guarded by mu_
  std::thread acceptor_;
};

}  // namespace fl::testing

#endif  // FL_TESTS_INTEGRATION_TCP_PROXY_H_
