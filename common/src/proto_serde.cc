#include "fl/common/proto_serde.h"

namespace fl {

void ToProto(const ModelSpec& spec, v1::ModelSpec* out) {
  out->Clear();
  for (const TensorSpec& t : spec.tensors()) {
    v1::TensorSpec* p = out->add_tensors();
    p->set_name(t.name);
    for (int64_t d : t.shape) p->add_shape(d);
  }
}

absl::StatusOr<ModelSpec> FromProto(const v1::ModelSpec& spec) {
  std::vector<TensorSpec> tensors;
  for (const v1::TensorSpec& p : spec.tensors()) {
    tensors.push_back(TensorSpec{p.name(), {p.shape().begin(), p.shape().end()}});
  }
  ModelSpec out(std::move(tensors));
  if (absl::Status s = out.Validate(); !s.ok()) return s;
  return out;
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace fl
