#include "tests/integration/test_federation.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "fl/common/file_util.h"
#include "fl/common/model.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace fl::testing {

RawClient::RawClient(const ProvisionedFiles& pki, size_t index, int port) {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = *ReadFile(pki.ca_cert);
  ssl.pem_cert_chain = *ReadFile(pki.client_certs[index]);
  ssl.pem_private_key = *ReadFile(pki.client_keys[index]);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(2 * static_cast<int>(kMaxChunkBytes));
  stub_ = v1::Federation::NewStub(
      grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port), grpc::SslCredentials(ssl), args));
}

v1::JoinReply RawClient::Join() {
  grpc::ClientContext ctx;
  v1::JoinRequest req;
  req.set_client_name("raw");
  v1::JoinReply reply;
  grpc::Status s = stub_->Join(&ctx, req, &reply);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return reply;
}

v1::Task RawClient::NextFit(int64_t run_id, int after_round) {
  for (int i = 0; i < 100; ++i) {
    grpc::ClientContext ctx;
    v1::PollRequest req;
    req.set_run_id(run_id);
    req.set_wait_ms(1000);
    v1::Task task;
    grpc::Status s = stub_->PollTask(&ctx, req, &task);
    EXPECT_TRUE(s.ok()) << s.error_message();
    if (task.kind() == v1::Task::FIT && task.round() > after_round) return task;
  }
  ADD_FAILURE() << "no fit task for a round after " << after_round;
  return {};
}

ProvisionedFiles MakePki(const std::string& dir, const std::vector<std::string>& names,
                         const std::string& federation) {
  ProvisionOptions options;
  options.out_dir = dir + "/certs";
  options.federation_name = federation;
  options.client_names = names;
  absl::StatusOr<ProvisionedFiles> files = ProvisionFederation(options);
  EXPECT_TRUE(files.ok()) << files.status();
  return files.ok() ? *files : ProvisionedFiles{};
}

namespace {
const client::Dataset& Load(bool train) {
  static std::unique_ptr<client::Dataset> data[2];
  std::unique_ptr<client::Dataset>& d = data[train ? 1 : 0];
  if (d == nullptr) {
    std::string dir = FL_FASHION_MNIST_DIR;
    absl::StatusOr<client::Dataset> loaded =
        train ? client::LoadIdx(dir + "/train-images-idx3-ubyte.gz",
                                dir + "/train-labels-idx1-ubyte.gz")
              : client::LoadIdx(dir + "/t10k-images-idx3-ubyte.gz",
                                dir + "/t10k-labels-idx1-ubyte.gz");
    if (!loaded.ok()) {
      ADD_FAILURE() << loaded.status();
      std::abort();
    }
    d = std::make_unique<client::Dataset>(*std::move(loaded));
  }
  return *d;
}

client::Dataset Slice(const client::Dataset& d, int64_t begin, int64_t count) {
  std::vector<int64_t> idx;
  for (int64_t i = begin; i < begin + count; ++i) idx.push_back(i);
  return d.Subset(idx);
}
}  // namespace

client::ModelArchitecture FashionMlp() {
  client::ModelArchitecture arch;
  arch.kind = client::ModelKind::kMlp;
  arch.num_features = 784;
  arch.num_classes = 10;
  arch.hidden = {32};
  return arch;
}

client::Dataset FashionTrainSlice(int64_t begin, int64_t count) {
  return Slice(Load(true), begin, count);
}
client::Dataset FashionTestSlice(int64_t count) { return Slice(Load(false), 0, count); }

ClientThread::ClientThread(client::ClientOptions options, std::unique_ptr<client::Trainer> trainer)
    : trainer_(std::move(trainer)) {
  absl::StatusOr<std::unique_ptr<client::Client>> c =
      client::Client::Create(std::move(options), trainer_.get());
  if (!c.ok()) {
    status_ = c.status();
    return;
  }
  client_ = *std::move(c);
  client_->set_on_task([this](const client::TaskReport& r) {
    if (r.status.ok()) ++accepted_;
  });
  thread_ = std::thread([this] { status_ = client_->Run(); });
}

ClientThread::~ClientThread() {
  Stop();
  if (thread_.joinable()) thread_.join();
}

absl::Status ClientThread::Join() {
  if (thread_.joinable()) thread_.join();
  return status_;
}

void ClientThread::Stop() {
  if (client_ != nullptr) client_->Stop();
}

client::ClientOptions TlsClientOptions(const ProvisionedFiles& pki, size_t index, int port) {
  client::ClientOptions o;
  o.server_address = absl::StrCat("127.0.0.1:", port);
  o.ca_cert_path = pki.ca_cert;
  o.cert_path = pki.client_certs.at(index);
  o.key_path = pki.client_keys.at(index);
  o.name = absl::StrCat("site-", index);
  o.poll_wait = absl::Seconds(2);
  o.reconnect_timeout = absl::Seconds(30);
  return o;
}

server::ServerOptions TlsServerOptions(const ProvisionedFiles& pki, const std::string& dir) {
  server::ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.data_dir = dir + "/server";
  o.ca_cert_path = pki.ca_cert;
  o.cert_path = pki.server_cert;
  o.key_path = pki.server_key;
  o.enroll_cert_paths = pki.client_certs;
  return o;
}

std::vector<std::string> SiteNames(int n) {
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) names.push_back(absl::StrCat("site-", i));
  return names;
}

server::ServerOptions MlpRunOptions(const ProvisionedFiles& pki, const std::string& dir, int sites,
                                    int rounds) {
  server::ServerOptions o = TlsServerOptions(pki, dir);
  o.engine.num_rounds = rounds;
  o.engine.min_clients = sites;
  o.engine.min_fit_clients = sites;
  o.engine.round_timeout = absl::Seconds(60);
  o.engine.fit.model_name = "mlp";
  o.max_poll_wait = absl::Seconds(2);
  return o;
}

std::vector<std::string> ServerCommand(const ProvisionedFiles& pki, const std::string& data_dir,
                                       int port, const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {
      FL_BINARY,    "server",        "--listen", absl::StrCat("127.0.0.1:", port),
      "--data-dir", data_dir,        "--ca",     pki.ca_cert,
      "--cert",     pki.server_cert, "--key",    pki.server_key};
  for (const std::string& cert : pki.client_certs) {
    argv.push_back("--enroll");
    argv.push_back(cert);
  }
  for (size_t i = 0; i + 1 < flags.size(); i += 2) {
    auto it = std::find(argv.begin(), argv.end(), flags[i]);
    if (it != argv.end() && it + 1 != argv.end()) {
      *(it + 1) = flags[i + 1];
    } else {
      argv.push_back(flags[i]);
      argv.push_back(flags[i + 1]);
    }
  }
  return argv;
}

std::string AuditText(server::Store& store) {
  absl::StatusOr<std::vector<server::AuditRecord>> log = store.AuditLog(1000);
  EXPECT_TRUE(log.ok()) << log.status();
  std::string all;
  if (!log.ok()) return all;
  for (const server::AuditRecord& r : *log) {
    absl::StrAppend(&all, r.event, " round ", r.round, ": ", r.detail, "\n");
  }
  return all;
}

int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

std::string HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buf[4096];
      ssize_t n;
      while ((n = read(fd, buf, sizeof(buf))) > 0) response.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return response;
}

}  // namespace fl::testing

namespace fl::testing {

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::string& log_path,
                           const std::vector<std::string>& env) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  // posix_spawn, not fork: gRPC's fork handlers would stop this process's own gRPC threads.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  if (posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), envp.data()) != 0) pid_ = -1;
  posix_spawn_file_actions_destroy(&actions);
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

void ChildProcess::Kill(int signal) {
  if (pid_ > 0) kill(pid_, signal);
}

int ChildProcess::Wait() {
  if (pid_ <= 0) return -1;
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace fl::testing
