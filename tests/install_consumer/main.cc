// A site plugs its own model code into the installed SDK. Checks, without a server, that the
// headers, the Trainer interface and the Client work from an installed package.
#include <cstdio>

#include "fl/client/client.h"
#include "fl/client/trainer.h"

namespace {

class SiteTrainer final : public fl::client::Trainer {
 public:
  fl::ModelSpec spec() const override { return fl::ModelSpec({{"w", {2, 3}}, {"b", {2}}}); }
  absl::StatusOr<fl::client::FitResult> Fit(const fl::Model& global,
                                            const fl::client::FitConfig& config) override {
    fl::Model local = global.Clone();
    for (float& x : local.data()) x += config.learning_rate;  // the site's own training
    return fl::client::FitResult{std::move(local), 42, {{"loss", 0.5}}};
  }
  absl::StatusOr<fl::client::EvalResult> Evaluate(const fl::Model&) override {
    return fl::client::EvalResult{0.5, 42, {{"accuracy", 0.9}}};
  }
};

}  // namespace

int main() {
  SiteTrainer trainer;
  absl::StatusOr<fl::client::FitResult> fit =
      trainer.Fit(fl::Model(trainer.spec()), fl::client::FitConfig{.learning_rate = 0.25f});
  if (!fit.ok() || fit->model.data()[0] != 0.25f || fit->model.NumBytes() != 32) {
    std::fprintf(stderr, "trainer through the installed headers misbehaved\n");
    return 1;
  }
  fl::client::ClientOptions options;
  options.server_address = "127.0.0.1:1";  // nothing listens there
  options.insecure_plaintext = true;
  options.reconnect_timeout = absl::Milliseconds(300);
  absl::StatusOr<std::unique_ptr<fl::client::Client>> client =
      fl::client::Client::Create(options, &trainer);
  if (!client.ok()) {
    std::fprintf(stderr, "Client::Create: %s\n", client.status().ToString().c_str());
    return 1;
  }
  absl::Status run = (*client)->Run();
  if (!absl::IsUnavailable(run)) {
    std::fprintf(stderr, "expected UNAVAILABLE from an absent server, got %s\n",
                 run.ToString().c_str());
    return 1;
  }
  std::printf("installed SDK works: %s\n", run.ToString().c_str());
  return 0;
}
