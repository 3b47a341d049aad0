#include "cli/site_trainer.h"

#include <utility>

#include "cli/client_site.h"

namespace fl::cli {

absl::StatusOr<SiteTrainer> BuildSiteTrainer(const ClientConfig& config) {
  if (absl::Status s = ValidateClientConfig(config); !s.ok()) return s;
  absl::StatusOr<SiteData> data = LoadSiteData(config);
  if (!data.ok()) return data.status();
  absl::StatusOr<fl::client::ModelKind> kind = fl::client::ParseModelKind(config.model.kind);
  if (!kind.ok()) return kind.status();
  SiteTrainer site;
  site.arch.kind = *kind;
  site.arch.num_features = data->train.num_features;
  site.arch.num_classes = data->train.num_classes;
  site.arch.hidden = config.model.hidden;
  site.arch.image_height = config.model.image_height;
  site.arch.image_width = config.model.image_width;
  site.arch.image_channels = config.model.image_channels;
  site.train_examples = data->train.num_examples();
  site.test_examples = data->test.num_examples();
  site.feature_columns = data->train.feature_names;
  absl::StatusOr<std::unique_ptr<fl::client::Trainer>> trainer = fl::client::MakeBuiltinTrainer(
      site.arch, std::move(data->train), std::move(data->test), config.training);
  if (!trainer.ok()) return trainer.status();
  site.trainer = *std::move(trainer);
  return site;
}

}  // namespace fl::cli
