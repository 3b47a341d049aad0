// Fuzz target for the secure-aggregation messages, at both ends of a round
// (fl/aggregation/secagg/protocol.h), from the wire in.
//
// Input: a mode byte (tests/fuzz/secagg_fixture.h's Mode), then:
//   kClient: records (a u16 length, then a serialized fl.v1.Task): the server's stage tasks to
//     one site. Each goes through TaskFromProto and the SDK's SecAggParticipant (seeded as
//     participant 0 of the fixture's round) as Client::Impl hands it over: advertise keys (a
//     model of kDim values), share keys, mask the fixture's change, sign the survivors, unmask.
//     A stage answers or refuses saying why; an answer is the stage's message for the task's
//     ids; a masked input has the round's word count; an unmasking reveals, for each peer, at
//     most one of its two secrets (its self-mask seed if listed as a survivor, its mask key if
//     listed as dropped), and never both over the whole sequence.
//   kServer: records (a type byte, a client byte, a u16 length and the payload): the sites'
//     messages to the server's ServerSession of the fixture's round. kSubmission: a serialized
//     fl.v1.SecAggSubmission, read by SecAggMessageFromProto as the service does and handed to
//     the session for its body (stages still open before the message's stage are closed first,
//     as their deadline would); kMaskedWords(Complete): a u16 first word and 32-bit little-endian
//     masked words, FoldMaskedWords (then CompleteMaskedInput). At the end the round is closed
//     and unmasked. Every refusal says why; a sum that Finish accepts has the model's dimension,
//     finite values within the clip range, and survivors in ascending order.
//   kSharePlaintext: the rest as the plaintext of one sealed pair of Shamir shares
//     (ParseSharePlaintext); one that parses serializes back to the same bytes.
//   kIdentity: records of a CA's PEM, a site's identity (the certificate a key advertisement
//     carries, relayed by the server to its peers) and a signed message, then the signature:
//     MakeX509Verifier and Verify, as a site checks a neighbour's advertisement. The CA gives a
//     verifier or INVALID_ARGUMENT; a verified identity is named by a lowercase hex SHA-256, a
//     refused one by PERMISSION_DENIED, UNAUTHENTICATED or INVALID_ARGUMENT, saying why.
//
// Compiled into the executable with the sanitizers: the wire's and the service's serde
// (common/wire/src/secagg_serde.cc, server/service/secagg_serde.cc), TaskFromProto
// (client_sdk/src/grpc_transport.cc), the participant (client_sdk/src/secagg_client.cc), and the
// sessions' message handling (aggregation/src/secagg/{client_session,server_session,masking,
// shamir}.cc) and of identities (aggregation/src/secagg/identity.cc). The primitives (X25519,
// AES-GCM, the PRG) come from the unsanitized fl::privacy, the PEM and X.509 parsing from OpenSSL.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <vector>

#include "aggregation/internal/secagg_masking.h"
#include "client_sdk/internal/transport.h"
#include "client_sdk/src/grpc_wire.h"
#include "client_sdk/src/secagg_client.h"
#include "fl/aggregation/secagg/identity.h"
#include "fl/aggregation/secagg/protocol.h"
#include "fl/aggregation/secagg/shamir.h"
#include "fl/v1/federation.pb.h"
#include "google/protobuf/stubs/logging.h"
#include "server/service/secagg_serde.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/secagg_fixture.h"

namespace fl::fuzz {
namespace {

// Mutants that do not parse are the point: protobuf's log of each would drown the output.
[[maybe_unused]] const bool kQuietProtobuf = [] {
  google::protobuf::SetLogHandler(nullptr);
  return true;
}();

namespace fx = secagg_fixture;
using client::ClientTask;
using client::SecAggReply;
using client::internal::SecAggParticipant;

// A refusal by the participant or a session: one of the protocol's codes, saying why.
void CheckProtocolRefusal(const absl::Status& s, const char* what) {
  Note(s, what);
  Check(!s.ok(), what);
  const absl::StatusCode code = s.code();
  const bool known =
      code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kFailedPrecondition ||
      code == absl::StatusCode::kAlreadyExists || code == absl::StatusCode::kDataLoss ||
      code == absl::StatusCode::kUnauthenticated || code == absl::StatusCode::kPermissionDenied;
  if (!known) std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  Check(known, what);
  Check(!s.message().empty(), "a refusal says why");
}

void CheckReplyIds(const SecAggReply& reply, const ClientTask& t) {
  Check(reply.run_id == t.run_id && reply.round == t.round && reply.task_id == t.task_id &&
            reply.stage == t.kind,
        "a reply answers its task");
}

void ClientMode(Reader& in) {
  SecAggParticipant participant(fx::Seeded(0));
  // Peers whose self-mask seed, and whose mask key, this site revealed so far.
  std::set<int> revealed_seed, revealed_key;
  while (!in.empty()) {
    const std::string_view bytes = in.Record();
    v1::Task proto;
    if (!proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) continue;
    const ClientTask t = client::internal::TaskFromProto(proto);
    participant.KeepOnly(t.run_id, t.task_id);
    switch (t.kind) {
      case ClientTask::Kind::kSecAggAdvertise: {
        absl::StatusOr<SecAggReply> r = participant.AdvertiseKeys(t, fx::kDim);
        if (!r.ok()) {
          CheckProtocolRefusal(r.status(), "advertise keys refuses");
          break;
        }
        CheckReplyIds(*r, t);
        Check(r->keys.has_value() && r->keys->client == t.secagg_id, "keys name their client");
        break;
      }
      case ClientTask::Kind::kSecAggShare: {
        absl::StatusOr<SecAggReply> r = participant.ShareKeys(t);
        if (!r.ok()) {
          CheckProtocolRefusal(r.status(), "share keys refuses");
          break;
        }
        CheckReplyIds(*r, t);
        Check(r->shares.has_value(), "shares are sent");
        for (const auto& [to, sealed] : r->shares->ciphertexts) {
          Check(sealed.size() == secagg::kSealedShareBytes, "a sealed share has its size");
        }
        break;
      }
      case ClientTask::Kind::kSecAggMaskedInput: {
        std::vector<float> change = fx::Change(0);
        absl::StatusOr<const client::internal::MaskedUpload*> up =
            participant.MaskInput(t, change, fx::Examples(0));
        if (!up.ok()) {
          CheckProtocolRefusal(up.status(), "masked input refuses");
          break;
        }
        const secagg::RoundParams* params = participant.params(t);
        Check(params != nullptr, "a masked input has its session");
        Check((*up)->payload.size() ==
                  secagg::EncodedWords(params->secagg, fx::kDim) * (*up)->word_bytes,
              "a masked input has the round's words");
        break;
      }
      case ClientTask::Kind::kSecAggConsistency: {
        absl::StatusOr<SecAggReply> r = participant.SignSurvivors(t);
        if (!r.ok()) {
          CheckProtocolRefusal(r.status(), "sign survivors refuses");
          break;
        }
        CheckReplyIds(*r, t);
        Check(r->survivor_signature.has_value(), "a signature is sent");
        break;
      }
      case ClientTask::Kind::kSecAggUnmask: {
        absl::StatusOr<SecAggReply> r = participant.Unmask(t);
        if (!r.ok()) {
          CheckProtocolRefusal(r.status(), "unmask refuses");
          break;
        }
        CheckReplyIds(*r, t);
        Check(r->unmask.has_value() && t.unmask.ok(), "shares answer a readable request");
        const std::vector<int>& survivors = t.unmask->survivors;
        const std::vector<int>& dropped = t.unmask->dropped;
        for (const auto& [owner, share] : r->unmask->self_seed_shares) {
          Check(std::find(survivors.begin(), survivors.end(), owner) != survivors.end(),
                "a self-mask seed share is only a survivor's");
          revealed_seed.insert(owner);
        }
        for (const auto& [owner, share] : r->unmask->mask_key_shares) {
          Check(std::find(dropped.begin(), dropped.end(), owner) != dropped.end(),
                "a mask key share is only a dropped client's");
          revealed_key.insert(owner);
        }
        for (int owner : revealed_seed) {
          Check(revealed_key.count(owner) == 0, "never both secrets of one peer");
        }
        Note(absl::OkStatus(), "the site unmasks");
        break;
      }
      default:
        break;
    }
  }
}

// The session's stage, as the index of the Task::Kind it answers (advertise 0 .. unmask 4).
int StageIndex(server::Task::Kind kind) {
  switch (kind) {
    case server::Task::Kind::kSecAggAdvertise:
      return 0;
    case server::Task::Kind::kSecAggShare:
      return 1;
    case server::Task::Kind::kSecAggMaskedInput:
      return 2;
    case server::Task::Kind::kSecAggConsistency:
      return 3;
    case server::Task::Kind::kSecAggUnmask:
      return 4;
    default:
      return -1;
  }
}

// Closes the session's stages before `stage`; false when one could not close (the round fails).
bool AdvanceTo(secagg::ServerSession& session, int& open, int stage) {
  while (open < stage) {
    absl::Status s;
    switch (open) {
      case 0:
        s = session.CloseAdvertiseKeys().status();
        break;
      case 1:
        s = session.CloseShareKeys().status();
        break;
      case 2:
        s = session.CloseMaskedInput().status();
        break;
      case 3:
        s = session.CloseConsistency().status();
        break;
    }
    if (!s.ok()) {
      CheckProtocolRefusal(s, "a stage cannot close");
      return false;
    }
    ++open;
  }
  return true;
}

void ServerMode(Reader& in) {
  const secagg::RoundParams params = fx::Params();
  absl::StatusOr<std::unique_ptr<secagg::ServerSession>> made =
      secagg::ServerSession::Create(params.secagg, fx::kDim, fx::ServerIdentity());
  Check(made.ok(), "the fixture's session is made");
  secagg::ServerSession& session = **made;
  int open = 0;
  while (!in.empty()) {
    const auto type = static_cast<fx::RecordType>(in.U8() & 0x03);
    // One past the last id too: the session refuses it.
    const int client = in.U8() % (fx::kClients + 1);
    const std::string_view payload = in.Record();
    absl::Status s;
    if (type == fx::RecordType::kSubmission) {
      v1::SecAggSubmission proto;
      if (!proto.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) continue;
      absl::StatusOr<server::SecAggMessage> m = server::SecAggMessageFromProto(proto);
      if (!m.ok() || !m->malformed.empty() || !m->decline_reason.empty()) continue;
      const int stage = StageIndex(m->stage);
      if (stage > open && !AdvanceTo(session, open, stage)) return;
      if (m->keys.has_value()) {
        m->keys->client = client;
        s = session.ReceiveKeys(*m->keys);
      } else if (m->shares.has_value()) {
        m->shares->client = client;
        s = session.ReceiveShares(*m->shares);
      } else if (m->survivor_signature.has_value()) {
        m->survivor_signature->client = client;
        s = session.ReceiveSurvivorSignature(*m->survivor_signature);
      } else if (m->unmask.has_value()) {
        m->unmask->client = client;
        s = session.ReceiveUnmask(*m->unmask);
      }
    } else {
      if (open < 2 && !AdvanceTo(session, open, 2)) return;
      Reader words_in(reinterpret_cast<const uint8_t*>(payload.data()), payload.size());
      const size_t first = words_in.U16();
      std::vector<uint64_t> words(words_in.remaining() / 4);
      for (uint64_t& w : words) w = words_in.U32();
      s = session.FoldMaskedWords(client, first, words);
      if (s.ok() && type == fx::RecordType::kMaskedWordsComplete) {
        s = session.CompleteMaskedInput(client);
      }
    }
    if (!s.ok()) CheckProtocolRefusal(s, "the session refuses a message");
  }
  if (!AdvanceTo(session, open, 4)) return;
  absl::StatusOr<secagg::AggregateResult> result = session.Finish();
  if (!result.ok()) {
    CheckProtocolRefusal(result.status(), "the unmasking fails");
    return;
  }
  Check(result->sum.size() == secagg::EncodedWords(params.secagg, fx::kDim),
        "the sum has the round's words");
  Check(result->mean.size() == fx::kDim, "the mean has the model's dimension");
  for (float v : result->mean) {
    Check(std::isfinite(v) && std::fabs(v) <= 2 * params.secagg.clip_range,
          "the mean is finite and within the clip range");
  }
  Check(std::is_sorted(result->survivors.begin(), result->survivors.end()),
        "the survivors are ascending");
  Note(absl::OkStatus(), "the round unmasks");
}

void SharePlaintextMode(Reader& in) {
  const std::string_view rest = in.Rest();
  const auto bytes = std::span(reinterpret_cast<const uint8_t*>(rest.data()), rest.size());
  absl::StatusOr<secagg::internal::SharePlaintext> p = secagg::internal::ParseSharePlaintext(bytes);
  if (!p.ok()) {
    CheckRefusal(p.status(), absl::StatusCode::kInvalidArgument, "a share plaintext is refused");
    return;
  }
  const secagg::Bytes again = secagg::internal::SerializeSharePlaintext(*p);
  Check(again.size() == bytes.size() && std::equal(again.begin(), again.end(), bytes.begin()),
        "a share plaintext survives a round trip");
}

void IdentityMode(Reader& in) {
  const std::string_view ca = in.Record();
  const std::string_view identity = in.Record();
  const std::string_view message = in.Record();
  const std::string_view signature = in.Rest();
  absl::StatusOr<std::unique_ptr<secagg::IdentityVerifier>> verifier = secagg::MakeX509Verifier(ca);
  if (!verifier.ok()) {
    CheckRefusal(verifier.status(), absl::StatusCode::kInvalidArgument, "a CA is refused");
    return;
  }
  auto bytes = [](std::string_view s) {
    return std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  absl::StatusOr<std::string> name =
      (*verifier)->Verify(identity, bytes(message), bytes(signature));
  if (!name.ok()) {
    CheckProtocolRefusal(name.status(), "an identity is refused");
    return;
  }
  Check(name->size() == 64 &&
            std::all_of(name->begin(), name->end(),
                        [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }),
        "a verified identity is named by its SHA-256");
  Note(absl::OkStatus(), "an identity verifies");
}

}  // namespace
}  // namespace fl::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using fl::fuzz::secagg_fixture::Mode;
  fl::fuzz::Reader in(data, size);
  switch (static_cast<Mode>(in.U8() % 4)) {
    case Mode::kClient:
      fl::fuzz::ClientMode(in);
      break;
    case Mode::kServer:
      fl::fuzz::ServerMode(in);
      break;
    case Mode::kSharePlaintext:
      fl::fuzz::SharePlaintextMode(in);
      break;
    case Mode::kIdentity:
      fl::fuzz::IdentityMode(in);
      break;
  }
  return 0;
}
