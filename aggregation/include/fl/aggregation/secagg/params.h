// Parameters of one secure-aggregation round (SecAgg+, Bell et al. 2020), their defaults derived
// from the number of clients, and their validation.
//
// Encoding of an update (see quantization.h): each value is clipped to [-clip_range, clip_range],
// quantized with stochastic rounding to an integer in [0, 2^quantization_bits), multiplied by the
// client's integer weight (1..max_weight, e.g. its number of examples, capped by the caller), and
// the weight itself is appended as one more word. Arithmetic is modulo 2^modulus_bits, so the sum
// of n clients is exact when n * max_weight * (2^quantization_bits - 1) < 2^modulus_bits.
#ifndef FL_AGGREGATION_SECAGG_PARAMS_H_
#define FL_AGGREGATION_SECAGG_PARAMS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fl::secagg {

struct SecAggParams {
  int num_clients = 0;         // n: clients selected for the round, ids 0..n-1
  int num_neighbors = 0;       // k: degree of the Harary graph (n - 1: everyone, as in SecAgg)
  int threshold = 0;           // t: shares needed to reconstruct; k/2 < t <= k
  double clip_range = 8.0;     // c: values are clipped to [-c, c] (Flower's default 8.0)
  int quantization_bits = 0;   // b: quantized values lie in [0, 2^b)
  int modulus_bits = 32;       // arithmetic modulo 2^modulus_bits; 32 or 64
  uint32_t max_weight = 1000;  // largest weight a client may give its update (Flower: 1000)
  // Public, chosen by the server; the graph's labels are shuffled by a hash of it and of every
  // client's fresh keys (the session's hash), so the server cannot set the graph outright.
  uint64_t graph_seed = 0;
  // gamma: the share of the round's clients that may collude with the server (sign two survivor
  // sets, reveal what they hold). The consistency check is sized for it (ConsistencyThreshold).
  double corrupt_fraction = 0;
};

// What the server tells every site of a secure-aggregation round with each stage task: the
// protocol's parameters, how example counts become weights, and distributed DP (fl::wire converts
// it, the same code on both ends).
struct RoundParams {
  SecAggParams secagg;
  int64_t example_unit = 1;  // weight = clamp(ceil(num_examples / example_unit), 1, max_weight)
  double dp_clip_norm = 0;   // distributed DP when > 0: each site clips its change to this L2 norm
  double dp_noise_stddev = 0;  // then adds N(0, s^2) to each coordinate (0: no noise)
};

// Defaults for `num_clients` clients: k = n - 1 for n <= 16 (every pair, as in Bonawitz et al.),
// otherwise the even number at or above 3 * log2(n) (Bell et al.: O(log n) neighbours);
// t = k/2 + 1 (the smallest threshold that keeps privacy; tolerates k/2 - 1 dropped
// neighbours); b = the largest value <= 22 (Flower's 2^22 range) for which the sum of n clients
// at max_weight cannot wrap the modulus. INVALID_ARGUMENT when num_clients < 3 or when no b >= 8
// fits (use modulus_bits = 64 or a smaller max_weight).
absl::StatusOr<SecAggParams> DefaultSecAggParams(int num_clients, int modulus_bits = 32,
                                                 uint32_t max_weight = 1000);

// How many sites must sign one survivor set before any reveals a share:
// T = floor((n + c) / 2) + 1 with n the round's sites (num_clients, not the directory the server
// sent, which it could shrink for some of them) and c = floor(corrupt_fraction x n) colluding with
// the server. Honest sites sign once and colluders may sign every set, so two different sets would
// need 2T <= n + c signers: within one session at most one set gathers T, and a server cannot get
// honest sites to reveal a client's self-mask seed to some and its neighbours' mask keys to others.
// What colluding neighbours hold themselves is another matter: t must exceed them (see
// ValidateSecAggParams and the design notes).
int ConsistencyThreshold(int num_clients, double corrupt_fraction);

// OK, or INVALID_ARGUMENT naming the first offending field: n < 3; k outside [2, n - 1] or n * k
// odd (no k-regular Harary graph); t <= k/2 ("gives no privacy": a server that lies about who
// dropped could collect both shares of one client) or t > k; clip_range not positive and finite;
// b outside [1, 62]; modulus_bits not 32 or 64; max_weight 0; corrupt_fraction outside
// [0, 0.5) (with half the clients colluding no survivor set is unique); or
// n * max_weight * (2^b - 1) >= 2^modulus_bits (the sum could wrap the modulus).
absl::Status ValidateSecAggParams(const SecAggParams& params);

}  // namespace fl::secagg

#endif  // FL_AGGREGATION_SECAGG_PARAMS_H_
