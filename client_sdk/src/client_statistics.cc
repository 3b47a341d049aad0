// The client's side of federated standardisation: the STATISTICS task (the trainer's feature
// sums, sent through SubmitEvaluation) and handing the server's statistics to the trainer.
#include <string>

#include "absl/strings/str_cat.h"
#include "client_sdk/src/client_impl.h"
#include "fl/common/logging.h"
#include "fl/common/proto_serde.h"
#include "fl/v1/federation.grpc.pb.h"

namespace fl::client {

absl::Status Client::Impl::Statistics(const fl::v1::Task& task) {
  fl::v1::EvaluationResult result;
  internal::SetTaskIds(task, result);
  absl::StatusOr<FeatureSums> sums = trainer_->FeatureSumsForStatistics();
  if (sums.ok()) {
    fl::v1::FeatureSums* out = result.mutable_feature_sums();
    out->set_count(sums->count);
    out->mutable_sum()->Add(sums->sum.begin(), sums->sum.end());
    out->mutable_sum_squares()->Add(sums->sum_sq.begin(), sums->sum_sq.end());
    result.set_num_examples(sums->count);
  } else {
    result.set_error(sums.status().ToString());
  }
  Call call(this, absl::Seconds(30));
  fl::v1::SubmitReply reply;
  absl::Status s = FromGrpcStatus(stub_->SubmitEvaluation(&call.ctx, result, &reply));
  LogEvent(s.ok() ? LogLevel::kInfo : LogLevel::kWarn, "statistics_task",
           {{"name", options_.name},
            {"result", sums.ok() ? absl::StrCat(sums->sum.size(), " features over ", sums->count,
                                                " rows")
                                 : absl::StrCat("declined: ", sums.status().ToString())},
            {"server", s.ok() ? "recorded" : s.ToString()}});
  return s;
}

absl::Status Client::Impl::ApplyStatistics(const fl::v1::Task& task) {
  ColumnStats stats;
  if (task.has_feature_statistics()) {
    stats.mean.assign(task.feature_statistics().mean().begin(),
                      task.feature_statistics().mean().end());
    stats.stddev.assign(task.feature_statistics().stddev().begin(),
                        task.feature_statistics().stddev().end());
  }
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
            {"rows", absl::StrCat(task.feature_statistics().count())}});
  applied_stats_ = std::move(stats);
  return absl::OkStatus();
}

}  // namespace fl::client
