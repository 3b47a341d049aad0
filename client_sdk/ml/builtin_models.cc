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

// The largest single dimension (features, classes, widths, image sides): the matrix products
// take int sizes on some backends (cuBLAS).
constexpr int64_t kMaxDimension = (int64_t{1} << 31) - 1;

absl::Status CheckDimension(const char* what, int64_t value) {
  if (value > kMaxDimension) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", value, " is over the limit of ", kMaxDimension));
  }
  return absl::OkStatus();
}

// What the architecture's numbers must satisfy before any layer is built.
absl::Status CheckArchitecture(const ModelArchitecture& arch) {
  for (absl::Status s : {CheckDimension("num_classes", arch.num_classes),
                         CheckDimension("num_features", arch.num_features)}) {
    if (!s.ok()) return s;
  }
  for (int64_t h : arch.hidden) {
    if (absl::Status s = CheckDimension("MLP hidden width", h); !s.ok()) return s;
  }
  if (arch.kind == ModelKind::kSimpleCnn) {
    for (absl::Status s : {CheckDimension("image height", arch.image_height),
                           CheckDimension("image width", arch.image_width),
                           CheckDimension("image channels", arch.image_channels)}) {
      if (!s.ok()) return s;
    }
  }
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
    // Each side is at most 2^31 - 1, so height x width fits in int64; the product with the
    // channels is compared by division so that it cannot overflow.
    if (arch.image_height < 1 || arch.image_width < 1 || arch.image_channels < 1 ||
        arch.num_features % arch.image_channels != 0 ||
        arch.image_height * arch.image_width != arch.num_features / arch.image_channels) {
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

// Refuses a model whose layers hold more than kMaxModelFloats parameters, naming the layer. Every
// dimension is at most 2^31 - 1 by now, so a layer's count (a product of two such numbers and
// small constants) fits in int64; the running total is checked before it can overflow.
absl::Status CheckParameterCount(const std::vector<ml::Network::NamedLayer>& layers) {
  int64_t total = 0;
  for (const ml::Network::NamedLayer& l : layers) {
    const int64_t n = l.layer->NumParams();
    const std::string name = l.name.empty() ? std::string("the linear layer") : l.name;
    if (n > kMaxModelFloats) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", name, " would have ", n,
                                                     " parameters, over the limit of ",
                                                     kMaxModelFloats, " for a whole model"));
    }
    if (total > kMaxModelFloats - n) {
      return absl::InvalidArgumentError(absl::StrCat("the model would have ", total + n,
                                                     " parameters with layer ", name,
                                                     ", over the limit of ", kMaxModelFloats));
    }
    total += n;
  }
  return absl::OkStatus();
}

// A double in [0, 1) from the top 53 bits of one draw: the same on every standard library.
double UniformUnit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// The layers of `arch` on `backend` (constructing them allocates nothing), after checking the
// architecture's numbers and its parameter count.
absl::StatusOr<std::vector<ml::Network::NamedLayer>> MakeLayers(const ModelArchitecture& arch,
                                                                ml::Backend* backend) {
  using ml::Conv2d, ml::Dense, ml::MaxPool2, ml::Relu;
  if (absl::Status s = CheckArchitecture(arch); !s.ok()) return s;
  std::vector<ml::Network::NamedLayer> layers;
  auto add = [&](std::string name, std::unique_ptr<ml::Layer> layer) {
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
  if (absl::Status s = CheckParameterCount(layers); !s.ok()) return s;
  return layers;
}

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
  // The spec comes from the layers themselves; building them allocates nothing.
  std::unique_ptr<ml::Backend> cpu = ml::MakeCpuBackend(1);
  absl::StatusOr<std::vector<ml::Network::NamedLayer>> layers = MakeLayers(arch, cpu.get());
  if (!layers.ok()) return layers.status();
  return ml::Network::SpecOf(*layers);
}

absl::StatusOr<Model> InitialBuiltinModel(const ModelArchitecture& arch, uint64_t seed) {
  // The layers alone give the spec and the fan-ins: no network buffers besides the model itself.
  std::unique_ptr<ml::Backend> cpu = ml::MakeCpuBackend(1);
  absl::StatusOr<std::vector<ml::Network::NamedLayer>> layers = MakeLayers(arch, cpu.get());
  if (!layers.ok()) return layers.status();
  Model model(ml::Network::SpecOf(*layers));
  if (arch.kind == ModelKind::kSoftmaxRegression) return model;  // zero, as it always was
  // PyTorch's default for Linear and Conv2d: weight and bias uniform in +-1/sqrt(fan_in), drawn
  // tensor by tensor in spec order from one generator.
  std::mt19937_64 rng(seed);
  float* out = model.data().data();
  for (const ml::Network::NamedLayer& named : *layers) {
    const ml::Layer& layer = *named.layer;
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
  absl::StatusOr<std::vector<Network::NamedLayer>> layers = MakeLayers(arch, backend);
  if (!layers.ok()) return layers.status();
  return std::make_unique<Network>(backend, *std::move(layers));
}

}  // namespace ml
}  // namespace fl::client
