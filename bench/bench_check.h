// Small helpers every benchmark's main shares: stop with the status on the first failure (a
// benchmark has no caller to hand an error to), and the median of repeated measurements.
#ifndef FL_BENCH_BENCH_CHECK_H_
#define FL_BENCH_BENCH_CHECK_H_

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace fl::bench {

// A benchmark cannot go on: prints `what` and exits 1.
[[noreturn]] inline void Die(const std::string& what) {
  std::fprintf(stderr, "%s\n", what.c_str());
  std::exit(1);
}
// OK, or Die naming `what` and the status.
inline void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) Die(absl::StrCat(what, ": ", s.ToString()));
}
// The value, or Die naming `what` and the status.
template <typename T>
T Check(absl::StatusOr<T> v, const char* what) {
  Check(v.status(), what);
  return *std::move(v);
}

// The median (the mean of the middle two for an even count); 0 for none.
inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace fl::bench

#endif  // FL_BENCH_BENCH_CHECK_H_
