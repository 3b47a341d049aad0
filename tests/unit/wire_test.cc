// fl::wire's conversions between domain types and fl.v1 messages: model specs, update encodings
// and statuses, with the refusals that name what was wrong.
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "fl/common/model.h"
#include "fl/common/update_codec.h"
#include "fl/wire/proto_serde.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fl {
namespace {

using ::testing::HasSubstr;

TEST(ProtoSerdeTest, ModelSpecRoundTrip) {
  ModelSpec spec({{"w", {10, 784}}, {"b", {10}}, {"s", {}}});
  v1::ModelSpec proto;
  proto.add_tensors()->set_name("stale");  // ToProto replaces what was there
  ToProto(spec, &proto);
  ASSERT_EQ(proto.tensors_size(), 3);
  EXPECT_EQ(proto.tensors(0).name(), "w");
  ASSERT_EQ(proto.tensors(0).shape_size(), 2);
  EXPECT_EQ(proto.tensors(0).shape(1), 784);
  EXPECT_EQ(proto.tensors(2).shape_size(), 0);

  absl::StatusOr<ModelSpec> back = FromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, spec);
}

TEST(ProtoSerdeTest, FromProtoRefusesInvalidSpec) {
  v1::ModelSpec empty;
  EXPECT_EQ(FromProto(empty).status().code(), absl::StatusCode::kInvalidArgument);

  v1::ModelSpec dup;
  ToProto(ModelSpec({{"w", {2}}, {"w", {3}}}), &dup);
  absl::StatusOr<ModelSpec> s = FromProto(dup);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("'w'"));

  v1::ModelSpec negative;
  v1::TensorSpec* t = negative.add_tensors();
  t->set_name("k");
  t->add_shape(-4);
  s = FromProto(negative);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("'k'"));
}

TEST(ProtoSerdeTest, GrpcStatusKeepsCodeAndMessage) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());

  const std::vector<absl::Status> statuses = {
      absl::InvalidArgumentError("chunk at offset 4 is out of order"),
      absl::NotFoundError("no such round"),
      absl::FailedPreconditionError("round closed"),
      absl::DataLossError("payload truncated"),
      absl::UnauthenticatedError("no certificate"),
      absl::PermissionDeniedError("revoked"),
      absl::ResourceExhaustedError("too many clients"),
      absl::UnavailableError("shutting down"),
      absl::DeadlineExceededError("late"),
      absl::AbortedError("aborted"),
      absl::InternalError("internal"),
  };
  for (const absl::Status& status : statuses) {
    grpc::Status g = ToGrpcStatus(status);
    EXPECT_EQ(static_cast<int>(g.error_code()), static_cast<int>(status.code()));
    EXPECT_EQ(g.error_message(), std::string(status.message()));
    absl::Status back = FromGrpcStatus(g);
    EXPECT_EQ(back, status);
  }

  grpc::Status from_wire(grpc::StatusCode::UNAVAILABLE, "server going away");
  absl::Status converted = FromGrpcStatus(from_wire);
  EXPECT_EQ(converted.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(std::string(converted.message()), "server going away");
}

// Every payload encoding has its own protocol value and comes back as itself; the unspecified
// value and values this build does not know are nothing (the service refuses them by name).
TEST(ProtoSerdeTest, PayloadEncodingsRoundTripAndUnknownOnesAreNone) {
  const PayloadEncoding all[] = {PayloadEncoding::kFloat32, PayloadEncoding::kMaskedUint32,
                                 PayloadEncoding::kMaskedUint64, PayloadEncoding::kFloat16,
                                 PayloadEncoding::kInt8};
  std::vector<v1::UpdateMetadata::Encoding> seen;
  for (PayloadEncoding e : all) {
    const v1::UpdateMetadata::Encoding wire = ToProto(e);
    EXPECT_NE(wire, v1::UpdateMetadata::ENCODING_UNSPECIFIED);
    for (v1::UpdateMetadata::Encoding other : seen) EXPECT_NE(wire, other);
    seen.push_back(wire);
    EXPECT_EQ(FromProto(wire), std::optional<PayloadEncoding>(e));
  }
  EXPECT_EQ(FromProto(v1::UpdateMetadata::ENCODING_UNSPECIFIED), std::nullopt);
  EXPECT_EQ(FromProto(static_cast<v1::UpdateMetadata::Encoding>(99)), std::nullopt);
  // A fit task's requested encoding is the payload encoding of the same name.
  EXPECT_EQ(ToProto(UpdateEncoding::kFloat16), v1::UpdateMetadata::FLOAT16);
  EXPECT_EQ(ToProto(UpdateEncoding::kInt8), v1::UpdateMetadata::INT8);
  EXPECT_EQ(ToProto(UpdateEncoding::kFloat32), v1::UpdateMetadata::FLOAT32);
  // And back, as a site reads its task: unspecified is float32, masked ones are no fit encoding.
  EXPECT_EQ(FitEncodingFromProto(v1::UpdateMetadata::ENCODING_UNSPECIFIED),
            UpdateEncoding::kFloat32);
  EXPECT_EQ(FitEncodingFromProto(v1::UpdateMetadata::INT8), UpdateEncoding::kInt8);
  EXPECT_EQ(FitEncodingFromProto(v1::UpdateMetadata::MASKED_UINT32), std::nullopt);
  EXPECT_EQ(PayloadEncodingName(PayloadEncoding::kMaskedUint64), std::string("MASKED_UINT64"));
}

}  // namespace
}  // namespace fl
