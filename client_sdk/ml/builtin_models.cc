// The built-in architectures: their layer stacks, specs and PyTorch-style initial weights.
#include "fl/client/builtin_models.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client_sdk/ml/models.h"

namespace fl::client {
namespace {

// What the architecture's numbers must satisfy before any layer is built.
absl::Status CheckArchitecture(const ModelArchitecture& arch) {
  if (arch.num_classes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a model needs at least 1 class, not ", arch.num_classes));
  }
  if (arch.num_features < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a model needs at least 1 feature, not ", arch.num_features));
  }
  if (arch.kind == ModelKind::kMlp) {
    if (arch.hidden.empty()) {
      return absl::InvalidArgumentError("an MLP needs at least one hidden layer width");
    }
    for (int64_t h : arch.hidden) {
      if (h < 1) {
        return absl::InvalidArgumentError(absl::StrCat("MLP hidden widths must be positive, not [",
                                                       absl::StrJoin(arch.hidden, ", "), "]"));
      }
    }
  }
  if (arch.kind == ModelKind::kSimpleCnn) {
    if (arch.image_height < 1 || arch.image_width < 1 || arch.image_channels < 1 ||
        arch.image_height * arch.image_width * arch.image_channels != arch.num_features) {
      return absl::InvalidArgumentError(
          absl::StrCat("the simple CNN needs num_features = image height x width x channels, but ",
                       arch.image_height, " x ", arch.image_width, " x ", arch.image_channels,
                       " != ", arch.num_features));
    }
    // conv 5x5, pool 2, conv 5x5, pool 2 must leave at least one pixel.
    auto after = [](int64_t side) { return ((side - 4) / 2 - 4) / 2; };
    if (arch.image_height < 5 || arch.image_width < 5 || after(arch.image_height) < 1 ||
        after(arch.image_width) < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the simple CNN needs images of at least 16x16 pixels for two 5x5 convolutions and two "
          "2x2 poolings, not ",
          arch.image_height, "x", arch.image_width));
    }
  }
  return absl::OkStatus();
}

// A double in [0, 1) from the top 53 bits of one draw: the same on every standard library.
double UniformUnit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

}  // namespace

absl::StatusOr<ModelKind> ParseModelKind(std::string_view name) {
  if (name == "softmax" || name == "logistic") return ModelKind::kSoftmaxRegression;
  if (name == "mlp") return ModelKind::kMlp;
  if (name == "simple_cnn") return ModelKind::kSimpleCnn;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model \"", std::string(name),
                   "\"; choose \"softmax\", \"logistic\", \"mlp\" or \"simple_cnn\""));
}

std::string_view ModelKindName(ModelKind kind) {
  switch (kind) {
    case ModelKind::kSoftmaxRegression:
      return "softmax";
    case ModelKind::kMlp:
      return "mlp";
    case ModelKind::kSimpleCnn:
      return "simple_cnn";
  }
  return "unknown";
}

absl::StatusOr<ModelSpec> BuiltinModelSpec(const ModelArchitecture& arch) {
  // The spec comes from the layers themselves; the CPU backend allocates nothing until Forward
  // beyond the (small) parameter buffers.
  std::unique_ptr<ml::Backend> cpu = ml::MakeCpuBackend(1);
  absl::StatusOr<std::unique_ptr<ml::Network>> net = ml::MakeNetwork(arch, cpu.get());
  if (!net.ok()) return net.status();
  return (*net)->spec();
}

absl::StatusOr<Model> InitialBuiltinModel(const ModelArchitecture& arch, uint64_t seed) {
  std::unique_ptr<ml::Backend> cpu = ml::MakeCpuBackend(1);
  absl::StatusOr<std::unique_ptr<ml::Network>> net = ml::MakeNetwork(arch, cpu.get());
  if (!net.ok()) return net.status();
  Model model((*net)->spec());
  if (arch.kind == ModelKind::kSoftmaxRegression) return model;  // zero, as it always was
  // PyTorch's default for Linear and Conv2d: weight and bias uniform in +-1/sqrt(fan_in), drawn
  // tensor by tensor in spec order from one generator.
  std::mt19937_64 rng(seed);
  float* out = model.data().data();
  for (size_t i = 0; i < (*net)->num_layers(); ++i) {
    const ml::Layer& layer = (*net)->layer(i);
    if (layer.NumParams() == 0) continue;
    const double bound = 1.0 / std::sqrt(static_cast<double>(layer.fan_in()));
    for (int64_t k = 0; k < layer.NumParams(); ++k) {
      *out++ = static_cast<float>((2.0 * UniformUnit(rng) - 1.0) * bound);
    }
  }
  return model;
}

namespace ml {

absl::StatusOr<std::unique_ptr<Network>> MakeNetwork(const ModelArchitecture& arch,
                                                     Backend* backend) {
  if (absl::Status s = CheckArchitecture(arch); !s.ok()) return s;
  std::vector<Network::NamedLayer> layers;
  auto add = [&](std::string name, std::unique_ptr<Layer> layer) {
    layers.push_back({std::move(name), std::move(layer)});
  };
  switch (arch.kind) {
    case ModelKind::kSoftmaxRegression:
      add("", std::make_unique<Dense>(backend, arch.num_features, arch.num_classes));
      break;
    case ModelKind::kMlp: {
      int64_t in = arch.num_features;
      for (size_t i = 0; i < arch.hidden.size(); ++i) {
        add(absl::StrCat("fc", i + 1), std::make_unique<Dense>(backend, in, arch.hidden[i]));
        add("", std::make_unique<Relu>(backend, arch.hidden[i]));
        in = arch.hidden[i];
      }
      add(absl::StrCat("fc", arch.hidden.size() + 1),
          std::make_unique<Dense>(backend, in, arch.num_classes));
      break;
    }
    case ModelKind::kSimpleCnn: {
      int64_t h = arch.image_height, w = arch.image_width;
      add("conv1", std::make_unique<Conv2d>(backend, h, w, arch.image_channels, 6, 5));
      h -= 4;
      w -= 4;
      add("", std::make_unique<Relu>(backend, h * w * 6));
      add("", std::make_unique<MaxPool2>(backend, h, w, 6));
      h /= 2;
      w /= 2;
      add("conv2", std::make_unique<Conv2d>(backend, h, w, 6, 16, 5));
      h -= 4;
      w -= 4;
      add("", std::make_unique<Relu>(backend, h * w * 16));
      add("", std::make_unique<MaxPool2>(backend, h, w, 16));
      h /= 2;
      w /= 2;
      // Flattening NHWC is free: fc1 sees the features in (row, column, channel) order.
      add("fc1", std::make_unique<Dense>(backend, h * w * 16, 120));
      add("", std::make_unique<Relu>(backend, 120));
      add("fc2", std::make_unique<Dense>(backend, 120, 84));
      add("", std::make_unique<Relu>(backend, 84));
      add("fc3", std::make_unique<Dense>(backend, 84, arch.num_classes));
      break;
    }
  }
  return std::make_unique<Network>(backend, std::move(layers));
}

}  // namespace ml
}  // namespace fl::client
