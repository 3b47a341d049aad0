// The kernels of robust aggregation (robust.h), over K updates held apart (rows of the same
// length, typically mapped spill files), computed in column blocks: each block of B parameters
// is read from every update, reduced and written out, and the rows' pages of that block are
// handed back (`release`), so memory stays at the output plus a small tile per thread whatever K
// is. The coordinate-wise kernels copy runs of 512 coordinates of every row into a tile and sort
// all 512 columns at once with a sorting network (Batcher's; its element-wise min and max
// vectorize; K <= 64) or one column at a time. Blocks run on every core; the per-coordinate
// results do not depend on how many, the distances only to float64 rounding.
//
// Unweighted, like the papers and Flower's aggregate_* functions (a site's example count must
// not buy it influence over a robust statistic); only WeightedMeanOfRows weighs.
#ifndef FL_AGGREGATION_INTERNAL_ROBUST_KERNELS_H_
#define FL_AGGREGATION_INTERNAL_ROBUST_KERNELS_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace fl::aggregation::internal {

using Rows = std::vector<std::span<const float>>;
// Called once a block [first, first + count) of every row has been read, by the worker thread
// that read it: calls for different blocks may run at once.
using ReleaseFn = std::function<void(int64_t first, int64_t count)>;

// How many threads the kernels use: n > 0, or 0 for every core (the default). For benchmarks.
void SetKernelThreads(int n);

// Parameters per column block: 16 Ki floats, a multiple of a page of floats. (The coordinate-wise
// kernels sort runs of 512 of a block at a time.)
inline constexpr int64_t kColumnBlock = 16384;

// out[j] = the median of rows[*][j] (the mean of the two middle values when K is even, as
// numpy's median). K >= 1; every row as long as out.
void CoordinateMedian(const Rows& rows, std::span<float> out, const ReleaseFn& release = {});

// out[j] = the mean of rows[*][j] without its `cut` smallest and `cut` largest values (scipy's
// trim_mean with cut = floor(beta K)). 2 cut < K.
void TrimmedMean(const Rows& rows, int cut, std::span<float> out, const ReleaseFn& release = {});

// The K x K matrix (row-major) of squared L2 distances between the rows, in float64.
std::vector<double> SquaredDistances(const Rows& rows, const ReleaseFn& release = {});

// Krum's scores: for each row among `candidates` (indices into the K x K matrix `d2`), the sum of
// its squared distances to its max(1, n - f - 2) nearest other candidates (n: the candidates).
std::vector<double> KrumScores(const std::vector<double>& d2, int k,
                               const std::vector<int>& candidates, int f);

// The `m` candidates of lowest Krum score, ties to the lower index, best first.
std::vector<int> KrumSelect(const std::vector<double>& d2, int k, std::vector<int> candidates,
                            int f, int m);

// Bulyan's selection (El Mhamdi et al. 2018, as Flower): theta = K - 2f times, Krum (with f)
// over the rows not yet selected picks one more. The selected rows' indices, in order.
std::vector<int> BulyanSelect(const std::vector<double>& d2, int k, int f);

// out[j] = sum_i w_i rows[i][j] / sum_i w_i over `pick`.
void WeightedMeanOfRows(const Rows& rows, const std::vector<int>& pick,
                        const std::vector<double>& weights, std::span<float> out,
                        const ReleaseFn& release = {});

// FLTrust's statistics of each row's change from `base`: dots[i] = (row_i - base) . direction,
// norms_sq[i] = ||row_i - base||^2, in float64.
void ChangeDotsAndNorms(const Rows& rows, std::span<const float> base,
                        std::span<const float> direction, std::vector<double>& dots,
                        std::vector<double>& norms_sq, const ReleaseFn& release = {});

// out[j] = base[j] + sum_i coeffs[i] (rows[i][j] - base[j]).
void AddScaledChanges(const Rows& rows, const std::vector<double>& coeffs,
                      std::span<const float> base, std::span<float> out,
                      const ReleaseFn& release = {});

// Bulyan's second step: out[j] = the mean of the `beta` values of rows[pick][j] closest to
// their median (ties: the lower value first).
void MeanClosestToMedian(const Rows& rows, const std::vector<int>& pick, int beta,
                         std::span<float> out, const ReleaseFn& release = {});

}  // namespace fl::aggregation::internal

#endif  // FL_AGGREGATION_INTERNAL_ROBUST_KERNELS_H_
