// The noise a site enforces in secure rounds with distributed DP (SiteLimits, fl/client/client.h):
// its input's noise multiplier against the server, and the epsilon it spends against the server
// over the inputs it masks, composed in Renyi DP without amplification (the server knows who took
// part).
#include <span>
#include <string>

#include "absl/strings/str_cat.h"
#include "fl/aggregation/dp/rdp_accountant.h"
#include "fl/aggregation/secagg/params.h"
#include "fl/client/client.h"

namespace fl::client {

double WorstCaseNoiseMultiplier(const SecureRoundNoise& round) {
  if (!(round.clip_norm > 0) || !(round.noise_stddev > 0)) return 0;
  return round.noise_stddev / round.clip_norm;
}

absl::Status CheckSecureRoundLimits(const SiteLimits& limits, const SecureRoundNoise& round,
                                    std::span<const double> earlier) {
  if (limits.min_sum_size < 0 || !(limits.min_noise_multiplier >= 0) ||
      !(limits.max_epsilon >= 0)) {
    return absl::InvalidArgumentError(
        "limits.min_sum_size, min_noise_multiplier and max_epsilon must be >= 0");
  }
  if (!(limits.min_corrupt_fraction >= 0 && limits.min_corrupt_fraction < 0.5)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "limits.min_corrupt_fraction must be in [0, 0.5), got ", limits.min_corrupt_fraction));
  }
  if (round.corrupt_fraction < limits.min_corrupt_fraction) {
    return absl::PermissionDeniedError(
        absl::StrCat("the round's consistency check holds with up to ", round.corrupt_fraction,
                     " of its sites colluding with the server; this site requires at least ",
                     limits.min_corrupt_fraction, " (limits.min_corrupt_fraction)"));
  }
  if (limits.grinding_bits < 0 || limits.grinding_bits > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("limits.grinding_bits must be in [0, 100], got ", limits.grinding_bits));
  }
  if (round.num_neighbors > 0) {
    // The server's graph, judged as the server's defaults are (Bell et al.'s exposure).
    secagg::SecAggParams graph;
    graph.num_clients = round.num_sites;
    graph.num_neighbors = round.num_neighbors;
    graph.threshold = round.threshold;
    graph.corrupt_fraction = round.corrupt_fraction;
    const double risk = secagg::SecAggRiskOf(graph, 0).privacy;
    const double target = secagg::PrivacyRiskTarget(limits.grinding_bits);
    if (risk > target) {
      return absl::PermissionDeniedError(absl::StrCat(
          "the round's graph (", round.num_neighbors, " neighbours, threshold ", round.threshold,
          ", ", round.num_sites, " sites) leaves some site with that many colluding neighbours ",
          "(corrupt_fraction ", round.corrupt_fraction, ") with probability ", risk,
          "; this site accepts at most ", target, " (2^-", 40 + limits.grinding_bits,
          ", limits.grinding_bits ", limits.grinding_bits, ")"));
    }
  }
  if (limits.max_epsilon > 0 && !(limits.epsilon_delta > 0 && limits.epsilon_delta < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("limits.epsilon_delta must be in (0, 1), got ", limits.epsilon_delta));
  }
  if (limits.min_sum_size > round.num_sites) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the round has ", round.num_sites, " sites; this site takes part only in sums of at least ",
        limits.min_sum_size, " (limits.min_sum_size)"));
  }
  if (limits.min_noise_multiplier <= 0 && limits.max_epsilon <= 0) return absl::OkStatus();
  const double z = WorstCaseNoiseMultiplier(round);
  if (z <= 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the round adds no distributed noise (clip norm ", round.clip_norm, ", noise stddev ",
        round.noise_stddev, "); this site requires ",
        limits.min_noise_multiplier > 0
            ? absl::StrCat("a noise multiplier of at least ", limits.min_noise_multiplier,
                           " (limits.min_noise_multiplier)")
            : absl::StrCat("epsilon at most ", limits.max_epsilon, " (limits.max_epsilon)")));
  }
  if (z < limits.min_noise_multiplier) {
    return absl::PermissionDeniedError(
        absl::StrCat("the round's noise gives this site's input a noise multiplier of ", z,
                     " against the server (stddev ", round.noise_stddev, " / clip norm ",
                     round.clip_norm, "); this site requires at least ",
                     limits.min_noise_multiplier, " (limits.min_noise_multiplier)"));
  }
  if (limits.max_epsilon <= 0) return absl::OkStatus();
  absl::StatusOr<aggregation::dp::RdpAccountant> accountant =
      aggregation::dp::RdpAccountant::Create();
  if (!accountant.ok()) return accountant.status();
  for (double earlier_z : earlier) {
    if (!(earlier_z > 0)) {
      // An input masked without distributed noise (before the budget was set, say, and kept in
      // the ledger): against the server its epsilon is unbounded.
      return absl::PermissionDeniedError(
          "this site already masked an input without distributed noise, so its epsilon against "
          "the server is unbounded; limits.max_epsilon declines every round (see "
          "limits.privacy_ledger)");
    }
    if (absl::Status s = accountant->AddSteps(1.0, earlier_z); !s.ok()) return s;
  }
  absl::StatusOr<aggregation::dp::PrivacySpent> after =
      accountant->SpentAfter(1.0, z, 1, limits.epsilon_delta);
  if (!after.ok()) return after.status();
  if (after->epsilon > limits.max_epsilon) {
    return absl::PermissionDeniedError(absl::StrCat(
        "this round (noise multiplier ", z,
        ") would bring this site's epsilon against the server to ", after->epsilon, " (delta ",
        limits.epsilon_delta, ") after ", earlier.size() + 1, " masked inputs; it allows at most ",
        limits.max_epsilon, " (limits.max_epsilon)"));
  }
  return absl::OkStatus();
}

}  // namespace fl::client
