// Writes the seed corpora of the protobuf fuzz targets, from the messages the unit tests build
// (tests/unit/wire_test.cc, secagg_serde_test.cc, secagg_client_test.cc):
//   <dir>/server_request/  a join, an update's metadata, chunk and SHA-256, an evaluation, and
//                          each secure-aggregation submission of a recorded round, each with its
//                          selector byte (server_request_fuzz.cc);
//   <dir>/client_task/     fit, evaluate, wait and done tasks, and each stage task of a recorded
//                          round (client_task_fuzz.cc);
//   <dir>/secagg/          recorded rounds of tests/fuzz/secagg_fixture.h (one with a site that
//                          drops after sharing its keys): participant 0's tasks, every site's
//                          messages to the server, a share plaintext, and a site's certificate
//                          with a signature (secagg_fuzz.cc).
// Deterministic (seeded participants), so that rerunning it rewrites the same files but the
// certificate seeds (fresh keys):
//   fuzz_seed_gen tests/fuzz/corpus
// Exits 0 when every file was written, 2 on a usage error; aborts, naming the step, when the
// recorded round does not go through.
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "aggregation/internal/secagg_masking.h"
#include "client_sdk/internal/transport.h"
#include "client_sdk/src/grpc_wire.h"
#include "client_sdk/src/secagg_client.h"
#include "fl/aggregation/secagg/identity.h"
#include "fl/common/crypto.h"
#include "fl/v1/federation.pb.h"
#include "fl/wire/proto_serde.h"
#include "fl/wire/secagg_serde.h"
#include "tests/fuzz/secagg_fixture.h"

namespace fl::fuzz {
namespace {

namespace fx = secagg_fixture;
using client::SecAggReply;
using client::internal::SecAggParticipant;
using client::internal::TaskFromProto;

std::filesystem::path out_dir;

void Write(const std::string& target, const std::string& name, const std::string& bytes) {
  const std::filesystem::path dir = out_dir / target;
  std::filesystem::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out << bytes;
  Check(static_cast<bool>(out), "a seed is written");
}

std::string Selected(uint8_t selector, const google::protobuf::Message& m) {
  return std::string(1, static_cast<char>(selector)) + m.SerializeAsString();
}

std::string U16(size_t n) {
  Check(n <= 0xffff, "a record fits a u16 length");
  return {static_cast<char>(n & 0xff), static_cast<char>(n >> 8)};
}
std::string Record(const std::string& bytes) { return U16(bytes.size()) + bytes; }

// "share_keys" for SECAGG_SHARE_KEYS: a file name.
std::string StageName(v1::Task::Kind kind) {
  std::string name = v1::Task::Kind_Name(kind);
  if (name.starts_with("SECAGG_")) name = name.substr(7);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

// A recorded round of the fixture: participant 0's tasks, and every message the sites sent.
struct RecordedRound {
  std::vector<v1::Task> tasks_of_0;
  std::vector<v1::Task> tasks;  // one of each stage, for client_task
  std::vector<v1::SecAggSubmission> submissions;
  std::string client_records;  // secagg_fuzz's kClient records
  std::string server_records;  // secagg_fuzz's kServer records
};

v1::SecAggSubmission SubmissionOf(const SecAggReply& r, v1::Task::Kind stage) {
  v1::SecAggSubmission s;
  s.set_run_id(r.run_id);
  s.set_round(r.round);
  s.set_task_id(r.task_id);
  s.set_stage(stage);
  if (r.keys.has_value()) wire::KeysToProto(*r.keys, s.mutable_keys());
  if (r.shares.has_value()) wire::SharesToProto(*r.shares, s.mutable_shares());
  if (r.survivor_signature.has_value()) {
    s.set_survivor_signature(std::string(r.survivor_signature->signature.begin(),
                                         r.survivor_signature->signature.end()));
  }
  if (r.unmask.has_value()) wire::UnmaskToProto(*r.unmask, s.mutable_unmask());
  return s;
}

// Runs the fixture's round, sites in `drop` leaving after they shared their keys.
RecordedRound RunRound(const std::set<int>& drop) {
  RecordedRound rec;
  std::vector<std::unique_ptr<SecAggParticipant>> sites;
  for (int i = 0; i < fx::kClients; ++i) {
    sites.push_back(std::make_unique<SecAggParticipant>(fx::Seeded(i)));
  }
  std::unique_ptr<secagg::ServerSession> server =
      *secagg::ServerSession::Create(fx::Params().secagg, fx::kDim, fx::ServerIdentity());
  auto task = [&](int i, v1::Task t) {
    if (i == 0) {
      rec.tasks_of_0.push_back(t);
      rec.client_records += Record(t.SerializeAsString());
    }
    return TaskFromProto(t);
  };
  auto sent = [&](int i, const SecAggReply& r, v1::Task::Kind stage) {
    const v1::SecAggSubmission s = SubmissionOf(r, stage);
    rec.submissions.push_back(s);
    rec.server_records +=
        std::string{static_cast<char>(fx::RecordType::kSubmission), static_cast<char>(i)} +
        Record(s.SerializeAsString());
  };

  for (int i = 0; i < fx::kClients; ++i) {
    absl::StatusOr<SecAggReply> r =
        sites[i]->AdvertiseKeys(task(i, fx::TaskFor(i, v1::Task::SECAGG_ADVERTISE_KEYS)), fx::kDim);
    Check(r.ok() && server->ReceiveKeys(*r->keys).ok(), "stage 1");
    sent(i, *r, v1::Task::SECAGG_ADVERTISE_KEYS);
  }
  Check(server->CloseAdvertiseKeys().ok(), "stage 1 closes");
  for (int i = 0; i < fx::kClients; ++i) {
    v1::Task t = fx::TaskFor(i, v1::Task::SECAGG_SHARE_KEYS);
    wire::DirectoryToProto(server->DirectoryFor(i), t.mutable_secagg());
    if (i == 0) rec.tasks.push_back(t);
    absl::StatusOr<SecAggReply> r = sites[i]->ShareKeys(task(i, t));
    Check(r.ok() && server->ReceiveShares(*r->shares).ok(), "stage 2");
    sent(i, *r, v1::Task::SECAGG_SHARE_KEYS);
  }
  absl::StatusOr<std::map<int, secagg::ShareBundle>> bundles = server->CloseShareKeys();
  Check(bundles.ok(), "stage 2 closes");
  for (int i = 0; i < fx::kClients; ++i) {
    if (drop.count(i) != 0) continue;
    v1::Task t = fx::TaskFor(i, v1::Task::SECAGG_MASKED_INPUT);
    wire::BundleToProto(bundles->at(i), t.mutable_secagg());
    if (i == 0) rec.tasks.push_back(t);
    std::vector<float> change = fx::Change(i);
    absl::StatusOr<const client::internal::MaskedUpload*> up =
        sites[i]->MaskInput(task(i, t), change, fx::Examples(i));
    Check(up.ok(), "stage 3");
    std::vector<uint64_t> words((*up)->payload.size() / 4);
    for (size_t w = 0; w < words.size(); ++w) {
      for (size_t b = 0; b < 4; ++b) {
        words[w] |= static_cast<uint64_t>((*up)->payload[4 * w + b]) << (8 * b);
      }
    }
    Check(server->FoldMaskedWords(i, 0, words).ok() && server->CompleteMaskedInput(i).ok(),
          "stage 3 folds");
    const std::string payload =
        U16(0) +
        std::string(reinterpret_cast<const char*>((*up)->payload.data()), (*up)->payload.size());
    rec.server_records +=
        std::string{static_cast<char>(fx::RecordType::kMaskedWordsComplete), static_cast<char>(i)} +
        Record(payload);
  }
  absl::StatusOr<secagg::SurvivorList> list = server->CloseMaskedInput();
  Check(list.ok(), "stage 3 closes");
  for (int i : list->survivors) {
    v1::Task t = fx::TaskFor(i, v1::Task::SECAGG_CONSISTENCY);
    wire::SurvivorListToProto(*list, t.mutable_secagg());
    if (i == 0) rec.tasks.push_back(t);
    absl::StatusOr<SecAggReply> r = sites[i]->SignSurvivors(task(i, t));
    Check(r.ok() && server->ReceiveSurvivorSignature(*r->survivor_signature).ok(), "stage 4");
    sent(i, *r, v1::Task::SECAGG_CONSISTENCY);
  }
  absl::StatusOr<secagg::UnmaskRequest> request = server->CloseConsistency();
  Check(request.ok(), "stage 4 closes");
  for (const auto& [i, endorsement] : request->signatures) {
    v1::Task t = fx::TaskFor(i, v1::Task::SECAGG_UNMASK);
    wire::UnmaskRequestToProto(*request, t.mutable_secagg());
    if (i == 0) rec.tasks.push_back(t);
    absl::StatusOr<SecAggReply> r = sites[i]->Unmask(task(i, t));
    Check(r.ok() && server->ReceiveUnmask(*r->unmask).ok(), "stage 5");
    sent(i, *r, v1::Task::SECAGG_UNMASK);
  }
  absl::StatusOr<secagg::AggregateResult> result = server->Finish();
  Check(result.ok(), "the recorded round unmasks");
  return rec;
}

v1::ModelSpec TestSpec() {
  v1::ModelSpec spec;
  ToProto(ModelSpec({{"w", {10, 784}}, {"b", {10}}, {"s", {}}}), &spec);
  return spec;
}

void ServerRequests(const RecordedRound& full) {
  const std::string target = "server_request";
  v1::JoinRequest join;
  join.set_client_name("hospital-a");
  join.set_sdk_version("0.1.0");
  join.add_capabilities("cpu");
  join.add_capabilities("fp32");
  *join.mutable_model_spec() = TestSpec();
  join.add_feature_columns("age");
  join.add_feature_columns("bmi");
  join.set_feature_schema_sha256(NameListSha256({"age", "bmi"}));
  Write(target, "join.pb", Selected(0, join));
  Write(target, "join_tight_limits.pb", Selected(0x08, join));
  v1::JoinRequest bad = join;
  bad.mutable_model_spec()->mutable_tensors(1)->set_name("w");  // named twice
  bad.mutable_model_spec()->mutable_tensors(0)->add_shape(-4);
  Write(target, "join_bad_spec.pb", Selected(0, bad));

  v1::UpdatePart part;
  v1::UpdateMetadata* m = part.mutable_metadata();
  m->set_run_id(1);
  m->set_round(2);
  m->set_task_id("r2.a0.c0");
  m->set_num_examples(25);
  (*m->mutable_metrics())["loss"] = 0.41;
  (*m->mutable_metrics())["accuracy"] = 0.9;
  m->set_encoding(v1::UpdateMetadata::FLOAT16);
  m->set_payload_bytes(2 * 7850);
  *m->mutable_model_spec() = TestSpec();
  Write(target, "update_metadata.pb", Selected(1, part));
  Write(target, "update_metadata_tight_limits.pb", Selected(0x09, part));
  m->clear_model_spec();
  m->set_decline_reason(
      "INVALID_ARGUMENT: the task asks for 400 epochs; this site allows 20 \xc3\xa9t\xc3\xa9");
  Write(target, "update_decline.pb", Selected(0x09, part));
  part.Clear();
  part.mutable_chunk()->set_offset(0);
  part.mutable_chunk()->set_data(std::string(16, '\x3c'));
  Write(target, "update_chunk.pb", Selected(1, part));
  part.Clear();
  part.set_sha256(Sha256Hex(std::string_view("payload")));
  Write(target, "update_sha256.pb", Selected(1, part));

  v1::EvaluationResult eval;
  eval.set_run_id(1);
  eval.set_round(2);
  eval.set_task_id("r2.a0.c0.eval");
  eval.set_num_examples(100);
  eval.set_loss(0.3);
  (*eval.mutable_metrics())["accuracy"] = 0.88;
  Write(target, "evaluation.pb", Selected(2, eval));
  eval.set_error("no test data: this site declines evaluation \xe2\x80\x94 set data.test_path");
  eval.mutable_feature_sums()->set_count(3);
  eval.mutable_feature_sums()->add_sum(1.5);
  eval.mutable_feature_sums()->add_sum_squares(2.25);
  Write(target, "evaluation_error.pb", Selected(0x0a, eval));

  std::set<v1::Task::Kind> stages;  // the first submission of each stage
  for (const v1::SecAggSubmission& s : full.submissions) {
    if (!stages.insert(s.stage()).second) continue;
    Write(target, "secagg_" + StageName(s.stage()) + ".pb", Selected(3, s));
  }
  v1::SecAggSubmission keys = full.submissions.front();
  keys.mutable_keys()->mutable_cipher_public()->pop_back();  // 31 bytes
  Write(target, "secagg_short_key.pb", Selected(3, keys));
  v1::SecAggSubmission decline;
  decline.set_run_id(1);
  decline.set_round(3);
  decline.set_task_id(fx::TaskId(2));
  decline.set_stage(v1::Task::SECAGG_SHARE_KEYS);
  decline.set_decline_reason("FAILED_PRECONDITION: too few neighbours");
  Write(target, "secagg_decline.pb", Selected(0x0b, decline));
}

void ClientTasks(const RecordedRound& full) {
  const std::string target = "client_task";
  v1::Task fit;
  fit.set_kind(v1::Task::FIT);
  fit.set_run_id(1);
  fit.set_round(2);
  fit.set_task_id("r2.a0.c0");
  v1::FitTask* f = fit.mutable_fit();
  f->set_local_epochs(2);
  f->set_batch_size(32);
  f->set_learning_rate(0.05f);
  *f->mutable_model_spec() = TestSpec();
  f->set_model_bytes(4 * 7850);
  f->set_model_sha256(Sha256Hex(std::string_view("model")));
  (*f->mutable_config())["proximal_mu"] = 0.01;
  f->set_model_name("softmax");
  f->set_update_encoding(v1::UpdateMetadata::INT8);
  fit.mutable_feature_statistics()->add_mean(0.5);
  fit.mutable_feature_statistics()->add_stddev(2);
  fit.mutable_feature_statistics()->set_count(100);
  Write(target, "fit.pb", fit.SerializeAsString());
  v1::Task evaluate = fit;
  evaluate.set_kind(v1::Task::EVALUATE);
  evaluate.mutable_fit()->set_update_encoding(v1::UpdateMetadata::MASKED_UINT32);  // not a fit's
  Write(target, "evaluate_masked_encoding.pb", evaluate.SerializeAsString());
  v1::Task done;
  done.set_kind(v1::Task::DONE);
  done.set_run_id(1);
  done.set_message("run 1 failed: too few clients");
  done.set_run_status(v1::Task::RUN_FAILED);
  Write(target, "done.pb", done.SerializeAsString());
  v1::Task wait;
  wait.set_kind(v1::Task::WAIT);
  wait.set_message("no task yet");
  Write(target, "wait.pb", wait.SerializeAsString());
  Write(target, "secagg_advertise.pb", full.tasks_of_0.front().SerializeAsString());
  for (const v1::Task& t : full.tasks) {
    Write(target, "secagg_" + StageName(t.kind()) + ".pb", t.SerializeAsString());
  }
}

void SecAgg(const RecordedRound& full, const RecordedRound& dropout) {
  const std::string target = "secagg";
  auto mode = [](fx::Mode m) { return std::string(1, static_cast<char>(m)); };
  Write(target, "client_round.bin", mode(fx::Mode::kClient) + full.client_records);
  Write(target, "client_round_dropout.bin", mode(fx::Mode::kClient) + dropout.client_records);
  Write(target, "server_round.bin", mode(fx::Mode::kServer) + full.server_records);
  Write(target, "server_round_dropout.bin", mode(fx::Mode::kServer) + dropout.server_records);
  secagg::internal::SharePlaintext p{
      .from = 1, .to = 2, .mask_key_share = {}, .self_seed_share = {}};
  p.mask_key_share.x = 3;
  p.self_seed_share.x = 3;
  for (int i = 0; i < secagg::kShamirPieces; ++i) {
    p.mask_key_share.y[i] = 1000 + i;
    p.self_seed_share.y[i] = secagg::kShamirPrime - 1 - i;
  }
  const secagg::Bytes plain = secagg::internal::SerializeSharePlaintext(p);
  Write(target, "share_plaintext.bin",
        mode(fx::Mode::kSharePlaintext) + std::string(plain.begin(), plain.end()));

  // A site's certificate from a CA, and its signature over a message (as identity.h signs a key
  // advertisement); valid for a century, so that the seed keeps verifying. Keys are fresh each
  // run: only these seeds change when the generator runs again.
  absl::StatusOr<CertAndKey> ca = MakeCertificateAuthority("fuzz CA", 36500);
  Check(ca.ok(), "the CA is made");
  absl::StatusOr<CertAndKey> site = MakeClientCertificate(*ca, "site-0", 36500);
  Check(site.ok(), "the site's certificate is made");
  absl::StatusOr<std::unique_ptr<secagg::IdentitySigner>> signer =
      secagg::MakeX509Signer(site->cert_pem, site->key_pem);
  Check(signer.ok(), "the signer is made");
  const std::string message = "fl-secagg/v2 keys of site 0";
  absl::StatusOr<secagg::Bytes> signature =
      (*signer)->Sign(std::span(reinterpret_cast<const uint8_t*>(message.data()), message.size()));
  Check(signature.ok(), "the message is signed");
  const std::string head = mode(fx::Mode::kIdentity) + Record(ca->cert_pem) +
                           Record((*signer)->identity()) + Record(message);
  Write(target, "identity_signed.bin", head + std::string(signature->begin(), signature->end()));
  Write(target, "identity_bad_signature.bin", head + std::string(64, '\x01'));
}

}  // namespace
}  // namespace fl::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  fl::fuzz::out_dir = argv[1];
  const fl::fuzz::RecordedRound full = fl::fuzz::RunRound({});
  const fl::fuzz::RecordedRound dropout = fl::fuzz::RunRound({3});
  fl::fuzz::ServerRequests(full);
  fl::fuzz::ClientTasks(full);
  fl::fuzz::SecAgg(full, dropout);
  std::printf("wrote the seeds of server_request, client_task and secagg under %s\n", argv[1]);
  return 0;
}
