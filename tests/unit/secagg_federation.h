// A whole secure-aggregation round in one process, for the protocol's tests: n client sessions
// and the server session, with clients that vanish at a chosen stage.
#ifndef FL_TESTS_UNIT_SECAGG_FEDERATION_H_
#define FL_TESTS_UNIT_SECAGG_FEDERATION_H_

#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fl/aggregation/secagg/graph.h"
#include "fl/aggregation/secagg/params.h"
#include "fl/aggregation/secagg/primitives.h"
#include "fl/aggregation/secagg/protocol.h"
#include "fl/aggregation/secagg/quantization.h"

namespace fl::secagg::protocol_test {

enum class DropAt {
  kNone,
  kBeforeSharing,
  kAfterSharing,
  kBeforeMaskedInput,
  kDuringConsistency,  // never signs the survivor set: not asked to unmask either
  kDuringUnmasking
};

inline std::string Name(DropAt at) {
  switch (at) {
    case DropAt::kNone:
      return "None";
    case DropAt::kBeforeSharing:
      return "BeforeSharing";
    case DropAt::kAfterSharing:
      return "AfterSharing";
    case DropAt::kBeforeMaskedInput:
      return "BeforeMaskedInput";
    case DropAt::kDuringConsistency:
      return "DuringConsistency";
    case DropAt::kDuringUnmasking:
      return "DuringUnmasking";
  }
  return "?";
}

inline void PrintTo(DropAt at, std::ostream* os) { *os << Name(at); }

struct Federation {
  SecAggParams params;
  size_t dim = 0;
  std::vector<std::vector<float>> updates;
  std::vector<uint32_t> weights;
  std::vector<std::vector<uint64_t>> encodings;
  std::vector<std::unique_ptr<ClientSession>> clients;
  std::unique_ptr<ServerSession> server;
};

inline Federation MakeFederation(const SecAggParams& params, size_t dim, uint64_t seed) {
  Federation f;
  f.params = params;
  f.dim = dim;
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto rounding = MakeDeterministicRandomSource(seed + 1000);
  for (int c = 0; c < params.num_clients; ++c) {
    std::vector<float> x(dim);
    for (float& v : x) v = normal(gen);
    f.updates.push_back(x);
    f.weights.push_back(1 + static_cast<uint32_t>(gen() % params.max_weight));
    f.encodings.push_back(*EncodeWeightedUpdate(params, x, f.weights.back(), *rounding));
    f.clients.push_back(
        *ClientSession::Create(params, c, dim, MakeDeterministicRandomSource(seed * 1000 + c)));
  }
  f.server = *ServerSession::Create(params, dim);
  return f;
}

using Drops = std::map<DropAt, std::set<int>>;

// Runs one round; the clients in drops[stage] vanish at that stage. `drops_for` is asked for them
// once the keys are in, with the session's graph (it depends on the keys), so that a test can pick
// a client's neighbours. Each client is sent its own directory (DirectoryFor). Returns the
// server's result.
inline absl::StatusOr<AggregateResult> RunRoundByGraph(
    Federation& f, const std::function<Drops(const NeighborGraph&)>& drops_for,
    std::vector<MaskedInput>* masked_out = nullptr) {
  const int n = f.params.num_clients;
  for (int c = 0; c < n; ++c) {
    absl::StatusOr<KeyAdvertisement> adv = f.clients[c]->AdvertiseKeys();
    if (!adv.ok()) return adv.status();
    if (absl::Status s = f.server->ReceiveKeys(*adv); !s.ok()) return s;
  }
  absl::StatusOr<KeyDirectory> dir = f.server->CloseAdvertiseKeys();
  if (!dir.ok()) return dir.status();
  const Drops drops = drops_for(f.server->graph());
  auto gone = [&](int c, DropAt stage) {
    auto it = drops.find(stage);
    return it != drops.end() && it->second.count(c) != 0;
  };
  for (int c = 0; c < n; ++c) {
    if (gone(c, DropAt::kBeforeSharing)) continue;
    absl::StatusOr<EncryptedShares> shares = f.clients[c]->ShareKeys(f.server->DirectoryFor(c));
    if (!shares.ok()) return shares.status();
    if (absl::Status s = f.server->ReceiveShares(*shares); !s.ok()) return s;
  }
  absl::StatusOr<std::map<int, ShareBundle>> bundles = f.server->CloseShareKeys();
  if (!bundles.ok()) return bundles.status();
  for (auto& [c, bundle] : *bundles) {
    if (gone(c, DropAt::kAfterSharing)) continue;  // never receives its bundle
    absl::StatusOr<MaskedInput> masked = f.clients[c]->MaskEncodedInput(bundle, f.encodings[c]);
    if (!masked.ok()) return masked.status();
    if (gone(c, DropAt::kBeforeMaskedInput)) continue;  // computed, never arrives
    if (masked_out != nullptr) masked_out->push_back(*masked);
    if (absl::Status s = f.server->ReceiveMaskedInput(*masked); !s.ok()) return s;
  }
  absl::StatusOr<SurvivorList> list = f.server->CloseMaskedInput();
  if (!list.ok()) return list.status();
  for (int c : list->survivors) {
    if (gone(c, DropAt::kDuringConsistency)) continue;
    absl::StatusOr<SurvivorSignature> signature = f.clients[c]->SignSurvivors(*list);
    if (!signature.ok()) return signature.status();
    if (absl::Status s = f.server->ReceiveSurvivorSignature(*signature); !s.ok()) return s;
  }
  absl::StatusOr<UnmaskRequest> request = f.server->CloseConsistency();
  if (!request.ok()) return request.status();
  if (request->survivors != list->survivors) {
    return absl::InternalError("the unmask request's survivors are not the list signed");
  }
  for (const auto& [c, endorsement] : request->signatures) {
    if (gone(c, DropAt::kDuringUnmasking)) continue;
    absl::StatusOr<UnmaskResponse> response = f.clients[c]->Unmask(*request);
    if (!response.ok()) return response.status();
    if (absl::Status s = f.server->ReceiveUnmask(*response); !s.ok()) return s;
  }
  return f.server->Finish();
}

inline absl::StatusOr<AggregateResult> RunRound(Federation& f, const Drops& drops,
                                                std::vector<MaskedInput>* masked_out = nullptr) {
  return RunRoundByGraph(
      f, [&drops](const NeighborGraph&) { return drops; }, masked_out);
}

inline absl::StatusOr<AggregateResult> RunRound(Federation& f, DropAt at, const std::set<int>& drop,
                                                std::vector<MaskedInput>* masked_out = nullptr) {
  return RunRound(f, Drops{{at, drop}}, masked_out);
}

}  // namespace fl::secagg::protocol_test

#endif  // FL_TESTS_UNIT_SECAGG_FEDERATION_H_
