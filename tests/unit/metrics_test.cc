#include "server/daemon/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/daemon/http_endpoint.h"

namespace fl::server {
namespace {

// The value of the sample line that starts with `series` (name and labels) and a space.
std::optional<std::string> SampleValue(const std::string& text, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, absl::StrCat(series, " "))) {
      return std::string(line.substr(series.size() + 1));
    }
  }
  return std::nullopt;
}

TEST(ServerMetricsTest, RendersAKnownSequenceExactly) {
  ServerMetrics metrics;
  metrics.RoundCommitted(absl::Milliseconds(250));
  metrics.RoundCommitted(absl::Seconds(5));  // on a bucket's bound: counts in that bucket
  metrics.RoundCommitted(absl::Hours(2));    // beyond the last bound: +Inf only
  metrics.RoundFailed();
  metrics.BytesReceived(1000);
  metrics.BytesReceived(24);
  metrics.BytesReceived(-5);  // ignored
  metrics.UpdateAccepted();
  metrics.UpdateAccepted();
  metrics.UpdateAccepted();
  metrics.UpdateRefused(absl::StatusCode::kInvalidArgument);
  metrics.UpdateRefused(absl::StatusCode::kInvalidArgument);
  metrics.UpdateRefused(absl::StatusCode::kDataLoss);
  metrics.SetClientsOnline(4);
  metrics.SetCurrentRound(7);
  metrics.SetRunState(3, 1800.5);

  const std::string expected =
      "# HELP fl_rounds_committed_total Rounds committed (checkpoint written).\n"
      "# TYPE fl_rounds_committed_total counter\n"
      "fl_rounds_committed_total 3\n"
      "# HELP fl_rounds_failed_total Round attempts that failed (too few accepted updates, or a "
      "non-finite average).\n"
      "# TYPE fl_rounds_failed_total counter\n"
      "fl_rounds_failed_total 1\n"
      "# HELP fl_round_duration_seconds Duration of committed rounds, in seconds.\n"
      "# TYPE fl_round_duration_seconds histogram\n"
      "fl_round_duration_seconds_bucket{le=\"0.1\"} 0\n"
      "fl_round_duration_seconds_bucket{le=\"0.5\"} 1\n"
      "fl_round_duration_seconds_bucket{le=\"1\"} 1\n"
      "fl_round_duration_seconds_bucket{le=\"2.5\"} 1\n"
      "fl_round_duration_seconds_bucket{le=\"5\"} 2\n"
      "fl_round_duration_seconds_bucket{le=\"10\"} 2\n"
      "fl_round_duration_seconds_bucket{le=\"30\"} 2\n"
      "fl_round_duration_seconds_bucket{le=\"60\"} 2\n"
      "fl_round_duration_seconds_bucket{le=\"120\"} 2\n"
      "fl_round_duration_seconds_bucket{le=\"300\"} 2\n"
      "fl_round_duration_seconds_bucket{le=\"600\"} 2\n"
      "fl_round_duration_seconds_bucket{le=\"1800\"} 2\n"
      "fl_round_duration_seconds_bucket{le=\"3600\"} 2\n"
      "fl_round_duration_seconds_bucket{le=\"+Inf\"} 3\n"
      "fl_round_duration_seconds_sum 7205.25\n"
      "fl_round_duration_seconds_count 3\n"
      "# HELP fl_update_bytes_received_total Bytes of update payload received from clients.\n"
      "# TYPE fl_update_bytes_received_total counter\n"
      "fl_update_bytes_received_total 1024\n"
      "# HELP fl_updates_accepted_total Client updates accepted into a round.\n"
      "# TYPE fl_updates_accepted_total counter\n"
      "fl_updates_accepted_total 3\n"
      "# HELP fl_updates_refused_total Client updates refused, by canonical status code.\n"
      "# TYPE fl_updates_refused_total counter\n"
      "fl_updates_refused_total{reason=\"DATA_LOSS\"} 1\n"
      "fl_updates_refused_total{reason=\"INVALID_ARGUMENT\"} 2\n"
      "# HELP fl_clients_online Clients seen within the client timeout.\n"
      "# TYPE fl_clients_online gauge\n"
      "fl_clients_online 4\n"
      "# HELP fl_current_round The round in progress.\n"
      "# TYPE fl_current_round gauge\n"
      "fl_current_round 7\n"
      "# HELP fl_run_state 0 waiting, 1 training, 2 evaluating, 3 stalled (no progress for "
      "stall_after_s), 4 finished, 5 failed, 6 idle (no run: a --stay-up server between "
      "runs).\n"
      "# TYPE fl_run_state gauge\n"
      "fl_run_state 3\n"
      "# HELP fl_seconds_since_progress Seconds since the run last made progress (a round "
      "opened or closed, an update accepted, a site at work).\n"
      "# TYPE fl_seconds_since_progress gauge\n"
      "fl_seconds_since_progress 1800.5\n"
      "# HELP fl_server_certificate_not_after_seconds When the server's certificate expires (Unix "
      "time, seconds); 0 without TLS.\n"
      "# TYPE fl_server_certificate_not_after_seconds gauge\n"
      "fl_server_certificate_not_after_seconds 0\n"
      "# HELP fl_site_certificates_expiring Enrolled sites whose certificate expires within "
      "cert_warn_days (or has expired).\n"
      "# TYPE fl_site_certificates_expiring gauge\n"
      "fl_site_certificates_expiring 0\n";
  EXPECT_EQ(metrics.RenderPrometheus(), expected);
}

TEST(ServerMetricsTest, FreshMetricsRenderZerosAndNoRefusalSamples) {
  ServerMetrics metrics;
  const std::string text = metrics.RenderPrometheus();
  EXPECT_EQ(SampleValue(text, "fl_rounds_committed_total"), "0");
  EXPECT_EQ(SampleValue(text, "fl_round_duration_seconds_bucket{le=\"+Inf\"}"), "0");
  EXPECT_EQ(SampleValue(text, "fl_round_duration_seconds_sum"), "0");
  EXPECT_TRUE(absl::StrContains(text, "# TYPE fl_updates_refused_total counter\n"));
  EXPECT_FALSE(absl::StrContains(text, "fl_updates_refused_total{"));
}

TEST(ServerMetricsTest, CodeWithoutCanonicalNameGetsItsNumber) {
  ServerMetrics metrics;
  metrics.UpdateRefused(static_cast<absl::StatusCode>(99));
  EXPECT_EQ(SampleValue(metrics.RenderPrometheus(), "fl_updates_refused_total{reason=\"CODE_99\"}"),
            "1");
}

TEST(MetricsRegistryTest, EscapesLabelValuesAndHelp) {
  MetricsRegistry registry;
  MetricsRegistry::Counter* counter = registry.AddCounter(
      "test_requests_total", "Help with \\ backslash\nand newline \"quoted\"", "path");
  {
    MetricsRegistry::UpdateScope scope(registry);
    counter->Increment(scope, "a\"b\\c\nd", 2);
    counter->Increment(scope, "plain");
  }
  EXPECT_EQ(registry.RenderPrometheus(),
            "# HELP test_requests_total Help with \\\\ backslash\\nand newline \"quoted\"\n"
            "# TYPE test_requests_total counter\n"
            "test_requests_total{path=\"a\\\"b\\\\c\\nd\"} 2\n"
            "test_requests_total{path=\"plain\"} 1\n");
}

TEST(MetricsRegistryTest, FormatsValuesAsTheFormatWants) {
  EXPECT_EQ(FormatPrometheusValue(0), "0");
  EXPECT_EQ(FormatPrometheusValue(7), "7");
  EXPECT_EQ(FormatPrometheusValue(0.1), "0.1");
  EXPECT_EQ(FormatPrometheusValue(-2.5), "-2.5");
  EXPECT_EQ(FormatPrometheusValue(1e-9), "1e-09");
  EXPECT_EQ(FormatPrometheusValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatPrometheusValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatPrometheusValue(std::nan("")), "NaN");
}

TEST(MetricsRegistryTest, HistogramIgnoresNaNAndCountsInfinityInInfBucket) {
  MetricsRegistry registry;
  MetricsRegistry::Histogram* histogram = registry.AddHistogram("test_seconds", "h", {1, 2});
  {
    MetricsRegistry::UpdateScope scope(registry);
    histogram->Observe(scope, std::nan(""));
    histogram->Observe(scope, 1.5);
    histogram->Observe(scope, -3);
  }
  EXPECT_EQ(registry.RenderPrometheus(),
            "# HELP test_seconds h\n"
            "# TYPE test_seconds histogram\n"
            "test_seconds_bucket{le=\"1\"} 1\n"
            "test_seconds_bucket{le=\"2\"} 2\n"
            "test_seconds_bucket{le=\"+Inf\"} 2\n"
            "test_seconds_sum -1.5\n"
            "test_seconds_count 2\n");
}

TEST(ServerMetricsTest, ConcurrentUpdatesSumAndRendersAreSnapshots) {
  ServerMetrics metrics;
  constexpr int kThreads = 4;
  constexpr int kPerThread = 20000;
  std::atomic<bool> done{false};
  std::atomic<int> renders{0};
  std::atomic<int> inconsistent{0};
  // Every render must show as many committed rounds as observed durations, and a histogram whose
  // +Inf bucket equals its count.
  std::thread renderer([&] {
    while (!done.load()) {
      const std::string text = metrics.RenderPrometheus();
      const auto committed = SampleValue(text, "fl_rounds_committed_total");
      const auto count = SampleValue(text, "fl_round_duration_seconds_count");
      const auto inf = SampleValue(text, "fl_round_duration_seconds_bucket{le=\"+Inf\"}");
      if (!committed || committed != count || count != inf) ++inconsistent;
      ++renders;
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&metrics, t] {
      for (int i = 0; i < kPerThread; ++i) {
        metrics.UpdateAccepted();
        metrics.BytesReceived(3);
        metrics.UpdateRefused(i % 2 == 0 ? absl::StatusCode::kInvalidArgument
                                         : absl::StatusCode::kAlreadyExists);
        metrics.RoundCommitted(absl::Seconds(1));
        metrics.SetClientsOnline(t);
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  done = true;
  renderer.join();

  const std::string text = metrics.RenderPrometheus();
  const std::string total = absl::StrCat(kThreads * kPerThread);
  EXPECT_EQ(SampleValue(text, "fl_updates_accepted_total"), total);
  EXPECT_EQ(SampleValue(text, "fl_update_bytes_received_total"),
            absl::StrCat(3 * kThreads * kPerThread));
  EXPECT_EQ(SampleValue(text, "fl_updates_refused_total{reason=\"INVALID_ARGUMENT\"}"),
            absl::StrCat(kThreads * kPerThread / 2));
  EXPECT_EQ(SampleValue(text, "fl_updates_refused_total{reason=\"ALREADY_EXISTS\"}"),
            absl::StrCat(kThreads * kPerThread / 2));
  EXPECT_EQ(SampleValue(text, "fl_rounds_committed_total"), total);
  EXPECT_EQ(SampleValue(text, "fl_round_duration_seconds_count"), total);
  EXPECT_EQ(SampleValue(text, "fl_round_duration_seconds_bucket{le=\"1\"}"), total);
  EXPECT_EQ(SampleValue(text, "fl_round_duration_seconds_bucket{le=\"0.5\"}"), "0");
  EXPECT_EQ(SampleValue(text, "fl_round_duration_seconds_sum"), total);
  EXPECT_EQ(inconsistent.load(), 0) << "of " << renders.load() << " renders";
  EXPECT_GT(renders.load(), 0);
}

// --- HTTP endpoint ------------------------------------------------------------------------------

struct HttpResponse {
  int status = 0;
  std::string content_type;
  std::string body;
};

// A minimal HTTP/1.1 client over a plain socket: one request, Connection: close, read to EOF.
absl::StatusOr<HttpResponse> HttpRequest(int port, const std::string& method,
                                         const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket");
  struct FdCloser {
    int fd;
    ~FdCloser() { close(fd); }
  } closer{fd};
  timeval timeout{.tv_sec = 5, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::UnavailableError(absl::StrCat("connect to port ", port, " failed"));
  }
  const std::string request = absl::StrCat(method, " ", path,
                                           " HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                           "Content-Length: 0\r\nConnection: close\r\n\r\n");
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    return absl::UnavailableError("send failed");
  }
  std::string raw;
  char buffer[4096];
  for (;;) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0) return absl::DeadlineExceededError("recv failed or timed out");
    if (n == 0) break;
    raw.append(buffer, static_cast<size_t>(n));
  }
  const size_t header_end = raw.find("\r\n\r\n");
  if (header_end == std::string::npos)
    return absl::DataLossError(absl::StrCat("no headers: ", raw));
  HttpResponse response;
  response.body = raw.substr(header_end + 4);
  std::vector<std::string> lines = absl::StrSplit(raw.substr(0, header_end), "\r\n");
  std::vector<std::string> status_line = absl::StrSplit(lines[0], ' ');
  if (status_line.size() < 2 || !absl::SimpleAtoi(status_line[1], &response.status)) {
    return absl::DataLossError(absl::StrCat("bad status line: ", lines[0]));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    if (absl::StartsWithIgnoreCase(lines[i], "Content-Type: ")) {
      response.content_type = lines[i].substr(14);
    }
  }
  return response;
}

class HttpEndpointTest : public ::testing::Test {
 protected:
  HealthReport Health() const {
    HealthReport report{
        .healthy = healthy_.load(), .reason = "", .run_id = 3, .round = 7, .clients_online = 2};
    if (!report.healthy) report.reason = "store: \"disk\" full\nretrying";
    return report;
  }
  std::unique_ptr<HttpEndpoint> StartOrDie(int port = 0) {
    absl::StatusOr<std::unique_ptr<HttpEndpoint>> endpoint =
        HttpEndpoint::Start("127.0.0.1", port, &metrics_, [this] { return Health(); });
    EXPECT_TRUE(endpoint.ok()) << endpoint.status();
    return endpoint.ok() ? *std::move(endpoint) : nullptr;
  }

  ServerMetrics metrics_;
  std::atomic<bool> healthy_{true};
};

TEST_F(HttpEndpointTest, ServesMetrics) {
  metrics_.UpdateAccepted();
  metrics_.UpdateRefused(absl::StatusCode::kInvalidArgument);
  metrics_.SetCurrentRound(7);
  std::unique_ptr<HttpEndpoint> endpoint = StartOrDie();
  ASSERT_NE(endpoint, nullptr);
  EXPECT_GT(endpoint->port(), 0);

  absl::StatusOr<HttpResponse> response = HttpRequest(endpoint->port(), "GET", "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->content_type, "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(response->body, metrics_.RenderPrometheus());
  EXPECT_TRUE(absl::StrContains(response->body, "\nfl_updates_accepted_total 1\n"));
  EXPECT_TRUE(absl::StrContains(response->body,
                                "\nfl_updates_refused_total{reason=\"INVALID_ARGUMENT\"} 1\n"));
  EXPECT_TRUE(absl::StrContains(response->body, "\nfl_current_round 7\n"));
  EXPECT_TRUE(absl::StrContains(response->body, "# TYPE fl_round_duration_seconds histogram\n"));

  // Later updates show in the next scrape.
  metrics_.UpdateAccepted();
  response = HttpRequest(endpoint->port(), "GET", "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_TRUE(absl::StrContains(response->body, "\nfl_updates_accepted_total 2\n"));
}

TEST_F(HttpEndpointTest, HealthzIsOkOrUnavailableWithTheReason) {
  std::unique_ptr<HttpEndpoint> endpoint = StartOrDie();
  ASSERT_NE(endpoint, nullptr);

  absl::StatusOr<HttpResponse> response = HttpRequest(endpoint->port(), "GET", "/healthz");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->content_type, "application/json");
  EXPECT_EQ(response->body, R"({"status":"ok","run_id":3,"round":7,"clients_online":2})");

  healthy_ = false;
  response = HttpRequest(endpoint->port(), "GET", "/healthz");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 503);
  EXPECT_EQ(response->content_type, "application/json");
  EXPECT_EQ(response->body, R"({"status":"unhealthy","reason":"store: \"disk\" full\nretrying",)"
                            R"("run_id":3,"round":7,"clients_online":2})");
}

TEST_F(HttpEndpointTest, EverythingElseIsNotFound) {
  std::unique_ptr<HttpEndpoint> endpoint = StartOrDie();
  ASSERT_NE(endpoint, nullptr);
  for (const auto& [method, path] :
       std::vector<std::pair<std::string, std::string>>{{"GET", "/"},
                                                        {"GET", "/metricsx"},
                                                        {"GET", "/metrics/"},
                                                        {"GET", "/healthz/x"},
                                                        {"POST", "/metrics"},
                                                        {"DELETE", "/healthz"}}) {
    absl::StatusOr<HttpResponse> response = HttpRequest(endpoint->port(), method, path);
    ASSERT_TRUE(response.ok()) << method << " " << path << ": " << response.status();
    EXPECT_EQ(response->status, 404) << method << " " << path;
  }
}

TEST_F(HttpEndpointTest, StopIsIdempotentAndReleasesThePort) {
  std::unique_ptr<HttpEndpoint> endpoint = StartOrDie();
  ASSERT_NE(endpoint, nullptr);
  const int port = endpoint->port();
  ASSERT_TRUE(HttpRequest(port, "GET", "/metrics").ok());

  endpoint->Stop();
  endpoint->Stop();
  EXPECT_FALSE(HttpRequest(port, "GET", "/metrics").ok());  // nobody listens

  // The same port can be bound again at once.
  std::unique_ptr<HttpEndpoint> again = StartOrDie(port);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->port(), port);
  absl::StatusOr<HttpResponse> response = HttpRequest(port, "GET", "/healthz");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  again.reset();  // the destructor stops it too
  endpoint.reset();
  EXPECT_FALSE(HttpRequest(port, "GET", "/healthz").ok());
}

TEST_F(HttpEndpointTest, PortInUseIsUnavailableNamingHostAndPort) {
  std::unique_ptr<HttpEndpoint> first = StartOrDie();
  ASSERT_NE(first, nullptr);
  absl::StatusOr<std::unique_ptr<HttpEndpoint>> second =
      HttpEndpoint::Start("127.0.0.1", first->port(), &metrics_, [this] { return Health(); });
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(
      absl::StrContains(second.status().message(), absl::StrCat("127.0.0.1:", first->port())))
      << second.status();
  // The first one still serves.
  absl::StatusOr<HttpResponse> response = HttpRequest(first->port(), "GET", "/healthz");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
}

TEST_F(HttpEndpointTest, RefusesBadArguments) {
  auto health = [this] { return Health(); };
  EXPECT_EQ(HttpEndpoint::Start("127.0.0.1", 0, nullptr, health).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HttpEndpoint::Start("127.0.0.1", 0, &metrics_, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HttpEndpoint::Start("127.0.0.1", 70000, &metrics_, health).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Not an address of this machine: bind fails.
  EXPECT_EQ(HttpEndpoint::Start("192.0.2.1", 0, &metrics_, health).status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace fl::server
