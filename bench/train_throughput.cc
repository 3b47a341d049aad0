// Training throughput of the built-in models: mini-batch SGD (batch 64, momentum 0.9, lr 0.01)
// on Fashion-MNIST for a fixed number of steps through the real trainer (MakeBuiltinTrainer and
// Trainer::Fit, so batch gathering and the optimizer are included), after one warm-up Fit.
// Prints one line per model and backend:
//   <model> <backend> <samples per second> <seconds> <steps> <final training loss>
// Models: softmax (784 -> 10), mlp (784-200-10, ReLU), simple_cnn (NIID-Bench, 44,426 params).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "fl/client/builtin_models.h"
#include "fl/client/dataset.h"

namespace {

using fl::client::BuiltinTrainerOptions;
using fl::client::Dataset;
using fl::client::FitConfig;
using fl::client::ModelArchitecture;

// The first `n` examples of `data`, wrapping around.
Dataset Head(const Dataset& data, int64_t n) {
  std::vector<int64_t> rows(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) rows[static_cast<size_t>(i)] = i % data.num_examples();
  return data.Subset(rows);
}

int Run(const Dataset& train, const std::string& model, const std::string& backend, int steps,
        int threads, int batch) {
  absl::StatusOr<fl::client::ModelKind> kind = fl::client::ParseModelKind(model);
  if (!kind.ok()) {
    std::fprintf(stderr, "%s\n", kind.status().ToString().c_str());
    return 2;
  }
  ModelArchitecture arch;
  arch.kind = *kind;
  arch.num_features = 784;
  arch.num_classes = 10;
  arch.hidden = {200};
  BuiltinTrainerOptions options;
  options.backend = backend;
  options.cpu_threads = threads;
  options.momentum = 0.9f;
  options.seed = 1;
  auto trainer =
      fl::client::MakeBuiltinTrainer(arch, Head(train, int64_t{steps} * batch), Dataset{}, options);
  auto warm =
      fl::client::MakeBuiltinTrainer(arch, Head(train, int64_t{20} * batch), Dataset{}, options);
  absl::StatusOr<fl::Model> init = fl::client::InitialBuiltinModel(arch, 0);
  if (!trainer.ok() || !warm.ok() || !init.ok()) {
    std::fprintf(stderr, "%s\n",
                 (!trainer.ok() ? trainer.status()
                  : !warm.ok()  ? warm.status()
                                : init.status())
                     .ToString()
                     .c_str());
    return 1;
  }
  FitConfig config;
  config.batch_size = batch;
  config.learning_rate = 0.01f;
  if (auto w = (*warm)->Fit(*init, config); !w.ok()) {
    std::fprintf(stderr, "%s\n", w.status().ToString().c_str());
    return 1;
  }
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<fl::client::FitResult> fit = (*trainer)->Fit(*init, config);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!fit.ok()) {
    std::fprintf(stderr, "%s\n", fit.status().ToString().c_str());
    return 1;
  }
  std::printf("%s %s %.1f %.4f %d %.4f\n", model.c_str(), backend.c_str(),
              static_cast<double>(steps) * batch / seconds, seconds, steps,
              fit->metrics.at("loss"));
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Training throughput of the built-in models on Fashion-MNIST");
  std::vector<std::string> models = {"softmax", "mlp", "simple_cnn"};
  std::vector<std::string> backends = {"cpu"};
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int steps = 200;
  int threads = 0;
  int batch = 64;
  app.add_option("--models", models, "softmax, mlp, simple_cnn");
  app.add_option("--backends", backends, "cpu, cuda (cuda is skipped when unavailable)");
  app.add_option("--data", data_dir, "directory of the Fashion-MNIST IDX files");
  app.add_option("--steps", steps, "SGD steps per measurement")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "cpu threads (0: every core)");
  app.add_option("--batch", batch, "batch size")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  absl::StatusOr<Dataset> train = fl::client::LoadIdx(data_dir + "/train-images-idx3-ubyte.gz",
                                                      data_dir + "/train-labels-idx1-ubyte.gz");
  if (!train.ok()) {
    std::fprintf(stderr, "%s\n", train.status().ToString().c_str());
    return 1;
  }
  for (const std::string& backend : backends) {
    std::string why;
    if (backend == "cuda" && !fl::client::CudaBackendAvailable(&why)) {
      std::fprintf(stderr, "skipping cuda: %s\n", why.c_str());
      continue;
    }
    for (const std::string& model : models) {
      if (int rc = Run(*train, model, backend, steps, threads, batch); rc != 0) return rc;
    }
  }
  return 0;
}
