// Robust aggregation's kernels and memory (issue 16).
//
// Speed: `robust_kernel_bench --data FILE [--sites 10] [--params 10000000] [--repeats 5]
//   [--threads 0] [--out DIR]` times, on the K x P float32 updates in FILE (written first when it
// is missing: seeded normal values), each kernel as the strategies run it over a mapped spill:
// coordinate-wise median, trimmed mean (beta 0.2), Krum (f = 2), Bulyan (f = 1). The table gives
// the median of the repeats. With --out, each result goes to DIR/<kernel>.f32, so that
// bench/robust_kernels_compare.sh can run Flower's numpy functions on the same FILE and compare
// both the time and the values.
//
// Memory: `robust_kernel_bench --memory STRATEGY --spill DIR [--sites 100] [--params 10000000]`
// runs one round of the real strategy (fedmedian, fedtrimmedavg, krum, multikrum, bulyan): K
// updates written piece by piece (1 MiB, as the engine does) into its spill in DIR, then Finish.
// It prints the process's peak resident memory (VmHWM, which counts the mapped spill pages this
// process touched too) against one model's size, and the peaks of the heap (RssAnon) and of the
// spill's mapped page cache (RssFile) sampled every 2 ms during Finish. f is
// K / 5 - 1 (19 of 100), within Bulyan's K >= 4f + 3.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/time/clock.h"
#include "aggregation/internal/robust_kernels.h"
#include "fl/aggregation/robust.h"
#include "fl/aggregation/strategies.h"

namespace {

namespace ik = fl::aggregation::internal;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// "VmHWM" or "RssFile" from /proc/self/status, in MiB.
double StatusMiB(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stod(line.substr(key.size() + 1)) / 1024.0;
  }
  return -1;
}

bool WriteData(const std::string& path, int sites, int64_t params) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  std::mt19937_64 rng(2026);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> piece(1 << 20);
  for (int k = 0; k < sites; ++k) {
    for (int64_t done = 0; done < params;) {
      const size_t n = static_cast<size_t>(std::min<int64_t>(piece.size(), params - done));
      for (size_t i = 0; i < n; ++i) piece[i] = normal(rng);
      if (std::fwrite(piece.data(), sizeof(float), n, f) != n) return false;
      done += static_cast<int64_t>(n);
    }
  }
  return std::fclose(f) == 0;
}

int Speed(const std::string& path, int sites, int64_t params, int repeats, const std::string& out) {
  const off_t bytes = static_cast<off_t>(sites) * params * 4;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || st.st_size != bytes) {
    std::fprintf(stderr, "writing %s (%d x %lld floats)\n", path.c_str(), sites,
                 static_cast<long long>(params));
    if (!WriteData(path, sites, params)) {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
      return 1;
    }
  }
  const int fd = ::open(path.c_str(), O_RDONLY);
  void* map = fd < 0 ? MAP_FAILED : ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    std::fprintf(stderr, "cannot map %s\n", path.c_str());
    return 1;
  }
  ik::Rows rows;
  for (int k = 0; k < sites; ++k) {
    rows.emplace_back(static_cast<const float*>(map) + static_cast<int64_t>(k) * params,
                      static_cast<size_t>(params));
  }
  std::vector<float> result(static_cast<size_t>(params));
  const std::vector<double> ones(static_cast<size_t>(sites), 1.0);
  const int cut = static_cast<int>(0.2 * sites);
  std::vector<std::pair<std::string, std::function<void()>>> kernels = {
      {"median", [&] { ik::CoordinateMedian(rows, result); }},
      {"trimmed_avg", [&] { ik::TrimmedMean(rows, cut, result); }},
      {"krum",
       [&] {
         std::vector<int> all(sites);
         for (int i = 0; i < sites; ++i) all[i] = i;
         const std::vector<double> d2 = ik::SquaredDistances(rows);
         ik::WeightedMeanOfRows(rows, ik::KrumSelect(d2, sites, all, 2, 1), ones, result);
       }},
      {"bulyan",
       [&] {
         const std::vector<double> d2 = ik::SquaredDistances(rows);
         ik::MeanClosestToMedian(rows, ik::BulyanSelect(d2, sites, 1), sites - 4, result);
       }},
  };
  // Warm the page cache and the mapping once, as a spill just written is.
  volatile float touched = 0;
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); i += 1024) touched = touched + r[i];
  }
  std::printf("%d updates x %lld parameters (%.0f MB each), repeats %d (medians)\n\n", sites,
              static_cast<long long>(params), params * 4 / 1e6, repeats);
  std::printf("| kernel | seconds |\n|---|---|\n");
  for (auto& [name, run] : kernels) {
    std::vector<double> s;
    for (int r = 0; r < repeats; ++r) {
      const absl::Time t0 = absl::Now();
      run();
      s.push_back(absl::ToDoubleSeconds(absl::Now() - t0));
    }
    std::printf("| %s | %.3f |\n", name.c_str(), Median(s));
    std::fprintf(stdout, "RESULT kernel=%s seconds=%.6f\n", name.c_str(), Median(s));
    if (!out.empty()) {
      std::FILE* f = std::fopen((out + "/" + name + ".f32").c_str(), "wb");
      if (f == nullptr || std::fwrite(result.data(), 4, result.size(), f) != result.size()) {
        std::fprintf(stderr, "cannot write %s/%s.f32\n", out.c_str(), name.c_str());
        return 1;
      }
      std::fclose(f);
    }
  }
  return 0;
}

int Memory(const std::string& name, const std::string& spill, int sites, int64_t params) {
  absl::StatusOr<std::unique_ptr<fl::aggregation::Strategy>> strategy =
      fl::aggregation::MakeStrategy({.name = name, .num_malicious = std::max(0, sites / 5 - 1)}, {},
                                    fl::aggregation::MakeFileSpill(spill));
  if (!strategy.ok()) {
    std::fprintf(stderr, "%s\n", strategy.status().ToString().c_str());
    return 1;
  }
  const double model_mib = params * 4 / 1048576.0;
  const double base = StatusMiB("VmHWM");
  fl::Model global(fl::ModelSpec({{"w", {params}}}));
  std::unique_ptr<fl::aggregation::RoundAggregator> agg = (*strategy)->BeginRound(global);
  std::vector<float> piece(1 << 18);  // 1 MiB
  uint64_t x = 88172645463325252ull;
  const absl::Time t0 = absl::Now();
  for (int k = 0; k < sites; ++k) {
    absl::StatusOr<std::unique_ptr<fl::aggregation::UpdateSink>> sink =
        agg->BeginUpdate({.weight = 1.0});
    if (!sink.ok()) {
      std::fprintf(stderr, "%s\n", sink.status().ToString().c_str());
      return 1;
    }
    for (int64_t done = 0; done < params;) {
      const size_t n = static_cast<size_t>(std::min<int64_t>(piece.size(), params - done));
      for (size_t i = 0; i < n; ++i) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        piece[i] = static_cast<float>(x >> 40) * 1e-7f - 0.8f;
      }
      if (absl::Status s = (*sink)->Write(done, std::span<const float>(piece.data(), n)); !s.ok()) {
        std::fprintf(stderr, "%s\n", s.ToString().c_str());
        return 1;
      }
      done += static_cast<int64_t>(n);
    }
    if (!(*sink)->Accept().ok()) return 1;
  }
  const double written_s = absl::ToDoubleSeconds(absl::Now() - t0);
  const double after_writes = StatusMiB("VmHWM");
  // VmHWM mixes the heap with the spill's mapped page cache (the kernel maps a file's large
  // folios whole, so up to about a MiB of each update can be mapped at once): a sampler tells the
  // two apart while Finish runs.
  std::atomic<bool> sampling{true};
  double peak_anon = 0, peak_file = 0;
  std::thread sampler([&] {
    while (sampling.load()) {
      peak_anon = std::max(peak_anon, StatusMiB("RssAnon"));
      peak_file = std::max(peak_file, StatusMiB("RssFile"));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  const absl::Time t1 = absl::Now();
  absl::StatusOr<fl::Model> next = agg->Finish();
  const double finish_s = absl::ToDoubleSeconds(absl::Now() - t1);
  sampling = false;
  sampler.join();
  if (!next.ok()) {
    std::fprintf(stderr, "%s\n", next.status().ToString().c_str());
    return 1;
  }
  const double peak = StatusMiB("VmHWM");
  std::printf(
      "RESULT strategy=%s sites=%d model_mib=%.1f base_mib=%.1f peak_after_writes_mib=%.1f "
      "peak_mib=%.1f peak_over_model=%.2f write_s=%.2f finish_s=%.2f peak_anon_mib=%.1f "
      "peak_anon_over_model=%.2f peak_mapped_file_mib=%.1f\n",
      name.c_str(), sites, model_mib, base, after_writes, peak, peak / model_mib, written_s,
      finish_s, peak_anon, peak_anon / model_mib, peak_file);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Robust aggregation: kernel speed on a file of updates, or one round's memory"};
  std::string data, out, memory, spill;
  int sites = 10;
  int64_t params = 10'000'000;
  int repeats = 5;
  int threads = 0;
  app.add_option("--data", data, "K x P float32 updates (written first when missing)");
  app.add_option("--out", out, "directory for each kernel's result (<kernel>.f32)");
  app.add_option("--memory", memory, "a robust strategy: measure one round's peak memory");
  app.add_option("--spill", spill, "the spill directory (--memory)");
  app.add_option("--sites", sites, "updates K")->check(CLI::Range(1, 1000));
  app.add_option("--params", params, "parameters P")->check(CLI::Range(1, 1'000'000'000));
  app.add_option("--repeats", repeats, "runs per kernel")->check(CLI::Range(1, 50));
  app.add_option("--threads", threads, "kernel threads (0: every core)")->check(CLI::Range(0, 256));
  CLI11_PARSE(app, argc, argv);
  ik::SetKernelThreads(threads);
  if (!memory.empty()) {
    if (spill.empty()) {
      std::fprintf(stderr, "--memory needs --spill DIR\n");
      return 2;
    }
    return Memory(memory, spill, sites, params);
  }
  if (data.empty()) {
    std::fprintf(stderr, "give --data FILE (speed) or --memory STRATEGY --spill DIR\n");
    return 2;
  }
  return Speed(data, sites, params, repeats, out);
}
