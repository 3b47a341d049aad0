#include "fl/aggregation/dp/clipping.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"

namespace fl::aggregation::dp {

double L2Norm(std::span<const float> values) {
  double sum = 0;
  for (float v : values) sum += static_cast<double>(v) * v;
  return std::sqrt(sum);
}

namespace {

absl::Status CheckClipNorm(double clip_norm) {
  if (!std::isfinite(clip_norm) || clip_norm <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("clip norm must be a finite number > 0, got ", clip_norm));
  }
  return absl::OkStatus();
}

absl::Status CheckFinite(std::span<const float> values, const char* what) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return absl::InvalidArgumentError(absl::StrCat(what, " element ", i, " is ", values[i],
                                                     "; cannot clip a non-finite update"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<double> ClipL2(std::span<float> delta, double clip_norm) {
  if (absl::Status s = CheckClipNorm(clip_norm); !s.ok()) return s;
  if (absl::Status s = CheckFinite(delta, "update"); !s.ok()) return s;
  const double norm = L2Norm(delta);
  if (norm > clip_norm) {
    const double scale = clip_norm / norm;
    for (float& v : delta) v = static_cast<float>(v * scale);
  }
  return norm;
}

absl::StatusOr<double> ClipModelUpdate(const Model& global, Model& local, double clip_norm) {
  if (!(global.spec() == local.spec())) {
    return absl::InvalidArgumentError(
        "cannot clip an update whose tensors differ from the global model's");
  }
  if (absl::Status s = CheckClipNorm(clip_norm); !s.ok()) return s;
  if (absl::Status s = CheckFinite(local.data(), "local model"); !s.ok()) return s;
  std::span<const float> g = global.data();
  std::span<float> l = local.data();
  std::vector<float> delta(l.size());
  for (size_t i = 0; i < l.size(); ++i) delta[i] = l[i] - g[i];
  absl::StatusOr<double> norm = ClipL2(delta, clip_norm);
  if (!norm.ok()) return norm.status();
  if (*norm > clip_norm) {
    for (size_t i = 0; i < l.size(); ++i) l[i] = g[i] + delta[i];
  }
  return norm;
}

void StreamingClip::Measure(int64_t first, std::span<const float> values) {
  const float* g = global_.data() + first;
  for (size_t i = 0; i < values.size(); ++i) {
    const double d = static_cast<double>(values[i]) - g[i];
    sum_squares_ += d * d;
  }
}

double StreamingClip::norm() const { return std::sqrt(sum_squares_); }

double StreamingClip::scale() const {
  const double n = norm();
  return n > clip_norm_ ? clip_norm_ / n : 1.0;
}

void StreamingClip::Apply(int64_t first, std::span<float> values) const {
  const double factor = scale();
  if (factor >= 1.0) return;
  const float* g = global_.data() + first;
  for (size_t i = 0; i < values.size(); ++i) {
    const double gi = g[i];
    values[i] = static_cast<float>(gi + (static_cast<double>(values[i]) - gi) * factor);
  }
}

}  // namespace fl::aggregation::dp
