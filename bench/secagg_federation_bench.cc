// Secure aggregation end to end: the real server and real SDK clients over mutual TLS on loopback,
// in one process, one round of plain FedAvg and then one secure round (SecAgg+) on the same
// workload, with a share of the clients dropping out right after they shared their keys (the case
// that costs the server most: their pairwise masks must be rebuilt). Each client's trainer only
// perturbs the global model, so that the framework and the protocol are measured, not training.
// Prints one table.
//   secagg_federation_bench [--clients 100] [--params 1000000] [--dropout 0.1] [--seed 1]
//
// Figures: the round's wall time (start to commit, from the engine's round summary) and its
// stages (from the round's secagg_json); CPU seconds of the client threads (each client runs on
// its own thread; median and total) and of the rest of the process (the server, and gRPC's own
// threads on both sides); bytes each client uploads (the server's count of received payload
// bytes, plus the secure stages' messages as relayed) and the expansion over the b-bit values in
// the clear, next to the 1.73x Bonawitz et al. (CCS 2017) report for 2^10 clients and 2^20
// values. bench/secagg_bench measures the protocol's math alone, without the network.
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "bench/bench_check.h"
#include "bench/bench_federation.h"
#include "fl/client/client.h"
#include "fl/client/trainer.h"
#include "fl/common/logging.h"
#include "fl/common/provision.h"
#include "fl/server/server.h"
#include "fl/server/store.h"
#include "nlohmann/json.hpp"

namespace {

using fl::bench::ProcessCpuSeconds;

using fl::bench::Check;

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}
double PeakRssMiB() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

struct RunFigures {
  double round_s = 0;
  std::string stages;         // "keys 0.31 s, shares ..." (secure rounds)
  double last_input_s = 0;    // when the last masked input was summed (secure rounds)
  double masked_close_s = 0;  // when the masked-input stage closed
  double client_cpu_median_s = 0;
  double client_cpu_total_s = 0;
  double rest_cpu_s = 0;  // server and gRPC threads
  double upload_bytes_per_client = 0;
  double secagg_bytes_per_client = 0;
  int accepted = 0;
  int sampled = 0;
  int quantization_bits = 0;
  double peak_rss_mib = 0;
};

RunFigures RunOnce(const fl::ProvisionedFiles& pki, const std::string& dir, int clients,
                   size_t params, double dropout, bool secure, uint64_t seed,
                   absl::Duration client_timeout) {
  std::filesystem::remove_all(dir);
  const fl::ModelSpec spec({{"w", {static_cast<int64_t>(params)}}});
  fl::server::ServerOptions so = fl::bench::TlsServerOptions(pki, dir);
  so.engine.run_name = secure ? "secagg" : "plain";
  so.engine.min_clients = clients;
  so.engine.min_fit_clients = std::max(3, clients / 2);
  so.engine.round_timeout = absl::Minutes(10);
  // Clients that stop are noticed after `client_timeout` of silence; the survivors heartbeat
  // every second while busy, but 100 clients on a few cores can starve a heartbeat for seconds.
  so.engine.client_timeout = client_timeout;
  so.engine.max_round_retries = 0;  // a failed round ends the benchmark with its reason
  so.engine.wait_timeout = absl::Minutes(2);
  so.engine.seed = seed;
  so.engine.secure_aggregation.enabled = secure;
  so.engine.secure_aggregation.clip_range = 0.05;  // the changes are within +-0.01
  so.engine.secure_aggregation.stage_timeout = absl::Seconds(60);
  so.max_poll_wait = absl::Seconds(2);

  std::mutex mu;
  fl::server::RoundSummary summary;
  bool have_summary = false;
  double cpu_at_start = 0;
  fl::server::EngineHooks hooks;
  hooks.on_round_end = [&](const fl::server::RoundSummary& s) {
    std::lock_guard<std::mutex> lock(mu);
    summary = s;
    have_summary = true;
  };
  fl::Model initial(spec);
  std::unique_ptr<fl::server::Server> server =
      Check(fl::server::Server::Start(so, std::move(initial), hooks), "server start");
  const std::string address = absl::StrCat("127.0.0.1:", server->port());

  const int dropping = secure ? static_cast<int>(clients * dropout + 0.5) : 0;
  std::vector<std::unique_ptr<fl::bench::PerturbTrainer>> trainers;
  std::vector<std::unique_ptr<fl::client::Client>> sdk;
  for (int i = 0; i < clients; ++i) {
    trainers.push_back(
        std::make_unique<fl::bench::PerturbTrainer>(spec, seed * 1000 + i, 100 + 7 * i));
    fl::client::ClientOptions co = fl::bench::TlsClientOptions(pki, i, address);
    co.poll_wait = absl::Seconds(2);
    co.heartbeat_interval = absl::Seconds(1);
    sdk.push_back(Check(fl::client::Client::Create(co, trainers.back().get()), "client"));
    if (i < dropping) {
      fl::client::Client* c = sdk.back().get();
      c->set_on_task([c](const fl::client::TaskReport& r) {
        if (r.stage == "secagg_share_keys") c->Stop();  // drops out after sharing its keys
      });
    }
  }
  std::vector<double> client_cpu(static_cast<size_t>(clients), 0);
  std::vector<std::thread> threads;
  cpu_at_start = ProcessCpuSeconds();
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      const double t0 = ThreadCpuSeconds();
      (void)sdk[static_cast<size_t>(i)]->Run();
      client_cpu[static_cast<size_t>(i)] = ThreadCpuSeconds() - t0;
    });
  }
  server->WaitUntilFinished(absl::Seconds(3));
  for (std::thread& t : threads) t.join();
  const double process_cpu = ProcessCpuSeconds() - cpu_at_start;

  RunFigures f;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!have_summary || !summary.committed) {
      std::fprintf(stderr, "%s round did not commit: %s\n", secure ? "secure" : "plain",
                   summary.reason.c_str());
      std::exit(1);
    }
    f.round_s = absl::ToDoubleSeconds(summary.duration);
    f.accepted = summary.num_accepted;
    f.sampled = summary.num_sampled;
  }
  std::vector<double> sorted = client_cpu;
  std::sort(sorted.begin(), sorted.end());
  f.client_cpu_median_s = sorted[sorted.size() / 2];
  for (double c : client_cpu) f.client_cpu_total_s += c;
  f.rest_cpu_s = process_cpu - f.client_cpu_total_s;
  fl::server::Store& store = server->store();
  const int64_t run = server->engine().run_id();
  std::vector<fl::server::ParticipationRecord> parts =
      Check(store.Participations(run, 1), "participations");
  int64_t uploaded = 0;
  int uploaders = 0;
  for (const auto& p : parts) {
    if (p.status != fl::server::ParticipationStatus::kAccepted) continue;
    uploaded += p.bytes_received;
    ++uploaders;
  }
  f.upload_bytes_per_client = uploaders > 0 ? static_cast<double>(uploaded) / uploaders : 0;
  for (const fl::server::RoundRecord& r : Check(store.Rounds(run), "rounds")) {
    if (r.status != fl::server::RoundStatus::kCommitted || r.secagg_json.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(r.secagg_json, nullptr, false);
    if (!j.is_object()) continue;
    if (j.contains("params")) f.quantization_bits = j["params"].value("b", 0);
    const double relay = j.value("relay_bytes", 0.0);
    const int u1 = j.value("u1", 0);
    if (u1 > 0) f.secagg_bytes_per_client = relay / u1;
    f.last_input_s = j.value("last_input_ms", 0.0) / 1000.0;
    if (j.contains("stage_ms") && j["stage_ms"].is_array()) {
      static constexpr const char* kNames[] = {"keys", "shares", "masked input", "unmask"};
      double prev = 0;
      for (size_t s = 0; s < j["stage_ms"].size() && s < 4; ++s) {
        const double at = j["stage_ms"][s].get<double>();
        absl::StrAppend(&f.stages, s ? ", " : "", kNames[s], " ",
                        absl::StrFormat("%.2f", (at - prev) / 1000.0), " s");
        if (s == 2) {
          f.masked_close_s = at / 1000.0;
          absl::StrAppend(&f.stages, " (last input summed at ",
                          absl::StrFormat("%.2f", f.last_input_s), " s; then waiting for the ",
                          "dropped clients to time out)");
        }
        prev = at;
      }
    }
  }
  f.peak_rss_mib = PeakRssMiB();
  server->Shutdown();
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Secure aggregation end to end against plain FedAvg: one round each, same run");
  int clients = 100;
  size_t params = 1000000;
  double dropout = 0.1;
  uint64_t seed = 1;
  std::string work_dir = "/tmp/secagg_federation_bench";
  double client_timeout_s = 20;
  app.add_option("--clients", clients)->check(CLI::Range(3, 1000));
  app.add_option("--params", params)->check(CLI::PositiveNumber);
  app.add_option("--dropout", dropout, "Share of clients dropping after sharing their keys")
      ->check(CLI::Range(0.0, 0.45));
  app.add_option("--seed", seed);
  app.add_option("--work-dir", work_dir);
  app.add_option("--client-timeout", client_timeout_s,
                 "Seconds of silence before the server drops a client (the dropouts' cost)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (!std::getenv("FL_LOG_LEVEL")) fl::SetLogLevel(fl::LogLevel::kError);

  std::filesystem::remove_all(work_dir);
  const fl::ProvisionedFiles pki = fl::bench::ProvisionSites(work_dir, clients);

  std::printf(
      "Workload: %d clients over mutual TLS on loopback, %zu float32 parameters, one "
      "round each; secure round: %.0f %% of the clients drop after sharing their keys\n",
      clients, params, dropout * 100);
  std::fflush(stdout);
  const absl::Duration timeout = absl::Seconds(client_timeout_s);
  const RunFigures plain =
      RunOnce(pki, work_dir + "/plain", clients, params, 0, false, seed, timeout);
  const RunFigures secure =
      RunOnce(pki, work_dir + "/secure", clients, params, dropout, true, seed, timeout);

  const double clear_bytes = static_cast<double>(params) * secure.quantization_bits / 8.0;
  const double secure_up = secure.upload_bytes_per_client + secure.secagg_bytes_per_client;
  std::printf("\n| %-34s | %14s | %14s | %7s |\n", "", "plain FedAvg", "SecAgg+", "ratio");
  std::printf("|%s|%s|%s|%s|\n", std::string(36, '-').c_str(), std::string(16, '-').c_str(),
              std::string(16, '-').c_str(), std::string(9, '-').c_str());
  auto row = [](const char* name, double a, double b, const char* fmt) {
    std::printf("| %-34s | %14s | %14s | %7s |\n", name, absl::StrFormat(fmt, a).c_str(),
                absl::StrFormat(fmt, b).c_str(),
                a > 0 ? absl::StrFormat("%.2fx", b / a).c_str() : "-");
  };
  row("round wall time (s)", plain.round_s, secure.round_s, "%.2f");
  if (secure.last_input_s > 0) {
    // The secure round without the wait for the dropped clients to time out: stages 1-2, the
    // masked inputs up to the last one, and the unmasking.
    row("  without the dropout timeout (s)", plain.round_s,
        secure.round_s - (secure.masked_close_s - secure.last_input_s), "%.2f");
  }
  row("client CPU, median per client (s)", plain.client_cpu_median_s, secure.client_cpu_median_s,
      "%.3f");
  row("client CPU, all clients (s)", plain.client_cpu_total_s, secure.client_cpu_total_s, "%.2f");
  row("server + gRPC threads CPU (s)", plain.rest_cpu_s, secure.rest_cpu_s, "%.2f");
  row("upload payload per client (bytes)", plain.upload_bytes_per_client,
      secure.upload_bytes_per_client, "%.0f");
  row("shares relayed per client (bytes)", 0, secure.secagg_bytes_per_client, "%.0f");
  std::printf("| %-34s | %14d | %14d | %7s |\n", "updates summed / sampled", plain.accepted,
              secure.accepted, "");
  std::printf("\nSecure round's stages: %s\n",
              secure.stages.empty() ? "(not recorded)" : secure.stages.c_str());
  if (secure.quantization_bits > 0) {
    std::printf(
        "Expansion of a client's upload over its %d-bit values in the clear: %.3fx "
        "(Bonawitz et al. 2017: 1.73x for 2^10 clients, 2^20 values, 16-bit values)\n",
        secure.quantization_bits, secure_up / clear_bytes);
  }
  std::printf("Upload over a float32 update: %.4fx; peak RSS of the process %.0f MiB\n",
              secure_up / (4.0 * static_cast<double>(params)), secure.peak_rss_mib);
  return 0;
}
