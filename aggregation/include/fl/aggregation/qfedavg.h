// q-FedAvg (Li et al. 2020, "Fair resource allocation in federated learning", Algorithm 2):
// sites on which the global model does worse weigh more, q tuning how much (q = 0: the sites
// weigh alike, as in FedSGD with a step set by L). With x the round's global model, w_k a site's
// model, F_k the loss of x on the site's training data (the update's metric "initial_loss") and
// L = 1 / qffl_learning_rate (the Lipschitz estimate: the clients' learning rate):
//
//   dw_k = L (x - w_k);   Delta_k = F_k^q dw_k;   h_k = q F_k^(q-1) ||dw_k||^2 + L F_k^q
//   x' = x - sum_k Delta_k / sum_k h_k
//
// F_k is each site's own loss, as in the paper; Flower's QFedAvg uses the server's single
// evaluation loss for every site, which makes every site weigh alike. (F_k + 1e-10 keeps
// F^(q-1) finite, as Flower does.)
//
// It streams: sum_k F_k^q w_k in a float64 sum (like FedAvg's), ||x - w_k||^2 measured as each
// update's pieces pass, so server memory is FedAvg's. An update without a finite, non-negative
// "initial_loss" is refused with the reason (the built-in trainers send it when the task's
// config asks with "report_initial_loss"; a custom trainer adds it to its FitResult's metrics).
// Refused with secure aggregation (the server would need each site's loss and norm) and with
// central DP (its noise is calibrated to a mean).
#ifndef FL_AGGREGATION_QFEDAVG_H_
#define FL_AGGREGATION_QFEDAVG_H_

#include <memory>

#include "absl/status/statusor.h"
#include "fl/aggregation/strategy.h"

namespace fl::aggregation {

// The metric q-FedAvg reads from every update, and the fit-config key that asks a built-in
// trainer to send it.
inline constexpr char kInitialLossMetric[] = "initial_loss";
inline constexpr char kReportInitialLossKey[] = "report_initial_loss";

struct QFedAvgOptions {
  double q = 0.2;                   // >= 0 (Flower's default)
  double qffl_learning_rate = 0.1;  // > 0: L = 1 / it (Flower's default)
};

// INVALID_ARGUMENT naming the setting when q < 0 or the learning rate is not positive.
absl::StatusOr<std::unique_ptr<Strategy>> MakeQFedAvg(QFedAvgOptions options);

}  // namespace fl::aggregation

#endif  // FL_AGGREGATION_QFEDAVG_H_
