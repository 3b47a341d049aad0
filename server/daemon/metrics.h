// The server's metrics: a small registry of counters, gauges and histograms that renders the
// Prometheus text exposition format 0.0.4, and `ServerMetrics`, the typed facade over it that the
// server updates and the HTTP endpoint (http_endpoint.h) renders.
//
// Thread-safety: everything here is thread-safe. Updates from many threads run concurrently
// (atomics under a shared lock); a render takes the lock exclusively, so it is a snapshot: it sees
// every update made under one `MetricsRegistry::UpdateScope` (for `ServerMetrics`, one method
// call) all or none, and a histogram's buckets, sum and count always agree.
#ifndef FL_SERVER_DAEMON_METRICS_H_
#define FL_SERVER_DAEMON_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace fl::server {

class MetricsRegistry final {
 public:
  // Holds the registry in update mode while alive: any number of scopes, on any threads, may be
  // open at once; a render waits until none is. Keep one for a few updates, never across a wait.
  class ABSL_SCOPED_LOCKABLE UpdateScope final {
   public:
    explicit UpdateScope(const MetricsRegistry& registry) ABSL_SHARED_LOCK_FUNCTION(registry.mu_);
    ~UpdateScope() ABSL_UNLOCK_FUNCTION();
    UpdateScope(const UpdateScope&) = delete;
    UpdateScope& operator=(const UpdateScope&) = delete;

   private:
    const MetricsRegistry& registry_;
  };

  // A monotonically increasing count, without labels or with the one label the registry was told
  // (its samples are rendered sorted by label value). Updates need an open UpdateScope.
  class Counter final {
   public:
    // For a counter without a label.
    void Increment(const UpdateScope& scope, uint64_t by = 1);
    // For a counter with a label; the first use of a label value creates its sample.
    void Increment(const UpdateScope& scope, std::string_view label_value, uint64_t by = 1);

   private:
    friend class MetricsRegistry;
    std::atomic<uint64_t> value_{0};  // the unlabelled sample
    mutable absl::Mutex mu_;          // guards the map, not the counts in it
    std::map<std::string, std::unique_ptr<std::atomic<uint64_t>>, std::less<>> labelled_
        ABSL_GUARDED_BY(mu_);
  };

  // A value that goes up and down. Updates need an open UpdateScope.
  class Gauge final {
   public:
    void Set(const UpdateScope& scope, double value);

   private:
    friend class MetricsRegistry;
    std::atomic<double> value_{0.0};
  };

  // Observations counted in fixed buckets (cumulative `le` buckets when rendered, +Inf implied),
  // with their sum and count. Updates need an open UpdateScope.
  class Histogram final {
   public:
    // A NaN observation is ignored.
    void Observe(const UpdateScope& scope, double value);

    explicit Histogram(std::vector<double> upper_bounds);  // use AddHistogram

   private:
    friend class MetricsRegistry;
    std::vector<double> upper_bounds_;                 // strictly increasing, finite
    std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // per bucket, +Inf last; not cumulative
    std::atomic<double> sum_{0.0};
    std::atomic<uint64_t> count_{0};
  };

  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Registers a metric and returns its handle, owned by the registry and valid for its lifetime.
  // Metrics render in the order they were added. Names must be valid Prometheus names
  // ([a-zA-Z_:][a-zA-Z0-9_:]*, label names without ':' and not starting with "__"), unique in the
  // registry; `help` is free text (escaped when rendered); `upper_bounds` strictly increasing and
  // finite. Breaking these is a programmer error (assert). An empty `label_name`: no label.
  Counter* AddCounter(std::string name, std::string help, std::string label_name = "");
  Gauge* AddGauge(std::string name, std::string help);
  Histogram* AddHistogram(std::string name, std::string help, std::vector<double> upper_bounds);

  // The text exposition format 0.0.4 of every metric: HELP and TYPE lines, then its samples.
  std::string RenderPrometheus() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Family {
    Type type = Type::kCounter;
    std::string name;
    std::string help;
    std::string label_name;  // counters only; empty: none
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  void Add(std::unique_ptr<Family> family) ABSL_LOCKS_EXCLUDED(mu_);

  // Shared by update scopes, exclusive for a render or to add a metric.
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Family>> families_ ABSL_GUARDED_BY(mu_);
};

// The Prometheus text format's escaping: of a label value (backslash, double quote, newline) and
// of HELP text (backslash, newline).
std::string EscapePrometheusLabelValue(std::string_view value);
std::string EscapePrometheusHelp(std::string_view help);
// A sample value as the format writes it: shortest round-trip decimal, "+Inf", "-Inf", "NaN".
std::string FormatPrometheusValue(double value);

// The server's metrics by name. Thread-safe; each method is one update scope.
//   fl_rounds_committed_total            counter
//   fl_rounds_failed_total               counter   (round attempts that failed)
//   fl_round_duration_seconds            histogram (of committed rounds; buckets 0.1 s to 1 h)
//   fl_update_bytes_received_total       counter
//   fl_updates_accepted_total            counter
//   fl_updates_refused_total{reason}     counter   (reason: canonical code, "INVALID_ARGUMENT")
//   fl_clients_online                    gauge
//   fl_current_round                     gauge
//   fl_run_state                         gauge     (0 waiting, 1 training, 2 evaluating,
//                                                   3 stalled, 4 finished, 5 failed)
//   fl_seconds_since_progress            gauge
class ServerMetrics final {
 public:
  ServerMetrics();
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  // One commit: counts it and observes its duration (an infinite one lands in +Inf only).
  void RoundCommitted(absl::Duration duration);
  void RoundFailed();
  // Adds `bytes` of update payload; zero or negative adds nothing.
  void BytesReceived(int64_t bytes);
  void UpdateAccepted();
  // Counts a refused update under its code's canonical name (a code absl does not name is
  // "CODE_<n>").
  void UpdateRefused(absl::StatusCode code);
  void SetClientsOnline(int clients);
  void SetCurrentRound(int round);
  // The run's state as fl_run_state's number (RunStateValue) and its seconds without progress.
  void SetRunState(int state, double seconds_since_progress);
  // When the server's certificate expires (Unix seconds; 0 without TLS), and how many enrolled
  // sites' certificates expire within the warning window ([server] cert_warn_days).
  void SetCertificates(double server_not_after_seconds, int sites_expiring);

  std::string RenderPrometheus() const;

  // The upper bounds of fl_round_duration_seconds's buckets, in seconds.
  static std::vector<double> RoundDurationBuckets();

 private:
  MetricsRegistry registry_;
  MetricsRegistry::Counter* rounds_committed_;
  MetricsRegistry::Counter* rounds_failed_;
  MetricsRegistry::Histogram* round_duration_;
  MetricsRegistry::Counter* bytes_received_;
  MetricsRegistry::Counter* updates_accepted_;
  MetricsRegistry::Counter* updates_refused_;
  MetricsRegistry::Gauge* clients_online_;
  MetricsRegistry::Gauge* current_round_;
  MetricsRegistry::Gauge* run_state_;
  MetricsRegistry::Gauge* seconds_since_progress_;
  MetricsRegistry::Gauge* server_cert_expiry_;
  MetricsRegistry::Gauge* sites_cert_expiring_;
};

}  // namespace fl::server

#endif  // FL_SERVER_DAEMON_METRICS_H_
