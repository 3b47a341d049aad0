// What a round's commit does to everyone else (issue 15): while the commit of a large model runs
// (the strategy's finish, the checkpoint's write and fsync, the store's commit), how long do the
// engine calls that sites' polls, heartbeats and downloads make wait, and how long does the
// upload that closed the round take to return?
//   commit_stall_bench [--mib 1024] [--work-dir DIR] [--repeats 3]
//
// Workload: the round engine over a real SQLite store and real checkpoint files in --work-dir
// (fsync included), FedAvg, two sites that each upload a model of --mib MiB (float32) through the
// engine's Upload API, and a third site, joined after the round started, that probes the engine
// from its own thread every millisecond: Poll, Heartbeat and ModelForTask (a download's call),
// timing each call. The engine runs as a server runs it (EngineOptions::commit_thread: the
// commit on the engine's own thread). Reported (medians over --repeats runs): the closing
// upload's Finish (which folds that site's update), the commit (from Finish's start to the
// committed round being visible), the probes answered while it ran, their median and largest
// latency. Before issue 15 the commit ran inside the closing upload's call under the engine's
// lock: the closing Finish took the whole time, and the largest probe waited about as long as
// the commit after the fold (run this file against the engine of commit ce8a18c, without the
// commit_thread line, for those figures).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "fl/aggregation/fedavg.h"
#include "fl/common/chunking.h"
#include "fl/common/logging.h"
#include "fl/server/engine.h"
#include "fl/server/store.h"

namespace {

using fl::Model;
using fl::ModelSpec;
using fl::server::RoundEngine;
using fl::server::Task;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "commit_stall_bench: %s\n", what.c_str());
  std::exit(1);
}

template <typename T>
T Check(absl::StatusOr<T> v, const char* what) {
  if (!v.ok()) Die(absl::StrCat(what, ": ", v.status().ToString()));
  return *std::move(v);
}

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) Die(absl::StrCat(what, ": ", s.ToString()));
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

struct Result {
  double finish_s = 0;  // the closing upload's Finish call
  double commit_s = 0;  // Finish's start to the committed round being visible
  int probes = 0;       // probe calls answered meanwhile
  double probe_p50_ms = 0;
  double probe_max_ms = 0;
};

// Streams `model` as `site`'s update for `task`, all but Finish; returns the open upload.
std::unique_ptr<fl::server::Upload> StreamUpdate(RoundEngine& engine, const std::string& site,
                                                 const Task& task, const Model& model) {
  fl::server::UpdateMeta meta;
  meta.run_id = task.run_id;
  meta.round = task.round;
  meta.task_id = task.task_id;
  meta.num_examples = 100;
  meta.payload_bytes = model.NumBytes();
  std::unique_ptr<fl::server::Upload> upload =
      Check(engine.BeginUpload(site, meta), "begin upload");
  Check(fl::ForEachChunk(model.bytes(), fl::kMaxChunkBytes,
                         [&](int64_t offset, std::span<const std::byte> bytes) {
                           return upload->AddChunk(
                               offset, std::string_view(reinterpret_cast<const char*>(bytes.data()),
                                                        bytes.size()));
                         }),
        "stream update");
  return upload;
}

Result RunOnce(const std::string& work_dir, const Model& update) {
  const std::string dir = absl::StrCat(work_dir, "/run");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/spill");
  Result r;
  {
    std::unique_ptr<fl::server::Store> store = Check(fl::server::Store::Open(dir), "open store");
    std::unique_ptr<fl::aggregation::Strategy> fedavg = fl::aggregation::MakeFedAvg();
    fl::server::EngineOptions options;
    options.num_rounds = 2;
    options.min_clients = 2;
    options.min_fit_clients = 2;
    options.spill_dir = dir + "/spill";
    options.commit_thread = true;
    std::unique_ptr<RoundEngine> engine =
        Check(RoundEngine::Create(options, store.get(), fedavg.get(), fl::server::Clock::Real(),
                                  Model(update.spec()), {}),
              "create engine");
    for (const char* site : {"site-a", "site-b"}) Check(engine->Join(site, site), "join");
    const Task task_a = engine->Poll("site-a");
    const Task task_b = engine->Poll("site-b");
    if (task_a.kind != Task::Kind::kFit || task_b.kind != Task::Kind::kFit) Die("no fit tasks");
    Check(engine->Join("observer", "observer"), "join observer");  // not sampled in round 1
    Check(StreamUpdate(*engine, "site-a", task_a, update)->Finish(update.Sha256Hex()), "finish a");
    std::unique_ptr<fl::server::Upload> last = StreamUpdate(*engine, "site-b", task_b, update);

    // The observer's probes, each timed; kept with when they started.
    struct Probe {
      absl::Time at;
      double ms;
    };
    std::vector<Probe> probes;
    std::atomic<bool> stop{false};
    std::thread prober([&] {
      while (!stop.load()) {
        for (int call = 0; call < 3; ++call) {
          const absl::Time t0 = absl::Now();
          switch (call) {
            case 0:
              (void)engine->Poll("observer");
              break;
            case 1:
              (void)engine->Heartbeat("observer", 0, "");
              break;
            default:
              (void)engine->ModelForTask("observer", task_a.run_id, 1, "not-a-task");
          }
          probes.push_back({t0, absl::ToDoubleMilliseconds(absl::Now() - t0)});
        }
        absl::SleepFor(absl::Milliseconds(1));
      }
    });
    const absl::Time start = absl::Now();
    Check(last->Finish(update.Sha256Hex()), "finish b");
    r.finish_s = absl::ToDoubleSeconds(absl::Now() - start);
    while (engine->committed_round() < 1) absl::SleepFor(absl::Microseconds(200));
    const absl::Time committed = absl::Now();
    r.commit_s = absl::ToDoubleSeconds(committed - start);
    stop = true;
    prober.join();
    std::vector<double> during;
    for (const Probe& p : probes) {
      if (p.at >= start && p.at < committed) during.push_back(p.ms);
    }
    r.probes = static_cast<int>(during.size());
    r.probe_p50_ms = Median(during);
    r.probe_max_ms = during.empty() ? 0 : *std::max_element(during.begin(), during.end());
    engine->Abort("benchmark over");
  }
  std::filesystem::remove_all(dir);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Polls, heartbeats and downloads while a large round commits"};
  int64_t mib = 1024;
  std::string work_dir = "/tmp/commit_stall_bench";
  int repeats = 3;
  app.add_option("--mib", mib, "model size in MiB (float32)")->check(CLI::Range(1, 16384));
  app.add_option("--work-dir", work_dir, "where the store, spills and checkpoints go");
  app.add_option("--repeats", repeats, "runs (the table gives medians)")->check(CLI::Range(1, 20));
  CLI11_PARSE(app, argc, argv);
  fl::SetLogLevel(fl::LogLevel::kWarn);

  const int64_t floats = mib * 1024 * 1024 / 4;
  Model update(ModelSpec({{"w", {floats}}}));
  for (size_t i = 0; i < update.data().size(); ++i) update.data()[i] = 1e-3f * (i % 1000);

  std::vector<Result> runs;
  for (int i = 0; i < repeats; ++i) runs.push_back(RunOnce(work_dir, update));
  std::printf("model %lld MiB, FedAvg, 2 sites, store and checkpoints in %s, %d runs (medians)\n\n",
              static_cast<long long>(mib), work_dir.c_str(), repeats);
  auto med = [&](auto field) {
    std::vector<double> v;
    for (const Result& r : runs) v.push_back(static_cast<double>(r.*field));
    return Median(v);
  };
  std::printf(
      "| closing Finish (s) | Finish to committed (s) | probes meanwhile | probe p50 (ms) | "
      "probe max (ms) |\n|---|---|---|---|---|\n");
  std::printf("| %.2f | %.2f | %.0f | %.3f | %.1f |\n", med(&Result::finish_s),
              med(&Result::commit_s), med(&Result::probes), med(&Result::probe_p50_ms),
              med(&Result::probe_max_ms));
  return 0;
}
