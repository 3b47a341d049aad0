// A site's data for `fl client`, loaded and checked against the configured model before the
// client connects: nothing is sent from a site whose data does not fit.
#ifndef FL_CLI_CLIENT_SITE_H_
#define FL_CLI_CLIENT_SITE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "cli/client_config.h"
#include "fl/client/dataset.h"

namespace fl::cli {

struct SiteData {
  fl::client::Dataset train;
  fl::client::Dataset test;  // may be empty (no test files and test_fraction 0)
};

// The number of input features `model` expects, or 0 when it takes the training data's
// (softmax and mlp without model.features).
int64_t ExpectedFeatures(const ClientModelConfig& model);

// Loads the training data (and the test data, or the held-out test_fraction) that `config.data`
// names, keeps shard data.shard of data.num_shards, and checks it against `config.model`. CSV
// files are read with CsvOptionsFromConfig(config.data); each one loaded is logged (event
// csv_loaded: rows, features, dropped_rows, imputed_values, feature_schema), and training
// features whose mean or stddev exceeds 10 are logged as a warning (features_unscaled). Refuses
// with INVALID_ARGUMENT, naming the file (and for CSV the row and column): everything LoadCsv and
// LoadIdx refuse, a label outside [0, model.classes), a feature count the model does not take
// ("site.csv has 12 feature columns but model mlp expects 30"), test data whose feature count or
// (CSV) feature columns are not the training data's, a split or shard that leaves no training
// rows. NOT_FOUND for a missing file.
absl::StatusOr<SiteData> LoadSiteData(const ClientConfig& config);

}  // namespace fl::cli

#endif  // FL_CLI_CLIENT_SITE_H_
