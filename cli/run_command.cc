#include "cli/run_command.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cli/command_util.h"
#include "cli/preflight_tls.h"
#include "fl/common/file_util.h"
#include "fl/v1/control.grpc.pb.h"
#include "fl/wire/proto_serde.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"

namespace fl::cli {
namespace {

// A run named on the command line: its run id, or a queued run's "q<queue id>".
struct RunRef {
  int64_t run_id = 0;
  int64_t queue_id = 0;
};

absl::StatusOr<RunRef> ParseRunRef(const std::string& text) {
  RunRef ref;
  const bool queued = !text.empty() && (text[0] == 'q' || text[0] == 'Q');
  int64_t id = 0;
  if (!absl::SimpleAtoi(queued ? text.substr(1) : text, &id) || id < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text,
                     "' names no run: give a run id (e.g. 12) or a queued run (e.g. q3), as fl run "
                     "list shows them"));
  }
  (queued ? ref.queue_id : ref.run_id) = id;
  return ref;
}

std::string Time(int64_t ms) {
  if (ms == 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMillis(ms), absl::LocalTimeZone());
}

std::string RefOf(const fl::v1::RunInfo& r) {
  return r.run_id() != 0 ? absl::StrCat(r.run_id()) : absl::StrCat("q", r.queue_id());
}

nlohmann::json Json(const fl::v1::RunInfo& r) {
  nlohmann::json j = {{"run", RefOf(r)},
                      {"run_id", r.run_id()},
                      {"queue_id", r.queue_id()},
                      {"name", r.name()},
                      {"status", r.status()},
                      {"reason", r.reason()},
                      {"committed_round", r.committed_round()},
                      {"rounds", r.num_rounds()},
                      {"strategy", r.strategy()},
                      {"state", r.state()},
                      {"created_at_ms", r.created_at_ms()},
                      {"ended_at_ms", r.ended_at_ms()},
                      {"submitted_by", r.submitted_by()}};
  if (!r.last_metrics_json().empty()) {
    j["last_metrics"] = nlohmann::json::parse(r.last_metrics_json(), nullptr, false);
  }
  if (!r.config_toml().empty()) j["config_toml"] = r.config_toml();
  return j;
}

void PrintTable(const google::protobuf::RepeatedPtrField<fl::v1::RunInfo>& runs) {
  std::printf("%-6s %-20s %-10s %-8s %-9s %-11s %-10s %-19s %s\n", "RUN", "NAME", "STATUS",
              "ROUNDS", "STRATEGY", "STATE", "BY", "CREATED", "REASON");
  for (const fl::v1::RunInfo& r : runs) {
    const std::string rounds =
        r.run_id() == 0 ? "-" : absl::StrCat(r.committed_round(), "/", r.num_rounds());
    std::printf("%-6s %-20s %-10s %-8s %-9s %-11s %-10s %-19s %s\n", RefOf(r).c_str(),
                r.name().c_str(), r.status().c_str(), rounds.c_str(),
                r.strategy().empty() ? "-" : r.strategy().c_str(),
                r.state().empty() ? "-" : r.state().c_str(),
                r.submitted_by().empty() ? "-" : r.submitted_by().c_str(),
                Time(r.created_at_ms()).c_str(), r.reason().c_str());
  }
}

class ControlClient {
 public:
  static absl::StatusOr<ControlClient> Connect(const RunArgs& a) {
    if (a.cert.empty() || a.key.empty()) {
      return absl::InvalidArgumentError(
          "give your admin certificate and key: --cert and --key (made by fl certs --admin NAME, "
          "in admins/ of the federation's certs directory)");
    }
    grpc::SslCredentialsOptions ssl;
    for (auto [path, out] :
         {std::pair{&a.ca, &ssl.pem_root_certs}, std::pair{&a.cert, &ssl.pem_cert_chain},
          std::pair{&a.key, &ssl.pem_private_key}}) {
      absl::StatusOr<std::string> text = ReadFile(*path);
      if (!text.ok()) return text.status();
      *out = *std::move(text);
    }
    grpc::ChannelArguments args;
    if (!a.server_name.empty()) args.SetSslTargetNameOverride(a.server_name);
    auto channel = grpc::CreateCustomChannel(a.server, grpc::SslCredentials(ssl), args);
    return ControlClient(a, fl::v1::Control::NewStub(channel));
  }

  // A context with the command's deadline (none for a followed stream).
  // `at_least_s`: a floor for calls that do real work on the server (a submission makes the run
  // once to check it: its model, its test set).
  std::unique_ptr<grpc::ClientContext> Context(bool deadline = true, double at_least_s = 0) const {
    auto ctx = std::make_unique<grpc::ClientContext>();
    if (deadline) {
      const double seconds = std::max(args_.timeout_s, at_least_s);
      ctx->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
    }
    return ctx;
  }

  fl::v1::Control::Stub& stub() { return *stub_; }

  // The error line of a failed call; for a server that cannot be reached, what a TLS probe finds.
  int Fail(const grpc::Status& status) const {
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE &&
        status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      return cli::Fail(
          absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message()));
    }
    return cli::Fail(absl::UnavailableError(
        absl::StrCat("cannot reach the server's control API at ", args_.server, ": ", Diagnose())));
  }

 private:
  ControlClient(const RunArgs& a, std::unique_ptr<fl::v1::Control::Stub> stub)
      : args_(a), stub_(std::move(stub)) {}

  std::string Diagnose() const {
    absl::StatusOr<std::pair<std::string, std::string>> hp = preflight::SplitHostPort(args_.server);
    if (!hp.ok()) return std::string(hp.status().message());
    absl::StatusOr<std::string> tcp =
        preflight::ProbeTcp(hp->first, hp->second, absl::Seconds(args_.timeout_s));
    if (!tcp.ok()) {
      return absl::StrCat(tcp.status().message(), "; check --server and that fl server runs there");
    }
    preflight::TlsProbe probe;
    probe.host = hp->first;
    probe.port = hp->second;
    probe.expected_name = args_.server_name.empty() ? hp->first : args_.server_name;
    probe.ca_path = args_.ca;
    probe.cert_path = args_.cert;
    probe.key_path = args_.key;
    probe.timeout = absl::Seconds(args_.timeout_s);
    absl::StatusOr<preflight::TlsResult> tls = preflight::ProbeTls(probe);
    if (tls.ok()) return "the TLS handshake works; the server did not answer in time";
    if (absl::IsUnauthenticated(tls.status())) {
      return absl::StrCat(tls.status().message(),
                          "; give --ca the federation's ca.pem, and --server a name the server's "
                          "certificate is valid for (or --server-name)");
    }
    return absl::StrCat(tls.status().message(),
                        "; is it an fl server with TLS (not plaintext) at that address?");
  }

  const RunArgs& args_;
  std::unique_ptr<fl::v1::Control::Stub> stub_;
};

int Submit(ControlClient& c, const RunArgs& a) {
  absl::StatusOr<std::string> text = ReadFile(a.file);
  if (!text.ok()) return cli::Fail(text.status());
  fl::v1::SubmitRunRequest req;
  req.set_config_toml(*text);
  req.set_name(a.name);
  fl::v1::RunInfo reply;
  if (grpc::Status s = c.stub().SubmitRun(c.Context(true, 120).get(), req, &reply); !s.ok()) {
    if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      return cli::Fail(absl::DeadlineExceededError(
          "the server did not confirm the submission in time; it may still have queued it: "
          "check fl run list before submitting again"));
    }
    return c.Fail(s);
  }
  std::printf("queued %s as %s; it starts when the runs before it are over (fl run list)\n",
              reply.name().c_str(), RefOf(reply).c_str());
  return 0;
}

int List(ControlClient& c, const RunArgs& a) {
  fl::v1::ListRunsReply reply;
  if (grpc::Status s = c.stub().ListRuns(c.Context().get(), {}, &reply); !s.ok()) {
    return c.Fail(s);
  }
  if (a.format == "json") {
    nlohmann::json runs = nlohmann::json::array();
    for (const fl::v1::RunInfo& r : reply.runs()) runs.push_back(Json(r));
    std::printf("%s\n", runs.dump(2).c_str());
  } else {
    PrintTable(reply.runs());
  }
  return 0;
}

int Status(ControlClient& c, const RunArgs& a, const RunRef& ref) {
  fl::v1::GetRunRequest req;
  req.set_run_id(ref.run_id);
  req.set_queue_id(ref.queue_id);
  fl::v1::RunInfo reply;
  if (grpc::Status s = c.stub().GetRun(c.Context().get(), req, &reply); !s.ok()) return c.Fail(s);
  if (a.format == "json") {
    std::printf("%s\n", Json(reply).dump(2).c_str());
    return 0;
  }
  google::protobuf::RepeatedPtrField<fl::v1::RunInfo> one;
  *one.Add() = reply;
  PrintTable(one);
  if (!reply.last_metrics_json().empty()) {
    std::printf("\nlast committed round's metrics: %s\n", reply.last_metrics_json().c_str());
  }
  if (!reply.config_toml().empty()) {
    const std::string& text = reply.config_toml();
    std::printf("\nrun file:\n%s%s", text.c_str(), text.back() == '\n' ? "" : "\n");
  }
  return 0;
}

int Stop(ControlClient& c, const RunArgs& a, const RunRef& ref) {
  fl::v1::StopRunRequest req;
  req.set_run_id(ref.run_id);
  req.set_queue_id(ref.queue_id);
  req.set_reason(a.reason);
  req.set_fail(a.fail);
  fl::v1::RunInfo reply;
  if (grpc::Status s = c.stub().StopRun(c.Context().get(), req, &reply); !s.ok()) {
    return c.Fail(s);
  }
  std::printf("%s %s: %s (%s)\n", RefOf(reply).c_str(), reply.name().c_str(),
              reply.status().c_str(), reply.reason().c_str());
  return 0;
}

int Update(ControlClient& c, const RunArgs& a, const RunRef& ref) {
  if (ref.run_id == 0) {
    return cli::Fail(absl::FailedPreconditionError(
        "a queued run changes by a new submission (fl run stop q<N>, then fl run submit)"));
  }
  fl::v1::UpdateRunRequest req;
  req.set_run_id(ref.run_id);
  for (const std::string& kv : a.set) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return cli::Fail(absl::InvalidArgumentError(
          absl::StrCat("--set '", kv, "' is not key=value (e.g. --set rounds=20)")));
    }
    (*req.mutable_set())[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  fl::v1::UpdateRunReply reply;
  if (grpc::Status s = c.stub().UpdateRun(c.Context().get(), req, &reply); !s.ok()) {
    return c.Fail(s);
  }
  if (reply.changes().empty())
    std::printf("run %lld: nothing changed\n", static_cast<long long>(ref.run_id));
  for (const std::string& change : reply.changes()) {
    std::printf("run %lld: %s\n", static_cast<long long>(ref.run_id), change.c_str());
  }
  return 0;
}

int Logs(ControlClient& c, const RunArgs& a, const RunRef& ref) {
  fl::v1::FollowRunRequest req;
  req.set_run_id(ref.run_id);
  req.set_queue_id(ref.queue_id);
  req.set_follow(a.follow);
  std::unique_ptr<grpc::ClientContext> ctx = c.Context(/*deadline=*/!a.follow);
  std::unique_ptr<grpc::ClientReader<fl::v1::RunEvent>> reader = c.stub().FollowRun(ctx.get(), req);
  fl::v1::RunEvent e;
  while (reader->Read(&e)) {
    const std::string round = e.round() == 0 ? "" : absl::StrCat("r", e.round());
    const std::string client = e.client().empty() ? "" : absl::StrCat("[", e.client(), "] ");
    std::printf("%s  %-5s %-22s %s%s\n", Time(e.at_ms()).c_str(), round.c_str(), e.kind().c_str(),
                client.c_str(), e.text().c_str());
    std::fflush(stdout);
  }
  if (grpc::Status s = reader->Finish(); !s.ok()) return c.Fail(s);
  return 0;
}

}  // namespace

CLI::App* AddRunCommand(CLI::App& app, RunArgs& a) {
  CLI::App* cmd = app.add_subcommand(
      "run",
      "Submit, list, follow and stop runs on a running server (its control API), with an "
      "admin certificate");
  cmd->require_subcommand(1);
  cmd->fallthrough();
  // A flag given twice (e.g. in a shell alias, then again) takes the last value.
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cmd->add_option("--server", a.server, "host:port of the server")->capture_default_str();
  cmd->add_option("--ca", a.ca, "The federation's CA certificate (PEM)")->capture_default_str();
  cmd->add_option("--cert", a.cert, "Your admin certificate (fl certs --admin NAME)");
  cmd->add_option("--key", a.key, "Its private key");
  cmd->add_option("--server-name", a.server_name,
                  "The name the server's certificate must be valid for (default: --server's "
                  "host)");
  cmd->add_option("--timeout", a.timeout_s, "Seconds to wait for the server")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  a.submit = cmd->add_subcommand(
      "submit",
      "Queue a run file (a run's tables: [run], [fit], [strategy], [model], [privacy], "
      "[secure_aggregation], over the server's "
      "configuration); runs start one after another");
  a.submit->add_option("file", a.file, "The run file (TOML)")->required();
  a.submit->add_option("--name", a.name, "The run's name (default: run.name in the file)");
  a.list = cmd->add_subcommand("list", "Queued runs, then every run, newest first");
  a.list->add_option("--format", a.format, "table or json")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "json"}));
  a.status = cmd->add_subcommand("status", "One run: its state, rounds, metrics and run file");
  a.status->add_option("run", a.run, "Run id, or q<N> for a queued run")->required();
  a.status->add_option("--format", a.format, "table or json")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "json"}));
  a.stop = cmd->add_subcommand(
      "stop", "End the active run (finished, or failed with --fail), or cancel a queued one");
  a.stop->add_option("run", a.run, "Run id, or q<N> for a queued run")->required();
  a.stop->add_option("--reason", a.reason, "Recorded with the run");
  a.stop->add_flag("--fail", a.fail, "Record the run as failed (default: finished)");
  a.update = cmd->add_subcommand(
      "update",
      "Change the active run's policies (rounds, min_clients, min_fit_clients, "
      "sample_fraction, timeouts, retries, eval_every, the stopping rule); audited");
  a.update->add_option("run", a.run, "Run id")->required();
  a.update->add_option("--set", a.set, "[run] key=value, e.g. rounds=20 (repeatable)")->required();
  a.logs = cmd->add_subcommand("logs", "A run's events: rounds, refusals, changes, its end");
  a.logs->add_option("run", a.run,
                     "Run id, or q<N> for a queued run (with --follow, once it starts); default: "
                     "the active run");
  a.logs->add_flag("-f,--follow", a.follow, "Keep printing events until the run ends");
  return cmd;
}

int RunRun(RunArgs& a) {
  RunRef ref;
  if (!a.run.empty()) {
    absl::StatusOr<RunRef> parsed = ParseRunRef(a.run);
    if (!parsed.ok()) return cli::Fail(parsed.status());
    ref = *parsed;
  }
  absl::StatusOr<ControlClient> client = ControlClient::Connect(a);
  if (!client.ok()) return cli::Fail(client.status());
  if (a.submit->parsed()) return Submit(*client, a);
  if (a.list->parsed()) return List(*client, a);
  if (a.status->parsed()) return Status(*client, a, ref);
  if (a.stop->parsed()) return Stop(*client, a, ref);
  if (a.logs->parsed()) return Logs(*client, a, ref);
  if (a.update->parsed()) return Update(*client, a, ref);
  return 1;
}

}  // namespace fl::cli
