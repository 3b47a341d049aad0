// SerializeSafetensors and WriteSafetensors; the reader is in safetensors.cc.
#include <bit>
#include <cstring>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "fl/common/file_util.h"
#include "fl/common/safetensors.h"
#include "nlohmann/json.hpp"

namespace fl {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors and Model payloads are little-endian; the writer copies bytes as is");

using Json = nlohmann::json;


absl::Status Refuse(absl::string_view message) { return absl::InvalidArgumentError(message); }

}  // namespace

absl::StatusOr<std::string> SerializeSafetensors(
    const Model& model, const std::map<std::string, std::string>& metadata) {
  const std::vector<TensorSpec>& tensors = model.spec().tensors();
  if (tensors.empty()) return Refuse("cannot write a safetensors file of a model with no tensors");
  // Built as text rather than as a json object: nlohmann's ordered_json finds keys linearly.
  std::string header = "{";
  try {
    constexpr int kCompact = -1;
    constexpr bool kEnsureAscii = false;
    if (!metadata.empty()) {
      absl::StrAppend(&header, "\"", kSafetensorsMetadataKey,
                      "\":", Json(metadata).dump(kCompact, ' ', kEnsureAscii), ",");
    }
    std::unordered_set<std::string> names;
    uint64_t offset = 0;
    for (const TensorSpec& t : tensors) {
      if (t.name == kSafetensorsMetadataKey || !names.insert(t.name).second) {
        return Refuse(absl::StrCat("cannot write a safetensors file with tensor ",
                                   absl::StrCat("'", t.name, "'"),
                                   t.name == kSafetensorsMetadataKey ? ": the name is reserved" : " twice"));
      }
      const uint64_t end = offset + static_cast<uint64_t>(t.NumElements()) * sizeof(float);
      absl::StrAppend(&header, Json(t.name).dump(kCompact, ' ', kEnsureAscii),
                      ":{\"dtype\":\"F32\",\"shape\":[", absl::StrJoin(t.shape, ","),
                      "],\"data_offsets\":[", offset, ",", end, "]},");
      offset = end;
    }
  } catch (const Json::exception&) {  // type_error 316: a string that is not UTF-8
    return Refuse("cannot write a safetensors file: a tensor name or metadata string is not UTF-8");
  }
  header.back() = '}';
  header.append((kSafetensorsSizeBytes - header.size() % kSafetensorsSizeBytes) % kSafetensorsSizeBytes, ' ');
  if (header.size() > kSafetensorsMaxHeaderBytes) {
    return Refuse(absl::StrCat("cannot write a safetensors file: its header would be ",
                               header.size(), " bytes, over the limit of ",
                               kSafetensorsMaxHeaderBytes));
  }
  const uint64_t header_size = header.size();
  const std::span<const std::byte> payload = model.bytes();
  std::string out;
  out.reserve(kSafetensorsSizeBytes + header.size() + payload.size());
  out.append(reinterpret_cast<const char*>(&header_size), sizeof(header_size));
  out.append(header);
  out.append(reinterpret_cast<const char*>(payload.data()), payload.size());
  return out;
}

absl::Status WriteSafetensors(const std::string& path, const Model& model,
                              const std::map<std::string, std::string>& metadata) {
  absl::StatusOr<std::string> bytes = SerializeSafetensors(model, metadata);
  if (!bytes.ok()) {
    return absl::Status(bytes.status().code(), absl::StrCat(path, ": ", bytes.status().message()));
  }
  return WriteFileAtomic(path, *bytes, 0644);
}

}  // namespace fl
