// The RDP of one step of a mechanism on a fixed-size sample drawn without replacement (see
// Sampling::kFixedSize in fl/aggregation/dp/rdp_accountant.h). Internal to fl_privacy.
#ifndef FL_AGGREGATION_INTERNAL_RDP_FIXED_SIZE_H_
#define FL_AGGREGATION_INTERNAL_RDP_FIXED_SIZE_H_

#include <functional>

namespace fl::aggregation::dp::internal {

// An upper bound on the RDP at order `alpha` (> 1) of one step that draws a uniform subset of a
// fraction q in (0, 1) of the sites without replacement and applies a mechanism to it, for
// datasets that differ in one site's input replaced by none (zero-out). Wang, Balle and
// Kasiviswanathan 2019 (AISTATS), Theorem 9, for integer orders:
//   (alpha - 1) eps'(alpha) <= log(1 + q^2 C(alpha, 2) min(4 (e^eps(2) - 1), 2 e^eps(2))
//                                   + sum_{j=3..alpha} q^j C(alpha, j) 2 e^((j - 1) eps(j)))
// where eps is `replace_one_rdp`: the mechanism's RDP for two inputs that differ in one site's
// input replaced by ANOTHER site's, even though the neighbours differ by one input replaced by
// none. In a fixed-size draw a site that is not drawn leaves its place to another, so the
// proof compares the site's input with another's (the Gaussian's sensitivity is 2C, not C).
// Its RDP at order infinity is taken as infinite, which fixes the min(2, .) factors at 2.
// Fractional orders interpolate (alpha - 1) eps'(alpha) linearly between the integers around
// alpha (their Corollary 10: it is convex in alpha). Each value is capped by `zero_out_rdp` at
// alpha, the unsampled mechanism's RDP for the neighbours themselves, which subsampling cannot
// exceed (joint quasi-convexity of the Renyi divergence, pairing each draw with itself); past
// order 10,000 that cap alone is returned.
double RdpOneStepFixedSize(double q, double alpha,
                           const std::function<double(double)>& replace_one_rdp,
                           const std::function<double(double)>& zero_out_rdp);

// The Gaussian with noise z C on a sum of updates clipped to C: replace_one_rdp(a) = 2 a / z^2
// (sensitivity 2C), zero_out_rdp(a) = a / (2 z^2).
double RdpOneStepFixedSize(double q, double z, double alpha);

}  // namespace fl::aggregation::dp::internal

#endif  // FL_AGGREGATION_INTERNAL_RDP_FIXED_SIZE_H_
