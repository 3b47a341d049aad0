// custom_site: a site's own program with its own model (two_layer_trainer.h), built against the
// installed SDK with find_package(fl). Three commands:
//
//   custom_site init --out init.safetensors [--hidden 32] [--seed 1]
//       the initial model, for `fl server --initial-model init.safetensors`
//   custom_site train --server HOST:PORT --ca ca.pem --cert site.pem --key site.key
//                     --images train-images.gz --labels train-labels.gz [--first 0] [--count 2000]
//       takes part in the federation until the server ends the run
//   custom_site evaluate --model global.safetensors --images test-images.gz --labels ...
//       scores a model, e.g. one that `fl admin export` wrote
//
// The data are IDX files (Fashion-MNIST: 784 features, 10 classes); --first/--count pick this
// site's rows.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "fl/client/client.h"
#include "fl/client/dataset.h"
#include "fl/common/safetensors.h"
#include "two_layer_trainer.h"

namespace {

constexpr int64_t kFeatures = 784;
constexpr int64_t kClasses = 10;

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "custom_site: %s\n", status.ToString().c_str());
  return 1;
}

// --name value pairs after the command.
std::map<std::string, std::string> Flags(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  for (int i = 2; i + 1 < argc; i += 2) flags[std::string(argv[i]).substr(2)] = argv[i + 1];
  return flags;
}

std::string Get(const std::map<std::string, std::string>& f, const std::string& name,
                const std::string& fallback = "") {
  auto it = f.find(name);
  return it == f.end() ? fallback : it->second;
}

// Rows [first, first + count) of an IDX pair (count 0: to the end).
absl::StatusOr<fl::client::Dataset> LoadRows(const std::map<std::string, std::string>& f) {
  absl::StatusOr<fl::client::Dataset> all =
      fl::client::LoadIdx(Get(f, "images"), Get(f, "labels"), kClasses);
  if (!all.ok()) return all.status();
  const int64_t first = std::atoll(Get(f, "first", "0").c_str());
  int64_t count = std::atoll(Get(f, "count", "0").c_str());
  if (count == 0) count = all->num_examples() - first;
  if (first < 0 || count < 1 || first + count > all->num_examples()) {
    return absl::InvalidArgumentError("--first/--count are outside the data's rows");
  }
  std::vector<int64_t> rows(static_cast<size_t>(count));
  std::iota(rows.begin(), rows.end(), first);
  return all->Subset(rows);
}

int Init(const std::map<std::string, std::string>& f) {
  custom_model::TwoLayerTrainer trainer({}, {}, kFeatures, std::stoll(Get(f, "hidden", "32")),
                                        kClasses);
  fl::Model initial = trainer.InitialModel(std::stoull(Get(f, "seed", "1")));
  if (absl::Status s = fl::WriteSafetensors(Get(f, "out", "init.safetensors"), initial); !s.ok()) {
    return Fail(s);
  }
  std::printf("wrote %s (%lld parameters)\n", Get(f, "out", "init.safetensors").c_str(),
              static_cast<long long>(initial.spec().NumFloats()));
  return 0;
}

int Train(const std::map<std::string, std::string>& f) {
  absl::StatusOr<fl::client::Dataset> rows = LoadRows(f);
  if (!rows.ok()) return Fail(rows.status());
  // The last tenth of the site's rows is its test set, for the server's federated evaluation.
  const int64_t n = rows->num_examples(), num_test = n / 10;
  std::vector<int64_t> train_rows(n - num_test), test_rows(num_test);
  std::iota(train_rows.begin(), train_rows.end(), 0);
  std::iota(test_rows.begin(), test_rows.end(), n - num_test);
  custom_model::TwoLayerTrainer trainer(rows->Subset(train_rows), rows->Subset(test_rows),
                                        kFeatures, std::stoll(Get(f, "hidden", "32")), kClasses,
                                        std::stoull(Get(f, "seed", "1")));
  fl::client::ClientOptions options;
  options.server_address = Get(f, "server", "127.0.0.1:7443");
  options.ca_cert_path = Get(f, "ca");
  options.cert_path = Get(f, "cert");
  options.key_path = Get(f, "key");
  absl::StatusOr<std::unique_ptr<fl::client::Client>> client =
      fl::client::Client::Create(options, &trainer);
  if (!client.ok()) return Fail(client.status());
  if (absl::Status done = (*client)->Run(); !done.ok()) return Fail(done);
  std::printf("the server ended the run\n");
  return 0;
}

int Evaluate(const std::map<std::string, std::string>& f) {
  absl::StatusOr<fl::Model> model = fl::ReadSafetensors(Get(f, "model"));
  if (!model.ok()) return Fail(model.status());
  absl::StatusOr<fl::client::Dataset> rows = LoadRows(f);
  if (!rows.ok()) return Fail(rows.status());
  const int64_t hidden = model->spec().tensors().empty() ? 0 : model->spec().tensors()[0].shape[0];
  custom_model::TwoLayerTrainer trainer({}, *std::move(rows), kFeatures, hidden, kClasses);
  absl::StatusOr<fl::client::EvalResult> eval = trainer.Evaluate(*model);
  if (!eval.ok()) return Fail(eval.status());
  std::printf("loss %.4f accuracy %.4f on %lld rows\n", eval->loss, eval->metrics["accuracy"],
              static_cast<long long>(eval->num_examples));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  const std::map<std::string, std::string> flags = Flags(argc, argv);
  if (command == "init") return Init(flags);
  if (command == "train") return Train(flags);
  if (command == "evaluate") return Evaluate(flags);
  std::fprintf(stderr, "usage: custom_site init|train|evaluate --flag value ... (see site.cc)\n");
  return 2;
}
