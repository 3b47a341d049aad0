// What `fl sim` prints while a simulation runs: the setup steps, the partition's summary, one
// table line per round attempt and, when the output is a terminal, a progress bar under the table
// (rounds done, elapsed time, ETA, the last test accuracy) redrawn in place. Not a terminal: the
// same lines without the bar, so that a log file or a pipe gets plain text. Not thread-safe: the
// simulation calls one at a time.
#ifndef FL_CLI_SIM_PROGRESS_H_
#define FL_CLI_SIM_PROGRESS_H_

#include <cstdio>
#include <string>

#include "absl/time/time.h"
#include "fl/simulation/partition.h"
#include "fl/simulation/simulation.h"

namespace fl::cli {

class SimProgress {
 public:
  // Writes to `out`; `bar` draws the progress bar (pass whether `out` is a terminal). `dp` adds
  // the epsilon column.
  SimProgress(std::FILE* out, bool bar, int32_t rounds, bool dp);

  void Setup(const std::string& step);
  void Partition(const simulation::PartitionSummary& summary);
  // Every site joined: the bar's elapsed time and ETA count from here.
  void TrainingStarted() { training_start_ = absl::Now(); }
  void Round(const simulation::SimulationRound& round);
  // Clears the bar (before the closing lines).
  void Finish();

 private:
  void Header();
  void ClearBar();
  void DrawBar();

  std::FILE* out_;
  bool bar_;
  int32_t rounds_;
  bool dp_;
  bool header_printed_ = false;
  bool bar_shown_ = false;
  int32_t committed_ = 0;
  double last_accuracy_ = -1;
  absl::Time start_ = absl::Now();
  absl::Time training_start_ = absl::Now();
};

}  // namespace fl::cli

#endif  // FL_CLI_SIM_PROGRESS_H_
