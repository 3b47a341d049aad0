// Federated standardisation: before round 1, every online client reports the per-feature sums
// and sums of squares of its training rows; the server adds them up (as FLARE's federated
// statistics do) into each feature's mean and population standard deviation, stores them with
// the run and sends them with every later task. The collection rides on the evaluation
// machinery (EvalState with `statistics`, round 0): the same deadline, offline handling and
// report RPC.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fl/common/logging.h"
#include "nlohmann/json.hpp"
#include "server/engine/engine_impl.h"

namespace fl::server::internal {
namespace {

constexpr size_t kMaxStatisticsFeatures = 65536;

}  // namespace

bool EngineImpl::NeedsStatisticsLocked() const {
  return options_.federated_standardization && feature_stats_ == nullptr && committed_round_ == 0;
}

void EngineImpl::StartStatisticsLocked(std::vector<std::string> online, absl::Time now) {
  auto stats = std::make_unique<EvalState>();
  stats->statistics = true;
  stats->round = 0;
  stats->deadline = now + options_.eval_timeout;
  stats->sampled = std::move(online);
  for (const std::string& id : stats->sampled) {
    stats->task_of[id] = absl::StrFormat("s0.%s", id.substr(0, 12));
  }
  LogEvent(LogLevel::kInfo, "statistics_started",
           {{"sampled", absl::StrCat(stats->sampled.size())}});
  eval_ = std::move(stats);
  BumpLocked();
}

absl::Status EngineImpl::CheckFeatureSumsLocked(const EvaluationReport& report) const {
  const FeatureSumsReport& f = report.feature_sums;
  if (f.count <= 0 || f.count > kMaxExamples) {
    return absl::InvalidArgumentError(absl::StrCat("feature statistics over ", f.count,
                                                   " rows; it must be in [1, ", kMaxExamples,
                                                   "]"));
  }
  if (f.sum.empty() || f.sum.size() > kMaxStatisticsFeatures ||
      f.sum_squares.size() != f.sum.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "feature statistics need one sum and one sum of squares per feature (1 to ",
        kMaxStatisticsFeatures, " features), got ", f.sum.size(), " and ", f.sum_squares.size()));
  }
  // What float32 features can sum to, and what only real data can: sum^2 <= count * sum_sq
  // (Cauchy-Schwarz), up to rounding. Anything else would let one site set the federation's
  // means and deviations (or overflow them).
  const double n = static_cast<double>(f.count);
  const double max_value = std::numeric_limits<float>::max();
  for (size_t j = 0; j < f.sum.size(); ++j) {
    const double s = f.sum[j], q = f.sum_squares[j];
    if (!std::isfinite(s) || !std::isfinite(q) || q < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("feature statistics of feature ", j, " are not finite (or negative)"));
    }
    if (std::abs(s) > n * max_value || q > n * max_value * max_value) {
      return absl::InvalidArgumentError(absl::StrCat(
          "feature statistics of feature ", j, " exceed what ", f.count, " float values can sum to"));
    }
    if (s * s > n * q * (1 + 1e-9) + 1e-300) {
      return absl::InvalidArgumentError(absl::StrCat(
          "feature statistics of feature ", j, " are inconsistent: sum^2 ", s * s,
          " exceeds count x sum of squares ", n * q));
    }
  }
  for (const auto& [id, other] : eval_->reports) {
    if (!other.error.empty()) continue;
    if (other.feature_sums.sum.size() != f.sum.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("this site has ", f.sum.size(), " features but another site reported ",
                       other.feature_sums.sum.size()));
    }
  }
  return absl::OkStatus();
}

void EngineImpl::FinishStatisticsLocked(std::unique_ptr<EvalState> stats, absl::Time now) {
  double count = 0;
  std::vector<double> sum, sum_squares;
  int sites = 0;
  for (const auto& [id, r] : stats->reports) {
    if (!r.error.empty()) continue;
    ++sites;
    count += static_cast<double>(r.feature_sums.count);
    sum.resize(r.feature_sums.sum.size(), 0.0);
    sum_squares.resize(r.feature_sums.sum.size(), 0.0);
    for (size_t j = 0; j < sum.size(); ++j) {
      sum[j] += r.feature_sums.sum[j];
      sum_squares[j] += r.feature_sums.sum_squares[j];
    }
  }
  waiting_since_ = now;
  if (sites < options_.min_fit_clients) {
    FailRunLocked(absl::StrCat(
        "federated standardisation: ", sites, " of the ", stats->sampled.size(),
        " sites asked reported their feature statistics within eval_timeout, fewer than "
        "min_fit_clients (",
        options_.min_fit_clients,
        "); sites with their own Trainer must implement FeatureSumsForStatistics, or turn "
        "run.federated_standardization off"));
    return;
  }
  auto result = std::make_shared<FeatureStatistics>();
  result->count = static_cast<int64_t>(count);
  for (size_t j = 0; j < sum.size(); ++j) {
    const double mean = sum[j] / count;
    const double stddev = std::sqrt(std::max(0.0, sum_squares[j] / count - mean * mean));
    if (!std::isfinite(mean) || !std::isfinite(stddev) ||
        std::abs(mean) > std::numeric_limits<float>::max() ||
        stddev > std::numeric_limits<float>::max()) {
      FailRunLocked(absl::StrCat("federated standardisation: feature ", j,
                                 " has no finite float mean and deviation over the sites' sums"));
      return;
    }
    result->mean.push_back(mean);
    result->stddev.push_back(stddev);
  }
  const nlohmann::json j = {{"mean", result->mean},
                            {"stddev", result->stddev},
                            {"count", result->count},
                            {"sites", sites}};
  if (absl::Status s = store_->SetFeatureStatistics(run_.run_id, j.dump()); !s.ok()) {
    FailRunLocked(absl::StrCat("federated standardisation: the statistics could not be stored: ",
                               s.message()));
    return;
  }
  feature_stats_ = std::move(result);
  LogEvent(LogLevel::kInfo, "statistics_finished",
           {{"sites", absl::StrCat(sites)},
            {"rows", absl::StrCat(feature_stats_->count)},
            {"features", absl::StrCat(feature_stats_->mean.size())}});
}

absl::Status EngineImpl::LoadFeatureStatistics() {
  if (!options_.federated_standardization) return absl::OkStatus();
  absl::StatusOr<std::string> text = store_->FeatureStatistics(run_.run_id);
  if (!text.ok()) return text.status();
  if (text->empty()) return absl::OkStatus();
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("mean") || !j.contains("stddev")) {
    return absl::DataLossError(absl::StrCat("run ", run_.run_id,
                                            "'s stored feature statistics are malformed"));
  }
  auto stats = std::make_shared<FeatureStatistics>();
  try {
    stats->mean = j.at("mean").get<std::vector<double>>();
    stats->stddev = j.at("stddev").get<std::vector<double>>();
    stats->count = j.value("count", int64_t{0});
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat("run ", run_.run_id,
                                            "'s stored feature statistics: ", e.what()));
  }
  feature_stats_ = std::move(stats);
  return absl::OkStatus();
}

}  // namespace fl::server::internal
