#include "fl/aggregation/secagg/params.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"

namespace fl::secagg {
namespace {

// n * w * (2^b - 1) < 2^m, computed exactly in 128 bits.
bool SumFits(int n, uint32_t max_weight, int bits, int modulus_bits) {
  const unsigned __int128 top = (static_cast<unsigned __int128>(1) << bits) - 1;
  const unsigned __int128 worst = top * static_cast<unsigned __int128>(n) * max_weight;
  return worst < (static_cast<unsigned __int128>(1) << modulus_bits);
}

// lgamma_r: glibc's lgamma writes the global signgam, a race when rounds of two runs start at once.
double LogGamma(double x) {
  int sign = 0;
  return lgamma_r(x, &sign);
}

double LogChoose(int64_t a, int64_t b) {
  return LogGamma(a + 1.0) - LogGamma(b + 1.0) - LogGamma(a - b + 1.0);
}

// P[lo <= X <= hi] for X ~ Hypergeometric(population, marked, draws), summed in log space so that
// tails down to 1e-300 keep their digits.
double HypergeometricRange(int64_t population, int64_t marked, int64_t draws, int64_t lo,
                           int64_t hi) {
  lo = std::max({lo, int64_t{0}, draws - (population - marked)});
  hi = std::min({hi, draws, marked});
  if (lo > hi) return 0;
  const double denominator = LogChoose(population, draws);
  std::vector<double> logs;
  logs.reserve(static_cast<size_t>(hi - lo + 1));
  double top = -std::numeric_limits<double>::infinity();
  for (int64_t x = lo; x <= hi; ++x) {
    logs.push_back(LogChoose(marked, x) + LogChoose(population - marked, draws - x) - denominator);
    top = std::max(top, logs.back());
  }
  double sum = 0;
  for (double l : logs) sum += std::exp(l - top);
  return std::min(1.0, std::exp(top) * sum);
}

int Colluding(int n, double corrupt_fraction) {
  return static_cast<int>(std::floor(corrupt_fraction * n));
}

// A valid degree for n clients: at most n - 1, and n * k even.
int ValidDegree(int n, int k) {
  k = std::min(k, n - 1);
  if ((static_cast<int64_t>(n) * k) % 2 != 0) --k;
  return k;
}

}  // namespace

SecAggRisk SecAggRiskOf(const SecAggParams& p, double dropout_fraction) {
  const int n = p.num_clients;
  const int k = p.num_neighbors;
  const int t = p.threshold;
  const int colluding = Colluding(n, p.corrupt_fraction);
  const int dropped = static_cast<int>(std::floor(dropout_fraction * n));
  SecAggRisk r;
  if (n < 2 || k < 1 || t < 1) return r;
  r.exposed_site = HypergeometricRange(n - 1, colluding, k, t, k);
  r.privacy = std::min(1.0, (n - colluding) * r.exposed_site);
  const int live_peers = std::max(0, n - 1 - dropped);
  r.stalled_site = HypergeometricRange(n - 1, live_peers, k, 0, t - 1);
  r.stall = std::min(1.0, n * r.stalled_site);
  return r;
}

double PrivacyRiskTarget(int grinding_bits) {
  return std::ldexp(kMaxPrivacyRisk, -std::max(0, grinding_bits));
}

std::optional<int> LeastPrivateThreshold(const SecAggParams& params, double max_privacy_risk) {
  // The risk falls as t grows: the least t that keeps it is found by bisection.
  SecAggParams p = params;
  int lo = p.num_neighbors / 2 + 1;
  int hi = p.num_neighbors;
  p.threshold = hi;
  if (SecAggRiskOf(p, 0).privacy > max_privacy_risk) return std::nullopt;
  while (lo < hi) {
    p.threshold = lo + (hi - lo) / 2;
    if (SecAggRiskOf(p, 0).privacy <= max_privacy_risk) {
      hi = p.threshold;
    } else {
      lo = p.threshold + 1;
    }
  }
  return lo;
}

absl::StatusOr<SecAggParams> DefaultSecAggParams(int num_clients, int modulus_bits,
                                                 uint32_t max_weight, double corrupt_fraction,
                                                 double dropout_fraction, double max_privacy_risk) {
  if (num_clients < 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "secure aggregation needs at least 3 clients (the sum of 2 reveals each), got ",
        num_clients));
  }
  if (!(corrupt_fraction >= 0 && corrupt_fraction < 0.5) ||
      !(dropout_fraction >= 0 && dropout_fraction < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("corrupt_fraction must be in [0, 0.5) and dropout_fraction in [0, 1), got ",
                     corrupt_fraction, " and ", dropout_fraction));
  }
  SecAggParams p;
  p.num_clients = num_clients;
  p.modulus_bits = modulus_bits;
  p.max_weight = max_weight;
  p.corrupt_fraction = corrupt_fraction;
  const int n = num_clients;
  int k = n - 1;
  if (n > 16) {
    k = static_cast<int>(std::ceil(3.0 * std::log2(static_cast<double>(n))));
    if (k % 2 != 0) ++k;
  }
  // The least k (from Bell et al.'s O(log n)) whose least private t also keeps the round live;
  // each step about a quarter more, up to every pair.
  for (k = ValidDegree(n, k);; k = ValidDegree(n, std::max(k + 2, k + k / 4))) {
    p.num_neighbors = k;
    std::optional<int> t = LeastPrivateThreshold(p, max_privacy_risk);
    if (t.has_value()) {
      p.threshold = *t;
      if (SecAggRiskOf(p, dropout_fraction).stall <= kMaxStallRisk) break;
    }
    if (k == ValidDegree(n, n - 1)) {
      // Every pair: t = k/2 + 1 exceeds the colluders for any gamma < 1/2, so privacy holds;
      // if the dropouts planned for still stall it, that is a liveness risk (the round fails
      // and is retried), reported by SecAggRiskOf, not a reason to refuse.
      if (t.has_value()) break;
      return absl::InvalidArgumentError(absl::StrCat(
          "no threshold keeps the privacy risk of ", n, " clients with ",
          Colluding(n, corrupt_fraction), " colluding (corrupt_fraction ", corrupt_fraction,
          ") at most ", max_privacy_risk, ", even with every pair as neighbours"));
    }
  }

  p.quantization_bits = 0;
  if (modulus_bits == 32 || modulus_bits == 64) {
    for (int b = 22; b >= 8; --b) {
      if (max_weight > 0 && SumFits(num_clients, max_weight, b, modulus_bits)) {
        p.quantization_bits = b;
        break;
      }
    }
    if (p.quantization_bits == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("no quantization of at least 8 bits fits: ", num_clients,
                       " clients at max_weight ", max_weight, " would wrap the modulus 2^",
                       modulus_bits, "; use modulus_bits = 64 or a smaller max_weight"));
    }
  }
  if (absl::Status s = ValidateSecAggParams(p); !s.ok()) return s;
  return p;
}

int ConsistencyThreshold(int num_clients, double corrupt_fraction) {
  const int corrupt = static_cast<int>(std::floor(corrupt_fraction * num_clients));
  return (num_clients + corrupt) / 2 + 1;
}

absl::Status ValidateSecAggParams(const SecAggParams& p) {
  const int n = p.num_clients;
  const int k = p.num_neighbors;
  if (n < 3) {
    return absl::InvalidArgumentError(absl::StrCat("num_clients must be at least 3, got ", n));
  }
  if (k < 2 || k > n - 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_neighbors must be in [2, num_clients - 1 = ", n - 1, "], got ", k));
  }
  if ((static_cast<int64_t>(n) * k) % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_neighbors ", k, " and num_clients ", n,
                     " are both odd: no k-regular graph exists; use an even num_neighbors"));
  }
  if (p.threshold <= k / 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "threshold ", p.threshold, " gives no privacy: it must exceed num_neighbors / 2 (", k,
        " / 2), or a server that lies about who dropped can collect both shares of one client"));
  }
  if (p.threshold > k) {
    return absl::InvalidArgumentError(
        absl::StrCat("threshold ", p.threshold, " exceeds num_neighbors ", k));
  }
  if (!(p.clip_range > 0) || !std::isfinite(p.clip_range)) {
    return absl::InvalidArgumentError(
        absl::StrCat("clip_range must be positive and finite, got ", p.clip_range));
  }
  if (p.modulus_bits != 32 && p.modulus_bits != 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("modulus_bits must be 32 or 64, got ", p.modulus_bits));
  }
  if (p.quantization_bits < 1 || p.quantization_bits > 62) {
    return absl::InvalidArgumentError(
        absl::StrCat("quantization_bits must be in [1, 62], got ", p.quantization_bits));
  }
  if (p.max_weight == 0) return absl::InvalidArgumentError("max_weight must be at least 1");
  if (!(p.corrupt_fraction >= 0 && p.corrupt_fraction < 0.5)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "corrupt_fraction must be in [0, 0.5) (with half the clients colluding with the server, "
        "no survivor set can be held to one), got ",
        p.corrupt_fraction));
  }
  if (UsesDdg(p) || p.ddg.granularity != 0) {  // a granularity <= 0 or NaN is refused here
    if (absl::Status s = ValidateDdgEncoding(p.ddg); !s.ok()) return s;
    if (p.ddg.modulus_bits != p.modulus_bits) {
      return absl::InvalidArgumentError(
          absl::StrCat("the discrete Gaussian encoding works modulo 2^", p.ddg.modulus_bits,
                       " but the round modulo 2^", p.modulus_bits));
    }
    return absl::OkStatus();  // the quantization below is not used
  }
  if (!SumFits(n, p.max_weight, p.quantization_bits, p.modulus_bits)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the sum can wrap the modulus: ", n, " clients x max_weight ", p.max_weight,
                     " x (2^", p.quantization_bits, " - 1) >= 2^", p.modulus_bits,
                     "; lower quantization_bits or max_weight, or use modulus_bits = 64"));
  }
  return absl::OkStatus();
}

}  // namespace fl::secagg
