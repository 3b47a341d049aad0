// Bad updates sent over the real wire by a hand-rolled client, while two real SDK clients train:
// each bad update is refused with a precise gRPC status, recorded, and the round completes with
// the others.
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
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

// The hand-rolled client, with what the bad-update tests send and wait for.
class BadClient : public RawClient {
 public:
  using RawClient::RawClient;

  // Polls until the server's answer carries `fragment` in its message; false after ~10 s.
  bool WaitForMessage(int64_t run_id, const std::string& fragment) {
    for (int i = 0; i < 200; ++i) {
      grpc::ClientContext ctx;
      v1::PollRequest req;
      req.set_run_id(run_id);
      req.set_wait_ms(0);
      v1::Task task;
      if (stub().PollTask(&ctx, req, &task).ok() &&
          task.message().find(fragment) != std::string::npos) {
        return true;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  }

  // Sends metadata, then `payload` as one chunk (unless empty), then `sha` (unless empty).
  grpc::Status Send(const v1::UpdateMetadata& meta, const std::string& payload,
                    const std::string& sha) {
    grpc::ClientContext ctx;
    v1::SubmitReply reply;
    auto writer = stub().SubmitUpdate(&ctx, &reply);
    v1::UpdatePart part;
    *part.mutable_metadata() = meta;
    writer->Write(part);
    if (!payload.empty()) {
      part.Clear();
      part.mutable_chunk()->set_offset(0);
      part.mutable_chunk()->set_data(payload);
      writer->Write(part);
    }
    if (!sha.empty()) {
      part.Clear();
      part.set_sha256(sha);
      writer->Write(part);
    }
    writer->WritesDone();
    return writer->Finish();
  }
};

v1::UpdateMetadata MetaFor(const v1::Task& task, int64_t bytes) {
  v1::UpdateMetadata m;
  m.set_run_id(task.run_id());
  m.set_round(task.round());
  m.set_task_id(task.task_id());
  m.set_num_examples(100);
  m.set_encoding(v1::UpdateMetadata::FLOAT32);
  m.set_payload_bytes(bytes);
  return m;
}

void ExpectRefused(const grpc::Status& s, grpc::StatusCode code, const std::string& fragment) {
  EXPECT_EQ(s.error_code(), code) << s.error_message();
  EXPECT_NE(s.error_message().find(fragment), std::string::npos) << s.error_message();
}

TEST(BadInputTest, EachBadUpdateIsRefusedAndTheRoundGoesOn) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "site-1", "raw"});
  server::ServerOptions o = TlsServerOptions(pki, dir.path());
  o.engine.num_rounds = 6;
  o.engine.min_clients = 3;
  o.engine.min_fit_clients = 2;
  o.engine.round_timeout = absl::Seconds(60);
  o.max_poll_wait = absl::Seconds(1);
  o.metrics_address = "127.0.0.1:0";
  const ModelSpec spec = client::SoftmaxRegressionSpec(784, 10);
  absl::StatusOr<std::unique_ptr<server::Server>> server = server::Server::Start(o, Model(spec));
  ASSERT_TRUE(server.ok()) << server.status();

  std::vector<std::unique_ptr<ClientThread>> good;
  for (int i = 0; i < 2; ++i) {
    good.push_back(std::make_unique<ClientThread>(
        TlsClientOptions(pki, i, (*server)->port()),
        client::MakeSoftmaxRegressionTrainer(FashionTrainSlice(i * 1000, 1000), {})));
  }
  BadClient raw(pki, 2, (*server)->port());
  const int64_t run_id = raw.Join().run_id();

  Model update(spec);
  for (size_t i = 0; i < update.data().size(); ++i) update.data()[i] = 0.001f * (i % 7);
  const std::string payload(reinterpret_cast<const char*>(update.bytes().data()),
                            update.bytes().size());
  const std::string sha = update.Sha256Hex();
  const int64_t bytes = update.NumBytes();

  // Round 1: stale and foreign requests first (they do not spend the client's update), then an
  // update whose declared size is not the model's.
  v1::Task t = raw.NextFit(run_id, 0);
  v1::UpdateMetadata m = MetaFor(t, bytes);
  m.set_round(t.round() + 1);
  ExpectRefused(raw.Send(m, payload, sha), grpc::StatusCode::FAILED_PRECONDITION,
                absl::StrCat("request is for round ", t.round() + 1));
  m = MetaFor(t, bytes);
  m.set_task_id("r1.a0.somebody-else");
  ExpectRefused(raw.Send(m, payload, sha), grpc::StatusCode::FAILED_PRECONDITION,
                "is not this client's task");
  m = MetaFor(t, bytes);
  m.set_run_id(run_id + 5);
  ExpectRefused(raw.Send(m, payload, sha), grpc::StatusCode::FAILED_PRECONDITION,
                absl::StrCat("request is for run ", run_id + 5));
  m = MetaFor(t, bytes);
  m.set_encoding(v1::UpdateMetadata::ENCODING_UNSPECIFIED);
  ExpectRefused(raw.Send(m, payload, sha), grpc::StatusCode::INVALID_ARGUMENT, "is not supported");
  ExpectRefused(raw.Send(MetaFor(t, 400), payload.substr(0, 400), sha),
                grpc::StatusCode::INVALID_ARGUMENT, "float32 parameters (31400 bytes)");

  // Round 2: the payload does not hash to the declared SHA-256.
  t = raw.NextFit(run_id, 1);
  ExpectRefused(raw.Send(MetaFor(t, bytes), payload, std::string(64, 'a')),
                grpc::StatusCode::INVALID_ARGUMENT, "SHA-256 mismatch");

  // Round 3: a NaN.
  t = raw.NextFit(run_id, 2);
  Model bad = update.Clone();
  bad.data()[4242] = std::numeric_limits<float>::quiet_NaN();
  std::string bad_payload(reinterpret_cast<const char*>(bad.bytes().data()), bad.bytes().size());
  ExpectRefused(raw.Send(MetaFor(t, bytes), bad_payload, bad.Sha256Hex()),
                grpc::StatusCode::INVALID_ARGUMENT, "non-finite value (nan) at parameter 4242");

  // Round 4: the stream stops halfway, without its SHA-256.
  t = raw.NextFit(run_id, 3);
  ExpectRefused(raw.Send(MetaFor(t, bytes), payload.substr(0, bytes / 2), ""),
                grpc::StatusCode::DATA_LOSS, "ended after 15700 of 31400 bytes");

  // Round 5: an update whose tensors have another shape than the model's.
  t = raw.NextFit(run_id, 4);
  m = MetaFor(t, bytes);
  ToProto(client::SoftmaxRegressionSpec(785, 10), m.mutable_model_spec());
  ExpectRefused(raw.Send(m, payload, sha), grpc::StatusCode::INVALID_ARGUMENT,
                "update's tensor 'weight' has shape [10,785] but the model's has shape [10,784]");

  // Round 6: a second update while the first is still open (the round cannot close under it),
  // then the first completes and is accepted.
  t = raw.NextFit(run_id, 5);
  {
    grpc::ClientContext ctx;
    v1::SubmitReply reply;
    auto first = raw.stub().SubmitUpdate(&ctx, &reply);
    v1::UpdatePart part;
    *part.mutable_metadata() = MetaFor(t, bytes);
    ASSERT_TRUE(first->Write(part));
    part.Clear();
    part.mutable_chunk()->set_offset(0);
    part.mutable_chunk()->set_data(payload);
    ASSERT_TRUE(first->Write(part));
    // The server has taken the first stream's metadata once its poll answer says so.
    EXPECT_TRUE(raw.WaitForMessage(run_id, "update received")) << "first stream never registered";
    ExpectRefused(raw.Send(MetaFor(t, bytes), payload, sha), grpc::StatusCode::ALREADY_EXISTS,
                  "already received");
    part.Clear();
    part.set_sha256(sha);
    ASSERT_TRUE(first->Write(part));
    first->WritesDone();
    grpc::Status s = first->Finish();
    EXPECT_TRUE(s.ok()) << s.error_message();
  }

  for (auto& c : good) EXPECT_TRUE(c->Join().ok());
  server::Store& store = (*server)->store();
  EXPECT_EQ(store.GetRun(run_id)->status, server::RunStatus::kFinished);
  absl::StatusOr<std::vector<server::RoundRecord>> rounds = store.Rounds(run_id);
  ASSERT_TRUE(rounds.ok());
  ASSERT_EQ(rounds->size(), 6u);
  for (const server::RoundRecord& r : *rounds) {
    EXPECT_EQ(r.status, server::RoundStatus::kCommitted) << "round " << r.round;
    EXPECT_EQ(r.num_reported, r.round == 6 ? 3 : 2) << "round " << r.round;
  }
  // Every refusal is in the audit log and the raw client's participations say why.
  absl::StatusOr<std::vector<server::AuditRecord>> audit = store.AuditLog(1000);
  ASSERT_TRUE(audit.ok());
  std::string all;
  for (const auto& r : *audit) all += r.event + ": " + r.detail + "\n";
  for (const char* fragment : {"request is for round 2", "is not this client's task",
                               "is not supported", "31400 bytes", "SHA-256 mismatch", "non-finite",
                               "ended after 15700", "has shape [10,785]", "already received"}) {
    EXPECT_NE(all.find(fragment), std::string::npos) << fragment << "\n" << all;
  }
  // The Prometheus endpoint counted what happened.
  const std::string metrics = HttpGet((*server)->metrics_port(), "/metrics");
  EXPECT_NE(metrics.find("HTTP/1.1 200"), std::string::npos) << metrics;
  for (const char* line : {"fl_rounds_committed_total 6\n", "fl_updates_accepted_total 13\n",
                           "fl_updates_refused_total{reason=\"INVALID_ARGUMENT\"} 5\n",
                           "fl_updates_refused_total{reason=\"FAILED_PRECONDITION\"} 3\n",
                           "fl_updates_refused_total{reason=\"DATA_LOSS\"} 1\n",
                           "fl_updates_refused_total{reason=\"ALREADY_EXISTS\"} 1\n",
                           "fl_update_bytes_received_total 408200\n"}) {
    EXPECT_NE(metrics.find(line), std::string::npos) << line << metrics;
  }
  EXPECT_NE(HttpGet((*server)->metrics_port(), "/healthz").find("\"status\":\"ok\""),
            std::string::npos);

  std::string raw_id = *CertificateFingerprint(*ReadFile(pki.client_certs[2]));
  for (int round = 1; round <= 5; ++round) {
    absl::StatusOr<std::vector<server::ParticipationRecord>> parts =
        store.Participations(run_id, round);
    ASSERT_TRUE(parts.ok());
    bool refused = false;
    for (const auto& p : *parts) {
      if (p.client_id == raw_id) {
        refused = p.status == server::ParticipationStatus::kRefused && !p.reason.empty();
      }
    }
    EXPECT_TRUE(refused) << "round " << round;
  }
}

// Client text and maps over the server's [limits] are refused before anything in them is logged
// or stored, each naming the field, its size and the option; a long decline is cut, not refused;
// the round goes on with the others.
TEST(BadInputTest, ClientTextOverTheLimitsIsRefusedNamingTheLimit) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "site-1", "raw"});
  server::ServerOptions o = TlsServerOptions(pki, dir.path());
  o.engine.num_rounds = 2;
  o.engine.min_clients = 3;
  o.engine.min_fit_clients = 2;
  o.engine.round_timeout = absl::Seconds(60);
  o.max_poll_wait = absl::Seconds(1);
  o.client_limits.max_name_bytes = 32;
  o.client_limits.max_metrics = 4;
  o.client_limits.max_metric_key_bytes = 16;
  o.client_limits.max_text_bytes = 64;
  o.engine.client_timeout = absl::Seconds(3);
  const ModelSpec spec = client::SoftmaxRegressionSpec(784, 10);
  absl::StatusOr<std::unique_ptr<server::Server>> server = server::Server::Start(o, Model(spec));
  ASSERT_TRUE(server.ok()) << server.status();
  BadClient raw(pki, 2, (*server)->port());
  {
    grpc::ClientContext ctx;
    v1::JoinRequest req;
    req.set_client_name(std::string(1500000, 'n'));
    v1::JoinReply reply;
    ExpectRefused(raw.stub().Join(&ctx, req, &reply), grpc::StatusCode::INVALID_ARGUMENT,
                  "client_name is 1500000 bytes; the server takes at most 32 "
                  "(limits.max_name_bytes)");
  }
  std::vector<std::unique_ptr<ClientThread>> good;
  for (int i = 0; i < 2; ++i) {
    good.push_back(std::make_unique<ClientThread>(
        TlsClientOptions(pki, i, (*server)->port()),
        client::MakeSoftmaxRegressionTrainer(FashionTrainSlice(i * 1000, 1000), {})));
  }
  const int64_t run_id = raw.Join().run_id();
  v1::Task t = raw.NextFit(run_id, 0);
  v1::UpdateMetadata m = MetaFor(t, Model(spec).NumBytes());
  for (int i = 0; i < 80; ++i) (*m.mutable_metrics())[absl::StrCat("m", i)] = i;
  ExpectRefused(raw.Send(m, "", ""), grpc::StatusCode::INVALID_ARGUMENT,
                "the update's metrics map is 80 entries; the server takes at most 4 "
                "(limits.max_metrics)");
  m = MetaFor(t, Model(spec).NumBytes());
  (*m.mutable_metrics())[std::string(1000, 'k')] = 1;
  ExpectRefused(raw.Send(m, "", ""), grpc::StatusCode::INVALID_ARGUMENT,
                "a key of the update's metrics is 1000 bytes; the server takes at most 16 "
                "(limits.max_metric_key_bytes)");
  m = MetaFor(t, Model(spec).NumBytes());
  m.mutable_model_spec()->add_tensors()->set_name(std::string(5000, 'w'));
  ExpectRefused(raw.Send(m, "", ""), grpc::StatusCode::INVALID_ARGUMENT,
                "the update's model spec's tensor 0 has a name of 5000 bytes");
  m = MetaFor(t, Model(spec).NumBytes());
  m.set_task_id(std::string(100, 't'));
  ExpectRefused(raw.Send(m, "", ""), grpc::StatusCode::INVALID_ARGUMENT,
                "task_id is 100 bytes; the server takes at most 32 (limits.max_name_bytes)");
  {
    grpc::ClientContext ctx;
    v1::EvaluationResult e;
    e.set_run_id(run_id);
    e.set_task_id(t.task_id());
    for (int i = 0; i < 5; ++i) (*e.mutable_metrics())[absl::StrCat("m", i)] = i;
    v1::SubmitReply reply;
    ExpectRefused(raw.stub().SubmitEvaluation(&ctx, e, &reply), grpc::StatusCode::INVALID_ARGUMENT,
                  "the evaluation's metrics map is 5 entries; the server takes at most 4");
  }
  // A long decline (a site's own error, say) is cut to max_text_bytes and recorded, not refused;
  // then the raw client stops (round 2 goes on without it once it is timed out). The refusals
  // are audited, and the good sites' rounds commit.
  m = MetaFor(t, Model(spec).NumBytes());
  m.set_decline_reason(std::string(5000, 'r'));
  EXPECT_TRUE(raw.Send(m, "", "").ok());
  for (auto& g : good) EXPECT_TRUE(g->Join().ok());
  absl::StatusOr<std::vector<server::RoundRecord>> rounds = (*server)->store().Rounds(run_id);
  ASSERT_TRUE(rounds.ok());
  int committed = 0;
  for (const server::RoundRecord& r : *rounds) {
    committed += r.status == server::RoundStatus::kCommitted ? 1 : 0;
  }
  EXPECT_EQ(committed, 2);
  absl::StatusOr<std::vector<server::AuditRecord>> audit = (*server)->store().AuditLog(1000);
  ASSERT_TRUE(audit.ok()) << audit.status();
  int refused = 0;
  for (const server::AuditRecord& a : *audit) {
    refused += a.detail.find("(limits.max_") != std::string::npos;
  }
  EXPECT_EQ(refused, 5);  // the join, three updates, the evaluation
  absl::StatusOr<std::vector<server::ParticipationRecord>> parts =
      (*server)->store().Participations(run_id, 1);
  ASSERT_TRUE(parts.ok());
  bool cut = false;
  for (const server::ParticipationRecord& p : *parts) {
    cut = cut || (p.reason.find("rrrr") != std::string::npos && p.reason.size() < 1000);
  }
  EXPECT_TRUE(cut) << "the long decline is recorded, cut";
}

// In plaintext mode (loopback tests) a client is named by its fl-client-name header: bounded
// like any client name.
TEST(BadInputTest, APlaintextClientNameOverTheLimitIsRefused) {
  TempDir dir;
  server::ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.data_dir = dir.path() + "/server";
  o.insecure_plaintext = true;
  absl::StatusOr<std::unique_ptr<server::Server>> server =
      server::Server::Start(o, Model(client::SoftmaxRegressionSpec(784, 10)));
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::Federation::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", (*server)->port()), grpc::InsecureChannelCredentials()));
  for (const size_t length : {size_t{128}, size_t{129}}) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("fl-client-name", std::string(length, 'n'));
    v1::JoinRequest req;
    v1::JoinReply reply;
    const grpc::Status s = stub->Join(&ctx, req, &reply);
    if (length == 128) {
      EXPECT_TRUE(s.ok()) << s.error_message();
    } else {
      ExpectRefused(s, grpc::StatusCode::INVALID_ARGUMENT,
                    "the fl-client-name metadata is 129 bytes; the server takes at most 128");
    }
  }
}

// The server trusts a certificate it verified for a while (verifying on every call was most of
// its CPU in short rounds), but looks enrollment up on every call: a site revoked between two
// calls is refused at the second, with the reason.
TEST(BadInputTest, ASiteRevokedBetweenTwoCallsIsRefusedAtTheSecond) {
  TempDir dir;
  ProvisionedFiles pki = MakePki(dir.path(), {"site-0", "raw"});
  server::ServerOptions o = TlsServerOptions(pki, dir.path());
  o.engine.min_clients = 2;
  absl::StatusOr<std::unique_ptr<server::Server>> server =
      server::Server::Start(o, Model(client::SoftmaxRegressionSpec(784, 10)));
  ASSERT_TRUE(server.ok()) << server.status();
  RawClient raw(pki, 1, (*server)->port());
  EXPECT_GT(raw.Join().run_id(), 0);
  const std::string fp = *CertificateFingerprint(*ReadFile(pki.client_certs[1]));
  ASSERT_TRUE((*server)->store().RevokeClient(fp, 1).ok());
  grpc::ClientContext ctx;
  v1::JoinRequest req;
  req.set_client_name("raw");
  v1::JoinReply reply;
  grpc::Status s = raw.stub().Join(&ctx, req, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_NE(s.error_message().find("(CN=raw) was revoked at"), std::string::npos)
      << s.error_message();
}

}  // namespace
}  // namespace fl::testing
