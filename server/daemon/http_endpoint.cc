#include "server/daemon/http_endpoint.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"

namespace fl::server {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kMetricsContentType[] = "text/plain; version=0.0.4; charset=utf-8";
// The limits of http_endpoint.h.
constexpr size_t kMaxConnections = 128;
constexpr size_t kMaxRequestHead = 8 * 1024;
constexpr Clock::duration kRequestHeadDeadline = std::chrono::seconds(2);
constexpr Clock::duration kResponseDeadline = std::chrono::seconds(2);
constexpr Clock::duration kLingerDeadline = std::chrono::seconds(1);
constexpr size_t kMaxLingerBytes = 64 * 1024;
// New connections taken per turn of the loop, so that a flood of them cannot starve the open ones.
constexpr int kMaxAcceptsPerTurn = 64;
// How long accepting pauses when the process is out of file descriptors or memory; meanwhile the
// kernel's backlog holds new connections.
constexpr Clock::duration kAcceptPause = std::chrono::milliseconds(100);

std::string HostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

std::string HealthJson(const HealthReport& report) {
  nlohmann::ordered_json j;
  j["status"] = report.healthy ? "ok" : "unhealthy";
  if (!report.healthy) j["reason"] = report.reason;
  j["run_id"] = report.run_id;
  j["round"] = report.round;
  j["clients_online"] = report.clients_online;
  if (!report.state.empty()) {
    j["state"] = report.state;
    j["seconds_since_progress"] = report.seconds_since_progress;
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Owns a file descriptor; closes it when destroyed or reset.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ~Fd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Where the request head ends (just past its empty line) in `in`, searching from `from`; npos when
// it has not ended yet. Bare LF line ends are accepted too.
size_t HeadEnd(absl::string_view in, size_t from) {
  const size_t crlf = in.find("\r\n\r\n", from);
  const size_t lf = in.find("\n\n", from);
  size_t end = absl::string_view::npos;
  if (crlf != absl::string_view::npos) end = crlf + 4;
  if (lf != absl::string_view::npos) end = std::min(end, lf + 2);
  return end;
}

struct RequestLine {
  absl::string_view method;
  absl::string_view path;  // without the query string
};

// "METHOD TARGET HTTP/1.x", the first line of `head`; nullopt when it is not of that form.
std::optional<RequestLine> ParseRequestLine(absl::string_view head) {
  absl::string_view line = head.substr(0, head.find('\n'));
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const size_t space1 = line.find(' ');
  if (space1 == 0 || space1 == absl::string_view::npos) return std::nullopt;
  const size_t space2 = line.find(' ', space1 + 1);
  if (space2 == space1 + 1 || space2 == absl::string_view::npos) return std::nullopt;
  if (line.substr(space2 + 1).substr(0, 7) != "HTTP/1.") return std::nullopt;
  const absl::string_view target = line.substr(space1 + 1, space2 - space1 - 1);
  return RequestLine{.method = line.substr(0, space1),
                     .path = target.substr(0, target.find_first_of("?#"))};
}

absl::string_view ReasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return "Unknown";
  }
}

std::string Response(int status, absl::string_view content_type, absl::string_view body,
                     bool head_only = false, absl::string_view extra_headers = "") {
  return absl::StrCat("HTTP/1.1 ", status, " ", ReasonPhrase(status),
                      "\r\nContent-Type: ", content_type, "\r\nContent-Length: ", body.size(),
                      "\r\n", extra_headers, "Connection: close\r\n\r\n",
                      head_only ? absl::string_view() : body);
}

class HttpEndpointImpl final : public HttpEndpoint {
 public:
  HttpEndpointImpl(const ServerMetrics* metrics, std::function<HealthReport()> health)
      : metrics_(metrics), health_(std::move(health)) {}
  ~HttpEndpointImpl() override { Stop(); }

  absl::Status Listen(const std::string& host, int port);

  int port() const override { return port_; }
  void Stop() override;

 private:
  enum class State {
    kReading,   // until the request head is complete
    kWriting,   // until the response is written
    kLingering  // after shutdown(SHUT_WR), until the client closes
  };
  struct Connection {
    Fd fd;
    State state = State::kReading;
    Clock::time_point accepted;
    Clock::time_point deadline;  // of the current state; closed past it
    std::string in;              // the request head so far
    std::string out;             // the response
    size_t written = 0;
    size_t lingered = 0;  // bytes discarded while lingering
  };

  // The loop and what it calls run on thread_ only, which alone touches connections_.
  void Loop();
  void Accept(Clock::time_point now);
  bool Displace();
  void Read(Connection& c);
  void Answer(Connection& c, std::string response);
  void Write(Connection& c);
  void Linger(Connection& c);
  std::string Respond(absl::string_view head);

  const ServerMetrics* const metrics_;
  const std::function<HealthReport()> health_;
  Fd listener_;
  Fd wake_;  // an eventfd; Stop() writes it to end poll()
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::vector<Connection> connections_;
  Clock::time_point accept_paused_until_;
  std::thread thread_;
  absl::Mutex stop_mu_;
  bool stopped_ ABSL_GUARDED_BY(stop_mu_) = false;
};

absl::Status HttpEndpointImpl::Listen(const std::string& host, int port) {
  auto unavailable = [&](absl::string_view reason) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve HTTP on ", HostPort(host, port), ": ", reason));
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  if (const int rc =
          getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
      rc != 0) {
    return unavailable(rc == EAI_SYSTEM ? std::strerror(errno) : gai_strerror(rc));
  }
  const std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> addresses(found, &freeaddrinfo);
  int error = 0;
  for (const addrinfo* a = addresses.get(); a != nullptr && !listener_.valid(); a = a->ai_next) {
    Fd fd(socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) {
      error = errno;
      continue;
    }
    // Not SO_REUSEPORT, which would let a second server share the port silently; SO_REUSEADDR
    // alone only allows rebinding over connections in TIME_WAIT.
    const int yes = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || listen(fd.get(), SOMAXCONN) != 0) {
      error = errno;
      continue;
    }
    listener_ = std::move(fd);
  }
  if (!listener_.valid()) return unavailable(std::strerror(error));

  sockaddr_storage bound{};
  socklen_t bound_size = sizeof(bound);
  if (getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&bound), &bound_size) != 0) {
    return unavailable(std::strerror(errno));
  }
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  wake_ = Fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_.valid()) return unavailable(std::strerror(errno));
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void HttpEndpointImpl::Stop() {
  absl::MutexLock lock(&stop_mu_);
  if (stopped_) return;
  stopped_ = true;
  stopping_ = true;
  if (thread_.joinable()) {
    const uint64_t one = 1;
    // Cannot fail short of a bad descriptor: the counter is far from its maximum.
    [[maybe_unused]] const ssize_t written = write(wake_.get(), &one, sizeof(one));
    thread_.join();  // the loop closed every connection
  }
  listener_.Reset();
}

void HttpEndpointImpl::Loop() {
  std::vector<pollfd> fds;
  while (!stopping_) {
    Clock::time_point now = Clock::now();
    std::erase_if(connections_, [now](const Connection& c) { return c.deadline <= now; });

    const bool accepting = now >= accept_paused_until_;
    Clock::time_point wake_at = accepting ? Clock::time_point::max() : accept_paused_until_;
    fds.clear();
    fds.push_back({.fd = wake_.get(), .events = POLLIN, .revents = 0});
    // poll() skips a negative descriptor.
    fds.push_back({.fd = accepting ? listener_.get() : -1, .events = POLLIN, .revents = 0});
    for (const Connection& c : connections_) {
      fds.push_back({.fd = c.fd.get(),
                     .events = static_cast<short>(c.state == State::kWriting ? POLLOUT : POLLIN),
                     .revents = 0});
      wake_at = std::min(wake_at, c.deadline);
    }
    int timeout_ms = -1;
    if (wake_at != Clock::time_point::max()) {
      // Rounded up, so that the loop does not wake just before a deadline and spin.
      const int64_t ms = std::chrono::ceil<std::chrono::milliseconds>(wake_at - now).count();
      timeout_ms = static_cast<int>(std::clamp<int64_t>(ms, 0, std::numeric_limits<int>::max()));
    }
    if (poll(fds.data(), fds.size(), timeout_ms) < 0) {
      if (errno != EINTR) std::this_thread::sleep_for(std::chrono::milliseconds(10));  // ENOMEM
      continue;
    }
    if (stopping_) break;

    // Connections first, then new ones, which may displace some.
    for (size_t i = 0; i < connections_.size(); ++i) {
      if (fds[i + 2].revents == 0) continue;
      Connection& c = connections_[i];
      switch (c.state) {
        case State::kReading:
          Read(c);
          break;
        case State::kWriting:
          Write(c);
          break;
        case State::kLingering:
          Linger(c);
          break;
      }
    }
    std::erase_if(connections_, [](const Connection& c) { return !c.fd.valid(); });
    if ((fds[1].revents & POLLIN) != 0) Accept(Clock::now());
  }
  connections_.clear();
}

void HttpEndpointImpl::Accept(Clock::time_point now) {
  for (int i = 0; i < kMaxAcceptsPerTurn; ++i) {
    Fd fd(accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.valid()) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // A connection that failed between the handshake and accept(), or a signal.
      if (errno == ECONNABORTED || errno == EINTR || errno == EPROTO) continue;
      // Out of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM): poll() would report the
      // listener at once again, so wait a little.
      accept_paused_until_ = now + kAcceptPause;
      return;
    }
    // At the bound the new connection takes an unanswered one's place; when every one is being
    // answered, it is refused (closed, as `fd` goes).
    if (connections_.size() >= kMaxConnections && !Displace()) continue;
    Connection& c = connections_.emplace_back();
    c.fd = std::move(fd);
    c.accepted = now;
    c.deadline = now + kRequestHeadDeadline;
  }
}

bool HttpEndpointImpl::Displace() {
  // A lingering connection has its answer already; after those, the oldest still reading.
  auto rank = [](const Connection& c) {
    return std::make_pair(c.state != State::kLingering, c.accepted);
  };
  auto victim = connections_.end();
  for (auto it = connections_.begin(); it != connections_.end(); ++it) {
    if (it->state == State::kWriting) continue;
    if (victim == connections_.end() || rank(*it) < rank(*victim)) victim = it;
  }
  if (victim == connections_.end()) return false;
  connections_.erase(victim);
  return true;
}

void HttpEndpointImpl::Read(Connection& c) {
  char buffer[4096];
  for (;;) {
    const ssize_t n = recv(c.fd.get(), buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {  // the client closed or reset before its request was complete
      c.fd.Reset();
      return;
    }
    // The terminator may straddle the previous read.
    const size_t from = c.in.size() < 3 ? 0 : c.in.size() - 3;
    c.in.append(buffer, static_cast<size_t>(n));
    const size_t end = HeadEnd(c.in, from);
    if (end != std::string::npos && end <= kMaxRequestHead) {
      Answer(c, Respond(absl::string_view(c.in).substr(0, end)));
      return;
    }
    if (c.in.size() > kMaxRequestHead) {
      Answer(c, Response(431, "text/plain", "request head too large\n"));
      return;
    }
  }
}

void HttpEndpointImpl::Answer(Connection& c, std::string response) {
  c.in = std::string();  // frees its buffer
  c.out = std::move(response);
  c.state = State::kWriting;
  c.deadline = Clock::now() + kResponseDeadline;
  Write(c);
}

void HttpEndpointImpl::Write(Connection& c) {
  while (c.written < c.out.size()) {
    const ssize_t n =
        send(c.fd.get(), c.out.data() + c.written, c.out.size() - c.written, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // poll() says when
    if (n <= 0) {
      c.fd.Reset();
      return;
    }
    c.written += static_cast<size_t>(n);
  }
  c.out = std::string();
  // Closing now would reset the connection if the client sent more than was read, and a reset
  // can discard the response before the client reads it.
  shutdown(c.fd.get(), SHUT_WR);
  c.state = State::kLingering;
  c.deadline = Clock::now() + kLingerDeadline;
}

void HttpEndpointImpl::Linger(Connection& c) {
  char buffer[4096];
  for (;;) {
    const ssize_t n = recv(c.fd.get(), buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    c.lingered += n > 0 ? static_cast<size_t>(n) : 0;
    if (n <= 0 || c.lingered > kMaxLingerBytes) {
      c.fd.Reset();
      return;
    }
  }
}

std::string HttpEndpointImpl::Respond(absl::string_view head) {
  const std::optional<RequestLine> request = ParseRequestLine(head);
  if (!request.has_value()) return Response(400, "text/plain", "bad request\n");
  const bool head_only = request->method == "HEAD";
  const bool metrics = request->path == "/metrics";
  const bool healthz = request->path == "/healthz";
  if (!metrics && !healthz) return Response(404, "text/plain", "not found\n", head_only);
  if (request->method != "GET" && !head_only) {
    return Response(405, "text/plain", "method not allowed\n", false, "Allow: GET, HEAD\r\n");
  }
  if (metrics) return Response(200, kMetricsContentType, metrics_->RenderPrometheus(), head_only);
  const HealthReport report = health_();
  return Response(report.healthy ? 200 : 503, "application/json", HealthJson(report), head_only);
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(
    const std::string& host, int port, const ServerMetrics* metrics,
    std::function<HealthReport()> health) {
  if (metrics == nullptr) return absl::InvalidArgumentError("HTTP endpoint: no metrics");
  if (!health) return absl::InvalidArgumentError("HTTP endpoint: no health check");
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("HTTP endpoint: port ", port, " out of range"));
  }
  auto endpoint = std::make_unique<HttpEndpointImpl>(metrics, std::move(health));
  if (absl::Status status = endpoint->Listen(host, port); !status.ok()) return status;
  return endpoint;
}

}  // namespace fl::server
