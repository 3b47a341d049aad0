// The default k and t (DefaultSecAggParams) next to Bell et al. 2020's way of choosing them.
//
// Bell et al. bound a site's colluding and surviving neighbours with Hoeffding's inequality, which
// holds for a uniform draw without replacement (Hoeffding 1963, section 6): with k neighbours drawn
// from n - 1 peers of which a fraction p collude, P[X >= k (p + s)] <= exp(-2 k s^2). Their table
// is not at hand here; what is checked instead, over a grid of (n, gamma, delta):
//   - SecAggRiskOf's tails equal an independent term-by-term sum in long double (so neither an
//     under- nor an overestimate passes), and never exceed Hoeffding's bounds;
//   - our k is never more than the least k whose Hoeffding bounds meet the same targets (2^-40
//     for privacy over the honest sites, 2^-20 for a stall), in our risk model: colluders that
//     withhold shares are planned for in delta, so a site stalls with fewer than t of the
//     n - 1 - D live peers among its neighbours (a model that took honest-and-live, 1 - gamma -
//     delta, would need more neighbours at high gamma);
//   - their headline point, 10^4 sites with 5 % corrupt and 5 % dropping (each site talks to 3 %
//     of the others, papers.md), needs no more neighbours with our defaults. Their 3 % also buys
//     a guarantee we do not claim: that each input is summed with at least 5,000 others.
// The table of both k is printed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "fl/aggregation/secagg/params.h"
#include "gtest/gtest.h"

namespace fl::secagg {
namespace {

// Hoeffding's bound on P[X >= threshold] for X the number of marked among k drawn without
// replacement from a population whose marked fraction is p (1 when the threshold is not above
// the mean).
double HoeffdingUpper(int k, double p, int threshold) {
  const double s = static_cast<double>(threshold) / k - p;
  return s > 0 ? std::exp(-2.0 * k * s * s) : 1.0;
}

// The same for P[X <= threshold].
double HoeffdingLower(int k, double p, int threshold) {
  const double s = p - static_cast<double>(threshold) / k;
  return s > 0 ? std::exp(-2.0 * k * s * s) : 1.0;
}

// P[lo <= X <= hi] for X ~ Hypergeometric(population, marked, draws), term by term.
double ExactTail(int64_t population, int64_t marked, int64_t draws, int64_t lo, int64_t hi) {
  auto log_choose = [](int64_t a, int64_t b) -> long double {
    return std::lgammal(a + 1.0L) - std::lgammal(b + 1.0L) - std::lgammal(a - b + 1.0L);
  };
  long double sum = 0;
  for (int64_t x = std::max<int64_t>(lo, 0); x <= std::min(hi, draws); ++x) {
    if (x > marked || draws - x > population - marked) continue;
    sum += std::exp(log_choose(marked, x) + log_choose(population - marked, draws - x) -
                    log_choose(population, draws));
  }
  return static_cast<double>(sum);
}

// Relative agreement, or both below 1e-300.
bool Agree(double a, double b) {
  if (std::abs(a) < 1e-300 && std::abs(b) < 1e-300) return true;
  return std::abs(a - b) <= 1e-6 * std::max(std::abs(a), std::abs(b));
}

struct Point {
  int n;
  double gamma;
  double delta;
};

struct Row {
  Point point;
  int k = 0;
  int t = 0;
  int hoeffding_k = 0;  // 0: none below every pair
};

// The least even k (n k even, k <= n - 1) with a t in (k/2, k] whose Hoeffding bounds keep
// privacy over the n - C honest sites at kMaxPrivacyRisk and a stall over all n at kMaxStallRisk.
int HoeffdingK(const Point& pt) {
  const int n = pt.n;
  const int corrupt = static_cast<int>(std::floor(pt.gamma * n));
  const int dropped = static_cast<int>(std::floor(pt.delta * n));
  const double p_corrupt = static_cast<double>(corrupt) / (n - 1);
  const double p_live = static_cast<double>(n - 1 - dropped) / (n - 1);
  for (int k = 2; k <= n - 1; ++k) {
    if ((static_cast<long long>(n) * k) % 2 != 0) continue;
    for (int t = k / 2 + 1; t <= k; ++t) {
      const double privacy = (n - corrupt) * HoeffdingUpper(k, p_corrupt, t);
      const double stall = n * HoeffdingLower(k, p_live, t - 1);
      if (privacy <= kMaxPrivacyRisk && stall <= kMaxStallRisk) return k;
    }
  }
  return 0;
}

const std::vector<Point>& Grid() {
  static const std::vector<Point> grid = {
      {100, 0.05, 0.05}, {100, 1.0 / 3, 0.3},  {1000, 0.05, 0.05},
      {1000, 0.1, 0.1},  {1000, 1.0 / 3, 0.3}, {10000, 0.05, 0.05},
      {10000, 0.1, 0.1}, {10000, 0.2, 0.2},    {10000, 1.0 / 3, 0.1}};
  return grid;
}

TEST(SecAggBellTest, ExactRisksStayUnderHoeffdingsBoundsAndKUnderTheirs) {
  std::vector<Row> rows;
  for (const Point& pt : Grid()) {
    SCOPED_TRACE(std::to_string(pt.n) + " sites, gamma " + std::to_string(pt.gamma) + ", delta " +
                 std::to_string(pt.delta));
    absl::StatusOr<SecAggParams> p = DefaultSecAggParams(pt.n, 64, 1000, pt.gamma, pt.delta);
    ASSERT_TRUE(p.ok()) << p.status();
    const int n = pt.n;
    const int k = p->num_neighbors;
    const int t = p->threshold;
    const int corrupt = static_cast<int>(std::floor(pt.gamma * n));
    const int dropped = static_cast<int>(std::floor(pt.delta * n));
    const SecAggRisk risk = SecAggRiskOf(*p, pt.delta);
    // The exact tails against Hoeffding's, at the chosen (k, t) and at neighbouring thresholds.
    for (int tt : {t - 1, t, t + 1}) {
      if (tt <= k / 2 || tt > k) continue;
      SecAggParams q = *p;
      q.threshold = tt;
      const SecAggRisk r = SecAggRiskOf(q, pt.delta);
      const double exposed = ExactTail(n - 1, corrupt, k, tt, k);
      const double stalled = ExactTail(n - 1, n - 1 - dropped, k, 0, tt - 1);
      EXPECT_TRUE(Agree(r.exposed_site, exposed)) << r.exposed_site << " vs " << exposed;
      EXPECT_TRUE(Agree(r.stalled_site, stalled)) << r.stalled_site << " vs " << stalled;
      EXPECT_LE(r.exposed_site,
                HoeffdingUpper(k, static_cast<double>(corrupt) / (n - 1), tt) * (1 + 1e-9));
      EXPECT_LE(
          r.stalled_site,
          HoeffdingLower(k, static_cast<double>(n - 1 - dropped) / (n - 1), tt - 1) * (1 + 1e-9));
    }
    EXPECT_LE(risk.privacy, kMaxPrivacyRisk);
    Row row{pt, k, t, HoeffdingK(pt)};
    if (row.hoeffding_k > 0) {
      EXPECT_LE(k, row.hoeffding_k) << "more neighbours than Hoeffding's bounds need";
    }
    rows.push_back(row);
  }
  std::printf("%8s %7s %7s | %10s %10s | %12s\n", "n", "gamma", "delta", "k (ours)", "t (ours)",
              "k (Hoeffding)");
  for (const Row& r : rows) {
    std::printf("%8d %7.3f %7.3f | %10d %10d | %12d\n", r.point.n, r.point.gamma, r.point.delta,
                r.k, r.t, r.hoeffding_k);
  }
}

// Bell et al.'s headline: 10^4 sites, 5 % corrupt, 5 % dropping, each talking to 3 % of them.
TEST(SecAggBellTest, TheirHeadlinePointNeedsNoMoreThanThreePercent) {
  absl::StatusOr<SecAggParams> p = DefaultSecAggParams(10000, 64, 1000, 0.05, 0.05);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_LE(p->num_neighbors, 300);
  EXPECT_LE(SecAggRiskOf(*p, 0.05).privacy, kMaxPrivacyRisk);
  EXPECT_LE(SecAggRiskOf(*p, 0.05).stall, kMaxStallRisk);
}

}  // namespace
}  // namespace fl::secagg
