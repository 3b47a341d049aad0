#include "tests/integration/tcp_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <random>

#include "absl/time/clock.h"

namespace fl::testing {
namespace {

constexpr size_t kChunk = 16 * 1024;

void Reset(int fd) {
  linger l{1, 0};  // close with RST, not FIN
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  shutdown(fd, SHUT_RDWR);
}

}  // namespace

TcpProxy::TcpProxy(int target_port, LinkOptions link) : target_port_(target_port), link_(link) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int yes = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  listen(listen_fd_, 64);
  socklen_t len = sizeof(addr);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { Accept(); });
}

TcpProxy::~TcpProxy() {
  stopping_ = true;
  shutdown(listen_fd_, SHUT_RDWR);
  acceptor_.join();
  close(listen_fd_);
  CutAll();
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (int fd : fds_) close(fd);
}

void TcpProxy::CutAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (int fd : fds_) Reset(fd);
}

void TcpProxy::Accept() {
  uint64_t seed = link_.seed;
  while (!stopping_) {
    const int site = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (site < 0) {
      if (errno == EINTR) continue;
      return;
    }
    const int server = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(target_port_));
    if (connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(site);
      close(server);
      continue;
    }
    int yes = 1;
    setsockopt(site, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    std::lock_guard<std::mutex> lock(mu_);
    fds_.push_back(site);
    fds_.push_back(server);
    threads_.emplace_back([this, site, server, s = seed++] { Relay(site, server, &bytes_up_, s); });
    threads_.emplace_back(
        [this, site, server, s = seed++] { Relay(server, site, &bytes_down_, s); });
  }
}

void TcpProxy::Relay(int from, int to, std::atomic<int64_t>* counter, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution stall(link_.stall_probability);
  char buf[kChunk];
  const absl::Time start = absl::Now();
  int64_t relayed = 0;
  while (!stopping_) {
    const ssize_t n = read(from, buf, sizeof(buf));
    if (n <= 0) break;
    for (ssize_t sent = 0; sent < n;) {
      const ssize_t w = write(to, buf + sent, static_cast<size_t>(n - sent));
      if (w <= 0) {
        shutdown(from, SHUT_RDWR);
        return;
      }
      sent += w;
    }
    relayed += n;
    *counter += n;
    if (link_.bytes_per_second > 0) {
      // Hold the average rate: the bytes so far may not have gone faster than the link.
      const absl::Time due =
          start + absl::Seconds(static_cast<double>(relayed) / link_.bytes_per_second);
      if (const absl::Time now = absl::Now(); due > now) absl::SleepFor(due - now);
    }
    if (link_.stall_probability > 0 && stall(rng)) absl::SleepFor(link_.stall);
  }
  shutdown(to, SHUT_WR);  // pass the end of the stream on
}

}  // namespace fl::testing
