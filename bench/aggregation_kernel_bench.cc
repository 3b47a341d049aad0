// The aggregation kernel (StripedSum::Add: float32 update * double weight into the float64 sum)
// against this machine's memory bandwidth, measured in the same run with a STREAM triad.
// Prints one table; every figure is the median of --reps timed repetitions after one warm-up. Each
// repetition times the triad and the fold back to back, and the ratio is the median of the
// per-repetition ratios, so that load from other processes on a shared machine hits both alike.
//   aggregation_kernel_bench [--threads 2] [--floats 67108864] [--reps 7]
//
// Accounting (GB = 10^9 bytes):
//  - triad a[i] = b[i] + s*c[i] over doubles counts 3 x 8 bytes per element, as STREAM does
//    (the write-allocate read of a[] is not counted, so the real traffic is 4/3 of it);
//  - the fold counts "update" GB/s = 4 bytes of float32 update per element, and "moved" GB/s =
//    4 (update read) + 8 (sum read) + 8 (sum write) bytes per element; the sum's lines
//    are read before they are written, so moved is the real traffic. Moved is the figure compared
//    with the triad: both count the bytes a loop reads and writes.
// Fold with T threads: T uploads at once, each thread folding its own update of --floats floats
// into the one shared sum in 1 MiB chunks (as the server receives them). "staggered" starts each
// upload at a different stripe (uploads arriving at different times); "same start" starts all at
// stripe 0, so they contend for the same stripe locks.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "aggregation/internal/striped_sum.h"

namespace {

using Clock = std::chrono::steady_clock;
using fl::aggregation::internal::StripedSum;

// Runs fn(t) for t in [0, threads) on its own thread (t = 0 on the caller's); returns seconds.
double RunTimed(int threads, const std::function<void(int)>& fn) {
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(fn, t);
  fn(0);
  for (std::thread& th : pool) th.join();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// [begin, end) of part t of n split into `parts` contiguous pieces.
std::pair<int64_t, int64_t> Part(int64_t n, int parts, int t) {
  return {n * t / parts, n * (t + 1) / parts};
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// STREAM triad over doubles with `threads` threads, each owning one contiguous part (and
// touching it first, so its pages are where that thread runs).
class Triad {
 public:
  Triad(int64_t n, int threads)
      : n_(n), threads_(threads), a_(static_cast<size_t>(n)), b_(a_.size()), c_(a_.size()) {
    RunTimed(threads_, [&](int t) {
      auto [lo, hi] = Part(n_, threads_, t);
      for (int64_t i = lo; i < hi; ++i) a_[i] = 1.0, b_[i] = 2.0, c_[i] = 0.5;
    });
  }
  double Once() {
    return RunTimed(threads_, [&](int t) {
      auto [lo, hi] = Part(n_, threads_, t);
      double* __restrict a = a_.data();
      const double* __restrict b = b_.data();
      const double* __restrict c = c_.data();
      for (int64_t i = lo; i < hi; ++i) a[i] = b[i] + 3.0 * c[i];
    });
  }

 private:
  const int64_t n_;
  const int threads_;
  std::vector<double> a_, b_, c_;
};

// `threads` uploads of n floats each, folded at once into one StripedSum of n in 1 MiB chunks.
class Fold {
 public:
  Fold(int64_t n, int threads)
      : n_(n), threads_(threads), sum_(fl::ModelSpec({{"w", {n}}})), updates_(threads) {
    RunTimed(threads_, [&](int t) {
      updates_[t].resize(static_cast<size_t>(n_));
      for (int64_t i = 0; i < n_; ++i) updates_[t][i] = static_cast<float>((i + t) % 1000) * 1e-3f;
    });
  }
  double Once(bool staggered) {
    const int64_t chunk = StripedSum::kStripeFloats;
    const int64_t num_chunks = (n_ + chunk - 1) / chunk;
    return RunTimed(threads_, [&](int t) {
      const std::span<const float> x = updates_[t];
      const int64_t first = staggered ? num_chunks * t / threads_ : 0;
      for (int64_t k = 0; k < num_chunks; ++k) {
        const int64_t offset = ((first + k) % num_chunks) * chunk;
        const int64_t len = std::min(chunk, n_ - offset);
        sum_.Add(offset, x.subspan(static_cast<size_t>(offset), static_cast<size_t>(len)), 0.5 + t);
      }
    });
  }

 private:
  const int64_t n_;
  const int threads_;
  StripedSum sum_;
  std::vector<std::vector<float>> updates_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Aggregation kernel GB/s against a STREAM triad taken in the same run");
  int threads = 2;
  int64_t floats = int64_t{64} << 20;
  int reps = 7;
  app.add_option("--threads", threads, "T: threads of the triad, uploads folding at once")
      ->check(CLI::Range(1, 1024));
  app.add_option("--floats", floats, "D: floats per update (the triad's arrays are 4*D bytes)")
      ->check(CLI::Range(int64_t{1} << 20, int64_t{1} << 34));
  app.add_option("--reps", reps, "timed repetitions per row (after one warm-up)")
      ->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);

  const int64_t triad_n = floats / 2;  // doubles per triad array: 4*D bytes, as big as an update
  const double mib = 1024.0 * 1024.0;
  std::printf(
      "Workload: triad 3 x %.0f MiB doubles; fold: T uploads of %lld float32 (%.0f MiB "
      "each) into one float64 sum (%.0f MiB), 1 MiB chunks; T = %d; %d reps + 1 warm-up, "
      "medians (triad best in brackets); %u hardware threads\n\n",
      triad_n * 8 / mib, static_cast<long long>(floats), floats * 4 / mib, floats * 8 / mib,
      threads, reps, std::thread::hardware_concurrency());

  std::vector<int> counts = {1};
  if (threads != 1) counts.push_back(threads);
  std::printf("| %-28s | %3s | %9s | %12s | %15s | %15s |\n", "kernel", "T", "ms", "update GB/s",
              "moved GB/s", "moved / triad");
  std::printf("|%s|%s|%s|%s|%s|%s|\n", std::string(30, '-').c_str(), std::string(5, '-').c_str(),
              std::string(11, '-').c_str(), std::string(14, '-').c_str(),
              std::string(17, '-').c_str(), std::string(17, '-').c_str());
  for (int t : counts) {
    Triad triad(triad_n, t);
    Fold fold(floats, t);
    // Each rep times the triad and then each fold back to back, so a ratio compares two
    // measurements taken under the same load on a shared machine; one warm-up rep is dropped.
    const int cases = t > 1 ? 2 : 1;
    std::vector<double> triad_s, fold_s[2], ratio[2];
    for (int r = 0; r <= reps; ++r) {
      const double ts = triad.Once();
      for (int c = 0; c < cases; ++c) {
        const double fs = fold.Once(/*staggered=*/c == 0);
        if (r == 0) continue;
        fold_s[c].push_back(fs);
        ratio[c].push_back((20.0 * floats * t / fs) / (24.0 * triad_n / ts));
      }
      if (r > 0) triad_s.push_back(ts);
    }
    const double triad_med = Median(triad_s);
    std::printf("| %-28s | %3d | %9.1f | %12s | %6.1f [%6.1f] | %15s |\n",
                "STREAM triad (24 B/elem)", t, triad_med * 1e3, "-",
                24.0 * triad_n / triad_med / 1e9,
                24.0 * triad_n / *std::min_element(triad_s.begin(), triad_s.end()) / 1e9, "1.00");
    const char* names[2] = {t > 1 ? "fold, staggered starts" : "fold StripedSum::Add",
                            "fold, same start (contended)"};
    for (int c = 0; c < cases; ++c) {
      const double fs = Median(fold_s[c]);
      const double elems = static_cast<double>(floats) * t;
      const double moved = 20.0 * elems / fs / 1e9;
      std::printf(
          "| %-28s | %3d | %9.1f | %12.1f | %15.1f | %6.2f [%6.2f] |\n", names[c], t, fs * 1e3,
          4.0 * elems / fs / 1e9, moved, Median(ratio[c]),
          moved / (24.0 * triad_n / *std::min_element(triad_s.begin(), triad_s.end()) / 1e9));
    }
  }
  std::printf(
      "\nmoved = 20 B/element (4 update read + 8 sum read + 8 sum write); update = 4 "
      "B/element. moved / triad: median of the per-rep ratios (fold and triad timed back to back) "
      "[fold median against the best triad].\n");
  return 0;
}
