#include "server/admin/export.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fl/common/safetensors.h"
#include "server/admin/admin.h"

namespace fl::server::admin {
namespace {

// "1-5", "1-3, 5", or "none" for the committed rounds of a run (sorted, distinct).
std::string DescribeRounds(const std::vector<int32_t>& rounds) {
  if (rounds.empty()) return "none yet";
  std::string out;
  for (size_t i = 0; i < rounds.size();) {
    size_t j = i;
    while (j + 1 < rounds.size() && rounds[j + 1] == rounds[j] + 1) ++j;
    absl::StrAppend(&out, out.empty() ? "" : ", ", rounds[i]);
    if (j > i) absl::StrAppend(&out, "-", rounds[j]);
    i = j + 1;
  }
  return out;
}

// `model` without its SCAFFOLD control variates.
Model WeightsOnly(const Model& model) {
  std::vector<TensorSpec> kept;
  std::vector<size_t> source;
  for (size_t i = 0; i < model.spec().tensors().size(); ++i) {
    if (IsScaffoldTensor(model.spec().tensors()[i].name)) continue;
    kept.push_back(model.spec().tensors()[i]);
    source.push_back(i);
  }
  Model weights{ModelSpec(std::move(kept))};
  for (size_t k = 0; k < source.size(); ++k) {
    std::span<const float> from = model.tensor(source[k]);
    std::copy(from.begin(), from.end(), weights.tensor(k).begin());
  }
  return weights;
}

}  // namespace

absl::StatusOr<ExportedModel> ReadCommittedModel(Store& store, const ExportRequest& request) {
  absl::StatusOr<RunRecord> run = ResolveRun(store, request.run_id);
  if (!run.ok()) return run.status();
  absl::StatusOr<std::vector<RoundRecord>> rounds = store.Rounds(run->run_id);
  if (!rounds.ok()) return rounds.status();
  std::vector<int32_t> committed;
  const RoundRecord* chosen = nullptr;
  for (const RoundRecord& r : *rounds) {
    if (r.status != RoundStatus::kCommitted) continue;
    committed.push_back(r.round);
    if (!request.round.has_value() || *request.round == r.round) chosen = &r;
  }
  int32_t round = 0;
  std::string checkpoint;
  if (request.round.has_value() && *request.round == 0) {
    checkpoint = run->initial_checkpoint;
  } else if (chosen == nullptr) {
    std::sort(committed.begin(), committed.end());
    committed.erase(std::unique(committed.begin(), committed.end()), committed.end());
    const std::string which =
        request.round.has_value() ? absl::StrCat("round ", *request.round) : std::string("round");
    return absl::NotFoundError(absl::StrCat(
        "run ", run->run_id, " has no committed ", which, "; its committed rounds are ",
        DescribeRounds(committed), " (--round 0 exports the initial model)"));
  } else {
    round = chosen->round;
    checkpoint = chosen->checkpoint;
  }
  absl::StatusOr<Model> model = store.ReadCheckpoint(checkpoint);
  if (!model.ok()) {
    if (absl::IsNotFound(model.status())) {
      return absl::DataLossError(absl::StrCat(
          "the checkpoint of run ", run->run_id, " round ", round,
          " is missing (a server with [server] keep_checkpoints removes older rounds' models; "
          "without it the data directory is damaged): ",
          model.status().message()));
    }
    return model.status();
  }
  return ExportedModel{
      .run_id = run->run_id,
      .round = round,
      .checkpoint = std::move(checkpoint),
      .model = request.with_server_state ? *std::move(model) : WeightsOnly(*model),
  };
}

absl::StatusOr<ExportedModel> ExportModel(Store& store, const ExportRequest& request,
                                          const std::string& path) {
  absl::StatusOr<ExportedModel> exported = ReadCommittedModel(store, request);
  if (!exported.ok()) return exported.status();
  absl::StatusOr<RunRecord> run = store.GetRun(exported->run_id);
  const std::map<std::string, std::string> metadata = {
      {"fl.run_id", absl::StrCat(exported->run_id)},
      {"fl.run_name", run.ok() ? run->name : ""},
      {"fl.round", absl::StrCat(exported->round)},
      {"fl.checkpoint_sha256", exported->checkpoint},
  };
  if (absl::Status s = WriteSafetensors(path, exported->model, metadata); !s.ok()) return s;
  return exported;
}

}  // namespace fl::server::admin
