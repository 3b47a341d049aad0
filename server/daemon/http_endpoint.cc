#include "server/daemon/http_endpoint.h"

// Debian's cpp-httplib is a shared library built with OpenSSL, zlib and Brotli support; the
// header is compiled with the same CPPHTTPLIB_* defines (from its pkg-config file, see
// server/CMakeLists.txt) because they change the layout of its classes. Nothing here uses TLS or
// compression.
#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace fl::server {
namespace {

constexpr char kMetricsContentType[] = "text/plain; version=0.0.4; charset=utf-8";
constexpr size_t kWorkerThreads = 2;
constexpr time_t kIoTimeoutSeconds = 2;

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

class HttpEndpointImpl final : public HttpEndpoint {
 public:
  HttpEndpointImpl(const ServerMetrics* metrics, std::function<HealthReport()> health)
      : metrics_(metrics), health_(std::move(health)) {}
  ~HttpEndpointImpl() override { Stop(); }

  absl::Status Listen(const std::string& host, int port);

  int port() const override { return port_; }
  void Stop() override;

 private:
  const ServerMetrics* const metrics_;
  const std::function<HealthReport()> health_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<bool> serving_done_{false};
  absl::Mutex stop_mu_;
  bool stopped_ ABSL_GUARDED_BY(stop_mu_) = false;
};

absl::Status HttpEndpointImpl::Listen(const std::string& host, int port) {
  server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_->RenderPrometheus(), kMetricsContentType);
  });
  server_.Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
    const HealthReport report = health_();
    res.status = report.healthy ? 200 : 503;
    res.set_content(HealthJson(report), "application/json");
  });
  // Only gives the 404 a body; the 503 of /healthz keeps its own.
  server_.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
        if (res.status != 404) return httplib::Server::HandlerResponse::Unhandled;
        res.set_content("not found\n", "text/plain");
        return httplib::Server::HandlerResponse::Handled;
      }));
  // httplib's default sets SO_REUSEPORT, which would let a second server share the port
  // silently; SO_REUSEADDR alone only allows rebinding over connections in TIME_WAIT.
  server_.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  // httplib owns the queue it gets.
  server_.new_task_queue = [] {
    return std::make_unique<httplib::ThreadPool>(kWorkerThreads).release();
  };
  // One request per connection, so that Stop() never waits on an idle keep-alive connection.
  server_.set_keep_alive_max_count(1);
  server_.set_read_timeout(kIoTimeoutSeconds, 0);
  server_.set_write_timeout(kIoTimeoutSeconds, 0);

  errno = 0;
  const int bound =
      port == 0 ? server_.bind_to_any_port(host) : (server_.bind_to_port(host, port) ? port : -1);
  if (bound < 0) {
    const int error = errno;
    return absl::UnavailableError(
        absl::StrCat("cannot serve HTTP on ", HostPort(host, port),
                     error != 0 ? absl::StrCat(": ", std::strerror(error)) : std::string()));
  }
  port_ = bound;
  thread_ = std::thread([this] {
    server_.listen_after_bind();
    serving_done_ = true;
  });
  // httplib's stop() does nothing until the server runs, so Stop() must not come before.
  while (!server_.is_running() && !serving_done_) absl::SleepFor(absl::Milliseconds(1));
  return absl::OkStatus();
}

void HttpEndpointImpl::Stop() {
  absl::MutexLock lock(&stop_mu_);
  if (stopped_) return;
  stopped_ = true;
  if (!thread_.joinable()) return;
  server_.stop();  // closes the listening socket; the accept loop ends
  thread_.join();  // after the workers finished their requests
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
