// The server's plain HTTP endpoint for operators: Prometheus metrics and a health check.
//
//   GET /metrics  200, "text/plain; version=0.0.4; charset=utf-8", ServerMetrics::RenderPrometheus
//   GET /healthz  200 {"status":"ok","run_id":1,"round":3,"clients_online":2} when healthy,
//                 503 {"status":"unhealthy","reason":"...","run_id":..,"round":..,
//                 "clients_online":..} when not (both application/json)
//   HEAD of either: the same status and headers, no body
//   another method on either path: 405 with "Allow: GET, HEAD"
//   any other path: 404, text/plain "not found\n"
//   a request line that is not "METHOD TARGET HTTP/1.x": 400
//   a request head (request line and headers) over 8 KiB: 431
// The query string is ignored for routing; a request body is never read. Every response carries
// "Connection: close": once it is written the endpoint shuts down its side and discards what the
// client still sends until the client closes, for at most 1 s and 64 KiB (so that a client that
// sent more than was read still receives the answer instead of a reset), then closes.
//
// Built to stay answerable under abuse, so that a health check never restarts a healthy server
// because of slow or silent connections:
//   - One thread of its own runs a poll(2) loop over non-blocking sockets; no worker pool.
//   - At most 128 connections are open. A connection that arrives at the bound displaces the
//     oldest one that has not finished sending its request (one that has already been answered
//     goes first); when every open connection is being answered, the new one is closed at once.
//   - A connection has 2 s from its accept to deliver its whole request head (a total deadline,
//     not a per-read one, so trickling a byte at a time does not extend it) and then 2 s to take
//     the whole response; past either, it is closed (a late request gets no answer, a slow
//     reader an incomplete one).
// It has no TLS and no authentication: bind it to a loopback or otherwise private address.
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
  // Binds `host`:`port` and starts serving. `host` is a numeric IPv4 or IPv6 address (without
  // brackets) or a name, which is resolved and the first of its addresses that binds is used; an
  // empty `host` means every local address. Port 0 picks a free port (see port()). The socket
  // sets SO_REUSEADDR, not SO_REUSEPORT, so a second endpoint on the same port fails to bind.
  // `metrics` is not owned and must outlive the endpoint; RenderPrometheus() is called on the
  // endpoint's thread for every GET or HEAD /metrics. `health` is called on the same thread for
  // every GET or HEAD /healthz, never on two threads at once, so it must be quick: while it runs,
  // no other request is read or answered (it must also not call Stop()).
  // Returns INVALID_ARGUMENT for a null `metrics`, an empty `health` or a port outside
  // [0, 65535]; UNAVAILABLE "cannot serve HTTP on host:port: <reason>" when it cannot resolve,
  // bind or listen there.
  static absl::StatusOr<std::unique_ptr<HttpEndpoint>> Start(const std::string& host, int port,
                                                             const ServerMetrics* metrics,
                                                             std::function<HealthReport()> health);
  // Stops serving, as Stop() does.
  virtual ~HttpEndpoint() = default;

  // The port it listens on (the one picked when started with 0).
  virtual int port() const = 0;
  // Closes the listening socket and every open connection, answered or not, and joins the
  // endpoint's thread; the port is free when it returns. Returns within about the time of one
  // metrics render or health check. Idempotent; thread-safe (a second caller waits for the
  // first); never call it from `health`.
  virtual void Stop() = 0;
};

}  // namespace fl::server

#endif  // FL_SERVER_DAEMON_HTTP_ENDPOINT_H_
