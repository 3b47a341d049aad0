// The secure-aggregation round that secagg_fuzz.cc replays and fuzz_seed_gen.cc records, after
// tests/unit/secagg_client_test.cc's Round: kClients SDK participants with seeded randomness
// (participant i draws from seed i), the round's parameters, and the server session's identity.
// Both sides build it from here, so that a recorded honest round is one the fuzz target's
// participant and session accept stage by stage. Header-only.
#ifndef FL_TESTS_FUZZ_SECAGG_FIXTURE_H_
#define FL_TESTS_FUZZ_SECAGG_FIXTURE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "client_sdk/src/secagg_client.h"
#include "fl/aggregation/dp/gaussian_noise.h"
#include "fl/aggregation/secagg/params.h"
#include "fl/aggregation/secagg/primitives.h"
#include "fl/aggregation/secagg/protocol.h"
#include "fl/v1/federation.pb.h"
#include "fl/wire/secagg_serde.h"
#include "tests/fuzz/fuzz_support.h"

namespace fl::fuzz::secagg_fixture {

inline constexpr int kClients = 4;
inline constexpr size_t kDim = 2;
inline constexpr int64_t kRunId = 1;
inline constexpr int32_t kRound = 3;

// The first byte of a secagg_fuzz input.
enum class Mode : uint8_t { kClient = 0, kServer = 1, kSharePlaintext = 2, kIdentity = 3 };
// A server-mode record's type.
enum class RecordType : uint8_t { kSubmission = 0, kMaskedWords = 1, kMaskedWordsComplete = 3 };

inline client::internal::SecAggParticipant::Randomness Seeded(uint64_t seed) {
  return {.protocol = [seed] { return secagg::MakeDeterministicRandomSource(seed); },
          .noise = [seed] { return aggregation::dp::MakeSeededBitSource(seed); }};
}

inline secagg::RoundParams Params() {
  absl::StatusOr<secagg::SecAggParams> p =
      secagg::DefaultSecAggParams(kClients, /*modulus_bits=*/32, /*max_weight=*/100);
  Check(p.ok(), "the fixture's parameters are valid");
  secagg::RoundParams out;
  out.secagg = *p;
  out.secagg.graph_seed = 7;
  out.secagg.clip_range = 2.0;
  out.example_unit = 10;
  return out;
}

inline std::string TaskId(int client) { return "r3.a0.c" + std::to_string(client); }

// A stage task for `client`, as the server writes it (the stage's own fields left to the caller).
inline v1::Task TaskFor(int client, v1::Task::Kind kind) {
  v1::Task t;
  t.set_kind(kind);
  t.set_run_id(kRunId);
  t.set_round(kRound);
  t.set_task_id(TaskId(client));
  wire::ParamsToProto(Params(), t.mutable_secagg()->mutable_params());
  t.mutable_secagg()->set_secagg_id(client);
  return t;
}

// What the server session is bound to: every client derives the same context from its task id.
inline secagg::SessionIdentity ServerIdentity() {
  secagg::SessionIdentity identity;
  identity.context = secagg::SessionContext(kRunId, kRound, TaskId(0));
  return identity;
}

// Client i's change and example count.
inline std::vector<float> Change(int client) {
  std::vector<float> out(kDim);
  for (size_t j = 0; j < kDim; ++j) out[j] = 0.1f * static_cast<float>(client) - 0.05f * j;
  return out;
}
inline int64_t Examples(int client) { return 10 + 15 * client; }

}  // namespace fl::fuzz::secagg_fixture

#endif  // FL_TESTS_FUZZ_SECAGG_FIXTURE_H_
