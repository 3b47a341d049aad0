#include "server/daemon/metrics.h"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cmath>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace fl::server {
namespace {

[[maybe_unused]] bool IsValidName(std::string_view name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (allow_colon && c == ':');
    const bool digit = c >= '0' && c <= '9';
    if (!letter && !(digit && i > 0)) return false;
  }
  return true;
}

// Appends one sample line: `name{label="value"} number`, the braces only with a label.
void AppendSample(std::string& out, std::string_view name, std::string_view label_name,
                  std::string_view label_value, std::string_view value) {
  out.append(name);
  if (!label_name.empty()) {
    out.append("{");
    out.append(label_name);
    out.append("=\"");
    out.append(EscapePrometheusLabelValue(label_value));
    out.append("\"}");
  }
  out.append(" ");
  out.append(value);
  out.append("\n");
}

}  // namespace

std::string EscapePrometheusLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    switch (c) {
      case '\\':
        out.append("\\\\");
        break;
      case '"':
        out.append("\\\"");
        break;
      case '\n':
        out.append("\\n");
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::string EscapePrometheusHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (const char c : help) {
    switch (c) {
      case '\\':
        out.append("\\\\");
        break;
      case '\n':
        out.append("\\n");
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::string FormatPrometheusValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

// --- MetricsRegistry ---------------------------------------------------------------------------

MetricsRegistry::UpdateScope::UpdateScope(const MetricsRegistry& registry) : registry_(registry) {
  registry_.mu_.ReaderLock();
}

MetricsRegistry::UpdateScope::~UpdateScope() { registry_.mu_.ReaderUnlock(); }

void MetricsRegistry::Counter::Increment(const UpdateScope&, uint64_t by) {
  value_.fetch_add(by, std::memory_order_relaxed);
}

void MetricsRegistry::Counter::Increment(const UpdateScope&, std::string_view label_value,
                                         uint64_t by) {
  absl::MutexLock lock(&mu_);
  auto it = labelled_.find(label_value);
  if (it == labelled_.end()) {
    it = labelled_.emplace(std::string(label_value), std::make_unique<std::atomic<uint64_t>>(0))
             .first;
  }
  it->second->fetch_add(by, std::memory_order_relaxed);
}

void MetricsRegistry::Gauge::Set(const UpdateScope&, double value) {
  value_.store(value, std::memory_order_relaxed);
}

MetricsRegistry::Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)),
      counts_(std::make_unique<std::atomic<uint64_t>[]>(upper_bounds_.size() + 1)) {
  for (size_t i = 0; i < upper_bounds_.size(); ++i) {
    assert(std::isfinite(upper_bounds_[i]));
    assert(i == 0 || upper_bounds_[i - 1] < upper_bounds_[i]);
  }
}

void MetricsRegistry::Histogram::Observe(const UpdateScope&, double value) {
  if (std::isnan(value)) return;
  size_t bucket = 0;
  while (bucket < upper_bounds_.size() && value > upper_bounds_[bucket]) ++bucket;
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

void MetricsRegistry::Add(std::unique_ptr<Family> family) {
  assert(IsValidName(family->name, /*allow_colon=*/true));
  absl::MutexLock lock(&mu_);
  assert(std::none_of(families_.begin(), families_.end(),
                      [&](const auto& other) { return other->name == family->name; }));
  families_.push_back(std::move(family));
}

MetricsRegistry::Counter* MetricsRegistry::AddCounter(std::string name, std::string help,
                                                      std::string label_name) {
  assert(label_name.empty() ||
         (IsValidName(label_name, /*allow_colon=*/false) && !label_name.starts_with("__")));
  auto family = std::make_unique<Family>();
  family->type = Type::kCounter;
  family->name = std::move(name);
  family->help = std::move(help);
  family->label_name = std::move(label_name);
  family->counter = std::make_unique<Counter>();
  Counter* counter = family->counter.get();
  Add(std::move(family));
  return counter;
}

MetricsRegistry::Gauge* MetricsRegistry::AddGauge(std::string name, std::string help) {
  auto family = std::make_unique<Family>();
  family->type = Type::kGauge;
  family->name = std::move(name);
  family->help = std::move(help);
  family->gauge = std::make_unique<Gauge>();
  Gauge* gauge = family->gauge.get();
  Add(std::move(family));
  return gauge;
}

MetricsRegistry::Histogram* MetricsRegistry::AddHistogram(std::string name, std::string help,
                                                          std::vector<double> upper_bounds) {
  auto family = std::make_unique<Family>();
  family->type = Type::kHistogram;
  family->name = std::move(name);
  family->help = std::move(help);
  family->histogram = std::make_unique<Histogram>(std::move(upper_bounds));
  Histogram* histogram = family->histogram.get();
  Add(std::move(family));
  return histogram;
}

std::string MetricsRegistry::RenderPrometheus() const {
  absl::WriterMutexLock lock(&mu_);  // no update scope is open: a snapshot
  std::string out;
  for (const auto& family : families_) {
    const char* type = family->type == Type::kCounter ? "counter"
                       : family->type == Type::kGauge ? "gauge"
                                                      : "histogram";
    absl::StrAppend(&out, "# HELP ", family->name, " ", EscapePrometheusHelp(family->help), "\n");
    absl::StrAppend(&out, "# TYPE ", family->name, " ", type, "\n");
    switch (family->type) {
      case Type::kCounter: {
        const Counter& counter = *family->counter;
        if (family->label_name.empty()) {
          AppendSample(out, family->name, "", "",
                       absl::StrCat(counter.value_.load(std::memory_order_relaxed)));
          break;
        }
        absl::MutexLock counter_lock(&counter.mu_);
        for (const auto& [label_value, value] : counter.labelled_) {
          AppendSample(out, family->name, family->label_name, label_value,
                       absl::StrCat(value->load(std::memory_order_relaxed)));
        }
        break;
      }
      case Type::kGauge:
        AppendSample(out, family->name, "", "",
                     FormatPrometheusValue(family->gauge->value_.load(std::memory_order_relaxed)));
        break;
      case Type::kHistogram: {
        const Histogram& histogram = *family->histogram;
        const std::string bucket_name = absl::StrCat(family->name, "_bucket");
        uint64_t cumulative = 0;
        for (size_t i = 0; i <= histogram.upper_bounds_.size(); ++i) {
          cumulative += histogram.counts_[i].load(std::memory_order_relaxed);
          const std::string le = i < histogram.upper_bounds_.size()
                                     ? FormatPrometheusValue(histogram.upper_bounds_[i])
                                     : std::string("+Inf");
          AppendSample(out, bucket_name, "le", le, absl::StrCat(cumulative));
        }
        AppendSample(out, absl::StrCat(family->name, "_sum"), "", "",
                     FormatPrometheusValue(histogram.sum_.load(std::memory_order_relaxed)));
        AppendSample(out, absl::StrCat(family->name, "_count"), "", "",
                     absl::StrCat(histogram.count_.load(std::memory_order_relaxed)));
        break;
      }
    }
  }
  return out;
}

// --- ServerMetrics -----------------------------------------------------------------------------

std::vector<double> ServerMetrics::RoundDurationBuckets() {
  return {0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600};
}

ServerMetrics::ServerMetrics()
    : rounds_committed_(registry_.AddCounter("fl_rounds_committed_total",
                                             "Rounds committed (checkpoint written).")),
      rounds_failed_(registry_.AddCounter(
          "fl_rounds_failed_total",
          "Round attempts that failed (too few accepted updates, or a non-finite average).")),
      round_duration_(registry_.AddHistogram("fl_round_duration_seconds",
                                             "Duration of committed rounds, in seconds.",
                                             RoundDurationBuckets())),
      bytes_received_(registry_.AddCounter("fl_update_bytes_received_total",
                                           "Bytes of update payload received from clients.")),
      updates_accepted_(registry_.AddCounter("fl_updates_accepted_total",
                                             "Client updates accepted into a round.")),
      updates_refused_(registry_.AddCounter("fl_updates_refused_total",
                                            "Client updates refused, by canonical status code.",
                                            "reason")),
      clients_online_(
          registry_.AddGauge("fl_clients_online", "Clients seen within the client timeout.")),
      current_round_(registry_.AddGauge("fl_current_round", "The round in progress.")),
      run_state_(registry_.AddGauge("fl_run_state",
                                    "0 waiting, 1 training, 2 evaluating, 3 stalled (no progress "
                                    "for stall_after_s), 4 finished, 5 failed, 6 idle (no run: "
                                    "a --stay-up server between runs).")),
      seconds_since_progress_(registry_.AddGauge(
          "fl_seconds_since_progress",
          "Seconds since the run last made progress (a round opened or closed, an update "
          "accepted, a site at work).")),
      server_cert_expiry_(registry_.AddGauge(
          "fl_server_certificate_not_after_seconds",
          "When the server's certificate expires (Unix time, seconds); 0 without TLS.")),
      sites_cert_expiring_(registry_.AddGauge(
          "fl_site_certificates_expiring",
          "Enrolled sites whose certificate expires within cert_warn_days (or has expired).")) {}

void ServerMetrics::RoundCommitted(absl::Duration duration) {
  MetricsRegistry::UpdateScope scope(registry_);
  rounds_committed_->Increment(scope);
  round_duration_->Observe(scope, absl::ToDoubleSeconds(duration));
}

void ServerMetrics::RoundFailed() {
  MetricsRegistry::UpdateScope scope(registry_);
  rounds_failed_->Increment(scope);
}

void ServerMetrics::BytesReceived(int64_t bytes) {
  if (bytes <= 0) return;
  MetricsRegistry::UpdateScope scope(registry_);
  bytes_received_->Increment(scope, static_cast<uint64_t>(bytes));
}

void ServerMetrics::UpdateAccepted() {
  MetricsRegistry::UpdateScope scope(registry_);
  updates_accepted_->Increment(scope);
}

void ServerMetrics::UpdateRefused(absl::StatusCode code) {
  std::string reason = absl::StatusCodeToString(code);
  if (reason.empty()) reason = absl::StrCat("CODE_", static_cast<int>(code));
  MetricsRegistry::UpdateScope scope(registry_);
  updates_refused_->Increment(scope, reason);
}

void ServerMetrics::SetClientsOnline(int clients) {
  MetricsRegistry::UpdateScope scope(registry_);
  clients_online_->Set(scope, clients);
}

void ServerMetrics::SetCurrentRound(int round) {
  MetricsRegistry::UpdateScope scope(registry_);
  current_round_->Set(scope, round);
}

void ServerMetrics::SetRunState(int state, double seconds_since_progress) {
  MetricsRegistry::UpdateScope scope(registry_);
  run_state_->Set(scope, state);
  seconds_since_progress_->Set(scope, seconds_since_progress);
}

void ServerMetrics::SetCertificates(double server_not_after_seconds, int sites_expiring) {
  MetricsRegistry::UpdateScope scope(registry_);
  server_cert_expiry_->Set(scope, server_not_after_seconds);
  sites_cert_expiring_->Set(scope, sites_expiring);
}

std::string ServerMetrics::RenderPrometheus() const { return registry_.RenderPrometheus(); }

}  // namespace fl::server
