// Fuzz target for a site's decoding of the server's tasks: TaskFromProto
// (client_sdk/src/grpc_transport.cc), which turns a polled fl.v1.Task into the SDK loop's
// ClientTask through fl::wire (the model spec, the update encoding, the secure-aggregation
// parameters, directory, bundle, survivor list and unmask request).
//
// Input: a serialized fl.v1.Task (bytes that do not parse are what gRPC refuses first).
// A task always converts: each field that cannot be read holds its refusal (INVALID_ARGUMENT,
// saying why) for the stage that needs it. What is read survives the trip back to the wire and
// in again unchanged: the spec (with has_spec exactly when tensors were named), the fit encoding
// (or its name when this SDK does not know it), the parameters, the directory, the bundle, the
// survivors and the unmask request.
//
// Compiled into the executable with the sanitizers: client_sdk/src/grpc_transport.cc,
// common/wire/src/proto_serde.cc, common/wire/src/secagg_serde.cc, common/src/model.cc.
// secagg_fuzz drives a participant through whole rounds of such tasks.
#include <cstddef>
#include <cstdint>
#include <string>

#include "client_sdk/internal/transport.h"
#include "client_sdk/src/grpc_wire.h"
#include "fl/v1/federation.pb.h"
#include "fl/wire/proto_serde.h"
#include "fl/wire/secagg_serde.h"
#include "google/protobuf/stubs/logging.h"
#include "tests/fuzz/fuzz_support.h"

namespace fl::fuzz {
namespace {

// Mutants that do not parse are the point: protobuf's log of each would drown the output.
[[maybe_unused]] const bool kQuietProtobuf = [] {
  google::protobuf::SetLogHandler(nullptr);
  return true;
}();

using client::ClientTask;

// A field that could not be read says why; one that could, written back into a SecAggTask and
// read again, gives the same bytes on the wire.
template <typename T, typename ToProto, typename FromProto>
void CheckSecAggField(const absl::StatusOr<T>& field, ToProto to_proto, FromProto from_proto,
                      const char* what) {
  if (!field.ok()) {
    CheckRefusal(field.status(), absl::StatusCode::kInvalidArgument, what);
    return;
  }
  v1::SecAggTask once;
  to_proto(*field, &once);
  absl::StatusOr<T> back = from_proto(once);
  Check(back.ok(), what);
  v1::SecAggTask twice;
  to_proto(*back, &twice);
  Check(once.SerializeAsString() == twice.SerializeAsString(), what);
}

void CheckTask(const v1::Task& in, const ClientTask& t) {
  Check(t.run_id == in.run_id() && t.round == in.round() && t.task_id == in.task_id() &&
            t.message == in.message(),
        "a task keeps its ids");
  Check(t.has_spec == (in.fit().model_spec().tensors_size() > 0), "has_spec says a spec came");
  if (t.spec.ok()) {
    Check(static_cast<int>(t.spec->tensors().size()) == in.fit().model_spec().tensors_size(),
          "a spec keeps every tensor");
    v1::ModelSpec again;
    ToProto(*t.spec, &again);
    absl::StatusOr<ModelSpec> back = FromProto(again);
    Check(back.ok() && *back == *t.spec, "a spec survives a round trip");
  } else {
    CheckRefusal(t.spec.status(), absl::StatusCode::kInvalidArgument, "a spec is refused");
  }
  if (t.update_encoding.has_value()) {
    Check(FitEncodingFromProto(ToProto(*t.update_encoding)) == t.update_encoding,
          "a fit encoding survives a round trip");
  } else {
    Check(!t.encoding_name.empty(), "an unknown encoding is named");
  }
  Check(
      t.feature_statistics.mean.size() == static_cast<size_t>(in.feature_statistics().mean_size()),
      "the feature statistics are kept");
  if (!IsSecAgg(t.kind)) return;
  Check(t.config.secure_aggregation, "a secure-aggregation task says so");
  if (t.secagg_params.ok()) {
    v1::SecAggParams once;
    wire::ParamsToProto(*t.secagg_params, &once);
    absl::StatusOr<secagg::RoundParams> back = wire::ParamsFromProto(once);
    Check(back.ok(), "parameters read back");
    v1::SecAggParams twice;
    wire::ParamsToProto(*back, &twice);
    Check(once.SerializeAsString() == twice.SerializeAsString(), "parameters survive a round trip");
  } else {
    CheckRefusal(t.secagg_params.status(), absl::StatusCode::kInvalidArgument,
                 "parameters are refused");
  }
  CheckSecAggField(t.directory, wire::DirectoryToProto, wire::DirectoryFromProto,
                   "a directory survives a round trip");
  CheckSecAggField(t.bundle, wire::BundleToProto, wire::BundleFromProto,
                   "a bundle survives a round trip");
  CheckSecAggField(t.survivors, wire::SurvivorListToProto, wire::SurvivorListFromProto,
                   "a survivor list survives a round trip");
  CheckSecAggField(t.unmask, wire::UnmaskRequestToProto, wire::UnmaskRequestFromProto,
                   "an unmask request survives a round trip");
}

}  // namespace
}  // namespace fl::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fl::v1::Task in;
  if (!in.ParseFromArray(data, static_cast<int>(size))) return 0;
  const fl::client::ClientTask t = fl::client::internal::TaskFromProto(in);
  fl::fuzz::CheckTask(in, t);
  return 0;
}
