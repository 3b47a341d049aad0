// Accounting for the distributed discrete Gaussian (Kairouz, Liu and Steinke 2021, "The
// Distributed Discrete Gaussian Mechanism for Federated Learning with Secure Aggregation"): each
// of n sites adds N_Z(0, sigma^2) to its integer vector, and the server sees only the sum.
//
// The sum of n discrete Gaussians is not a discrete Gaussian, but close to one: their Theorem 1
// bounds the gap by tau = 10 sum_{k=1}^{n-1} exp(-2 pi^2 sigma^2 k / (k + 1)), and their
// Proposition 14 gives the RDP of one release at order a, for a change of L2 norm D2 and L1 norm
// D1 in the integer vector of dimension d, with s = sqrt(n) sigma:
//   min( a/2 (D2/s)^2 + tau d,
//        a/2 ((D2/s)^2 + 2 (D1/s) tau + tau^2 d),
//        a/2 (D2/s + sqrt(d) tau)^2 ).
// With sigma of a few units tau is below 1e-30 and this is the Gaussian's a D2^2 / 2 s^2.
//
// The sensitivities are those the encoding enforces (fl/aggregation/secagg/ddg_encoding.h): a
// site's update clipped to L2 norm C, scaled by 1/gamma, rotated (norm kept) and rounded at
// random to integers, a rounding kept only when its norm stays within RoundedL2Bound. The
// neighbouring relation is zero-out, as for the Gaussian (rdp_accountant.h): one site's vector
// replaced by none. Free functions; thread-safe.
#ifndef FL_AGGREGATION_DP_DDG_ACCOUNTANT_H_
#define FL_AGGREGATION_DP_DDG_ACCOUNTANT_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "fl/aggregation/dp/rdp_accountant.h"

namespace fl::aggregation::dp {

// The L2 norm a vector of norm `scaled_norm` (already divided by gamma) may have after
// conditional randomized rounding in dimension d with parameter beta in [0, 1) (their Theorem 1
// with Proposition 22): min(c + sqrt(d), sqrt(c^2 + d/4 + sqrt(2 ln(1/beta)) (c + sqrt(d)/2)));
// beta = 0 keeps every rounding and gives c + sqrt(d).
double RoundedL2Bound(double scaled_norm, double beta, int64_t dimension);

// The L1 norm of an integer vector of L2 norm at most l2 in dimension d: l2 min(sqrt(d), l2).
double RoundedL1Bound(double rounded_l2, int64_t dimension);

// One release of a sum of discrete Gaussians.
struct DdgRelease {
  double l2_sensitivity = 0;  // D2, in integer units
  double l1_sensitivity = 0;  // D1, in integer units
  double site_stddev = 0;     // sigma of each site's noise, in integer units
  int64_t num_sites = 0;      // n whose noise the sum carries
  int64_t dimension = 0;      // d, the integer vector's length
};

// tau of Theorem 1 for n sites at sigma (0 for n = 1).
double DdgTau(double site_stddev, int64_t num_sites);

// Proposition 14's RDP at order a > 1 of one release, given tau = DdgTau(its sigma, its n).
double DdgRdp(const DdgRelease& release, double tau, double order);

// The RDP of `steps` releases, each on a fixed-size draw of a fraction q of the sites (the round
// draw; q = 1: everyone), at each order: Wang, Balle and Kasiviswanathan 2019's bound over
// DdgRdp (as Sampling::kFixedSize does over the Gaussian's). INVALID_ARGUMENT, naming the value,
// for q outside (0, 1], steps < 0, an order not a finite number > 1, or a release whose
// sensitivities, stddev, site count or dimension are not positive.
absl::StatusOr<std::vector<double>> ComputeDdgRdp(const DdgRelease& release, double sampling_rate,
                                                  int64_t steps, std::span<const double> orders);

}  // namespace fl::aggregation::dp

#endif  // FL_AGGREGATION_DP_DDG_ACCOUNTANT_H_
