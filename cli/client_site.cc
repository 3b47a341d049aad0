#include "cli/client_site.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fl/simulation/partition.h"

namespace fl::cli {
namespace {

using fl::client::Dataset;

// Loads one CSV file or IDX pair in the configured format, labels checked against the model.
absl::StatusOr<Dataset> Load(const ClientConfig& config, const std::string& csv,
                             const std::string& images, const std::string& labels,
                             int32_t classes) {
  if (config.data.format == "idx") return fl::client::LoadIdx(images, labels, classes);
  return fl::client::LoadCsv(csv, config.data.label_column, classes);
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

  if (d.num_shards > 0) {
    absl::StatusOr<std::vector<std::vector<int64_t>>> parts =
        fl::simulation::PartitionIid(site.train.num_examples(), d.num_shards, d.split_seed);
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
