// Crash points: named places where a test can make the process kill itself with SIGKILL, to
// check that a crash at exactly that moment loses nothing committed.
//
// The environment variable FL_CRASH_POINT=<name>[@<n>] arms one point: the n-th time (default
// the first) the process reaches CrashPoint("<name>"), it raises SIGKILL. Unset, CrashPoint costs
// one comparison. Points in use:
//   round_start       a round is about to be recorded as started (the server is waiting)
//   mid_upload        a chunk of an update was staged; the update is not complete
//   aggregate         a round is closing, before its aggregate is computed
//   checkpoint_write  a checkpoint's temporary file is written and synced, not yet renamed
//   after_commit      a round's commit returned
#ifndef FL_COMMON_CRASH_POINT_H_
#define FL_COMMON_CRASH_POINT_H_

namespace fl {

void CrashPoint(const char* name);

}  // namespace fl

#endif  // FL_COMMON_CRASH_POINT_H_
