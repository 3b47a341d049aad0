// Distributed DP's epsilon against the server (RoundRecord::dp_epsilon_server). The server knows
// which sites were in each sum, so against it sampling amplifies nothing: each site has spent, in
// Renyi DP at order a, a / 2 times the sum of 1 / z^2 over the sums it was in (z being a sum's
// noise multiplier), plus, with the discrete Gaussian, the sum of the sums' tau d terms; the run
// reports the site that has spent most.
//   Gaussian: a sum of u3 inputs, each noised with the stddev planned for n_min survivors
//     (z C / sqrt(n_min)), has z_sum = z sqrt(u3 / n_min).
//   Discrete Gaussian: z_sum = sqrt(u3) sigma / D2 in integer steps, D2 the L2 norm the rounding
//     enforces, and the offset tau(sigma, u3) d (Kairouz et al.'s Proposition 14, first term).
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "fl/aggregation/dp/ddg_accountant.h"
#include "fl/aggregation/dp/rdp_accountant.h"
#include "nlohmann/json.hpp"
#include "server/engine/engine_impl.h"

namespace fl::server::internal {

namespace {

// The epsilon of RDP a / 2 * inverse_z2 + offset at every order.
double EpsilonOfExposure(const SiteExposure& exposure, double delta) {
  if (!(exposure.inverse_z2 > 0)) return 0;
  const std::vector<double> orders = aggregation::dp::DefaultRdpOrders();
  std::vector<double> rdp;
  rdp.reserve(orders.size());
  for (double a : orders) rdp.push_back(a / 2 * exposure.inverse_z2 + exposure.offset);
  absl::StatusOr<aggregation::dp::PrivacySpent> spent =
      aggregation::dp::RdpToEpsilon(orders, rdp, delta);
  return spent.ok() ? spent->epsilon : 0;
}

// What one sum of `summed` inputs adds to each of its sites' exposure.
SiteExposure ExposureOfSum(double noise_multiplier, const secagg::SecAggParams& params,
                           size_t dimension, int32_t summed, int32_t planned_for) {
  if (!secagg::UsesDdg(params)) {
    const double z = SumNoiseMultiplier(noise_multiplier, summed, planned_for);
    return {.inverse_z2 = z > 0 ? 1.0 / (z * z) : 0.0};
  }
  if (summed <= 0) return {};
  const aggregation::dp::DdgRelease r = secagg::DdgReleaseOf(params.ddg, dimension, summed);
  const double z = std::sqrt(static_cast<double>(summed)) * r.site_stddev / r.l2_sensitivity;
  return {
      .inverse_z2 = 1.0 / (z * z),
      .offset = aggregation::dp::DdgTau(r.site_stddev, summed) * static_cast<double>(r.dimension)};
}

// The epsilon of the site that has spent most among those added. Epsilon grows with both sums,
// so among exposures without an offset (every Gaussian sum, and a discrete Gaussian's whose tau
// underflows) the largest 1 / z^2 is the one to convert; any with an offset is converted on its
// own.
class MostSpent {
 public:
  explicit MostSpent(double delta) : delta_(delta) {}
  void Add(const SiteExposure& e) {
    if (e.offset == 0) {
      most_plain_ = std::max(most_plain_, e.inverse_z2);
    } else {
      most_ = std::max(most_, EpsilonOfExposure(e, delta_));
    }
  }
  double Epsilon() const {
    return std::max(most_, EpsilonOfExposure({.inverse_z2 = most_plain_}, delta_));
  }

 private:
  double delta_;
  double most_ = 0;
  double most_plain_ = 0;  // the largest 1 / z^2 without an offset
};

}  // namespace

double SumNoiseMultiplier(double noise_multiplier, int32_t summed, int32_t planned_for) {
  if (summed <= 0 || planned_for <= 0) return 0;
  return noise_multiplier * std::sqrt(static_cast<double>(summed) / planned_for);
}

double EngineImpl::ServerEpsilonAfterLocked(const RoundState& round,
                                            const std::vector<ParticipationRecord>& participations,
                                            bool apply) {
  if (!options_.privacy.distributed() || round.secagg == nullptr) return 0;
  std::vector<const std::string*> summed;
  for (const ParticipationRecord& p : participations) {
    if (p.status == ParticipationStatus::kAccepted) summed.push_back(&p.client_id);
  }
  const SiteExposure sum =
      ExposureOfSum(options_.privacy.noise_multiplier, round.secagg->params,
                    static_cast<size_t>(global_->spec().NumFloats()),
                    static_cast<int32_t>(summed.size()), round.secagg->dp_min_survivors);
  if (!(sum.inverse_z2 > 0)) return 0;
  MostSpent most(options_.privacy.delta);
  for (const auto& [site, exposure] : site_exposure_) most.Add(exposure);
  for (const std::string* site : summed) {
    auto it = site_exposure_.find(*site);
    const SiteExposure now = it == site_exposure_.end() ? SiteExposure{} : it->second;
    const SiteExposure after{.inverse_z2 = now.inverse_z2 + sum.inverse_z2,
                             .offset = now.offset + sum.offset};
    most.Add(after);
    if (apply) site_exposure_[*site] = after;
  }
  return most.Epsilon();
}

double EngineImpl::ServerEpsilonLocked() const {
  MostSpent most(options_.privacy.delta);
  for (const auto& [site, exposure] : site_exposure_) most.Add(exposure);
  return most.Epsilon();
}

void EngineImpl::ReplayServerExposureLocked(const RoundRecord& round,
                                            const std::vector<ParticipationRecord>& summed) {
  if (!options_.privacy.distributed() || round.secagg_json.empty()) return;
  nlohmann::json j = nlohmann::json::parse(round.secagg_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("params")) return;
  const nlohmann::json& params = j["params"];
  secagg::SecAggParams p;
  if (params.contains("ddg") && params["ddg"].is_object()) {
    const nlohmann::json& d = params["ddg"];
    p.ddg = {.clip_norm = d.value("clip_norm", 0.0),
             .granularity = d.value("granularity", 0.0),
             .site_stddev = d.value("stddev", 0.0),
             .beta = d.value("beta", 0.0)};
    if (!(p.ddg.clip_norm > 0 && p.ddg.site_stddev > 0)) p.ddg.granularity = 0;
  }
  const SiteExposure sum = ExposureOfSum(
      options_.privacy.noise_multiplier, p, static_cast<size_t>(global_->spec().NumFloats()),
      static_cast<int32_t>(summed.size()), params.value("dp_min_survivors", 0));
  if (!(sum.inverse_z2 > 0)) return;
  for (const ParticipationRecord& r : summed) {
    SiteExposure& e = site_exposure_[r.client_id];
    e.inverse_z2 += sum.inverse_z2;
    e.offset += sum.offset;
  }
}

}  // namespace fl::server::internal
