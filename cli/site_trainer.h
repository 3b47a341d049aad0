// The trainer `fl client` runs, built from its configuration: what both a site's run
// (cli/client_daemon.h) and its preflight check (cli/preflight.h) do before anything connects.
#ifndef FL_CLI_SITE_TRAINER_H_
#define FL_CLI_SITE_TRAINER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/client_config.h"
#include "fl/client/builtin_models.h"
#include "fl/client/trainer.h"

namespace fl::cli {

struct SiteTrainer {
  std::unique_ptr<fl::client::Trainer> trainer;  // owns the site's data
  fl::client::ModelArchitecture arch;            // features and classes as the data gave them
  int64_t train_examples = 0;
  int64_t test_examples = 0;
  std::vector<std::string> feature_columns;  // the CSV's feature columns in order; IDX: none
};

// ValidateClientConfig, then LoadSiteData, then the built-in trainer of config.model on that
// data (MakeBuiltinTrainer). Returns their error unchanged (INVALID_ARGUMENT naming the key, the
// file, row and column; NOT_FOUND for a missing file; UNAVAILABLE for backend "cuda" without a
// device): every one a configuration or data error. Thread-safe (no shared state).
absl::StatusOr<SiteTrainer> BuildSiteTrainer(const ClientConfig& config);

}  // namespace fl::cli

#endif  // FL_CLI_SITE_TRAINER_H_
