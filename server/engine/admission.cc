// Admitting a joining site: its model spec against the global model, its data columns against
// the run's (fixed by the first site that sends columns, and kept in the store).
#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "server/engine/engine_impl.h"

namespace fl::server::internal {
namespace {

// "a, b, c" with at most `limit` names, then "... (N in all)".
std::string ListColumns(const std::vector<std::string>& columns, size_t limit = 12) {
  std::vector<std::string> shown(columns.begin(),
                                 columns.begin() + std::min(limit, columns.size()));
  std::string out = absl::StrJoin(shown, ", ");
  if (columns.size() > limit) absl::StrAppend(&out, ", ... (", columns.size(), " in all)");
  return out;
}

// Why `site` is not `run` (both in order), or "" when the lists are equal.
std::string DescribeColumnDifference(const std::vector<std::string>& run,
                                     const std::vector<std::string>& site) {
  for (size_t i = 0; i < std::min(run.size(), site.size()); ++i) {
    if (run[i] == site[i]) continue;
    const bool elsewhere = std::find(run.begin(), run.end(), site[i]) != run.end();
    return absl::StrCat("column ", i + 1, " is '", site[i], "' here but '", run[i],
                        "' in the run's", elsewhere ? " (same names, another order?)" : "");
  }
  if (site.size() < run.size()) {
    return absl::StrCat("this site lacks column ", site.size() + 1, " '", run[site.size()], "' (",
                        site.size(), " columns here, ", run.size(), " in the run's)");
  }
  if (site.size() > run.size()) {
    return absl::StrCat("this site has an extra column ", run.size() + 1, " '", site[run.size()],
                        "' (", site.size(), " columns here, ", run.size(), " in the run's)");
  }
  return "";
}

}  // namespace

absl::Status EngineImpl::Admit(const std::string& client_id, const SiteProfile& profile,
                               bool dry_run) {
  std::shared_ptr<const Model> global;
  int64_t run_id = 0;
  {
    absl::MutexLock lock(&mu_);
    global = global_;
    run_id = run_.run_id;
  }
  absl::Status refusal;
  if (profile.model_spec.has_value() && global != nullptr) {
    std::string diff = DescribeSpecDifference(global->spec(), *profile.model_spec,
                                              "the server's model", "this site's model");
    if (!diff.empty()) {
      std::vector<TensorSpec> ours = global->spec().tensors(),
                              theirs = profile.model_spec->tensors();
      auto by_name = [](const TensorSpec& a, const TensorSpec& b) { return a.name < b.name; };
      std::sort(ours.begin(), ours.end(), by_name);
      std::sort(theirs.begin(), theirs.end(), by_name);
      const bool reordered = ours == theirs;
      refusal = absl::FailedPreconditionError(absl::StrCat(
          "this site's model is not the run's: ", diff,
          reordered ? "; it has the same tensors in another order: write the initial file in the "
                      "trainer's order (fl::WriteSafetensors keeps a Model's order; Python's "
                      "safetensors sorts tensors by dtype and name)"
                    : "; train the model the server was started with (its initial safetensors "
                      "file or built-in kind)"));
    }
  }
  if (refusal.ok() && !profile.feature_schema_sha256.empty()) {
    const nlohmann::json mine = {{"sha256", profile.feature_schema_sha256},
                                 {"columns", profile.feature_columns},
                                 {"client", client_id.substr(0, 16)}};
    // A dry run only reads: a preflight must not fix the run's columns.
    absl::StatusOr<std::string> stored =
        store_->ClaimFeatureSchema(run_id, dry_run ? std::string() : mine.dump());
    if (!stored.ok()) return stored.status();
    const nlohmann::json run = nlohmann::json::parse(*stored, nullptr, /*allow_exceptions=*/false);
    if (run.is_object() && run.value("sha256", "") != profile.feature_schema_sha256) {
      std::vector<std::string> columns;
      if (run.contains("columns") && run["columns"].is_array()) {
        for (const nlohmann::json& c : run["columns"]) {
          if (c.is_string()) columns.push_back(c.get<std::string>());
        }
      }
      std::string diff = DescribeColumnDifference(columns, profile.feature_columns);
      if (diff.empty()) diff = "the column lists hash differently";
      refusal = absl::FailedPreconditionError(absl::StrCat(
          "this site's data columns are not the run's (fixed by the first site, client ",
          run.value("client", "?"), "): ", diff, "; the run's columns: ", ListColumns(columns),
          "; select and order them with data.feature_columns / data.drop_columns (if the first "
          "site was wrong, the operator runs `fl admin columns --reset`)"));
    }
  }
  if (!refusal.ok()) AuditRefusal(client_id, "join_refused", refusal);
  return refusal;
}

}  // namespace fl::server::internal
