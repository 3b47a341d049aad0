// `fl admin export`: a committed global model of a run, as a safetensors file that other tools
// (PyTorch, numpy, Hugging Face) read.
//
// The model comes from the store's checkpoint of the round (verified against its SHA-256 as it
// is read), so an export is exactly what the server committed. SCAFFOLD's control variates
// ("scaffold.c.*" tensors) are server state, not weights: they are left out unless asked for.
// The file's __metadata__ records where the model came from: fl.run_id, fl.run_name, fl.round
// and fl.checkpoint_sha256 (of the whole checkpoint, state included).
//
// Thread-safe as the Store is; reads only, so it works on a store opened read-only while the
// server runs.
#ifndef FL_SERVER_ADMIN_EXPORT_H_
#define FL_SERVER_ADMIN_EXPORT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "fl/common/model.h"
#include "fl/server/store.h"

namespace fl::server::admin {

struct ExportRequest {
  std::optional<int64_t> run_id;  // nullopt: the newest run
  // nullopt: the run's last committed round; 0: the run's initial model; N: round N, which must
  // be committed.
  std::optional<int32_t> round;
  bool with_server_state = false;  // keep SCAFFOLD's control variates
};

struct ExportedModel {
  int64_t run_id = 0;
  int32_t round = 0;       // 0 for the initial model
  std::string checkpoint;  // SHA-256 of the checkpoint it came from
  Model model;             // what was (or is to be) written
};

// Reads the model `request` names. NOT_FOUND naming the run, or the round and the rounds the run
// has committed ("run 2 has no committed round 7; its committed rounds are 1-5"); DATA_LOSS when
// the checkpoint file is missing or does not match its hash; otherwise the store's errors.
absl::StatusOr<ExportedModel> ReadCommittedModel(Store& store, const ExportRequest& request);

// ReadCommittedModel, then writes the model to `path` as float32 safetensors (atomically: a
// temporary file renamed over `path`). Errors as ReadCommittedModel's, or the write's, naming the
// file.
absl::StatusOr<ExportedModel> ExportModel(Store& store, const ExportRequest& request,
                                          const std::string& path);

}  // namespace fl::server::admin

#endif  // FL_SERVER_ADMIN_EXPORT_H_
