#include "fl/simulation/attacks.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"

namespace fl::simulation {
namespace {

// The standard normal quantile, by bisection on erfc (the attack needs it once a round).
double NormalQuantile(double p) {
  double lo = -10, hi = 10;
  for (int i = 0; i < 200; ++i) {
    const double mid = (lo + hi) / 2;
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

}  // namespace

absl::Status AttackOptions::Validate() const {
  if (kind != "none" && kind != "sign_flip" && kind != "scale" && kind != "gaussian" &&
      kind != "label_flip" && kind != "alie") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown attack '", kind,
                     "'; choose none, sign_flip, scale, gaussian, label_flip or alie"));
  }
  if (!(fraction >= 0 && fraction < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("attack fraction must be in [0, 1), got ", fraction));
  }
  if (kind == "alie" && fraction >= 0.5) {
    // s = floor(n / 2 + 1) - f must stay >= 1: the attack hides in the majority's spread.
    return absl::InvalidArgumentError(absl::StrCat(
        "attack 'alie' needs fewer than half the sites attacking (its z needs an honest "
        "majority), got fraction ",
        fraction));
  }
  if (!std::isfinite(scale) || scale < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("attack scale must be >= 0 (0: the attack's default), got ", scale));
  }
  return absl::OkStatus();
}

std::vector<bool> AttackingSites(int32_t n, double fraction, uint64_t seed) {
  std::vector<int32_t> order(static_cast<size_t>(std::max(n, 0)));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed ^ 0xa77ac4ull);
  std::shuffle(order.begin(), order.end(), rng);
  const int32_t count = static_cast<int32_t>(std::lround(fraction * n));
  std::vector<bool> attacking(order.size(), false);
  for (int32_t i = 0; i < count && i < n; ++i) attacking[static_cast<size_t>(order[i])] = true;
  return attacking;
}

bool PoisonUpdates(const AttackOptions& options, int32_t num_sites, uint64_t seed,
                   std::vector<RoundUpdate>& updates) {
  if (!options.poisons_updates()) return false;
  const std::string& kind = options.kind;
  if (kind == "alie") {
    const int n = static_cast<int>(updates.size());
    const int f = static_cast<int>(
        std::count_if(updates.begin(), updates.end(), [](const auto& u) { return u.attacking; }));
    if (f == 0 || n < 2) return false;
    const int s = n / 2 + 1 - f;
    const double z = NormalQuantile(static_cast<double>(n - s) / n);
    const size_t size = updates.front().model.size();
    std::vector<float> crafted(size);
    for (size_t j = 0; j < size; ++j) {
      double sum = 0, sum_sq = 0;
      for (const RoundUpdate& u : updates) {
        sum += u.model[j];
        sum_sq += static_cast<double>(u.model[j]) * u.model[j];
      }
      const double mean = sum / n;
      const double var = std::max(0.0, sum_sq / n - mean * mean);
      crafted[j] = static_cast<float>(mean - z * std::sqrt(var));
    }
    for (RoundUpdate& u : updates) {
      if (u.attacking) std::copy(crafted.begin(), crafted.end(), u.model.begin());
    }
    return true;
  }
  for (RoundUpdate& u : updates) {
    if (!u.attacking) continue;
    if (kind == "sign_flip" || kind == "scale") {
      const double s = kind == "sign_flip" ? -(options.scale > 0 ? options.scale : 1.0)
                                           : (options.scale > 0 ? options.scale : num_sites);
      for (size_t j = 0; j < u.model.size(); ++j) {
        const double x = u.global[j];
        u.model[j] = static_cast<float>(x + s * (u.model[j] - x));
      }
    } else {  // gaussian
      std::mt19937_64 rng(seed ^ (static_cast<uint64_t>(u.site) * 0x9e3779b97f4a7c15ull));
      std::normal_distribution<float> noise(
          0.f, static_cast<float>(options.scale > 0 ? options.scale : 1.0));
      for (size_t j = 0; j < u.model.size(); ++j) u.model[j] = u.global[j] + noise(rng);
    }
  }
  return true;
}

void FlipLabels(client::Dataset& data) {
  for (int32_t& y : data.labels) y = data.num_classes - 1 - y;
}

}  // namespace fl::simulation
