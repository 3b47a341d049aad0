#include "aggregation/internal/robust_kernels.h"

#include <algorithm>
#include <atomic>
#include <numeric>
#include <system_error>
#include <thread>
#include <utility>

namespace fl::aggregation::internal {
namespace {

std::atomic<int> kernel_threads{0};

int Workers(int64_t blocks) {
  const int64_t cores = kernel_threads.load() > 0
                            ? kernel_threads.load()
                            : std::max(1u, std::thread::hardware_concurrency());
  return static_cast<int>(std::max<int64_t>(1, std::min(cores, blocks)));
}

// Runs fn(worker, first, count) for every column block of [0, total), on `workers` threads (this
// one among them), blocks handed out in order; releases each block once done.
template <typename Fn>
void ForEachBlock(int64_t total, int workers, const ReleaseFn& release, Fn fn) {
  const int64_t blocks = (total + kColumnBlock - 1) / kColumnBlock;
  std::atomic<int64_t> next{0};
  auto work = [&](int worker) {
    for (int64_t b = next++; b < blocks; b = next++) {
      const int64_t first = b * kColumnBlock;
      const int64_t count = std::min(kColumnBlock, total - first);
      fn(worker, first, count);
      if (release) release(first, count);
    }
  };
  std::vector<std::thread> threads;
  for (int w = 1; w < workers; ++w) {
    try {
      threads.emplace_back(work, w);
    } catch (const std::system_error&) {
      break;  // fewer threads: the others take more blocks
    }
  }
  work(0);
  for (std::thread& t : threads) t.join();
}

// Coordinates sorted together: a run of up to kRun coordinates of every row, copied into a tile
// (row i at tile[i * kRun]), small enough for the first-level cache at K = 10.
constexpr int64_t kRun = 512;
// Up to this many rows a sorting network sorts every coordinate of a run at once (a compare-
// exchange is an element-wise min and max of two tile rows, which the compiler vectorizes);
// beyond it, each coordinate is sorted on its own.
constexpr int kNetworkMax = 64;

using Network = std::vector<std::pair<int, int>>;

// Batcher's odd-even merge sort for n inputs (any n), as compare-exchange pairs (i < j).
Network SortingNetwork(int n) {
  Network net;
  for (int p = 1; p < n; p <<= 1) {
    for (int k = p; k >= 1; k >>= 1) {
      for (int j = k % p; j <= n - 1 - k; j += 2 * k) {
        for (int i = 0; i <= std::min(k - 1, n - j - k - 1); ++i) {
          if ((i + j) / (2 * p) == (i + j + k) / (2 * p)) net.emplace_back(i + j, i + j + k);
        }
      }
    }
  }
  return net;
}

// Sorts each of the first `count` columns of `tile` (k rows of stride kRun) ascending.
void SortColumns(float* tile, int k, int64_t count, const Network& net) {
  if (k <= kNetworkMax) {
    for (const auto& [a, b] : net) {
      float* x = tile + a * kRun;
      float* y = tile + b * kRun;
      for (int64_t t = 0; t < count; ++t) {
        const float lo = y[t] < x[t] ? y[t] : x[t];
        const float hi = y[t] < x[t] ? x[t] : y[t];
        x[t] = lo;
        y[t] = hi;
      }
    }
    return;
  }
  std::vector<float> v(static_cast<size_t>(k));
  for (int64_t t = 0; t < count; ++t) {
    for (int i = 0; i < k; ++i) v[static_cast<size_t>(i)] = tile[i * kRun + t];
    std::sort(v.begin(), v.end());
    for (int i = 0; i < k; ++i) tile[i * kRun + t] = v[static_cast<size_t>(i)];
  }
}

// Runs reduce(tile, count, first) for every run of coordinates [first, first + count), with
// tile row i holding the i-th smallest value of each coordinate among the rows.
template <typename Reduce>
void PerSortedRun(const Rows& rows, int64_t total, const ReleaseFn& release, Reduce reduce) {
  const int k = static_cast<int>(rows.size());
  const Network net = SortingNetwork(k);
  const int64_t blocks = (total + kColumnBlock - 1) / kColumnBlock;
  const int workers = Workers(blocks);
  std::vector<std::vector<float>> tiles(static_cast<size_t>(workers));
  ForEachBlock(total, workers, release, [&](int worker, int64_t first, int64_t count) {
    std::vector<float>& tile = tiles[static_cast<size_t>(worker)];
    tile.resize(static_cast<size_t>(kRun) * static_cast<size_t>(k));
    for (int64_t run = first; run < first + count; run += kRun) {
      const int64_t n = std::min(kRun, first + count - run);
      for (int i = 0; i < k; ++i) {
        std::copy_n(rows[static_cast<size_t>(i)].data() + run, n, tile.data() + i * kRun);
      }
      SortColumns(tile.data(), k, n, net);
      reduce(static_cast<const float*>(tile.data()), n, run);
    }
  });
}

// sum over [0, n) of (a - b)^2: float lanes over short runs (vectorizable), float64 across runs.
double SquaredDistance(const float* a, const float* b, int64_t n) {
  constexpr int kLanes = 16;
  constexpr int64_t kRun = 256;
  double total = 0;
  int64_t t = 0;
  for (; t + kRun <= n; t += kRun) {
    float lane[kLanes] = {};
    for (int64_t u = 0; u < kRun; u += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        const float d = a[t + u + l] - b[t + u + l];
        lane[l] += d * d;
      }
    }
    double run = 0;
    for (float x : lane) run += x;
    total += run;
  }
  for (; t < n; ++t) {
    const double d = static_cast<double>(a[t]) - b[t];
    total += d * d;
  }
  return total;
}

// out[j] = base[j] + sum_i coeffs[i] (rows[i][j] - base[j]), or sum_i coeffs[i] rows[i][j] when
// `base` is empty; float64 sums per block.
void LinearCombination(const Rows& rows, const std::vector<double>& coeffs,
                       std::span<const float> base, std::span<float> out,
                       const ReleaseFn& release) {
  const int64_t total = static_cast<int64_t>(out.size());
  const int workers = Workers((total + kColumnBlock - 1) / kColumnBlock);
  std::vector<std::vector<double>> sums(static_cast<size_t>(workers));
  ForEachBlock(total, workers, release, [&](int worker, int64_t first, int64_t count) {
    std::vector<double>& sum = sums[static_cast<size_t>(worker)];
    sum.assign(static_cast<size_t>(count), 0.0);
    const float* x = base.empty() ? nullptr : base.data() + first;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (coeffs[i] == 0) continue;
      const double c = coeffs[i];
      const float* r = rows[i].data() + first;
      if (x == nullptr) {
        for (int64_t j = 0; j < count; ++j) sum[static_cast<size_t>(j)] += c * r[j];
      } else {
        for (int64_t j = 0; j < count; ++j) {
          sum[static_cast<size_t>(j)] += c * (static_cast<double>(r[j]) - x[j]);
        }
      }
    }
    for (int64_t j = 0; j < count; ++j) {
      const double v = sum[static_cast<size_t>(j)] + (x == nullptr ? 0.0 : x[j]);
      out[static_cast<size_t>(first + j)] = static_cast<float>(v);
    }
  });
}

}  // namespace

void SetKernelThreads(int n) { kernel_threads = std::max(0, n); }

void CoordinateMedian(const Rows& rows, std::span<float> out, const ReleaseFn& release) {
  const int k = static_cast<int>(rows.size());
  PerSortedRun(rows, static_cast<int64_t>(out.size()), release,
               [&](const float* tile, int64_t n, int64_t first) {
                 float* o = out.data() + first;
                 const float* hi = tile + (k / 2) * kRun;
                 if (k % 2 == 1) {
                   std::copy_n(hi, n, o);
                   return;
                 }
                 const float* lo = tile + (k / 2 - 1) * kRun;
                 for (int64_t t = 0; t < n; ++t) {
                   o[t] = static_cast<float>((static_cast<double>(lo[t]) + hi[t]) / 2);
                 }
               });
}

void TrimmedMean(const Rows& rows, int cut, std::span<float> out, const ReleaseFn& release) {
  const int k = static_cast<int>(rows.size());
  const double kept = k - 2 * cut;
  PerSortedRun(rows, static_cast<int64_t>(out.size()), release,
               [&](const float* tile, int64_t n, int64_t first) {
                 double sum[kRun] = {};
                 for (int i = cut; i < k - cut; ++i) {
                   const float* v = tile + i * kRun;
                   for (int64_t t = 0; t < n; ++t) sum[t] += v[t];
                 }
                 float* o = out.data() + first;
                 for (int64_t t = 0; t < n; ++t) o[t] = static_cast<float>(sum[t] / kept);
               });
}

std::vector<double> SquaredDistances(const Rows& rows, const ReleaseFn& release) {
  const size_t k = rows.size();
  const int64_t total = k == 0 ? 0 : static_cast<int64_t>(rows[0].size());
  // Each worker sums into a K x K matrix of its own: no more workers than leave those matrices
  // together below the rows' size (K = 100 on 64 cores is 5 MiB; K = 2000 would be 2 GiB).
  const int64_t matrix_bytes = static_cast<int64_t>(k * k * sizeof(double));
  const int64_t row_bytes = total * static_cast<int64_t>(sizeof(float));
  const int workers = static_cast<int>(
      std::min<int64_t>(Workers((total + kColumnBlock - 1) / kColumnBlock),
                        std::max<int64_t>(1, row_bytes / std::max<int64_t>(1, matrix_bytes))));
  std::vector<std::vector<double>> partial(static_cast<size_t>(workers),
                                           std::vector<double>(k * k, 0.0));
  ForEachBlock(total, workers, release, [&](int worker, int64_t first, int64_t count) {
    std::vector<double>& d = partial[static_cast<size_t>(worker)];
    for (size_t i = 0; i < k; ++i) {
      for (size_t m = i + 1; m < k; ++m) {
        d[i * k + m] += SquaredDistance(rows[i].data() + first, rows[m].data() + first, count);
      }
    }
  });
  std::vector<double> d2(k * k, 0.0);
  for (const std::vector<double>& p : partial) {
    for (size_t i = 0; i < k; ++i) {
      for (size_t m = i + 1; m < k; ++m) d2[i * k + m] += p[i * k + m];
    }
  }
  for (size_t i = 0; i < k; ++i) {
    for (size_t m = i + 1; m < k; ++m) d2[m * k + i] = d2[i * k + m];
  }
  return d2;
}

std::vector<double> KrumScores(const std::vector<double>& d2, int k,
                               const std::vector<int>& candidates, int f) {
  const int n = static_cast<int>(candidates.size());
  const int closest = std::min(std::max(1, n - f - 2), n - 1);
  std::vector<double> scores;
  std::vector<double> others;
  for (int i : candidates) {
    others.clear();
    for (int m : candidates) {
      if (m != i) others.push_back(d2[static_cast<size_t>(i) * k + m]);
    }
    std::sort(others.begin(), others.end());
    scores.push_back(std::accumulate(others.begin(), others.begin() + std::max(closest, 0), 0.0));
  }
  return scores;
}

std::vector<int> KrumSelect(const std::vector<double>& d2, int k, std::vector<int> candidates,
                            int f, int m) {
  const std::vector<double> scores = KrumScores(d2, k, candidates, f);
  std::vector<int> order(candidates.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return scores[static_cast<size_t>(a)] < scores[static_cast<size_t>(b)];
  });
  std::vector<int> picked;
  for (int i = 0; i < m && i < static_cast<int>(order.size()); ++i) {
    picked.push_back(candidates[static_cast<size_t>(order[static_cast<size_t>(i)])]);
  }
  return picked;
}

std::vector<int> BulyanSelect(const std::vector<double>& d2, int k, int f) {
  std::vector<int> remaining(static_cast<size_t>(k));
  std::iota(remaining.begin(), remaining.end(), 0);
  std::vector<int> selected;
  const int theta = k - 2 * f;
  while (static_cast<int>(selected.size()) < theta && !remaining.empty()) {
    const int best = KrumSelect(d2, k, remaining, f, 1).front();
    selected.push_back(best);
    remaining.erase(std::find(remaining.begin(), remaining.end(), best));
  }
  return selected;
}

void WeightedMeanOfRows(const Rows& rows, const std::vector<int>& pick,
                        const std::vector<double>& weights, std::span<float> out,
                        const ReleaseFn& release) {
  double total_weight = 0;
  for (int i : pick) total_weight += weights[static_cast<size_t>(i)];
  std::vector<double> coeffs(rows.size(), 0.0);
  for (int i : pick)
    coeffs[static_cast<size_t>(i)] = weights[static_cast<size_t>(i)] / total_weight;
  LinearCombination(rows, coeffs, {}, out, release);
}

void ChangeDotsAndNorms(const Rows& rows, std::span<const float> base,
                        std::span<const float> direction, std::vector<double>& dots,
                        std::vector<double>& norms_sq, const ReleaseFn& release) {
  const size_t k = rows.size();
  const int64_t total = static_cast<int64_t>(base.size());
  const int workers = Workers((total + kColumnBlock - 1) / kColumnBlock);
  // Per worker: K dots then K norms.
  std::vector<std::vector<double>> partial(static_cast<size_t>(workers),
                                           std::vector<double>(2 * k, 0.0));
  ForEachBlock(total, workers, release, [&](int worker, int64_t first, int64_t count) {
    std::vector<double>& p = partial[static_cast<size_t>(worker)];
    const float* x = base.data() + first;
    const float* g = direction.data() + first;
    for (size_t i = 0; i < k; ++i) {
      const float* r = rows[i].data() + first;
      double dot = 0, norm = 0;
      for (int64_t j = 0; j < count; ++j) {
        const double d = static_cast<double>(r[j]) - x[j];
        dot += d * g[j];
        norm += d * d;
      }
      p[i] += dot;
      p[k + i] += norm;
    }
  });
  dots.assign(k, 0.0);
  norms_sq.assign(k, 0.0);
  for (const std::vector<double>& p : partial) {
    for (size_t i = 0; i < k; ++i) {
      dots[i] += p[i];
      norms_sq[i] += p[k + i];
    }
  }
}

void AddScaledChanges(const Rows& rows, const std::vector<double>& coeffs,
                      std::span<const float> base, std::span<float> out, const ReleaseFn& release) {
  LinearCombination(rows, coeffs, base, out, release);
}

void MeanClosestToMedian(const Rows& rows, const std::vector<int>& pick, int beta,
                         std::span<float> out, const ReleaseFn& release) {
  Rows picked;
  for (int i : pick) picked.push_back(rows[static_cast<size_t>(i)]);
  const int64_t n = static_cast<int64_t>(picked.size());
  // The rows not picked are released too: their blocks are never read, so that is harmless.
  PerSortedRun(picked, static_cast<int64_t>(out.size()), release,
               [&](const float* tile, int64_t count, int64_t first) {
                 for (int64_t t = 0; t < count; ++t) {
                   auto v = [&](int64_t i) { return tile[i * kRun + t]; };
                   const double m =
                       n % 2 == 1 ? v(n / 2) : (static_cast<double>(v(n / 2 - 1)) + v(n / 2)) / 2;
                   // The beta values nearest m form a window of the sorted values around it:
                   // grow it from m outwards, the nearer side first (ties: the lower value).
                   int64_t r = 0;
                   while (r < n && v(r) < m) ++r;
                   int64_t l = r - 1;
                   double sum = 0;
                   for (int taken = 0; taken < beta; ++taken) {
                     const bool take_left = r >= n || (l >= 0 && m - v(l) <= v(r) - m);
                     sum += take_left ? v(l--) : v(r++);
                   }
                   out[static_cast<size_t>(first + t)] =
                       static_cast<float>(sum / static_cast<double>(beta));
                 }
               });
}

}  // namespace fl::aggregation::internal
