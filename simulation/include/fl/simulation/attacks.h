// Attacking sites in simulation: a fraction of the virtual sites that poison what they send, to
// measure what robust aggregation (fl/aggregation/robust.h) buys. The attacks, with x the round's
// global model, w_i a site's honestly trained model and d_i = w_i - x its change:
//
//   "sign_flip"   sends x - s d_i (s = scale; 0: 1): the change reversed (Damaskinos et al.).
//   "scale"       sends x + s d_i (s = scale; 0: the number of sites): model replacement
//                 (Bagdasaryan et al. 2020), one site's change boosted to outweigh the mean.
//   "gaussian"    sends x + N(0, s^2) per parameter (s = scale; 0: 1): noise instead of training.
//   "label_flip"  trains honestly on labels y -> C - 1 - y (data poisoning).
//   "alie"        "a little is enough" (Baruch et al. 2019): every attacker sends
//                 mu - z sigma, with mu and sigma the per-parameter mean and standard deviation
//                 of the updates handed out with it (the attackers' own honest ones included: an
//                 omniscient attacker, the common benchmark setting), and z = Phi^-1((n - s) / n),
//                 s = floor(n / 2 + 1) - f, for n updates of which f are attackers'.
//
// Which sites attack is fixed by the seed (AttackingSites), the same for every strategy, so that
// runs differ only in how the server aggregates. Updates are rewritten after the sites trained and
// before the engine sees them (the server cannot tell); so attacks need float32 updates in the
// clear: not with secure aggregation, another update encoding, or MPI.
#ifndef FL_SIMULATION_ATTACKS_H_
#define FL_SIMULATION_ATTACKS_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "fl/client/dataset.h"

namespace fl::simulation {

struct AttackOptions {
  std::string kind = "none";  // none, sign_flip, scale, gaussian, label_flip, alie
  double fraction = 0;        // of the sites that attack, in [0, 1); alie: in [0, 0.5)
  double scale = 0;           // the attack's strength (see above); 0: its default

  // INVALID_ARGUMENT naming the value: an unknown kind, a fraction outside [0, 1), a negative or
  // non-finite scale.
  absl::Status Validate() const;
  bool enabled() const { return kind != "none" && fraction > 0; }
  bool poisons_updates() const { return enabled() && kind != "label_flip"; }
};

// Which of n sites attack: round(fraction * n) of them, chosen by `seed`.
std::vector<bool> AttackingSites(int32_t n, double fraction, uint64_t seed);

// One update of a round handed out at once: the site's model (rewritten in place when the site
// attacks) and the global model it trained from.
struct RoundUpdate {
  int32_t site = 0;
  bool attacking = false;
  std::span<float> model;
  std::span<const float> global;
};

// Rewrites the attackers' models among `updates` (nothing for label_flip). `num_sites` gives the
// scale attack's default; `seed` (differing by round and site) the Gaussian noise. False when
// the attackers' updates were left as they were: label_flip, or ALIE with fewer than two updates
// to compute its statistics from.
bool PoisonUpdates(const AttackOptions& options, int32_t num_sites, uint64_t seed,
                   std::vector<RoundUpdate>& updates);

// Label flipping: every label y becomes num_classes - 1 - y.
void FlipLabels(client::Dataset& data);

}  // namespace fl::simulation

#endif  // FL_SIMULATION_ATTACKS_H_
