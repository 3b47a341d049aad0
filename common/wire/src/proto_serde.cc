#include "fl/wire/proto_serde.h"

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

v1::UpdateMetadata::Encoding ToProto(PayloadEncoding encoding) {
  switch (encoding) {
    case PayloadEncoding::kFloat32:
      return v1::UpdateMetadata::FLOAT32;
    case PayloadEncoding::kMaskedUint32:
      return v1::UpdateMetadata::MASKED_UINT32;
    case PayloadEncoding::kMaskedUint64:
      return v1::UpdateMetadata::MASKED_UINT64;
    case PayloadEncoding::kFloat16:
      return v1::UpdateMetadata::FLOAT16;
    case PayloadEncoding::kInt8:
      return v1::UpdateMetadata::INT8;
  }
  return v1::UpdateMetadata::ENCODING_UNSPECIFIED;
}

std::optional<PayloadEncoding> FromProto(v1::UpdateMetadata::Encoding encoding) {
  switch (encoding) {
    case v1::UpdateMetadata::FLOAT32:
      return PayloadEncoding::kFloat32;
    case v1::UpdateMetadata::MASKED_UINT32:
      return PayloadEncoding::kMaskedUint32;
    case v1::UpdateMetadata::MASKED_UINT64:
      return PayloadEncoding::kMaskedUint64;
    case v1::UpdateMetadata::FLOAT16:
      return PayloadEncoding::kFloat16;
    case v1::UpdateMetadata::INT8:
      return PayloadEncoding::kInt8;
    default:
      return std::nullopt;
  }
}

std::optional<UpdateEncoding> FitEncodingFromProto(v1::UpdateMetadata::Encoding encoding) {
  switch (encoding) {
    case v1::UpdateMetadata::ENCODING_UNSPECIFIED:
    case v1::UpdateMetadata::FLOAT32:
      return UpdateEncoding::kFloat32;
    case v1::UpdateMetadata::FLOAT16:
      return UpdateEncoding::kFloat16;
    case v1::UpdateMetadata::INT8:
      return UpdateEncoding::kInt8;
    default:
      return std::nullopt;
  }
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
