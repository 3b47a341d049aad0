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
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fl/aggregation/secagg/ddg_encoding.h"

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
  // Distributed DP with the discrete Gaussian when ddg.granularity > 0: each input is
  // EncodeDdg's (DdgPaddedDimension(d) + 1 words, weight 1) instead of the quantization above,
  // and the sum decodes by DecodeDdgMean. ddg.modulus_bits must equal modulus_bits. Public, and
  // bound in the session's hash like the rest.
  DdgEncoding ddg = {.beta = 0};
};

// Whether the round's inputs are discrete Gaussian encodings (params.ddg).
inline bool UsesDdg(const SecAggParams& params) { return params.ddg.granularity > 0; }

// The words of one input for an update of `dimension` values, the weight word included.
inline size_t EncodedWords(const SecAggParams& params, size_t dimension) {
  return (UsesDdg(params) ? DdgPaddedDimension(dimension) : dimension) + 1;
}

// What the server tells every site of a secure-aggregation round with each stage task: the
// protocol's parameters, how example counts become weights, and distributed DP (fl::wire converts
// it, the same code on both ends).
struct RoundParams {
  SecAggParams secagg;
  int64_t example_unit = 1;  // weight = clamp(ceil(num_examples / example_unit), 1, max_weight)
  double dp_clip_norm = 0;   // distributed DP when > 0: each site clips its change to this L2 norm
  double dp_noise_stddev = 0;  // then adds N(0, s^2) to each coordinate (0: no noise)
};

// The two risks of a round's graph (k, t) for its n sites, of which C = floor(corrupt_fraction n)
// collude with the server and D = floor(dropout_fraction n) drop out (Bell et al. 2020's
// conditions). A site's neighbours are a uniformly random k of the other n - 1 (the graph's labels
// are shuffled), so the colluders among them are hypergeometric.
struct SecAggRisk {
  // A given honest site has t or more colluding neighbours: they hold t shares of both its
  // secrets, so its input is exposed whatever the honest sites do.
  double exposed_site = 0;
  // Some honest site is: min(1, (n - C) x exposed_site), a union bound, for one graph (one
  // attempt of a round). Bell et al.'s condition that the honest survivors stay connected is not
  // computed: with signed survivor sets (identities), a server that calls honest sites dropped
  // can learn the sums of the components of the honest survivors' graph, each at least t - c + 1
  // inputs (c: a member's colluding neighbours), not one site's input (docs/design-decisions.md).
  // Without identities a split view of the survivors isolates one input.
  double privacy = 0;
  // A given site keeps fewer than t live neighbours (its self-mask seed cannot be rebuilt and the
  // round fails), with the D dropouts among its peers; some site does: min(1, n x stalled_site).
  // Colluders that withhold their shares count as dropouts: plan for them in dropout_fraction.
  double stalled_site = 0;
  double stall = 0;
};
SecAggRisk SecAggRiskOf(const SecAggParams& params, double dropout_fraction);

// What DefaultSecAggParams accepts by default: privacy at most 2^-40 (a statistical security
// parameter of 40, as Bell et al.'s) per graph, and the defaults aim at a stall at most 2^-20.
// The server and the sites hold each graph to PrivacyRiskTarget(grinding_bits), below.
inline constexpr double kMaxPrivacyRisk = 0x1p-40;
inline constexpr double kMaxStallRisk = 0x1p-20;

// The smallest t in (k/2, k] whose privacy risk (SecAggRiskOf) is at most `max_privacy_risk`
// for the params' n, k and corrupt_fraction; nullopt when none is.
std::optional<int> LeastPrivateThreshold(const SecAggParams& params,
                                         double max_privacy_risk = kMaxPrivacyRisk);

// The risk a graph may carry when the server can try 2^grinding_bits directories (and so graphs:
// the graph follows the session's hash, which the server steers by choosing the directory) and
// keep the one it likes: kMaxPrivacyRisk / 2^grinding_bits, so that the best of its tries still
// holds at kMaxPrivacyRisk (a union bound).
double PrivacyRiskTarget(int grinding_bits);

// Defaults for `num_clients` clients: k = n - 1 for n <= 16 (every pair, as in Bonawitz et al.),
// otherwise starting from the even number at or above 3 * log2(n) (Bell et al.: O(log n)
// neighbours) and raised until a t in (k/2, k] gives a privacy risk of at most max_privacy_risk
// (kMaxPrivacyRisk, or PrivacyRiskTarget's) and a stall risk of at most kMaxStallRisk with
// `corrupt_fraction` of the clients colluding and `dropout_fraction` dropping (at gamma 1/3 and 30
// % dropping: 72 of 99 at n = 100, 266 at n = 1000), t the least such; when only every pair keeps
// privacy but the dropouts still stall it, every pair (the stall risk, which SecAggRiskOf gives,
// fails a round, not its privacy); b = the largest value <= 22 (Flower's 2^22 range) for which the
// sum of n clients at max_weight cannot wrap the modulus. INVALID_ARGUMENT when num_clients < 3,
// corrupt_fraction is outside [0, 0.5) or dropout_fraction outside [0, 1), or no b >= 8 fits (use
// modulus_bits = 64 or a smaller max_weight).
absl::StatusOr<SecAggParams> DefaultSecAggParams(int num_clients, int modulus_bits = 32,
                                                 uint32_t max_weight = 1000,
                                                 double corrupt_fraction = 0,
                                                 double dropout_fraction = 0,
                                                 double max_privacy_risk = kMaxPrivacyRisk);

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
