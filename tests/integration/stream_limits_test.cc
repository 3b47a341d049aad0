// What one client can hold of the server: streams that stop moving are cut and the cut audited,
// each client's calls are bounded ([limits] max_streams_per_client, max_uploads_per_client), and
// waiting polls and idle streams hold no server threads (the callback API with the service's own
// pool). Real gRPC over loopback, the server in process.
#include <dirent.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "fl/client/softmax_trainer.h"
#include "fl/common/crypto.h"
#include "fl/common/file_util.h"
#include "fl/server/server.h"
#include "fl/v1/federation.grpc.pb.h"
#include "fl/wire/proto_serde.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/integration/test_federation.h"

namespace fl::testing {
namespace {

// Threads of this process now.
int ThreadCount() {
  int count = 0;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count;
}

void ExpectRefused(const grpc::Status& s, grpc::StatusCode code, const std::string& fragment) {
  EXPECT_EQ(s.error_code(), code) << s.error_message();
  EXPECT_NE(s.error_message().find(fragment), std::string::npos) << s.error_message();
}

// Calls many clients make at once over one channel, on one completion queue, without a thread
// per call: in plaintext mode each call names its client in its fl-client-name header.
class ManyCalls {
 public:
  explicit ManyCalls(int port)
      : stub_(v1::Federation::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                                          grpc::InsecureChannelCredentials()))) {}
  ~ManyCalls() {
    for (auto& c : calls_) c->ctx.TryCancel();
    Drain(calls_.size() - done_, absl::Seconds(30));
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
  }

  v1::Federation::Stub& stub() { return *stub_; }

  // A long poll of `client` for `run_id`, waiting up to `wait`.
  void Poll(const std::string& client, int64_t run_id, absl::Duration wait) {
    auto call = NewCall(client, wait + absl::Seconds(30));
    v1::PollRequest req;
    req.set_run_id(run_id);
    req.set_wait_ms(static_cast<int>(absl::ToInt64Milliseconds(wait)));
    call->poll = stub_->AsyncPollTask(&call->ctx, req, &cq_);
    call->poll->Finish(&call->task, &call->status, call);
  }

  // An upload of `client` that sends nothing (its stream is open, silent).
  void SilentUpload(const std::string& client) {
    auto call = NewCall(client, absl::Seconds(60));
    call->upload = stub_->AsyncSubmitUpdate(&call->ctx, &call->reply, &cq_, call);
    call->started = true;
  }

  // Waits for `n` calls to end (or `timeout`); returns how many did.
  size_t Drain(size_t n, absl::Duration timeout) {
    size_t ended = 0;
    const absl::Time deadline = absl::Now() + timeout;
    while (ended < n) {
      void* tag;
      bool ok;
      const auto status = cq_.AsyncNext(&tag, &ok, absl::ToChronoTime(deadline));
      if (status != grpc::CompletionQueue::GOT_EVENT) break;
      auto* call = static_cast<Call*>(tag);
      if (call->upload != nullptr && call->started) {
        // The stream started; ask for its end.
        call->started = false;
        call->upload->Finish(&call->status, call);
        continue;
      }
      call->ended = true;
      statuses_.push_back(call->status);
      kinds_.push_back(call->poll != nullptr ? static_cast<int>(call->task.kind()) : -1);
      ++ended;
      ++done_;
    }
    return ended;
  }

  const std::vector<grpc::Status>& statuses() const { return statuses_; }
  // The task kind each poll that ended got (-1 for an upload), in the order they ended.
  const std::vector<int>& kinds() const { return kinds_; }

 private:
  struct Call {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientAsyncResponseReader<v1::Task>> poll;
    std::unique_ptr<grpc::ClientAsyncWriter<v1::UpdatePart>> upload;
    v1::Task task;
    v1::SubmitReply reply;
    grpc::Status status;
    bool started = false;
    bool ended = false;
  };
  Call* NewCall(const std::string& client, absl::Duration deadline) {
    calls_.push_back(std::make_unique<Call>());
    Call* call = calls_.back().get();
    call->ctx.AddMetadata("fl-client-name", client);
    call->ctx.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    return call;
  }

  std::unique_ptr<v1::Federation::Stub> stub_;
  grpc::CompletionQueue cq_;
  std::vector<std::unique_ptr<Call>> calls_;
  std::vector<grpc::Status> statuses_;
  std::vector<int> kinds_;
  size_t done_ = 0;
};

// A plaintext server whose run waits for more clients than will come: polls find no task.
std::unique_ptr<server::Server> WaitingServer(const std::string& dir,
                                              const server::ClientInputLimits& limits) {
  server::ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.data_dir = dir + "/server";
  o.insecure_plaintext = true;
  o.engine.min_clients = 1000;
  o.max_poll_wait = absl::Seconds(30);
  o.client_limits = limits;
  absl::StatusOr<std::unique_ptr<server::Server>> server =
      server::Server::Start(o, Model(client::SoftmaxRegressionSpec(784, 10)));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

int64_t JoinAs(ManyCalls& calls, const std::string& client) {
  grpc::ClientContext ctx;
  ctx.AddMetadata("fl-client-name", client);
  v1::JoinRequest req;
  req.set_client_name(client);
  v1::JoinReply reply;
  const grpc::Status s = calls.stub().Join(&ctx, req, &reply);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return reply.run_id();
}

grpc::Status HeartbeatAs(ManyCalls& calls, const std::string& client) {
  grpc::ClientContext ctx;
  ctx.AddMetadata("fl-client-name", client);
  v1::HeartbeatRequest req;
  v1::HeartbeatReply reply;
  return calls.stub().Heartbeat(&ctx, req, &reply);
}

// One client's calls are bounded: past max_streams_per_client calls in progress (here three
// parked polls) its next is refused, naming the limit; past max_uploads_per_client uploads, the
// next upload. Another client is not affected, and the client gets its calls back once they end.
TEST(StreamLimitsTest, AClientOverItsCallQuotaIsRefusedNamingTheLimit) {
  TempDir dir;
  server::ClientInputLimits limits;
  limits.max_streams_per_client = 3;
  limits.max_uploads_per_client = 1;
  std::unique_ptr<server::Server> server = WaitingServer(dir.path(), limits);
  ASSERT_NE(server, nullptr);
  ManyCalls calls(server->port());
  const int64_t run_id = JoinAs(calls, "greedy");
  JoinAs(calls, "other");

  for (int i = 0; i < 3; ++i) calls.Poll("greedy", run_id, absl::Seconds(5));
  // Once the three polls are parked on the server, the next call is refused.
  grpc::Status refused;
  for (int i = 0; i < 100 && refused.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED; ++i) {
    refused = HeartbeatAs(calls, "greedy");
    if (refused.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) {
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  ExpectRefused(refused, grpc::StatusCode::RESOURCE_EXHAUSTED,
                "this client has 3 calls in progress; the server takes at most 3 at once from "
                "one client (limits.max_streams_per_client)");
  const grpc::Status other = HeartbeatAs(calls, "other");
  EXPECT_NE(other.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << other.error_message();

  // The polls end (with their wait); then the client has room again.
  ASSERT_EQ(calls.Drain(3, absl::Seconds(20)), 3u);
  for (const grpc::Status& s : calls.statuses()) EXPECT_TRUE(s.ok()) << s.error_message();
  const grpc::Status again = HeartbeatAs(calls, "greedy");
  EXPECT_NE(again.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << again.error_message();

  // One upload in progress; a second is refused (tried until the first is in).
  calls.SilentUpload("greedy");
  grpc::Status second_upload;
  for (int i = 0; i < 100 && second_upload.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED;
       ++i) {
    ManyCalls second(server->port());
    second.SilentUpload("greedy");
    if (second.Drain(1, absl::Milliseconds(300)) == 1) second_upload = second.statuses().front();
  }
  ExpectRefused(second_upload, grpc::StatusCode::RESOURCE_EXHAUSTED,
                "this client has 1 uploads in progress; the server takes at most 1 at once from "
                "one client (limits.max_uploads_per_client)");

  // The refusal is audited (once a minute per client at most).
  const std::string audit = AuditText(server->store());
  EXPECT_NE(audit.find("limits.max_streams_per_client"), std::string::npos) << audit;
}

// An upload that sends nothing is cut after limits.stream_idle_timeout_s, well before the
// client's own deadline; the cut is audited with why, and the client's quota is free again.
TEST(StreamLimitsTest, ASilentUploadIsCutAfterTheIdleTimeAndTheCutIsAudited) {
  TempDir dir;
  server::ClientInputLimits limits;
  limits.stream_idle_timeout = absl::Seconds(1);
  limits.max_uploads_per_client = 1;
  std::unique_ptr<server::Server> server = WaitingServer(dir.path(), limits);
  ASSERT_NE(server, nullptr);
  ManyCalls calls(server->port());
  JoinAs(calls, "silent");

  const absl::Time start = absl::Now();
  calls.SilentUpload("silent");  // the client's deadline is 60 s
  ASSERT_EQ(calls.Drain(1, absl::Seconds(20)), 1u);
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(900));
  EXPECT_LT(took, absl::Seconds(5)) << "cut after " << took;
  EXPECT_FALSE(calls.statuses().front().ok());

  // The server records the cut once the call is over: on its own threads, after the client saw
  // it end.
  std::string audit;
  for (int i = 0; i < 100 && audit.find("the server cut") == std::string::npos; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    audit = AuditText(server->store());
  }
  EXPECT_NE(audit.find("the server cut this upload before its metadata: no data moved for"),
            std::string::npos)
      << audit;
  EXPECT_NE(audit.find("limits.stream_idle_timeout_s is 1s"), std::string::npos) << audit;
  // Its upload slot was given back: a new upload is not refused for the quota.
  ManyCalls next(server->port());
  next.SilentUpload("silent");
  ASSERT_EQ(next.Drain(1, absl::Seconds(20)), 1u);
  EXPECT_NE(next.statuses().front().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << next.statuses().front().error_message();
}

// A sampled site that starts its update and then goes silent no longer holds the round until its
// deadline (60 s here): its upload is cut at the idle time, its update refused with why, and the
// round commits with the others.
TEST(StreamLimitsTest, ASiteThatGoesSilentMidUploadIsCutAndTheRoundGoesOn) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "site-1", "raw"});
  server::ServerOptions o = TlsServerOptions(pki, dir.path());
  o.engine.num_rounds = 1;
  o.engine.min_clients = 3;
  o.engine.min_fit_clients = 2;  // all three are sampled; two accepted updates commit
  o.engine.round_timeout = absl::Seconds(60);
  o.max_poll_wait = absl::Seconds(1);
  o.client_limits.stream_idle_timeout = absl::Seconds(1);
  const ModelSpec spec = client::SoftmaxRegressionSpec(784, 10);
  absl::StatusOr<std::unique_ptr<server::Server>> server = server::Server::Start(o, Model(spec));
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<std::unique_ptr<ClientThread>> good;
  for (int i = 0; i < 2; ++i) {
    good.push_back(std::make_unique<ClientThread>(
        TlsClientOptions(pki, i, (*server)->port()),
        client::MakeSoftmaxRegressionTrainer(FashionTrainSlice(i * 1000, 1000), {})));
  }
  RawClient raw(pki, 2, (*server)->port());
  const int64_t run_id = raw.Join().run_id();
  const v1::Task task = raw.NextFit(run_id);
  const absl::Time start = absl::Now();

  Model update(spec);
  grpc::ClientContext ctx;
  v1::SubmitReply reply;
  auto writer = raw.stub().SubmitUpdate(&ctx, &reply);
  v1::UpdatePart part;
  v1::UpdateMetadata* m = part.mutable_metadata();
  m->set_run_id(task.run_id());
  m->set_round(task.round());
  m->set_task_id(task.task_id());
  m->set_num_examples(100);
  m->set_encoding(v1::UpdateMetadata::FLOAT32);
  m->set_payload_bytes(update.NumBytes());
  ASSERT_TRUE(writer->Write(part));
  part.Clear();
  part.mutable_chunk()->set_offset(0);
  part.mutable_chunk()->set_data(
      std::string(reinterpret_cast<const char*>(update.bytes().data()), update.NumBytes() / 2));
  ASSERT_TRUE(writer->Write(part));
  // Then nothing: the server ends the stream.
  const grpc::Status s = writer->Finish();
  EXPECT_FALSE(s.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));

  for (auto& c : good) EXPECT_TRUE(c->Join().ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(40)) << "the round waited for the silent site";
  server::Store& store = (*server)->store();
  EXPECT_EQ(store.GetRun(run_id)->status, server::RunStatus::kFinished);
  absl::StatusOr<std::vector<server::RoundRecord>> rounds = store.Rounds(run_id);
  ASSERT_TRUE(rounds.ok());
  ASSERT_EQ(rounds->size(), 1u);
  EXPECT_EQ(rounds->front().status, server::RoundStatus::kCommitted);
  EXPECT_EQ(rounds->front().num_reported, 2);
  const std::string raw_id = *CertificateFingerprint(*ReadFile(pki.client_certs[2]));
  absl::StatusOr<std::vector<server::ParticipationRecord>> parts = store.Participations(run_id, 1);
  ASSERT_TRUE(parts.ok()) << parts.status();
  bool cut = false;
  for (const server::ParticipationRecord& p : *parts) {
    if (p.client_id != raw_id) continue;
    EXPECT_EQ(p.status, server::ParticipationStatus::kRefused);
    cut = p.reason.find("the server cut this upload: no data moved for") != std::string::npos;
    EXPECT_TRUE(cut) << p.reason;
  }
  EXPECT_TRUE(cut) << "no participation of the silent site";
}

// 300 clients with a parked poll each and 100 with a silent upload hold no server threads: the
// process's thread count stays within a small bound of what it was (the sync API held one thread
// per call: 400 more). The uploads are cut at the idle time and the polls end with their wait.
TEST(StreamLimitsTest, ParkedPollsAndIdleStreamsHoldNoServerThreads) {
  TempDir dir;
  server::ClientInputLimits limits;
  limits.stream_idle_timeout = absl::Seconds(2);
  std::unique_ptr<server::Server> server = WaitingServer(dir.path(), limits);
  ASSERT_NE(server, nullptr);
  ManyCalls calls(server->port());
  const int64_t run_id = JoinAs(calls, "client-0");
  // One call first, so that gRPC's own threads (client and server) have started.
  calls.Poll("client-0", run_id, absl::Milliseconds(1));
  ASSERT_EQ(calls.Drain(1, absl::Seconds(10)), 1u);
  const int before = ThreadCount();

  const absl::Time start = absl::Now();
  for (int i = 0; i < 300; ++i) calls.Poll(absl::StrCat("poller-", i), run_id, absl::Seconds(6));
  for (int i = 0; i < 100; ++i) calls.SilentUpload(absl::StrCat("uploader-", i));
  absl::SleepFor(absl::Seconds(1));
  const int during = ThreadCount();
  EXPECT_LT(during - before, 16) << before << " threads before, " << during << " with 400 calls";

  // The silent uploads are cut at the idle time (2 s): the client sees its call cancelled.
  ASSERT_EQ(calls.Drain(100, absl::Seconds(20)), 100u);
  for (size_t i = 1; i <= 100; ++i) {
    EXPECT_EQ(calls.statuses()[i].error_code(), grpc::StatusCode::CANCELLED)
        << calls.statuses()[i].error_message();
    EXPECT_EQ(calls.kinds()[i], -1) << "a poll ended before the uploads were cut";
  }
  // The polls waited their whole wait (6 s) and were answered WAIT: they were parked.
  ASSERT_EQ(calls.Drain(300, absl::Seconds(30)), 300u);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(5500));
  for (size_t i = 101; i < calls.statuses().size(); ++i) {
    EXPECT_TRUE(calls.statuses()[i].ok()) << calls.statuses()[i].error_message();
    EXPECT_EQ(calls.kinds()[i], static_cast<int>(v1::Task::WAIT));
  }
  const std::string audit = AuditText(server->store());
  size_t cuts = 0;
  for (size_t at = audit.find("the server cut this upload"); at != std::string::npos;
       at = audit.find("the server cut this upload", at + 1)) {
    ++cuts;
  }
  EXPECT_EQ(cuts, 100u);
  std::cerr << "threads: " << before << " before, " << during << " with 300 parked polls and 100 "
            << "silent uploads\n";
}

// A call whose headers are past limits.max_metadata_bytes is refused by gRPC before the service
// sees it; one under it is served.
TEST(StreamLimitsTest, HeadersPastTheMetadataLimitAreRefused) {
  TempDir dir;
  server::ClientInputLimits limits;
  limits.max_metadata_bytes = 4096;
  std::unique_ptr<server::Server> server = WaitingServer(dir.path(), limits);
  ASSERT_NE(server, nullptr);
  ManyCalls calls(server->port());
  for (const size_t bytes : {size_t{1000}, size_t{20000}}) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("fl-client-name", "headers");
    ctx.AddMetadata("x-padding", std::string(bytes, 'p'));
    v1::JoinRequest req;
    v1::JoinReply reply;
    const grpc::Status s = calls.stub().Join(&ctx, req, &reply);
    if (bytes == 1000) {
      EXPECT_TRUE(s.ok()) << s.error_message();
    } else {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
    }
  }
}

}  // namespace
}  // namespace fl::testing
