// The noise a site enforces in secure rounds with distributed DP (SiteLimits, fl/client/client.h):
// the worst-case noise multiplier of a sum against the server, and the epsilon the site spends
// against it over a run, composed in Renyi DP without amplification (the server knows who took
// part).
#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fl/aggregation/dp/rdp_accountant.h"
#include "fl/client/client.h"

namespace fl::client {

namespace {

// The fewest inputs a sum of this round can hold once this site's limit is counted, and how many
// of them are honest at worst (this site's own at least).
int32_t LeastSum(const SiteLimits& limits, const SecureRoundNoise& round) {
  return std::max(limits.min_sum_size, round.threshold + 1);
}
int32_t LeastHonest(const SiteLimits& limits, const SecureRoundNoise& round) {
  return std::max(1, LeastSum(limits, round) - limits.colluding_sites);
}

absl::Status Refuse(const std::string& what) { return absl::PermissionDeniedError(what); }

}  // namespace

double WorstCaseNoiseMultiplier(const SiteLimits& limits, const SecureRoundNoise& round) {
  if (!(round.clip_norm > 0) || !(round.noise_stddev > 0)) return 0;
  return round.noise_stddev * std::sqrt(static_cast<double>(LeastHonest(limits, round))) /
         round.clip_norm;
}

absl::Status CheckSecureRoundLimits(const SiteLimits& limits, const SecureRoundNoise& round,
                                    std::span<const double> earlier) {
  if (limits.min_sum_size < 0 || limits.colluding_sites < 0 ||
      !(limits.min_noise_multiplier >= 0) || !(limits.max_epsilon >= 0)) {
    return absl::InvalidArgumentError(
        "limits.min_sum_size, colluding_sites, min_noise_multiplier and max_epsilon must be >= 0");
  }
  if (limits.max_epsilon > 0 && !(limits.epsilon_delta > 0 && limits.epsilon_delta < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("limits.epsilon_delta must be in (0, 1), got ", limits.epsilon_delta));
  }
  if (limits.min_sum_size > round.num_sites) {
    return Refuse(absl::StrCat("the round has ", round.num_sites,
                               " sites; this site takes part only in sums of at least ",
                               limits.min_sum_size, " (limits.min_sum_size)"));
  }
  if (limits.min_noise_multiplier <= 0 && limits.max_epsilon <= 0) return absl::OkStatus();
  const double z = WorstCaseNoiseMultiplier(limits, round);
  const std::string sum = absl::StrCat("a sum of ", LeastSum(limits, round), " inputs with ",
                                       limits.colluding_sites, " colluding");
  if (z <= 0) {
    return Refuse(absl::StrCat(
        "the round adds no distributed noise (clip norm ", round.clip_norm, ", noise stddev ",
        round.noise_stddev, "); this site requires ",
        limits.min_noise_multiplier > 0
            ? absl::StrCat("a noise multiplier of at least ", limits.min_noise_multiplier,
                           " (limits.min_noise_multiplier)")
            : absl::StrCat("epsilon at most ", limits.max_epsilon, " (limits.max_epsilon)")));
  }
  if (z < limits.min_noise_multiplier) {
    return Refuse(absl::StrCat("the round's noise gives a noise multiplier of ", z, " for ", sum,
                               "; this site requires at least ", limits.min_noise_multiplier,
                               " (limits.min_noise_multiplier)"));
  }
  if (limits.max_epsilon <= 0) return absl::OkStatus();
  absl::StatusOr<aggregation::dp::RdpAccountant> accountant =
      aggregation::dp::RdpAccountant::Create();
  if (!accountant.ok()) return accountant.status();
  for (double earlier_z : earlier) {
    if (absl::Status s = accountant->AddSteps(1.0, earlier_z); !s.ok()) return s;
  }
  absl::StatusOr<aggregation::dp::PrivacySpent> after =
      accountant->SpentAfter(1.0, z, 1, limits.epsilon_delta);
  if (!after.ok()) return after.status();
  if (after->epsilon > limits.max_epsilon) {
    return Refuse(absl::StrCat("this round (noise multiplier ", z, " for ", sum,
                               ") would bring this site's epsilon against the server to ",
                               after->epsilon, " (delta ", limits.epsilon_delta, ") after ",
                               earlier.size() + 1, " sums in this run; it allows at most ",
                               limits.max_epsilon, " (limits.max_epsilon)"));
  }
  return absl::OkStatus();
}

}  // namespace fl::client
