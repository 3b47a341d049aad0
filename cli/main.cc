// fl: the one command-line program of the federation: provisioning, the server, a generic client
// and simulation.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "cli/admin_command.h"
#include "cli/certs_command.h"
#include "cli/client_config.h"
#include "cli/client_daemon.h"
#include "cli/client_site.h"
#include "cli/command_util.h"
#include "cli/exit_codes.h"
#include "cli/key_flags.h"
#include "cli/preflight.h"
#include "cli/report_command.h"
#include "cli/run_command.h"
#include "cli/sim_command.h"
#include "fl/aggregation/scaffold.h"
#include "fl/aggregation/strategies.h"
#include "fl/client/builtin_models.h"
#include "fl/client/client.h"
#include "fl/client/dataset.h"
#include "fl/client/softmax_trainer.h"
#include "fl/common/file_util.h"
#include "fl/common/logging.h"
#include "fl/common/provision.h"
#include "fl/common/safetensors.h"
#include "fl/server/server.h"
#include "fl/server/store.h"
#include "fl/simulation/evaluation.h"
#include "fl/simulation/simulation.h"
#include "server/admin/export.h"
#include "server/daemon/config.h"

namespace {

using fl::cli::Fail;

sigset_t TerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

// Blocks SIGINT and SIGTERM; call before the subcommand starts any thread, so that every thread
// inherits the mask and only the WatchSignals thread receives them.
void BlockTerminationSignals() {
  const sigset_t signals = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
}

// Returns a thread that calls `on_signal` when SIGINT or SIGTERM arrives (after
// BlockTerminationSignals).
std::thread WatchSignals(std::function<void(int)> on_signal) {
  return std::thread([set = TerminationSignals(), on_signal] {
    int sig = 0;
    sigwait(&set, &sig);
    on_signal(sig);
  });
}

// `fl server --config FILE` / `fl client --config FILE`: the file's path, looked up before CLI11
// parses so that the file fills the option structs first and CLI11 then overwrites only the flags
// given. Empty when none.
std::string ConfigPath(int argc, char** argv, std::string_view subcommand) {
  return fl::cli::FlagValueBeforeParsing(argc, argv, subcommand, "--config");
}

// The built-in architecture of the server's [model], or INVALID_ARGUMENT saying what does not fit.
absl::StatusOr<fl::client::ModelArchitecture> ServerModelArchitecture(
    const fl::server::ServerModelOptions& m) {
  absl::StatusOr<fl::client::ModelKind> kind = fl::client::ParseModelKind(m.kind);
  if (!kind.ok()) return kind.status();
  fl::client::ModelArchitecture arch;
  arch.kind = *kind;
  arch.num_features = m.features;
  arch.num_classes = m.classes;
  arch.hidden = m.hidden;
  arch.image_height = m.image_height;
  arch.image_width = m.image_width;
  arch.image_channels = m.image_channels;
  if (absl::Status s = fl::client::BuiltinModelSpec(arch).status(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("model '", m.kind, "': ", s.message()));
  }
  return arch;
}

// A run's model, strategy, engine options and evaluation hook from a server configuration: the
// server's own run, and each run file submitted through the control API (over the same).
absl::StatusOr<fl::server::RunSetup> MakeRunSetup(fl::server::ServerConfig config) {
  absl::StatusOr<fl::client::ModelArchitecture> arch;
  absl::StatusOr<fl::Model> weights;
  if (!config.model.initial.empty()) {
    // The sites' own model, from a file: no built-in architecture, so no model name in tasks.
    weights = fl::ReadSafetensors(config.model.initial);
    if (!weights.ok()) {
      return absl::Status(
          weights.status().code(),
          absl::StrCat("model.initial (--initial-model): ", weights.status().message(),
                       "; give a safetensors file of float tensors, e.g. one written by "
                       "fl::WriteSafetensors in the order the sites' Trainer::spec() lists them"));
    }
    config.server.engine.fit.model_name.clear();
    fl::LogEvent(fl::LogLevel::kInfo, "initial_model",
                 {{"file", config.model.initial},
                  {"tensors", absl::StrCat(weights->spec().tensors().size())},
                  {"parameters", absl::StrCat(weights->spec().NumFloats())},
                  {"sha256", weights->Sha256Hex()}});
  } else {
    arch = ServerModelArchitecture(config.model);
    if (!arch.ok()) return arch.status();
    weights = fl::client::InitialBuiltinModel(*arch, config.model.init_seed);
    if (!weights.ok()) return weights.status();
    config.server.engine.fit.model_name = std::string(fl::client::ModelKindName(arch->kind));
  }
  fl::server::EngineHooks hooks;
  std::shared_ptr<fl::client::Dataset> eval_set;
  if (arch.ok() && (!config.model.eval_images.empty() || !config.model.eval_labels.empty())) {
    absl::StatusOr<fl::client::Dataset> data =
        fl::client::LoadIdx(config.model.eval_images, config.model.eval_labels);
    if (!data.ok()) return data.status();
    eval_set = std::make_shared<fl::client::Dataset>(*std::move(data));
    // Refuse at start a test set that does not fit the model, instead of rounds without metrics.
    if (absl::Status s = fl::client::EvaluateBuiltinModel(*arch, *weights, *eval_set).status();
        !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--eval-images/--eval-labels do not fit the model: ", s.message()));
    }
    hooks.evaluate = fl::simulation::BuiltinTestSetEvaluation(*arch, eval_set);
  }
  fl::aggregation::RootTrainer root_trainer;
  if (config.server.strategy.name == "fltrust" && arch.ok()) {
    absl::StatusOr<fl::client::Dataset> data =
        fl::client::LoadIdx(config.model.root_images, config.model.root_labels);
    if (!data.ok()) {
      return absl::Status(data.status().code(),
                          absl::StrCat("model.root_images/root_labels: ", data.status().message()));
    }
    if (absl::Status s = fl::client::EvaluateBuiltinModel(*arch, *weights, *data).status();
        !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--root-images/--root-labels do not fit the model: ", s.message()));
    }
    fl::client::BuiltinTrainerOptions options;
    options.backend = "cpu";
    options.seed = config.model.init_seed;
    options.cpu_threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    root_trainer = fl::simulation::BuiltinRootTrainer(
        *arch, std::make_shared<const fl::client::Dataset>(*std::move(data)),
        config.server.engine.fit, config.server.strategy, options);
  }
  // SCAFFOLD's global model carries the server's control variate, zero at the start.
  fl::Model initial = config.server.strategy.name == "scaffold"
                          ? fl::aggregation::WithZeroControlVariates(*weights)
                          : *std::move(weights);
  return fl::server::RunSetup{config.server.engine, config.server.strategy, std::move(initial),
                              std::move(hooks), std::move(root_trainer)};
}

int RunServer(fl::server::ServerConfig config) {
  BlockTerminationSignals();
  if (absl::Status s = fl::server::CheckServerConfig(config); !s.ok()) return Fail(s);
  absl::StatusOr<fl::server::RunSetup> first = MakeRunSetup(config);
  if (!first.ok()) return Fail(first.status());
  // Submitted runs: their run file over this configuration.
  config.server.run_factory =
      [config](const std::string& run_toml) -> absl::StatusOr<fl::server::RunSetup> {
    fl::server::ServerConfig run = config;
    if (absl::Status s = fl::server::ApplyRunConfig(run_toml, "run file", run); !s.ok()) return s;
    return MakeRunSetup(std::move(run));
  };
  config.server.engine = first->engine;
  config.server.root_trainer = first->root_trainer;
  absl::StatusOr<std::unique_ptr<fl::server::Server>> server = fl::server::Server::Start(
      config.server, std::move(first->initial_model), std::move(first->hooks));
  if (!server.ok()) return Fail(server.status());
  fl::server::Server* s = server->get();
  std::thread signals = WatchSignals([s](int sig) {
    fl::LogEvent(fl::LogLevel::kInfo, "signal", {{"signal", absl::StrCat(sig)}});
    s->Shutdown();
  });
  signals.detach();
  s->WaitUntilFinished(config.grace);
  s->Shutdown();
  if (absl::Status fatal = s->fatal_error(); !fatal.ok()) return Fail(fatal);
  // A failed run exits non-zero, so that systemd and scripts see it; a daemon (--stay-up) ends
  // only on a signal, and its runs' outcomes are in fl run list.
  if (config.server.stay_up) return 0;
  for (int64_t id : s->served_runs()) {
    absl::StatusOr<fl::server::RunRecord> run = s->store().GetRun(id);
    if (run.ok() && run->status == fl::server::RunStatus::kFailed) {
      return Fail(absl::AbortedError(absl::StrCat("run ", run->run_id, " failed: ", run->reason)));
    }
  }
  return 0;
}

// What this start of `fl server` gave for a run's tables ([run], [fit], [strategy], [privacy],
// [secure_aggregation]): the flags given, with their values, as a run file. The --config file is
// not: a service restarts with the same file every time, which would undo every `fl run update`
// at each restart.
std::string GivenRunToml(const std::map<std::string, CLI::Option*>& flags,
                         const fl::server::ServerConfig& config) {
  static constexpr std::string_view kRunTables[] = {"run.", "fit.", "strategy.", "privacy.",
                                                    "secure_aggregation."};
  std::set<std::string> keys;
  for (const auto& [key, option] : flags) {
    if (option->count() == 0) continue;
    for (std::string_view table : kRunTables) {
      if (key.starts_with(table)) keys.insert(key);
    }
    if (key.starts_with("secure_aggregation.")) keys.insert("secure_aggregation.enabled");
  }
  return fl::server::RunTomlOfKeys(config, keys);
}

// `fl client`: the configuration (file, then flags) and what to print instead of running.
struct ClientArgs {
  fl::cli::ClientConfig config;
  std::string config_path;  // read before parsing, see ConfigPath
  bool print_config_reference = false;
  bool print_effective_config = false;
  bool preflight = false;
  std::map<std::string, CLI::Option*> flags;  // by key: which were given
};

CLI::App* AddClientCommand(CLI::App& app, ClientArgs& a) {
  CLI::App* cmd = app.add_subcommand(
      "client",
      "Run a site's client with a built-in model (softmax, mlp, simple_cnn): it serves run "
      "after run until SIGTERM, or one run with --once");
  cmd->footer(fl::cli::kClientExitCodesHelp);
  cmd->add_flag("--preflight", a.preflight,
                "Check the certificates, the way to the server, the enrollment and the data, "
                "print PASS/FAIL per check, and exit (0: all passed, 6: a check failed)");
  cmd->add_option("--config", a.config_path,
                  "TOML configuration file; flags given override its values");
  cmd->add_flag("--print-config-reference", a.print_config_reference,
                "Print every configuration key with its default and meaning, and exit");
  cmd->add_flag("--print-effective-config", a.print_effective_config,
                "Print the configuration from --config and the flags as TOML, and exit");
  // Every key's flag (the file's keys and the flags are one table: cli/client_config.cc).
  a.flags = fl::cli::AddKeyFlags(*cmd, fl::cli::ClientConfigKeys(), a.config);
  return cmd;
}

int RunClient(ClientArgs& a) {
  BlockTerminationSignals();
  fl::cli::ClientConfig& config = a.config;
  auto given = [&a](const std::string& key) {
    auto it = a.flags.find(key);
    return it != a.flags.end() && it->second->count() > 0;
  };
  if (!given("data.format")) {
    if (given("data.images")) config.data.format = "idx";
    if (given("data.path")) config.data.format = "csv";
  }
  if (!given("data.split_seed") && given("training.seed")) {
    config.data.split_seed = config.training.seed;
  }
  if (a.print_config_reference) {
    std::fputs(fl::cli::ClientConfigReference().c_str(), stdout);
    return 0;
  }
  if (a.print_effective_config) {
    std::fputs(fl::cli::ClientConfigToToml(config).c_str(), stdout);
    return 0;
  }
  if (a.preflight) return fl::cli::RunPreflight(config, stdout);
  // Everything about the site is checked before the client connects (SiteDaemon::Run): nothing
  // is sent from a site whose configuration or data is wrong. The daemon is shared with the
  // signal thread, which outlives this function.
  auto daemon = std::make_shared<fl::cli::SiteDaemon>(config);
  std::thread signals = WatchSignals([daemon](int sig) { daemon->Stop(sig); });
  signals.detach();
  return daemon->Run();
}

}  // namespace

int main(int argc, char** argv) {
  // Debian builds Abseil without NDEBUG, which leaves absl::Mutex's deadlock detection on: a
  // lock-order graph updated on every lock gRPC takes (4 % of a simulation's CPU), set to abort
  // the process on a lock-order inversion. Release builds of Abseil skip it; so does fl: a real
  // deadlock still shows as a hang, and an inversion that never deadlocks no longer kills a
  // server that has run for months.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App app{"fl: federated learning — aggregation server, client, simulation, provisioning"};
  app.set_version_flag("--version",
                       std::string("fl ") + FL_VERSION + " (protocol fl.v1; gRPC over mutual TLS)");
  app.require_subcommand(1);

  fl::cli::CertsArgs certs;
  CLI::App* certs_cmd = fl::cli::AddCertsCommand(app, certs);

  // The configuration file first, then the flags given (their defaults show the file's values).
  fl::server::ServerConfig server_config;
  if (const std::string path = ConfigPath(argc, argv, "server"); !path.empty()) {
    if (absl::Status s = fl::server::ApplyServerConfig(path, server_config); !s.ok()) {
      return Fail(s);
    }
  }
  fl::server::ServerOptions& server = server_config.server;
  std::string server_config_path;
  bool print_config_reference = false, print_effective_config = false;
  CLI::App* server_cmd = app.add_subcommand("server", "Run the aggregation server");
  server_cmd->add_option("--config", server_config_path,
                         "TOML configuration file; flags given override its values");
  server_cmd->add_flag("--print-config-reference", print_config_reference,
                       "Print every configuration key with its default and meaning, and exit");
  server_cmd->add_flag("--print-effective-config", print_effective_config,
                       "Print the configuration from --config and the flags as TOML, and exit");
  // Every key's flag (the file's keys and the flags are one table: server/daemon/config.cc).
  const std::map<std::string, CLI::Option*> server_flags =
      fl::cli::AddKeyFlags(*server_cmd, fl::server::ServerConfigKeys(), server_config);
  // A secure-aggregation setting given turns secure aggregation on.
  for (const auto& [key, option] : server_flags) {
    if (key.starts_with("secure_aggregation.") && key != "secure_aggregation.enabled") {
      option->each(
          [&server](const std::string&) { server.engine.secure_aggregation.enabled = true; });
    }
  }

  ClientArgs client;
  if (const std::string path = ConfigPath(argc, argv, "client"); !path.empty()) {
    if (absl::Status st = fl::cli::ApplyClientConfig(path, client.config); !st.ok()) {
      Fail(st);
      return fl::cli::kExitConfig;
    }
  }
  CLI::App* client_cmd = AddClientCommand(app, client);

  fl::cli::SimArgs sim;
  if (absl::Status st = fl::cli::AddSimCommand(app, argc, argv, sim); !st.ok()) return Fail(st);

  fl::cli::ReportArgs report_args;
  CLI::App* report_cmd = fl::cli::AddReportCommand(app, report_args);
  fl::cli::AdminArgs admin;
  CLI::App* admin_cmd = fl::cli::AddAdminCommand(app, admin);
  fl::cli::RunArgs run_args;
  CLI::App* run_cmd = fl::cli::AddRunCommand(app, run_args);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    // `fl client` documents one code for every configuration error (cli/exit_codes.h).
    const bool client_args = argc > 1 && std::string_view(argv[1]) == "client";
    return code != 0 && client_args ? fl::cli::kExitConfig : code;
  }

  if (certs_cmd->parsed()) return fl::cli::RunCerts(certs);
  if (server_cmd->parsed()) {
    if (print_config_reference) {
      std::fputs(fl::server::ServerConfigReference().c_str(), stdout);
      return 0;
    }
    if (print_effective_config) {
      std::fputs(fl::server::ServerConfigToToml(server_config).c_str(), stdout);
      return 0;
    }
    server.resume_toml = GivenRunToml(server_flags, server_config);
    return RunServer(server_config);
  }
  if (client_cmd->parsed()) return RunClient(client);
  if (sim.command->parsed()) return fl::cli::RunSimCommand(sim);
  if (report_cmd->parsed()) return fl::cli::RunReport(report_args);
  if (admin_cmd->parsed()) return fl::cli::RunAdmin(admin);
  if (run_cmd->parsed()) return fl::cli::RunRun(run_args);
  return 1;
}
