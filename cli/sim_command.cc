#include "cli/sim_command.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/command_util.h"
#include "cli/key_flags.h"
#include "cli/sim_progress.h"
#include "fl/client/builtin_models.h"
#include "fl/common/logging.h"
#include "fl/server/store.h"
#include "fl/simulation/report.h"
#include "fl/simulation/run_report.h"
#include "server/admin/export.h"

namespace fl::cli {
namespace {

// What is no key of the file: the progress display.
void AddRunFlags(CLI::App* cmd, SimArgs& a) {
  cmd->add_flag(
      "--no-progress", [&a](int64_t) { a.progress = false; },
      "No progress bar, even on a terminal");
}

// The flags of every key that has one (the file's keys and the flags are one table: the [fit],
// [strategy], [privacy] and [secure_aggregation] keys are declared once with `fl server`'s). A
// numeric DP value turns DP on unless --dp-mode is given (in the mode that --secagg allows,
// decided after parsing: see RunSimCommand); a secure-aggregation value turns secure aggregation
// on; --csv implies --data csv.
void AddKeyTableFlags(CLI::App* cmd, SimArgs& a) {
  const std::map<std::string, CLI::Option*> options = AddKeyFlags(*cmd, SimConfigKeys(), a.config);
  for (const auto& [key, option] : options) {
    if (key.starts_with("privacy.") && key != "privacy.mode") {
      option->each([&a](const std::string&) { a.dp_value_given = true; });
    }
    if (key.starts_with("secure_aggregation.") && key != "secure_aggregation.enabled") {
      option->each([&a](const std::string&) { a.config.sim.secure_aggregation.enabled = true; });
    }
    if (key == "data.csv") option->each([&a](const std::string&) { a.config.sim.data = "csv"; });
  }
}

std::string PresetHelp() {
  std::string help = "Start from a preset (then --config, then flags):";
  for (const std::string& name : SimPresetNames()) {
    absl::StrAppend(&help, "\n  ", name, ": ", SimPresetDoc(name));
  }
  return help;
}

}  // namespace

absl::Status AddSimCommand(CLI::App& app, int argc, char** argv, SimArgs& a) {
  absl::Status early;
  a.preset = FlagValueBeforeParsing(argc, argv, "sim", "--preset");
  a.config_path = FlagValueBeforeParsing(argc, argv, "sim", "--config");
  if (!a.preset.empty()) early = ApplySimPreset(a.preset, a.config);
  if (early.ok() && !a.config_path.empty()) early = ApplySimConfig(a.config_path, a.config);

  CLI::App* cmd = app.add_subcommand(
      "sim",
      "Simulate a federation on this machine: the real engine, store and strategies, with "
      "virtual sites in process (default) or real clients over loopback mutual TLS");
  a.command = cmd;
  // --preset and --config were read before parsing; parsing writes the same values again (into
  // SimArgs, which outlives the parse: a local here would be written after it is gone).
  cmd->add_option("--preset", a.preset, PresetHelp());
  cmd->add_option("--config", a.config_path, "TOML configuration file; flags given override it");
  cmd->add_flag("--print-config-reference", a.print_config_reference,
                "Print every configuration key with its default and meaning, and exit");
  cmd->add_flag("--print-effective-config", a.print_effective_config,
                "Print the configuration from the preset, --config and the flags, and exit");
  AddRunFlags(cmd, a);
  AddKeyTableFlags(cmd, a);
  cmd->add_flag("--insecure-plaintext", a.plaintext, "grpc: loopback plaintext instead of TLS");
  cmd->add_flag("--verbose", a.verbose, "Log every server and client event to stderr");
  return early;
}

namespace {

std::string Describe(const simulation::SimulationOptions& o) {
  const std::string data = o.data == "csv"         ? absl::StrCat("CSV ", o.csv_path)
                           : o.data == "synthetic" ? absl::StrCat("Synthetic(", o.synthetic.alpha,
                                                                  ", ", o.synthetic.beta, ")")
                                                   : std::string("Fashion-MNIST");
  const std::string split = simulation::PartitionNameFor(o);
  const bool natural = split == "natural";
  const std::string sites = o.num_clients > 0       ? absl::StrCat(o.num_clients, " sites")
                            : !natural              ? std::string("10 sites")
                            : o.data == "synthetic" ? std::string("30 sites (devices)")
                                                    : std::string("a site per key");
  const std::string how =
      o.mpi ? "virtual sites on the ranks of an MPI job, over gRPC (simulated clock)"
      : o.transport == "inproc" ? "in process (virtual sites, simulated clock)"
      : o.tls ? "virtual sites over loopback gRPC with mutual TLS (simulated clock)"
              : "virtual sites over plaintext loopback gRPC (simulated clock)";
  return absl::StrCat("Simulated federation: ", sites, ", ", o.num_rounds, " rounds, ",
                      o.strategy.name, ", ", o.model, " on ", data, " (", split, " split), ", how);
}

// The report of the run, from its store as `fl report` makes it, with what only the simulation
// knows: the wall time of each round (with its evaluation) and the partition.
absl::Status WriteSimReport(const SimConfig& config, const simulation::SimulationResult& result,
                            const std::vector<double>& evaluate_seconds, std::string& prefix) {
  const std::string data_dir = result.db_path.substr(0, result.db_path.rfind('/'));
  absl::StatusOr<std::unique_ptr<server::Store>> store = server::Store::OpenReadOnly(data_dir);
  if (!store.ok()) return store.status();
  absl::StatusOr<simulation::RunReport> report =
      simulation::ReportFromStore(**store, result.run_id);
  if (!report.ok()) return report.status();
  for (size_t i = 0; i < report->rounds.size() && i < result.rounds.size(); ++i) {
    simulation::ReportRound& r = report->rounds[i];
    const double wall = absl::ToDoubleSeconds(result.rounds[i].wall_time);
    const double evaluate = i < evaluate_seconds.size() ? evaluate_seconds[i] : 0;
    r.duration_s = wall;
    r.phase_seconds = {{"train and aggregate", std::max(0.0, wall - evaluate)},
                       {"evaluate", evaluate}};
  }
  for (const simulation::PartySummary& party : result.partition.parties) {
    report->partition.push_back({party.num_examples, party.class_counts});
  }
  report->partition_summary_text = simulation::FormatPartitionSummary(result.partition);
  report->configuration_json = SimConfigToToml(config);  // not JSON: the page shows it verbatim
  report->wall_seconds = absl::ToDoubleSeconds(result.wall_time);
  report->generated_by = "fl sim";
  prefix = data_dir + "/report";
  return simulation::WriteReportFiles(*report, prefix);
}

// The report of a run that failed, from its store alone; best effort (the run's error matters
// more than the report's).
void WriteFailedRunReport(const SimConfig& config, const std::string& data_dir) {
  absl::StatusOr<std::unique_ptr<server::Store>> store = server::Store::OpenReadOnly(data_dir);
  if (!store.ok()) return;
  absl::StatusOr<int64_t> run_id = simulation::NewestRunId(**store);
  if (!run_id.ok()) return;
  absl::StatusOr<simulation::RunReport> report = simulation::ReportFromStore(**store, *run_id);
  if (!report.ok()) return;
  report->configuration_json = SimConfigToToml(config);
  report->generated_by = "fl sim";
  if (simulation::WriteReportFiles(*report, data_dir + "/report").ok()) {
    std::fprintf(stderr, "Report: %s/report.html (and .csv, .json)\n", data_dir.c_str());
  }
}

}  // namespace

int RunSimCommand(SimArgs& a) {
  SimConfig& config = a.config;
  simulation::SimulationOptions& options = config.sim;
  if (a.plaintext) options.tls = false;
  if (a.dp_value_given && a.command->get_option("--dp-mode")->count() == 0 &&
      options.privacy.mode == "off") {
    options.privacy.mode = options.secure_aggregation.enabled ? "distributed" : "central";
  }
  if (a.print_config_reference) {
    std::fputs(SimConfigReference().c_str(), stdout);
    return 0;
  }
  if (a.print_effective_config) {
    std::fputs(SimConfigToToml(config).c_str(), stdout);
    return 0;
  }
  if (absl::Status s = FinishSimConfig(config); !s.ok()) return Fail(s);
  if (!a.verbose && !std::getenv("FL_LOG_LEVEL")) SetLogLevel(LogLevel::kWarn);
  // Refuse bad choices before printing the run's header (on every MPI rank alike, before any of
  // them waits for another).
  if (absl::Status s = options.strategy.Validate(); !s.ok()) return Fail(s);
  if (absl::Status s = client::ParseModelKind(options.model).status(); !s.ok()) return Fail(s);
  if (absl::Status s = options.privacy.Validate(); !s.ok()) return Fail(s);
  if (absl::Status s = options.secure_aggregation.Validate(); !s.ok()) return Fail(s);
  absl::StatusOr<int32_t> rank = simulation::SimulationRank(options);
  if (!rank.ok()) return Fail(rank.status());
  if (*rank > 0) {  // an MPI rank that runs sites for rank 0, which reports
    absl::StatusOr<simulation::SimulationResult> served = simulation::RunSimulation(options);
    if (!served.ok()) {
      return Fail(absl::Status(served.status().code(),
                               absl::StrCat("rank ", *rank, ": ", served.status().message())));
    }
    return 0;
  }
  const bool dp = options.privacy.accounted();
  const SimConfig as_given = config;  // for the report: rerunning it makes a new run directory
  options.work_dir = absl::StrCat(options.work_dir, "/run-", absl::ToUnixMillis(absl::Now()));
  std::printf("%s\n", Describe(options).c_str());
  if (options.secure_aggregation.enabled) {
    std::printf(
        "Secure aggregation (SecAgg+): the server sees only the sum of the sites' changes\n");
  }
  if (dp) {
    std::printf("%s differential privacy: noise multiplier %g, clip norm %g, delta %g, %s\n",
                options.privacy.distributed() ? "Distributed" : "Central",
                options.privacy.noise_multiplier, options.privacy.clip_norm, options.privacy.delta,
                options.privacy.epsilon_budget > 0
                    ? absl::StrCat("epsilon budget ", options.privacy.epsilon_budget).c_str()
                    : "no epsilon budget");
  }
  std::fflush(stdout);
  SimProgress progress(stdout, a.progress && isatty(fileno(stdout)) != 0, options.num_rounds, dp);
  simulation::SimulationCallbacks callbacks;
  callbacks.on_setup = [&progress](const std::string& step) { progress.Setup(step); };
  callbacks.on_partition = [&progress](const simulation::PartitionSummary& summary) {
    progress.Partition(summary);
  };
  callbacks.on_training_start = [&progress] { progress.TrainingStarted(); };
  callbacks.on_round = [&progress](const simulation::SimulationRound& round) {
    progress.Round(round);
  };
  absl::StatusOr<simulation::SimulationResult> result =
      simulation::RunSimulation(options, callbacks);
  progress.Finish();
  if (!result.ok()) {
    // A run that failed is what a researcher most needs to look at: say where it is, and write
    // its report from the store when the run got that far.
    const std::string data_dir = options.work_dir + "/server";
    if (std::filesystem::exists(data_dir + "/federation.db")) {
      std::fprintf(stderr, "SQLite file with the run: %s/federation.db\n", data_dir.c_str());
      if (config.report) WriteFailedRunReport(as_given, data_dir);
    }
    return Fail(result.status());
  }
  int committed = 0;
  for (const auto& r : result->rounds) committed += r.summary.committed ? 1 : 0;
  if (!result->finish_reason.empty()) {
    std::printf("\nRun stopped early: %s\n", result->finish_reason.c_str());
  }
  std::printf("\nRun %lld finished: %d rounds committed, final test accuracy %.2f %%, %.1f s",
              static_cast<long long>(result->run_id), committed,
              100.0 * result->final_test_accuracy, absl::ToDoubleSeconds(result->wall_time));
  if (dp) {
    std::printf(", epsilon spent %.4f (delta %g)", result->dp_epsilon, options.privacy.delta);
    if (result->dp_epsilon_server > 0) {
      std::printf(", %.4f against the server (the most exposed site)", result->dp_epsilon_server);
    }
  }
  if (options.attack.poisons_updates()) {
    std::printf(", %lld updates poisoned (%s)", static_cast<long long>(result->poisoned_updates),
                options.attack.kind.c_str());
  }
  std::printf("\nSQLite file with the run: %s\n", result->db_path.c_str());
  const std::string data_dir = result->db_path.substr(0, result->db_path.rfind('/'));
  if (config.report) {
    std::vector<double> evaluate_seconds;
    for (const auto& r : result->rounds) {
      evaluate_seconds.push_back(absl::ToDoubleSeconds(r.evaluate_time));
    }
    std::string prefix;
    if (absl::Status s = WriteSimReport(as_given, *result, evaluate_seconds, prefix); !s.ok()) {
      return Fail(s);
    }
    std::printf("Report: %s.html (and .csv, .json)\n", prefix.c_str());
  }
  if (!config.export_path.empty()) {
    // The committed global model, read back from the run's own store as `fl admin export` does.
    absl::StatusOr<std::unique_ptr<server::Store>> store = server::Store::OpenReadOnly(data_dir);
    if (!store.ok()) return Fail(store.status());
    server::admin::ExportRequest request;
    request.run_id = result->run_id;
    absl::StatusOr<server::admin::ExportedModel> exported =
        server::admin::ExportModel(**store, request, config.export_path);
    if (!exported.ok()) return Fail(exported.status());
    std::printf("Global model of round %d: %s\n", exported->round, config.export_path.c_str());
  }
  return 0;
}

}  // namespace fl::cli
