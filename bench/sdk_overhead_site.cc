// The C++ side of bench/python_sdk_bench.sh: one site with a trivial trainer (it returns the
// global model it was given, as a copy, with num_examples 1) over the C++ SDK, for the model in a
// safetensors file. After the run it prints one line per fit task:
//   TASK <round> <task seconds> <train seconds>
// where task is the whole task at the site (download, training, upload until the server
// answered), the figure the Python SDK's on_task reports for its site in the same run.
//   sdk_overhead_site --server HOST:PORT --ca CA --cert CERT --key KEY --model init.safetensors
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/time/time.h"
#include "fl/client/client.h"
#include "fl/common/safetensors.h"

namespace {

class TrivialTrainer final : public fl::client::Trainer {
 public:
  explicit TrivialTrainer(fl::ModelSpec spec) : spec_(std::move(spec)) {}
  fl::ModelSpec spec() const override { return spec_; }
  absl::StatusOr<fl::client::FitResult> Fit(const fl::Model& global,
                                            const fl::client::FitConfig&) override {
    return fl::client::FitResult{.model = global.Clone(), .num_examples = 1, .metrics = {}};
  }
  absl::StatusOr<fl::client::EvalResult> Evaluate(const fl::Model&) override {
    return absl::UnimplementedError("no evaluation in this benchmark");
  }

 private:
  fl::ModelSpec spec_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("A trivial C++ site for the Python SDK's overhead benchmark");
  fl::client::ClientOptions options;
  std::string model_path;
  app.add_option("--server", options.server_address)->required();
  app.add_option("--ca", options.ca_cert_path)->required();
  app.add_option("--cert", options.cert_path)->required();
  app.add_option("--key", options.key_path)->required();
  app.add_option("--model", model_path, "safetensors file of the server's model")->required();
  CLI11_PARSE(app, argc, argv);
  absl::StatusOr<fl::Model> model = fl::ReadSafetensors(model_path);
  if (!model.ok()) {
    std::fprintf(stderr, "%s: %s\n", model_path.c_str(), model.status().ToString().c_str());
    return 1;
  }
  TrivialTrainer trainer(model->spec());
  absl::StatusOr<std::unique_ptr<fl::client::Client>> client =
      fl::client::Client::Create(options, &trainer);
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", client.status().ToString().c_str());
    return 1;
  }
  std::vector<fl::client::TaskReport> reports;
  (*client)->set_on_task([&](const fl::client::TaskReport& r) { reports.push_back(r); });
  absl::Status done = (*client)->Run();
  for (const fl::client::TaskReport& r : reports) {
    if (r.stage != "fit" || !r.status.ok()) continue;
    std::printf("TASK %d %.6f %.6f\n", r.round, absl::ToDoubleSeconds(r.task_time),
                absl::ToDoubleSeconds(r.train_time));
  }
  if (!done.ok()) {
    std::fprintf(stderr, "%s\n", done.ToString().c_str());
    return 1;
  }
  return 0;
}
