// Builders of safetensors bytes for the tests of fl/common/safetensors.h.
#ifndef FL_TESTS_UNIT_SAFETENSORS_TEST_UTIL_H_
#define FL_TESTS_UNIT_SAFETENSORS_TEST_UTIL_H_

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fl/common/safetensors.h"

namespace fl {

// The 8-byte little-endian `header_size`, then `header` (padded with spaces to a multiple of 8
// bytes, as the reference writer pads, when `pad`), then `data`.
inline std::string SafetensorsBytes(std::string header, const std::string& data, bool pad = true) {
  if (pad) header.append((8 - header.size() % 8) % 8, ' ');
  const uint64_t size = header.size();
  std::string bytes(reinterpret_cast<const char*>(&size), sizeof(size));
  return bytes + header + data;
}

// A file of one tensor `name` of `dtype` holding `values` (their raw little-endian bytes), shape
// [values.size()].
template <typename T>
std::string OneTensor(const std::string& name, const std::string& dtype,
                      const std::vector<T>& values) {
  std::string data(values.size() * sizeof(T), '\0');
  std::memcpy(data.data(), values.data(), data.size());
  return SafetensorsBytes(
      absl::StrCat(R"({")", name, R"(":{"dtype":")", dtype, R"(","shape":[)", values.size(),
                   R"(],"data_offsets":[0,)", data.size(), "]}}"),
      data);
}

// The model's values, as a vector for gMock's container matchers.
inline std::vector<float> Values(const Model& model) {
  return std::vector<float>(model.data().begin(), model.data().end());
}

inline absl::StatusOr<SafetensorsFile> Parse(const std::string& bytes,
                                             SafetensorsReadOptions options = {}) {
  return ParseSafetensors(std::as_bytes(std::span(bytes.data(), bytes.size())), options);
}

}  // namespace fl

#endif  // FL_TESTS_UNIT_SAFETENSORS_TEST_UTIL_H_
