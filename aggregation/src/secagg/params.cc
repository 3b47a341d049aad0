#include "fl/aggregation/secagg/params.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace fl::secagg {
namespace {

// n * w * (2^b - 1) < 2^m, computed exactly in 128 bits.
bool SumFits(int n, uint32_t max_weight, int bits, int modulus_bits) {
  const unsigned __int128 top = (static_cast<unsigned __int128>(1) << bits) - 1;
  const unsigned __int128 worst = top * static_cast<unsigned __int128>(n) * max_weight;
  return worst < (static_cast<unsigned __int128>(1) << modulus_bits);
}

}  // namespace

absl::StatusOr<SecAggParams> DefaultSecAggParams(int num_clients, int modulus_bits,
                                                 uint32_t max_weight) {
  if (num_clients < 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "secure aggregation needs at least 3 clients (the sum of 2 reveals each), got ",
        num_clients));
  }
  SecAggParams p;
  p.num_clients = num_clients;
  p.modulus_bits = modulus_bits;
  p.max_weight = max_weight;
  if (num_clients <= 16) {
    p.num_neighbors = num_clients - 1;
  } else {
    int k = static_cast<int>(std::ceil(3.0 * std::log2(static_cast<double>(num_clients))));
    if (k % 2 != 0) ++k;
    p.num_neighbors = std::min(k, num_clients - 1);
    if ((p.num_neighbors * num_clients) % 2 != 0) --p.num_neighbors;
  }
  p.threshold = p.num_neighbors / 2 + 1;
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
  if (!SumFits(n, p.max_weight, p.quantization_bits, p.modulus_bits)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the sum can wrap the modulus: ", n, " clients x max_weight ", p.max_weight,
                     " x (2^", p.quantization_bits, " - 1) >= 2^", p.modulus_bits,
                     "; lower quantization_bits or max_weight, or use modulus_bits = 64"));
  }
  return absl::OkStatus();
}

}  // namespace fl::secagg
