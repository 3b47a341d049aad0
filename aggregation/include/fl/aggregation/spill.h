// Spill: where a round keeps the clients' updates apart until it finishes, for the strategies
// that need every update at once (robust aggregation, robust.h). An update is a file of its
// floats, written piece by piece as it arrives and mapped read-only when the round finishes;
// its pages are the kernel's page cache, not the server's heap, and the aggregation hands each
// block of them back once it has read it, so a round of many updates costs the server little more
// than its output model.
//
// An interface, so that tests can make the spill fail (a full disk, a read error) and see what
// the round does.
#ifndef FL_AGGREGATION_SPILL_H_
#define FL_AGGREGATION_SPILL_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fl::aggregation {

// One update's floats. Write may be called from one thread at a time; Map after the last Write.
class SpillFile {
 public:
  virtual ~SpillFile() = default;
  // Floats [offset, offset + values.size()); inside the size the file was created with.
  virtual absl::Status Write(int64_t offset, std::span<const float> values) = 0;
  // The whole update, read-only, valid while this file lives.
  virtual absl::StatusOr<std::span<const float>> Map() = 0;
  // The caller is done with floats [offset, offset + count) of the mapping for now: the pages
  // leave this process's resident memory (they stay in the page cache, and read back if touched).
  virtual void Release(int64_t offset, int64_t count) {}
};

class SpillSpace {
 public:
  virtual ~SpillSpace() = default;
  // A file for an update of `num_floats` floats, its space reserved now, so that a full disk is
  // refused here ("no space ... for an update of N bytes") and not halfway through the update.
  virtual absl::StatusOr<std::unique_ptr<SpillFile>> Create(int64_t num_floats) = 0;
};

// Files in `dir` (which must exist), unlinked at once: nothing is left behind by a crash.
std::shared_ptr<SpillSpace> MakeFileSpill(std::string dir);

}  // namespace fl::aggregation

#endif  // FL_AGGREGATION_SPILL_H_
