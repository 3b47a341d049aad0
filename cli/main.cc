// fl: the one command-line program of the federation: provisioning, the server, a generic client
// and simulation.
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "fl/client/client.h"
#include "fl/client/dataset.h"
#include "fl/client/softmax_trainer.h"
#include "fl/common/logging.h"
#include "fl/common/provision.h"
#include "fl/server/server.h"
#include "fl/simulation/partition.h"
#include "fl/simulation/simulation.h"

namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
  return 1;
}

sigset_t TerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

// Returns a thread that calls `on_signal` when SIGINT or SIGTERM arrives. main blocked both
// before any thread existed, so every thread inherited the mask and only this one receives them.
std::thread WatchSignals(std::function<void(int)> on_signal) {
  return std::thread([set = TerminationSignals(), on_signal] {
    int sig = 0;
    sigwait(&set, &sig);
    on_signal(sig);
  });
}

struct CertsArgs {
  std::string out_dir = "fl-certs";
  std::string federation = "fl-federation";
  std::vector<std::string> clients;
  int num_clients = 0;
  std::vector<std::string> server_names = {"localhost", "127.0.0.1", "::1"};
  int valid_days = 365;
};

int RunCerts(const CertsArgs& args) {
  fl::ProvisionOptions options;
  options.out_dir = args.out_dir;
  options.federation_name = args.federation;
  options.server_names = args.server_names;
  options.client_names = args.clients;
  for (int i = 0; i < args.num_clients; ++i) options.client_names.push_back(absl::StrCat("site-", i));
  options.valid_days = args.valid_days;
  absl::StatusOr<fl::ProvisionedFiles> files = fl::ProvisionFederation(options);
  if (!files.ok()) return Fail(files.status());
  std::printf("federation CA:      %s (keep %s offline)\n", files->ca_cert.c_str(),
              files->ca_key.c_str());
  std::printf("server certificate: %s, key %s\n", files->server_cert.c_str(),
              files->server_key.c_str());
  for (size_t i = 0; i < files->client_certs.size(); ++i) {
    std::printf("client %-12s %s, key %s\n", options.client_names[i].c_str(),
                files->client_certs[i].c_str(), files->client_keys[i].c_str());
  }
  return 0;
}

struct ModelArgs {
  int64_t features = 784;
  int32_t classes = 10;
};

int RunServer(fl::server::ServerOptions options, const ModelArgs& model, double round_timeout_s,
              double grace_s) {
  options.engine.round_timeout = absl::Seconds(round_timeout_s);
  fl::Model initial(fl::client::SoftmaxRegressionSpec(model.features, model.classes));
  absl::StatusOr<std::unique_ptr<fl::server::Server>> server =
      fl::server::Server::Start(options, std::move(initial));
  if (!server.ok()) return Fail(server.status());
  fl::server::Server* s = server->get();
  std::thread signals = WatchSignals([s](int sig) {
    fl::LogEvent(fl::LogLevel::kInfo, "signal", {{"signal", absl::StrCat(sig)}});
    s->Shutdown();
  });
  signals.detach();
  s->WaitUntilFinished(absl::Seconds(grace_s));
  s->Shutdown();
  return 0;
}

struct ClientArgs {
  fl::client::ClientOptions options;
  std::string images, labels, csv, label_column = "label";
  int shard = -1, num_shards = 0;
  uint64_t seed = 0;
};

int RunClient(ClientArgs args) {
  absl::StatusOr<fl::client::Dataset> data =
      !args.csv.empty() ? fl::client::LoadCsv(args.csv, args.label_column)
      : !args.images.empty()
          ? fl::client::LoadIdx(args.images, args.labels)
          : absl::StatusOr<fl::client::Dataset>(absl::InvalidArgumentError(
                "give the training data: --images and --labels (IDX), or --csv"));
  if (!data.ok()) return Fail(data.status());
  if (args.num_shards > 0) {
    if (args.shard < 0 || args.shard >= args.num_shards) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("--shard must be in [0, ", args.num_shards, ")")));
    }
    auto parts = fl::simulation::PartitionIid(data->num_examples(), args.num_shards, args.seed);
    if (!parts.ok()) return Fail(parts.status());
    *data = data->Subset((*parts)[args.shard]);
  }
  fl::client::SoftmaxTrainerOptions trainer_options;
  trainer_options.seed = args.seed;
  std::unique_ptr<fl::client::Trainer> trainer =
      fl::client::MakeSoftmaxRegressionTrainer(*std::move(data), {}, trainer_options);
  absl::StatusOr<std::unique_ptr<fl::client::Client>> client =
      fl::client::Client::Create(args.options, trainer.get());
  if (!client.ok()) return Fail(client.status());
  fl::client::Client* c = client->get();
  c->set_on_task([](const fl::client::TaskReport& r) {
    fl::LogEvent(fl::LogLevel::kInfo, "fit_task",
                 {{"round", absl::StrCat(r.round)}, {"examples", absl::StrCat(r.num_examples)},
                  {"train_time", absl::FormatDuration(r.train_time)},
                  {"status", r.status.ok() ? "accepted" : r.status.ToString()}});
  });
  std::thread signals = WatchSignals([c](int) { c->Stop(); });
  signals.detach();
  absl::Status s = c->Run();
  if (!s.ok()) return Fail(s);
  return 0;
}

int RunSim(fl::simulation::SimulationOptions options) {
  options.work_dir = absl::StrCat(options.work_dir, "/run-", absl::ToUnixMillis(absl::Now()));
  std::printf("Simulated federation: %d clients, %d rounds, FedAvg, softmax regression on "
              "Fashion-MNIST (%s split), %s\n",
              options.num_clients, options.num_rounds, options.partition.c_str(),
              options.tls ? "mutual TLS over loopback gRPC" : "plaintext loopback gRPC");
  std::printf("%6s %9s %11s %10s %9s\n", "round", "clients", "train loss", "test acc", "time");
  std::fflush(stdout);
  absl::StatusOr<fl::simulation::SimulationResult> result = fl::simulation::RunSimulation(
      options, [](const fl::server::RoundSummary& r) {
        auto metric = [&](const char* name) {
          auto it = r.metrics.find(name);
          return it == r.metrics.end() ? std::string("-") : absl::StrFormat("%.4f", it->second);
        };
        std::printf("%6d %4d/%-4d %11s %10s %8.2fs%s\n", r.round, r.num_accepted, r.num_sampled,
                    metric("train_loss").c_str(), metric("test_accuracy").c_str(),
                    absl::ToDoubleSeconds(r.duration),
                    r.committed ? "" : absl::StrCat("  FAILED: ", r.reason).c_str());
        std::fflush(stdout);
      });
  if (!result.ok()) return Fail(result.status());
  int committed = 0;
  for (const auto& r : result->rounds) committed += r.committed ? 1 : 0;
  std::printf("\nRun %lld finished: %d rounds committed, final test accuracy %.2f %%, %.1f s\n",
              static_cast<long long>(result->run_id), committed,
              100.0 * result->final_test_accuracy, absl::ToDoubleSeconds(result->wall_time));
  std::printf("SQLite file with the run: %s\n", result->db_path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const sigset_t signals = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  CLI::App app{"fl: federated learning — aggregation server, client, simulation, provisioning"};
  app.require_subcommand(1);

  CertsArgs certs;
  CLI::App* certs_cmd = app.add_subcommand(
      "certs", "Create a federation CA, the server certificate and one certificate per site");
  certs_cmd->add_option("--out", certs.out_dir, "Output directory")->capture_default_str();
  certs_cmd->add_option("--federation", certs.federation, "Federation name")
      ->capture_default_str();
  certs_cmd->add_option("--client", certs.clients, "A site's name (repeat for each site)");
  certs_cmd->add_option("--clients", certs.num_clients, "Also make N sites named site-0..N-1");
  certs_cmd->add_option("--server-name", certs.server_names,
                        "Host names and IP addresses the server certificate is valid for")
      ->capture_default_str();
  certs_cmd->add_option("--valid-days", certs.valid_days)->capture_default_str();

  fl::server::ServerOptions server;
  ModelArgs server_model;
  double round_timeout_s = 600, grace_s = 10;
  CLI::App* server_cmd = app.add_subcommand("server", "Run the aggregation server");
  server_cmd->add_option("--listen", server.listen_address, "host:port to listen on")
      ->capture_default_str();
  server_cmd->add_option("--data-dir", server.data_dir, "SQLite file and checkpoints go here")
      ->capture_default_str();
  server_cmd->add_option("--ca", server.ca_cert_path, "Federation CA certificate (PEM)");
  server_cmd->add_option("--cert", server.cert_path, "Server certificate (PEM)");
  server_cmd->add_option("--key", server.key_path, "Server private key (PEM)");
  server_cmd->add_option("--enroll", server.enroll_cert_paths,
                         "Client certificate to enroll (repeatable)");
  server_cmd->add_flag("--insecure-plaintext", server.insecure_plaintext,
                       "No TLS; loopback addresses only; for tests");
  server_cmd->add_option("--rounds", server.engine.num_rounds)->capture_default_str();
  server_cmd->add_option("--min-clients", server.engine.min_clients,
                         "Clients online before a round starts")
      ->capture_default_str();
  server_cmd->add_option("--min-fit-clients", server.engine.min_fit_clients,
                         "Accepted updates needed to commit a round")
      ->capture_default_str();
  server_cmd->add_option("--sample-fraction", server.engine.sample_fraction)
      ->capture_default_str();
  server_cmd->add_option("--round-timeout", round_timeout_s, "Round deadline in seconds")
      ->capture_default_str();
  server_cmd->add_option("--max-round-retries", server.engine.max_round_retries)
      ->capture_default_str();
  server_cmd->add_option("--seed", server.engine.seed)->capture_default_str();
  server_cmd->add_option("--local-epochs", server.engine.fit.local_epochs)->capture_default_str();
  server_cmd->add_option("--batch-size", server.engine.fit.batch_size)->capture_default_str();
  server_cmd->add_option("--lr", server.engine.fit.learning_rate)->capture_default_str();
  server_cmd->add_option("--features", server_model.features, "Softmax model: input features")
      ->capture_default_str();
  server_cmd->add_option("--classes", server_model.classes, "Softmax model: classes")
      ->capture_default_str();
  server_cmd->add_option("--grace", grace_s, "Seconds to keep serving DONE after the run ends")
      ->capture_default_str();

  ClientArgs client;
  CLI::App* client_cmd = app.add_subcommand("client", "Run a site's client with the built-in "
                                                      "softmax-regression trainer");
  client_cmd->add_option("--server", client.options.server_address, "host:port of the server")
      ->capture_default_str();
  client_cmd->add_option("--ca", client.options.ca_cert_path, "Federation CA certificate (PEM)");
  client_cmd->add_option("--cert", client.options.cert_path, "This site's certificate (PEM)");
  client_cmd->add_option("--key", client.options.key_path, "This site's private key (PEM)");
  client_cmd->add_option("--name", client.options.name, "Site name for logs (default: the certificate's CN; the identity in plaintext mode)")
      ->capture_default_str();
  client_cmd->add_flag("--insecure-plaintext", client.options.insecure_plaintext,
                       "No TLS; loopback only; for tests");
  client_cmd->add_option("--images", client.images, "IDX image file (optionally .gz)");
  client_cmd->add_option("--labels", client.labels, "IDX label file (optionally .gz)");
  client_cmd->add_option("--csv", client.csv, "CSV file with a header row");
  client_cmd->add_option("--label-column", client.label_column)->capture_default_str();
  client_cmd->add_option("--shard", client.shard, "Train on IID shard K of --num-shards");
  client_cmd->add_option("--num-shards", client.num_shards);
  client_cmd->add_option("--seed", client.seed)->capture_default_str();

  fl::simulation::SimulationOptions sim;
  double sim_timeout_s = 300;
  CLI::App* sim_cmd = app.add_subcommand(
      "sim", "Simulate a federation on this machine: real server, real clients, real TLS");
  sim_cmd->add_option("--work-dir", sim.work_dir, "Certificates and the run's data go here")
      ->capture_default_str();
  sim_cmd->add_option("--dataset-dir", sim.dataset_dir, "Fashion-MNIST IDX files")
      ->capture_default_str();
  sim_cmd->add_option("--clients", sim.num_clients)->capture_default_str();
  sim_cmd->add_option("--rounds", sim.num_rounds)->capture_default_str();
  sim_cmd->add_option("--sample-fraction", sim.sample_fraction)->capture_default_str();
  sim_cmd->add_option("--partition", sim.partition, "iid or dirichlet")->capture_default_str();
  sim_cmd->add_option("--beta", sim.dirichlet_beta, "Dirichlet concentration")
      ->capture_default_str();
  sim_cmd->add_option("--seed", sim.seed)->capture_default_str();
  sim_cmd->add_option("--local-epochs", sim.fit.local_epochs)->capture_default_str();
  sim_cmd->add_option("--batch-size", sim.fit.batch_size)->capture_default_str();
  sim_cmd->add_option("--lr", sim.fit.learning_rate)->capture_default_str();
  sim_cmd->add_option("--round-timeout", sim_timeout_s, "Round deadline in seconds")
      ->capture_default_str();
  bool sim_plaintext = false, sim_verbose = false;
  sim_cmd->add_flag("--insecure-plaintext", sim_plaintext, "Loopback plaintext instead of TLS");
  sim_cmd->add_flag("--verbose", sim_verbose, "Log every server and client event to stderr");

  CLI11_PARSE(app, argc, argv);

  if (certs_cmd->parsed()) return RunCerts(certs);
  if (server_cmd->parsed()) return RunServer(server, server_model, round_timeout_s, grace_s);
  if (client_cmd->parsed()) return RunClient(client);
  if (sim_cmd->parsed()) {
    sim.tls = !sim_plaintext;
    if (!sim_verbose && !std::getenv("FL_LOG_LEVEL")) fl::SetLogLevel(fl::LogLevel::kWarn);
    sim.round_timeout = absl::Seconds(sim_timeout_s);
    return RunSim(sim);
  }
  return 1;
}
