// The server's plain HTTP endpoint for operators: Prometheus metrics and a health check.
//
//   GET /metrics  200, "text/plain; version=0.0.4; charset=utf-8", ServerMetrics::RenderPrometheus
//   GET /healthz  200 {"status":"ok","run_id":1,"round":3,"clients_online":2} when healthy,
//                 503 {"status":"unhealthy","reason":"...","run_id":..,"round":..,
//                 "clients_online":..} when not (both application/json)
//   anything else 404
//
// It serves on its own thread (and a small pool of worker threads), without TLS: bind it to a
// loopback or otherwise private address. Connections are not kept alive, so Stop() waits at most
// about one read timeout (2 s) for a request in progress.
#ifndef FL_SERVER_DAEMON_HTTP_ENDPOINT_H_
#define FL_SERVER_DAEMON_HTTP_ENDPOINT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/daemon/metrics.h"

namespace fl::server {

// What /healthz reports; `reason` says why when not healthy.
struct HealthReport {
  bool healthy = false;
  std::string reason;
  int64_t run_id = 0;
  int32_t round = 0;
  int clients_online = 0;
  // "waiting", "training", "evaluating", "stalled", "finished" or "failed"; empty: not known.
  std::string state;
  int64_t seconds_since_progress = 0;
};

class HttpEndpoint {
 public:
  // Binds `host`:`port` (port 0 picks a free one) and starts serving. `metrics` is not owned and
  // must outlive the endpoint; `health` is called on a worker thread for every /healthz request,
  // possibly on several at once, so it must be thread-safe and quick.
  // Returns INVALID_ARGUMENT for a null `metrics`, an empty `health` or a port outside
  // [0, 65535]; UNAVAILABLE naming host:port when it cannot bind or listen there.
  static absl::StatusOr<std::unique_ptr<HttpEndpoint>> Start(const std::string& host, int port,
                                                             const ServerMetrics* metrics,
                                                             std::function<HealthReport()> health);
  // Stops serving.
  virtual ~HttpEndpoint() = default;

  // The port it listens on (the one picked when started with 0).
  virtual int port() const = 0;
  // Closes the listening socket (the port is free when it returns), finishes the requests in
  // progress and joins the endpoint's threads. Idempotent; thread-safe.
  virtual void Stop() = 0;
};

}  // namespace fl::server

#endif  // FL_SERVER_DAEMON_HTTP_ENDPOINT_H_
