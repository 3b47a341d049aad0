// Where a training step's time goes: forward and backward time of every layer of a built-in
// model at one batch size, on one backend, averaged over many steps. For profiling the backends.
//   layer_times [--model simple_cnn] [--backend cpu] [--threads 0] [--batch 64] [--steps 200]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "client_sdk/ml/backend.h"
#include "client_sdk/ml/layers.h"
#include "client_sdk/ml/models.h"
#include "fl/client/builtin_models.h"

int main(int argc, char** argv) {
  CLI::App app("Per-layer forward and backward times of a built-in model");
  std::string model = "simple_cnn", backend_name = "cpu";
  int threads = 0, batch = 64, steps = 200;
  app.add_option("--model", model);
  app.add_option("--backend", backend_name);
  app.add_option("--threads", threads);
  app.add_option("--batch", batch)->check(CLI::PositiveNumber);
  app.add_option("--steps", steps)->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  auto kind = fl::client::ParseModelKind(model);
  auto backend = fl::client::ml::MakeBackend(backend_name, threads);
  if (!kind.ok() || !backend.ok()) {
    std::fprintf(stderr, "%s\n",
                 (!kind.ok() ? kind.status() : backend.status()).ToString().c_str());
    return 1;
  }
  fl::client::ModelArchitecture arch{.kind = *kind, .num_features = 784, .num_classes = 10};
  fl::client::ml::Backend& b = **backend;
  auto net = fl::client::ml::MakeNetwork(arch, &b);
  auto init = fl::client::InitialBuiltinModel(arch, 0);
  if (!net.ok() || !init.ok()) return 1;
  fl::client::ml::Network& n = **net;
  b.Upload(init->data().data(), n.num_params(), n.params());
  std::vector<float> x(static_cast<size_t>(batch) * 784);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 255) / 255.0f;
  std::vector<int32_t> y(static_cast<size_t>(batch));
  for (int i = 0; i < batch; ++i) y[static_cast<size_t>(i)] = i % 10;
  auto bx = b.Allocate(static_cast<int64_t>(x.size()));
  auto by = b.AllocateInts(batch);
  b.Upload(x.data(), static_cast<int64_t>(x.size()), bx->data());
  b.UploadInts(y.data(), batch, by->ints());

  // Run the layers one by one with the network's own buffers, timing each call.
  const size_t layers = n.num_layers();
  std::vector<std::unique_ptr<fl::client::ml::Buffer>> out(layers), grad(layers + 1);
  for (size_t i = 0; i < layers; ++i) {
    out[i] = b.Allocate(int64_t{batch} * n.layer(i).output_size());
    grad[i] = b.Allocate(int64_t{batch} * n.layer(i).input_size());
  }
  std::vector<double> fwd(layers), bwd(layers);
  double loss_time = 0;
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(Clock::now() - t).count();
  };
  for (int s = -10; s < steps; ++s) {  // 10 warm-up steps
    const float* in = bx->data();
    for (size_t i = 0; i < layers; ++i) {
      auto t = Clock::now();
      n.layer(i).Forward(batch, in, out[i]->data());
      b.Synchronize();
      if (s >= 0) fwd[i] += since(t);
      in = out[i]->data();
    }
    auto t = Clock::now();
    b.SoftmaxCrossEntropy(batch, 10, by->ints(), 1.0f / batch, out[layers - 1]->data());
    if (s >= 0) loss_time += since(t);
    const float* g = out[layers - 1]->data();
    for (size_t i = layers; i-- > 0;) {
      t = Clock::now();
      n.layer(i).Backward(batch, g, i == 0 ? nullptr : grad[i]->data());
      b.Synchronize();
      if (s >= 0) bwd[i] += since(t);
      g = grad[i]->data();
    }
  }
  double total = loss_time;
  std::printf("%s on %s, batch %d, mean microseconds per step over %d steps\n", model.c_str(),
              b.Describe().c_str(), batch, steps);
  std::printf("%-6s %-8s %12s %12s\n", "layer", "params", "forward", "backward");
  for (size_t i = 0; i < layers; ++i) {
    std::printf("%-6zu %-8lld %12.1f %12.1f\n", i, static_cast<long long>(n.layer(i).NumParams()),
                fwd[i] / steps, bwd[i] / steps);
    total += fwd[i] + bwd[i];
  }
  std::printf("loss %.1f; total %.1f us per step (%.0f samples/s without the optimizer)\n",
              loss_time / steps, total / steps, batch * steps / (total * 1e-6));
  return 0;
}
