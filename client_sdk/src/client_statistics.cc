// The client's side of federated standardisation: the STATISTICS task (the trainer's feature
// sums, sent through SubmitEvaluation) and handing the server's statistics to the trainer.
#include <string>

#include "absl/strings/str_cat.h"
#include "client_sdk/src/client_impl.h"
#include "fl/common/logging.h"

namespace fl::client {

absl::Status Client::Impl::Statistics(const ClientTask& task) {
  EvaluationReply result = ReplyTo<EvaluationReply>(task);
  absl::StatusOr<FeatureSums> sums = trainer_->FeatureSumsForStatistics();
  if (sums.ok()) {
    result.feature_sums = *sums;
    result.num_examples = sums->count;
  } else {
    result.error = sums.status().ToString();
  }
  absl::Status s = transport_->SubmitEvaluation(result);
  LogEvent(s.ok() ? LogLevel::kInfo : LogLevel::kWarn, "statistics_task",
           {{"name", options_.name},
            {"result", sums.ok() ? absl::StrCat(sums->sum.size(), " features over ", sums->count,
                                                " rows")
                                 : absl::StrCat("declined: ", sums.status().ToString())},
            {"server", s.ok() ? "recorded" : s.ToString()}});
  return s;
}

absl::Status Client::Impl::ApplyStatistics(const ClientTask& task) {
  const ColumnStats& stats = task.feature_statistics;
  if (stats.mean == applied_stats_.mean && stats.stddev == applied_stats_.stddev) {
    return absl::OkStatus();
  }
  if (absl::Status s = trainer_->ApplyFeatureStatistics(stats); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot standardise this site's features with the federation's statistics: ",
        s.message()));
  }
  LogEvent(LogLevel::kInfo, "feature_statistics_applied",
           {{"name", options_.name},
            {"features", absl::StrCat(stats.mean.size())},
            {"rows", absl::StrCat(task.feature_statistics_count)}});
  applied_stats_ = stats;
  return absl::OkStatus();
}

}  // namespace fl::client
