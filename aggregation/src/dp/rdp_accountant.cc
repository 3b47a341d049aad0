#include "fl/aggregation/dp/rdp_accountant.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "aggregation/internal/rdp_fixed_size.h"

namespace fl::aggregation::dp {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// log(exp(x) + exp(y)).
double LogAdd(double x, double y) {
  const double a = std::min(x, y);
  const double b = std::max(x, y);
  if (a == -kInf) return b;
  return std::log1p(std::exp(a - b)) + b;
}

// log(exp(x) - exp(y)) for x >= y; NaN when x < y (the series went negative: a numerical
// failure, reported by the caller).
double LogSub(double x, double y) {
  if (x < y) return std::numeric_limits<double>::quiet_NaN();
  if (y == -kInf) return x;
  if (x == y) return -kInf;
  const double d = x - y;
  if (d > 700) return x;  // expm1 would overflow; exp(y) is negligible next to exp(x)
  return std::log(std::expm1(d)) + y;
}

// log(erfc(x)), accurate where erfc underflows.
double LogErfc(double x) {
  if (x < 20) return std::log(std::erfc(x));
  // Asymptotic series at infinity: erfc(x) ~ exp(-x^2 - .5/x^2 + .625/x^4 ...) / (x sqrt(pi)).
  const double x2 = x * x;
  return -0.5 * std::log(std::numbers::pi) - std::log(x) - x2 - 0.5 / x2 + 0.625 / (x2 * x2) -
         37.0 / 24.0 / (x2 * x2 * x2) + 353.0 / 64.0 / (x2 * x2 * x2 * x2);
}

// log A_alpha for an integer alpha: log sum_i C(alpha, i) q^i (1-q)^(alpha-i) e^((i^2 - i)/2s^2).
double LogAIntAlpha(double q, double sigma, int64_t alpha) {
  double log_a = -kInf;
  const double log_q = std::log(q);
  const double log_1mq = std::log1p(-q);
  const double lg_alpha = std::lgamma(static_cast<double>(alpha) + 1);
  for (int64_t i = 0; i <= alpha; ++i) {
    const double di = static_cast<double>(i);
    const double log_coef = lg_alpha - std::lgamma(di + 1) -
                            std::lgamma(static_cast<double>(alpha - i) + 1) + di * log_q +
                            static_cast<double>(alpha - i) * log_1mq;
    log_a = LogAdd(log_a, log_coef + (di * di - di) / (2 * sigma * sigma));
  }
  return log_a;
}

// log A_alpha for a fractional alpha (Mironov et al. 2019, Sec. 3.3), as Opacus computes it.
absl::StatusOr<double> LogAFracAlpha(double q, double sigma, double alpha) {
  double log_a0 = -kInf;
  double log_a1 = -kInf;
  const double z0 = sigma * sigma * std::log(1 / q - 1) + 0.5;
  const double log_q = std::log(q);
  const double log_1mq = std::log1p(-q);
  // C(alpha, i) kept as log|C| and its sign, updated by C(a, i) = C(a, i-1) (a - i + 1) / i.
  double log_abs_coef = 0;
  bool coef_positive = true;
  for (int64_t i = 0;; ++i) {
    if (i > 0) {
      const double factor = (alpha - static_cast<double>(i) + 1) / static_cast<double>(i);
      log_abs_coef += std::log(std::abs(factor));
      if (factor < 0) coef_positive = !coef_positive;
    }
    const double di = static_cast<double>(i);
    const double j = alpha - di;
    const double log_t0 = log_abs_coef + di * log_q + j * log_1mq;
    const double log_t1 = log_abs_coef + j * log_q + di * log_1mq;
    const double log_e0 = std::log(0.5) + LogErfc((di - z0) / (std::numbers::sqrt2 * sigma));
    const double log_e1 = std::log(0.5) + LogErfc((z0 - j) / (std::numbers::sqrt2 * sigma));
    const double log_s0 = log_t0 + (di * di - di) / (2 * sigma * sigma) + log_e0;
    const double log_s1 = log_t1 + (j * j - j) / (2 * sigma * sigma) + log_e1;
    if (coef_positive) {
      log_a0 = LogAdd(log_a0, log_s0);
      log_a1 = LogAdd(log_a1, log_s1);
    } else {
      log_a0 = LogSub(log_a0, log_s0);
      log_a1 = LogSub(log_a1, log_s1);
    }
    if (std::isnan(log_a0) || std::isnan(log_a1)) {
      return absl::InternalError(absl::StrCat("RDP series for order ", alpha, " with q=", q,
                                              " and z=", sigma, " lost precision at term ", i));
    }
    if (std::max(log_s0, log_s1) < -30) break;
    if (i > 10'000'000) {
      return absl::InternalError(absl::StrCat("RDP series for order ", alpha, " with q=", q,
                                              " and z=", sigma, " did not converge"));
    }
  }
  return LogAdd(log_a0, log_a1);
}

absl::StatusOr<double> RdpOneStep(double q, double sigma, double alpha) {
  if (q == 1.0) return alpha / (2 * sigma * sigma);
  if (alpha == std::floor(alpha) && alpha < 1e9) {
    return LogAIntAlpha(q, sigma, static_cast<int64_t>(alpha)) / (alpha - 1);
  }
  absl::StatusOr<double> log_a = LogAFracAlpha(q, sigma, alpha);
  if (!log_a.ok()) return log_a.status();
  return *log_a / (alpha - 1);
}

absl::Status CheckOrders(std::span<const double> orders) {
  if (orders.empty()) return absl::InvalidArgumentError("the list of RDP orders is empty");
  for (double a : orders) {
    if (!std::isfinite(a) || a <= 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("every RDP order must be a finite number > 1, got ", a));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckMechanism(double q, double z, int64_t steps) {
  if (!(q > 0 && q <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("sampling rate q must be in (0, 1], got ", q));
  }
  if (!std::isfinite(z) || z <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("noise multiplier z must be a finite number > 0, got ", z));
  }
  if (steps < 0) return absl::InvalidArgumentError(absl::StrCat("steps must be >= 0, got ", steps));
  return absl::OkStatus();
}

absl::Status CheckDelta(double delta) {
  if (!(delta > 0 && delta < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("delta must be in (0, 1), got ", delta));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<double> DefaultRdpOrders() {
  std::vector<double> orders;
  for (int x = 1; x < 100; ++x) orders.push_back(1 + x / 10.0);
  for (int a = 12; a < 64; ++a) orders.push_back(a);
  return orders;
}

absl::StatusOr<std::vector<double>> ComputeRdp(double sampling_rate, double noise_multiplier,
                                               int64_t steps, std::span<const double> orders,
                                               Sampling sampling) {
  if (absl::Status s = CheckMechanism(sampling_rate, noise_multiplier, steps); !s.ok()) return s;
  if (absl::Status s = CheckOrders(orders); !s.ok()) return s;
  std::vector<double> rdp;
  rdp.reserve(orders.size());
  for (double a : orders) {
    absl::StatusOr<double> r = sampling == Sampling::kFixedSize
                                   ? absl::StatusOr<double>(internal::RdpOneStepFixedSize(
                                         sampling_rate, noise_multiplier, a))
                                   : RdpOneStep(sampling_rate, noise_multiplier, a);
    if (!r.ok()) return r.status();
    rdp.push_back(*r * static_cast<double>(steps));
  }
  return rdp;
}

absl::StatusOr<PrivacySpent> RdpToEpsilon(std::span<const double> orders,
                                          std::span<const double> rdp, double delta) {
  if (absl::Status s = CheckOrders(orders); !s.ok()) return s;
  if (orders.size() != rdp.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("got ", orders.size(), " RDP orders but ", rdp.size(), " RDP values"));
  }
  if (absl::Status s = CheckDelta(delta); !s.ok()) return s;
  PrivacySpent best{kInf, orders[0]};
  for (size_t i = 0; i < orders.size(); ++i) {
    const double a = orders[i];
    const double r = rdp[i];
    if (std::isnan(r) || r < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("RDP value at order ", a, " must be >= 0, got ", r));
    }
    const double eps = r - (std::log(delta) + std::log(a)) / (a - 1) + std::log((a - 1) / a);
    if (eps < best.epsilon) best = {eps, a};
  }
  best.epsilon = std::max(0.0, best.epsilon);
  return best;
}

absl::StatusOr<PrivacySpent> ComputeEpsilon(double sampling_rate, double noise_multiplier,
                                            int64_t steps, double delta,
                                            std::span<const double> orders, Sampling sampling) {
  std::vector<double> defaults;
  if (orders.empty()) {
    defaults = DefaultRdpOrders();
    orders = defaults;
  }
  if (absl::Status s = CheckDelta(delta); !s.ok()) return s;
  absl::StatusOr<std::vector<double>> rdp =
      ComputeRdp(sampling_rate, noise_multiplier, steps, orders, sampling);
  if (!rdp.ok()) return rdp.status();
  return RdpToEpsilon(orders, *rdp, delta);
}

absl::StatusOr<double> NoiseMultiplierForEpsilon(double target_epsilon, double sampling_rate,
                                                 int64_t steps, double delta,
                                                 std::span<const double> orders,
                                                 double relative_tolerance) {
  if (!std::isfinite(target_epsilon) || target_epsilon <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("target epsilon must be a finite number > 0, got ", target_epsilon));
  }
  if (steps < 1) return absl::InvalidArgumentError(absl::StrCat("steps must be >= 1, got ", steps));
  if (!(relative_tolerance > 0 && relative_tolerance <= 0.1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("relative tolerance must be in (0, 0.1], got ", relative_tolerance));
  }
  std::vector<double> defaults;
  if (orders.empty()) {
    defaults = DefaultRdpOrders();
    orders = defaults;
  }
  auto eps_at = [&](double z) -> absl::StatusOr<double> {
    absl::StatusOr<PrivacySpent> spent = ComputeEpsilon(sampling_rate, z, steps, delta, orders);
    if (!spent.ok()) return spent.status();
    return spent->epsilon;
  };
  // Validate the arguments once through ComputeEpsilon.
  absl::StatusOr<double> eps_hi = eps_at(1.0);
  if (!eps_hi.ok()) return eps_hi.status();
  // As z grows, the RDP goes to 0 and epsilon to the floor min_a -(ln delta + ln a)/(a-1) +
  // ln((a-1)/a), which no z goes below.
  std::vector<double> zeros(orders.size(), 0.0);
  absl::StatusOr<PrivacySpent> floor = RdpToEpsilon(orders, zeros, delta);
  if (!floor.ok()) return floor.status();
  if (target_epsilon <= floor->epsilon) {
    return absl::OutOfRangeError(absl::StrCat(
        "target epsilon ", target_epsilon, " is not reachable with delta ", delta,
        ": with these RDP orders (largest ", *std::max_element(orders.begin(), orders.end()),
        ") epsilon never falls below ", floor->epsilon, "; add larger orders or raise delta"));
  }
  double hi = 1.0;
  double lo = 0.0;
  while (*eps_hi > target_epsilon) {
    lo = hi;
    hi *= 2;
    if (hi > 1e12) {
      return absl::OutOfRangeError(
          absl::StrCat("no noise multiplier up to 1e12 reaches epsilon ", target_epsilon));
    }
    eps_hi = eps_at(hi);
    if (!eps_hi.ok()) return eps_hi.status();
  }
  // Invariant: eps(hi) <= target, and eps(lo) > target (lo = 0 stands for "no noise").
  while (hi - lo > relative_tolerance * hi) {
    const double mid = 0.5 * (lo + hi);
    absl::StatusOr<double> eps_mid = eps_at(mid);
    if (!eps_mid.ok()) return eps_mid.status();
    if (*eps_mid <= target_epsilon) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return hi;
}

RdpAccountant::RdpAccountant(std::vector<double> orders)
    : orders_(std::move(orders)), rdp_(orders_.size(), 0.0) {}

absl::StatusOr<RdpAccountant> RdpAccountant::Create(std::vector<double> orders) {
  if (orders.empty()) orders = DefaultRdpOrders();
  if (absl::Status s = CheckOrders(orders); !s.ok()) return s;
  return RdpAccountant(std::move(orders));
}

absl::Status RdpAccountant::AddSteps(double sampling_rate, double noise_multiplier, int64_t steps,
                                     Sampling sampling) {
  absl::StatusOr<std::vector<double>> rdp =
      ComputeRdp(sampling_rate, noise_multiplier, steps, orders_, sampling);
  if (!rdp.ok()) return rdp.status();
  for (size_t i = 0; i < rdp_.size(); ++i) rdp_[i] += (*rdp)[i];
  total_steps_ += steps;
  return absl::OkStatus();
}

absl::StatusOr<PrivacySpent> RdpAccountant::Spent(double delta) const {
  return RdpToEpsilon(orders_, rdp_, delta);
}

absl::StatusOr<PrivacySpent> RdpAccountant::SpentAfter(double sampling_rate,
                                                       double noise_multiplier, int64_t steps,
                                                       double delta, Sampling sampling) const {
  absl::StatusOr<std::vector<double>> rdp =
      ComputeRdp(sampling_rate, noise_multiplier, steps, orders_, sampling);
  if (!rdp.ok()) return rdp.status();
  for (size_t i = 0; i < rdp_.size(); ++i) (*rdp)[i] += rdp_[i];
  return RdpToEpsilon(orders_, *rdp, delta);
}

namespace {

absl::Status CheckRdpVector(std::span<const double> rdp, size_t orders) {
  if (rdp.size() != orders) {
    return absl::InvalidArgumentError(
        absl::StrCat("got ", rdp.size(), " RDP values for ", orders, " orders"));
  }
  for (double r : rdp) {
    if (std::isnan(r) || r < 0) {
      return absl::InvalidArgumentError(absl::StrCat("RDP values must be >= 0, got ", r));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RdpAccountant::AddRdp(std::span<const double> rdp) {
  if (absl::Status s = CheckRdpVector(rdp, orders_.size()); !s.ok()) return s;
  for (size_t i = 0; i < rdp_.size(); ++i) rdp_[i] += rdp[i];
  ++total_steps_;
  return absl::OkStatus();
}

absl::StatusOr<PrivacySpent> RdpAccountant::SpentAfterRdp(std::span<const double> rdp,
                                                          double delta) const {
  if (absl::Status s = CheckRdpVector(rdp, orders_.size()); !s.ok()) return s;
  std::vector<double> after = rdp_;
  for (size_t i = 0; i < after.size(); ++i) after[i] += rdp[i];
  return RdpToEpsilon(orders_, after, delta);
}

}  // namespace fl::aggregation::dp
