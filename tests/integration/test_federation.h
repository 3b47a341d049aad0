// Shared pieces of the integration tests: a temporary directory with a provisioned federation,
// slices of the real Fashion-MNIST data, clients running on threads, a free loopback port.
#ifndef FL_TESTS_INTEGRATION_TEST_FEDERATION_H_
#define FL_TESTS_INTEGRATION_TEST_FEDERATION_H_

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "fl/client/builtin_models.h"
#include "fl/client/client.h"
#include "fl/client/dataset.h"
#include "fl/common/provision.h"
#include "fl/server/server.h"
#include "fl/server/store.h"
#include "fl/v1/federation.grpc.pb.h"
#include "tests/temp_dir.h"

namespace fl::testing {

// CA, server and client certificates for `names` under `dir`/certs.
ProvisionedFiles MakePki(const std::string& dir, const std::vector<std::string>& names,
                         const std::string& federation = "test-federation");

// Rows [begin, begin + count) of the Fashion-MNIST training set / the first `count` test rows.
client::Dataset FashionTrainSlice(int64_t begin, int64_t count);
// A small MLP for Fashion-MNIST: 784 -> 32 -> 10.
client::ModelArchitecture FashionMlp();
client::Dataset FashionTestSlice(int64_t count);

// Wraps a trainer and sleeps before each fit, so that rounds last long enough to interrupt.
class SlowTrainer final : public client::Trainer {
 public:
  SlowTrainer(std::unique_ptr<client::Trainer> inner, absl::Duration delay)
      : inner_(std::move(inner)), delay_(delay) {}
  ModelSpec spec() const override { return inner_->spec(); }
  absl::StatusOr<client::FitResult> Fit(const Model& global,
                                        const client::FitConfig& config) override {
    absl::SleepFor(delay_);
    return inner_->Fit(global, config);
  }
  absl::StatusOr<client::EvalResult> Evaluate(const Model& model) override {
    return inner_->Evaluate(model);
  }

 private:
  std::unique_ptr<client::Trainer> inner_;
  absl::Duration delay_;
};

// A real SDK client with its own softmax trainer on a slice of Fashion-MNIST, running on a thread.
class ClientThread {
 public:
  ClientThread(client::ClientOptions options, std::unique_ptr<client::Trainer> trainer);
  ~ClientThread();
  // Waits for Run to return and gives its status.
  absl::Status Join();
  void Stop();
  int tasks_accepted() const { return accepted_.load(); }

 private:
  std::unique_ptr<client::Trainer> trainer_;
  std::unique_ptr<client::Client> client_;
  absl::Status status_;
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

client::ClientOptions TlsClientOptions(const ProvisionedFiles& pki, size_t index, int port);

// A client that speaks the protocol by hand over mutual TLS with client `index`'s certificate,
// for the tests that send what the SDK never would. Receives messages of up to 2 chunks.
class RawClient {
 public:
  RawClient(const ProvisionedFiles& pki, size_t index, int port);
  // Joins (as "raw"); a failure is a test failure.
  v1::JoinReply Join();
  // Polls until a fit task for a round after `after_round` arrives (a test failure after 100
  // polls).
  v1::Task NextFit(int64_t run_id, int after_round = 0);
  v1::Federation::Stub& stub() { return *stub_; }

 private:
  std::unique_ptr<v1::Federation::Stub> stub_;
};

// Options of an in-process server of the federation `pki` with mutual TLS on a free loopback port
// (127.0.0.1:0), its data in `dir`/server, every client certificate of `pki` enrolled. Everything
// else (engine, fit, strategy) keeps its default for the test to set.
server::ServerOptions TlsServerOptions(const ProvisionedFiles& pki, const std::string& dir);

// "site-0" ... "site-<n-1>".
std::vector<std::string> SiteNames(int n);

// TlsServerOptions for `rounds` rounds of the FashionMlp model in which all `sites` sites take
// part (min_clients = min_fit_clients = sites), with a 60 s round deadline and 2 s long polls.
server::ServerOptions MlpRunOptions(const ProvisionedFiles& pki, const std::string& dir, int sites,
                                    int rounds);

// The argv of the real `fl server` (FL_BINARY) for the federation `pki` with mutual TLS on
// 127.0.0.1:`port`, its data in `data_dir`, every client certificate of `pki` enrolled, then
// `flags` as pairs ("--rounds", "4"): a flag already in the argv gets the later value.
std::vector<std::string> ServerCommand(const ProvisionedFiles& pki, const std::string& data_dir,
                                       int port, const std::vector<std::string>& flags = {});

// The first 1000 entries of `store`'s audit log, one line each: "<event> round <n>: <detail>".
std::string AuditText(server::Store& store);

int FreeLoopbackPort();

// The whole HTTP/1.0 response (status line, headers, body) to GET `path` on 127.0.0.1:port.
std::string HttpGet(int port, const std::string& path);

}  // namespace fl::testing

namespace fl::testing {

// A child process running a command, its stdout and stderr appended to `log_path`.
class ChildProcess {
 public:
  // `env` entries ("NAME=value") are added to this process's environment for the child.
  ChildProcess(const std::vector<std::string>& argv, const std::string& log_path,
               const std::vector<std::string>& env = {});
  ~ChildProcess();  // SIGKILLs the child if it still runs
  void Kill(int signal);
  // Waits for the child to exit; returns its exit code, or 128 + signal number.
  int Wait();
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

}  // namespace fl::testing

#endif  // FL_TESTS_INTEGRATION_TEST_FEDERATION_H_
