// The RDP of one step of the Gaussian mechanism on a fixed-size sample drawn without replacement
// (see Sampling::kFixedSize in fl/aggregation/dp/rdp_accountant.h). Internal to fl_privacy.
#ifndef FL_AGGREGATION_INTERNAL_RDP_FIXED_SIZE_H_
#define FL_AGGREGATION_INTERNAL_RDP_FIXED_SIZE_H_

#include <functional>

namespace fl::aggregation::dp::internal {

// An upper bound on the RDP at order `alpha` (> 1) of one step that draws a uniform subset of a
// fraction q in (0, 1) of the sites without replacement and adds N(0, (z C)^2) to the sum of
// their updates clipped to C, for datasets that differ in one site's update (replaced by none).
// Wang, Balle and Kasiviswanathan 2019 (AISTATS), Theorem 9, for integer orders:
//   (alpha - 1) eps'(alpha) <= log(1 + q^2 C(alpha, 2) min(4 (e^eps(2) - 1), 2 e^eps(2))
//                                   + sum_{j=3..alpha} q^j C(alpha, j) 2 e^((j - 1) eps(j)))
// with eps(j) = j / (2 z^2) the Gaussian's RDP (its RDP at order infinity is infinite, which
// fixes the min(2, .) factors at 2); fractional orders interpolate (alpha - 1) eps'(alpha)
// linearly between the integers around alpha (their Corollary 10: it is convex in alpha). Each
// is capped by the unsampled Gaussian's alpha / (2 z^2), which subsampling cannot exceed (joint
// quasi-convexity of the Renyi divergence); past order 10,000 that cap alone is returned.
double RdpOneStepFixedSize(double q, double z, double alpha);

// The same bound for any base mechanism whose RDP at order a (for datasets that differ in one
// site's input replaced by none) is base_rdp(a), and whose RDP at order infinity is infinite:
// the discrete Gaussian's (fl/aggregation/dp/ddg_accountant.h). base_rdp is called at integer
// orders 2..ceil(alpha) and at alpha itself (the cap).
double RdpOneStepFixedSize(double q, double alpha, const std::function<double(double)>& base_rdp);

}  // namespace fl::aggregation::dp::internal

#endif  // FL_AGGREGATION_INTERNAL_RDP_FIXED_SIZE_H_
