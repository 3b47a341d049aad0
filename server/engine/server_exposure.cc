// Distributed DP's epsilon against the server (RoundRecord::dp_epsilon_server). The server knows
// which sites were in each sum, so against it sampling amplifies nothing: each site has spent, in
// Renyi DP, alpha / 2 times the sum of 1 / z^2 over the sums it was in, z being a sum's noise
// multiplier; the run reports the site that has spent most. A sum of u3 inputs, each noised with
// the stddev planned for n_min survivors (z C / sqrt(n_min)), has z_sum = z sqrt(u3 / n_min).
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "fl/aggregation/dp/rdp_accountant.h"
#include "nlohmann/json.hpp"
#include "server/engine/engine_impl.h"

namespace fl::server::internal {

namespace {

// The Gaussian mechanism's epsilon for `exposure` = sum of 1 / z^2 (the RDP at order a is
// a * exposure / 2, that of one release at z = 1 / sqrt(exposure)).
double EpsilonOfExposure(double exposure, double delta) {
  if (!(exposure > 0)) return 0;
  absl::StatusOr<aggregation::dp::PrivacySpent> spent =
      aggregation::dp::ComputeEpsilon(1.0, 1.0 / std::sqrt(exposure), 1, delta);
  return spent.ok() ? spent->epsilon : 0;
}

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
  const double z =
      SumNoiseMultiplier(options_.privacy.noise_multiplier, static_cast<int32_t>(summed.size()),
                         round.secagg->dp_min_survivors);
  if (!(z > 0)) return 0;
  double most = 0;
  for (const auto& [site, exposure] : site_exposure_) most = std::max(most, exposure);
  for (const std::string* site : summed) {
    auto it = site_exposure_.find(*site);
    const double after = (it == site_exposure_.end() ? 0.0 : it->second) + 1.0 / (z * z);
    most = std::max(most, after);
    if (apply) site_exposure_[*site] = after;
  }
  return EpsilonOfExposure(most, options_.privacy.delta);
}

void EngineImpl::ReplayServerExposureLocked(const RoundRecord& round,
                                            const std::vector<ParticipationRecord>& summed) {
  if (!options_.privacy.distributed() || round.secagg_json.empty()) return;
  nlohmann::json j = nlohmann::json::parse(round.secagg_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("params")) return;
  const int32_t planned_for = j["params"].value("dp_min_survivors", 0);
  const double z = SumNoiseMultiplier(options_.privacy.noise_multiplier,
                                      static_cast<int32_t>(summed.size()), planned_for);
  if (!(z > 0)) return;
  for (const ParticipationRecord& p : summed) site_exposure_[p.client_id] += 1.0 / (z * z);
}

}  // namespace fl::server::internal
