// DownloadModel over the real wire (mutual TLS) from the shared chunk set: every client gets the
// exact payload with the SHA-256 on the last chunk only, a client that cancels mid-download
// leaves the server serving the others, a refusal is audited, and nothing keeps the model alive
// once the server is gone.
#include <thread>

#include "absl/strings/str_cat.h"
#include "fl/common/file_util.h"
#include "fl/server/server.h"
#include "fl/v1/federation.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/integration/test_federation.h"

namespace fl::testing {
namespace {

v1::DownloadRequest RequestFor(const v1::Task& task) {
  v1::DownloadRequest req;
  req.set_run_id(task.run_id());
  req.set_round(task.round());
  req.set_task_id(task.task_id());
  return req;
}

// The hand-rolled client, downloading by hand.
class DownloadClient : public RawClient {
 public:
  using RawClient::RawClient;

  // Downloads the whole model, checking offsets and that only the last chunk names a SHA-256.
  grpc::Status Download(const v1::DownloadRequest& req, std::string* payload, std::string* sha) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    auto reader = stub().DownloadModel(&ctx, req);
    v1::ModelChunk chunk;
    payload->clear();
    sha->clear();
    while (reader->Read(&chunk)) {
      EXPECT_EQ(chunk.offset(), static_cast<int64_t>(payload->size()));
      EXPECT_TRUE(sha->empty()) << "a chunk followed the one carrying the SHA-256";
      EXPECT_LE(static_cast<int64_t>(chunk.data().size()), kMaxChunkBytes);
      payload->append(chunk.data());
      *sha = chunk.sha256();
    }
    return reader->Finish();
  }

  // Reads `chunks` chunks, then cancels the call; returns the call's status.
  grpc::Status DownloadAndCancel(const v1::DownloadRequest& req, int chunks) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    auto reader = stub().DownloadModel(&ctx, req);
    v1::ModelChunk chunk;
    for (int i = 0; i < chunks; ++i) EXPECT_TRUE(reader->Read(&chunk));
    ctx.TryCancel();
    return reader->Finish();
  }

};

TEST(DownloadTest, EveryClientGetsThePayloadAndACancelledDownloadHurtsNoOne) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"a", "b", "c"});
  server::ServerOptions o = TlsServerOptions(pki, dir.path());
  o.engine.num_rounds = 1;
  o.engine.min_clients = 3;
  o.engine.min_fit_clients = 3;
  o.engine.round_timeout = absl::Seconds(120);
  o.max_poll_wait = absl::Seconds(1);
  // 40 MiB + 12 bytes: far more than HTTP/2's flow-control windows, so a client that stops
  // reading after one chunk leaves the server mid-stream; not a multiple of the chunk size.
  Model initial(ModelSpec({{"w", {10 * kMaxChunkBytes + 3}}}));
  for (size_t i = 0; i < initial.data().size(); ++i) initial.data()[i] = 0.25f * i;
  const std::string want(reinterpret_cast<const char*>(initial.bytes().data()),
                         initial.bytes().size());
  const std::string want_sha = initial.Sha256Hex();
  absl::StatusOr<std::unique_ptr<server::Server>> server =
      server::Server::Start(o, std::move(initial));
  ASSERT_TRUE(server.ok()) << server.status();
  std::weak_ptr<const Model> global = (*server)->engine().global_model();

  std::vector<std::unique_ptr<DownloadClient>> clients;
  std::vector<int64_t> runs;
  for (size_t i = 0; i < 3; ++i) {
    clients.push_back(std::make_unique<DownloadClient>(pki, i, (*server)->port()));
    runs.push_back(clients.back()->Join().run_id());
  }
  std::vector<v1::Task> tasks(3);
  {
    std::vector<std::thread> polls;
    for (size_t i = 0; i < 3; ++i) {
      polls.emplace_back([&, i] { tasks[i] = clients[i]->NextFit(runs[i]); });
    }
    for (std::thread& t : polls) t.join();
  }
  for (const v1::Task& t : tasks) {
    ASSERT_EQ(t.kind(), v1::Task::FIT);
    ASSERT_EQ(t.fit().model_sha256(), want_sha);
  }

  // Client a goes away after one chunk, twice.
  for (int i = 0; i < 2; ++i) {
    grpc::Status cancelled = clients[0]->DownloadAndCancel(RequestFor(tasks[0]), 1);
    EXPECT_EQ(cancelled.error_code(), grpc::StatusCode::CANCELLED) << cancelled.error_message();
  }

  // The server keeps serving: b and c download at the same time, then a again.
  std::string payload[3], sha[3];
  grpc::Status status[3];
  {
    std::vector<std::thread> downloads;
    for (size_t i = 1; i < 3; ++i) {
      downloads.emplace_back([&, i] {
        status[i] = clients[i]->Download(RequestFor(tasks[i]), &payload[i], &sha[i]);
      });
    }
    for (std::thread& t : downloads) t.join();
  }
  status[0] = clients[0]->Download(RequestFor(tasks[0]), &payload[0], &sha[0]);
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    ASSERT_TRUE(status[i].ok()) << status[i].error_message();
    EXPECT_EQ(payload[i].size(), want.size());
    EXPECT_TRUE(payload[i] == want) << "the downloaded payload differs from the global model";
    EXPECT_EQ(sha[i], want_sha);
  }

  // A download for a task the client does not hold is refused, and the refusal audited.
  v1::DownloadRequest bogus = RequestFor(tasks[2]);
  bogus.set_task_id("no-such-task");
  std::string ignored_payload, ignored_sha;
  grpc::Status refused = clients[2]->Download(bogus, &ignored_payload, &ignored_sha);
  EXPECT_FALSE(refused.ok());
  EXPECT_TRUE(ignored_payload.empty());
  EXPECT_NE(AuditText((*server)->store()).find("download_refused"), std::string::npos)
      << AuditText((*server)->store());

  // No reactor, chunk set or slice outlives the server and its clients: the model is freed.
  ASSERT_FALSE(global.expired());
  clients.clear();
  (*server)->Shutdown();
  server->reset();
  for (int i = 0; i < 100 && !global.expired(); ++i) absl::SleepFor(absl::Milliseconds(50));
  EXPECT_TRUE(global.expired()) << "something still holds the served model";
}

}  // namespace
}  // namespace fl::testing
