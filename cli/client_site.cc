#include "cli/client_site.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fl/common/logging.h"

namespace fl::cli {
namespace {

using fl::client::Dataset;

// Loads one CSV file or IDX pair in the configured format, labels checked against the model,
// and logs what the CSV loader did to the file's rows.
absl::StatusOr<Dataset> Load(const ClientConfig& config, const std::string& csv,
                             const std::string& images, const std::string& labels,
                             int32_t classes) {
  if (config.data.format == "idx") return fl::client::LoadIdx(images, labels, classes);
  absl::StatusOr<fl::client::CsvOptions> options = CsvOptionsFromConfig(config.data, classes);
  if (!options.ok()) return options.status();
  absl::StatusOr<Dataset> data = fl::client::LoadCsv(csv, *options);
  if (!data.ok()) return data.status();
  fl::LogEvent(fl::LogLevel::kInfo, "csv_loaded",
               {{"file", csv},
                {"rows", absl::StrCat(data->num_examples())},
                {"features", absl::StrCat(data->num_features)},
                {"dropped_rows", absl::StrCat(data->dropped_rows)},
                {"imputed_values", absl::StrCat(data->imputed_values)},
                {"feature_schema", fl::client::FeatureSchemaSha256(*data)}});
  return data;
}

// Warns when features look unscaled: one learning rate then suits none of them.
void WarnIfUnscaled(const Dataset& data, const std::string& source) {
  absl::StatusOr<fl::client::ColumnStats> stats = fl::client::DescribeColumns(data);
  if (!stats.ok()) return;
  const std::vector<std::string> unscaled = fl::client::UnscaledFeatures(data, *stats);
  if (unscaled.empty()) return;
  constexpr size_t kShown = 5;
  std::string names =
      absl::StrJoin(unscaled.begin(), unscaled.begin() + std::min(kShown, unscaled.size()), ",");
  if (unscaled.size() > kShown) absl::StrAppend(&names, ",...");
  fl::LogEvent(fl::LogLevel::kWarn, "features_unscaled",
               {{"file", source},
                {"count", absl::StrCat(unscaled.size())},
                {"features", names},
                {"hint",
                 "mean or stddev above 10: standardize these columns, with the same mean and "
                 "stddev at every site"}});
}

// Refuses `data` (loaded from `source`) when the model does not take its feature count.
absl::Status CheckFeatures(const ClientConfig& config, const Dataset& data,
                           const std::string& source, int64_t expected) {
  if (data.num_features == expected) return absl::OkStatus();
  const bool csv = config.data.format == "csv";
  std::string what = csv ? absl::StrCat(data.num_features, " feature columns")
                         : absl::StrCat(data.num_features, " features (pixels) per image");
  std::string geometry;
  if (config.model.kind == "simple_cnn") {
    geometry = absl::StrCat(" (", config.model.image_height, "x", config.model.image_width, "x",
                            config.model.image_channels, ")");
  }
  return absl::InvalidArgumentError(absl::StrCat(
      source, " has ", what, " but model ", config.model.kind, " expects ", expected, geometry));
}

}  // namespace

int64_t ExpectedFeatures(const ClientModelConfig& model) {
  if (model.kind == "simple_cnn") {
    return model.image_height * model.image_width * model.image_channels;
  }
  return model.features;
}

absl::StatusOr<SiteData> LoadSiteData(const ClientConfig& config) {
  const ClientDataConfig& d = config.data;
  const bool csv = d.format == "csv";
  const std::string train_source = csv ? d.path : d.images;
  SiteData site;
  absl::StatusOr<Dataset> train = Load(config, d.path, d.images, d.labels, config.model.classes);
  if (!train.ok()) return train.status();
  site.train = *std::move(train);
  if (site.train.num_classes < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(train_source,
                     ": every label is 0, so the number of classes cannot be "
                     "taken from the data; set model.classes (--classes)"));
  }
  int64_t expected = ExpectedFeatures(config.model);
  if (expected == 0) expected = site.train.num_features;
  if (absl::Status s = CheckFeatures(config, site.train, train_source, expected); !s.ok()) {
    return s;
  }
  WarnIfUnscaled(site.train, train_source);

  if (d.num_shards > 0) {
    absl::StatusOr<std::vector<std::vector<int64_t>>> parts =
        fl::client::SplitIid(site.train.num_examples(), d.num_shards, d.split_seed);
    if (!parts.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(train_source, ": cannot split ", site.train.num_examples(), " rows into ",
                       d.num_shards, " shards: ", parts.status().message()));
    }
    site.train = site.train.Subset((*parts)[static_cast<size_t>(d.shard)]);
  }

  const std::string test_source = csv ? d.test_path : d.test_images;
  if (!test_source.empty()) {
    // The test labels must be the training data's classes (the model's).
    absl::StatusOr<Dataset> test =
        Load(config, d.test_path, d.test_images, d.test_labels, site.train.num_classes);
    if (!test.ok()) return test.status();
    if (absl::Status s = CheckFeatures(config, *test, test_source, expected); !s.ok()) return s;
    if (test->feature_names != site.train.feature_names) {
      return absl::InvalidArgumentError(absl::StrCat(
          test_source, "'s feature columns (", absl::StrJoin(test->feature_names, ", "),
          ") are not those of ", train_source, " (", absl::StrJoin(site.train.feature_names, ", "),
          "), in the same order"));
    }
    site.test = *std::move(test);
  } else if (d.test_fraction > 0) {
    const int64_t n = site.train.num_examples();
    const int64_t num_test = static_cast<int64_t>(std::llround(d.test_fraction * n));
    if (num_test < 1 || num_test >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat("data.test_fraction ", d.test_fraction, " of the ", n, " training rows of ",
                       train_source, " leaves ", num_test, " test and ", n - num_test,
                       " training rows; both must be at least 1"));
    }
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), int64_t{0});
    std::mt19937_64 rng(d.split_seed);
    std::shuffle(order.begin(), order.end(), rng);
    site.test = site.train.Subset({order.begin(), order.begin() + num_test});
    site.train = site.train.Subset({order.begin() + num_test, order.end()});
  }
  return site;
}

}  // namespace fl::cli
