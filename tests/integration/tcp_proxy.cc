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
}

void TcpProxy::CutAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::shared_ptr<Connection>& c : connections_) {
    // Linger 0: the close that ends the connection sends an RST. SHUT_RD wakes both relays from
    // their reads; the last one closes.
    c->cut = true;
    linger l{1, 0};
    setsockopt(c->site, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    setsockopt(c->server, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    shutdown(c->site, SHUT_RD);
    shutdown(c->server, SHUT_RD);
  }
}

void TcpProxy::Accept() {
  uint64_t seed = link_.seed;
  while (!stopping_) {
    const int site = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (site < 0) {
      if (stopping_) return;
      absl::SleepFor(absl::Milliseconds(10));  // ECONNABORTED, EMFILE...: try again
      continue;
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
    auto c = std::make_shared<Connection>();
    c->site = site;
    c->server = server;
    std::lock_guard<std::mutex> lock(mu_);
    connections_.push_back(c);
    threads_.emplace_back([this, c, s = seed++] { Relay(c, /*up=*/true, s); });
    threads_.emplace_back([this, c, s = seed++] { Relay(c, /*up=*/false, s); });
  }
}

void TcpProxy::Relay(const std::shared_ptr<Connection>& c, bool up, uint64_t seed) {
  const int from = up ? c->site : c->server;
  const int to = up ? c->server : c->site;
  std::atomic<int64_t>* counter = up ? &bytes_up_ : &bytes_down_;
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution stall(link_.stall_probability);
  char buf[kChunk];
  absl::Time next = absl::Now();  // when the link is free again
  while (!stopping_ && !c->cut) {
    const ssize_t n = read(from, buf, sizeof(buf));
    if (n <= 0 || c->cut) break;
    if (link_.bytes_per_second > 0) {
      // Paced block by block: a link idle for a while has no credit for a burst later.
      next = std::max(next, absl::Now()) +
             absl::Seconds(static_cast<double>(n) / static_cast<double>(link_.bytes_per_second));
      absl::SleepFor(next - absl::Now());
    }
    if (link_.stall_probability > 0 && stall(rng)) absl::SleepFor(link_.stall);
    bool failed = false;
    for (ssize_t sent = 0; sent < n && !c->cut;) {
      const ssize_t w = send(to, buf + sent, static_cast<size_t>(n - sent), MSG_NOSIGNAL);
      if (w <= 0) {
        failed = true;
        break;
      }
      sent += w;
    }
    if (failed || c->cut) break;
    *counter += n;
  }
  // Pass the end of this direction on (nothing to do after a cut: the close resets).
  if (!c->cut) shutdown(to, SHUT_WR);
  if (c->relays.fetch_sub(1) == 1) {
    std::lock_guard<std::mutex> lock(mu_);
    close(c->site);
    close(c->server);
    std::erase(connections_, c);
  }
}

}  // namespace fl::testing
