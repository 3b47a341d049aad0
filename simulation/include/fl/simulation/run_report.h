// A run's report (fl/simulation/report.h) read from a server's store: the same report for a
// simulation's store and for a production server's data directory, since both are a Store. Reads
// only; works on a store opened with Store::OpenReadOnly, also while a server writes to it (each
// call reads the last committed state). Thread-safe as the Store is.
#ifndef FL_SIMULATION_RUN_REPORT_H_
#define FL_SIMULATION_RUN_REPORT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "fl/server/store.h"
#include "fl/simulation/report.h"

namespace fl::simulation {

// The report of run `run_id`, as the store holds it at `now_ms` (milliseconds since the Unix
// epoch; used only for what is still running). Fills:
//   title: the run's name ("run <id>" when it has none); run_id; status: "running", "finished"
//     or "failed"; reason: the run's; configuration_json: the run's config_json as stored;
//   wall_seconds: ended_at - created_at, or now_ms - created_at while the run runs;
//   rounds: one ReportRound per round attempt, in the store's order (round, then attempt), with
//     committed: the attempt's status is committed;
//     num_sampled: the store's num_sampled;
//     num_accepted: the updates that went into the attempt's aggregate: the store's num_reported
//       for a committed attempt; for another (whose num_reported the store leaves at 0) the
//       number of its participations with status accepted, as the engine counted them;
//     duration_s: ended_at - started_at, or now_ms - started_at for an attempt still running;
//     metrics: every number of the attempt's metrics_json (e.g. train_loss, test_accuracy; other
//       values and a metrics_json that does not parse are left out), plus "dp_epsilon" (the
//       epsilon spent up to this round) when it is above 0, "dp_epsilon_server" (distributed DP:
//       the most exposed site's against the server) likewise, plus, on a round's committed attempt,
//       the round's federated evaluation (source "federated") as "eval_loss" and "eval_<name>"
//       for each of its metrics (e.g. eval_accuracy), the newest when evaluated twice;
//     bytes_up: the sum of bytes_received of the attempt's participations (what the sites
//       uploaded, complete or cut off);
//     bytes_down: an estimate, as the store keeps no download counts: the global model's size as
//       float32 (4 bytes per parameter of the run's model_spec_json) times the number of the
//       attempt's participations. Every participation row is a site sampled and handed a task
//       with the global model, whatever its status (assigned, accepted, refused or dropped), so
//       this is the bytes the server would send if each fetched the model once: an upper bound
//       when sites dropped before downloading or resumed a download, a lower bound when one
//       retried a download. 0 when model_spec_json does not parse. Secure aggregation's relayed
//       messages are counted in neither direction;
//     reason: the store's reason ("still running" for an attempt that is running);
//     phase_seconds: empty (the store keeps no phase times).
//   partition and partition_summary_text stay empty (a server does not know its sites' data);
//   generated_by stays empty (the caller names itself).
// Errors: NOT_FOUND naming the run when the store has no run `run_id`; otherwise the store's.
absl::StatusOr<RunReport> ReportFromStore(server::Store& store, int64_t run_id, int64_t now_ms);
// As above at the current time (absl::Now()).
absl::StatusOr<RunReport> ReportFromStore(server::Store& store, int64_t run_id);

// The newest run's id (the largest). NOT_FOUND naming the store's database when it has no run;
// otherwise the store's errors.
absl::StatusOr<int64_t> NewestRunId(server::Store& store);

}  // namespace fl::simulation

#endif  // FL_SIMULATION_RUN_REPORT_H_
