#include "fl/common/safetensors.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "fl/common/file_util.h"
#include "nlohmann/json.hpp"

namespace fl {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors and Model payloads are little-endian; this reader copies bytes as is");

using Json = nlohmann::json;

// The format needs three levels (root, entry, shape); deeper nesting can only sit in ignored keys.
constexpr int kMaxJsonDepth = 64;

enum class DtypeKind { kF32, kF16, kBF16, kF64, kInteger, kUnsupported };

struct Dtype {
  absl::string_view name;
  int bits;
  DtypeKind kind;
};

// Every dtype of the reference implementation.
constexpr Dtype kDtypes[] = {
    {"F32", 32, DtypeKind::kF32},
    {"F16", 16, DtypeKind::kF16},
    {"BF16", 16, DtypeKind::kBF16},
    {"F64", 64, DtypeKind::kF64},
    {"BOOL", 8, DtypeKind::kInteger},
    {"U8", 8, DtypeKind::kInteger},
    {"I8", 8, DtypeKind::kInteger},
    {"I16", 16, DtypeKind::kInteger},
    {"U16", 16, DtypeKind::kInteger},
    {"I32", 32, DtypeKind::kInteger},
    {"U32", 32, DtypeKind::kInteger},
    {"I64", 64, DtypeKind::kInteger},
    {"U64", 64, DtypeKind::kInteger},
    {"F8_E5M2", 8, DtypeKind::kUnsupported},
    {"F8_E4M3", 8, DtypeKind::kUnsupported},
    {"F8_E8M0", 8, DtypeKind::kUnsupported},
    {"F4", 4, DtypeKind::kUnsupported},
    {"F6_E2M3", 6, DtypeKind::kUnsupported},
    {"F6_E3M2", 6, DtypeKind::kUnsupported},
    {"C64", 64, DtypeKind::kUnsupported},
};

const Dtype* FindDtype(absl::string_view name) {
  for (const Dtype& d : kDtypes) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

// Names and JSON errors come from the file: bound what of them reaches a message.
std::string Clip(absl::string_view text) {
  constexpr size_t kMax = 200;
  if (text.size() <= kMax) return std::string(text);
  size_t cut = kMax;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // UTF-8
  return absl::StrCat(text.substr(0, cut), "...");
}

std::string Quote(absl::string_view name) { return absl::StrCat("'", Clip(name), "'"); }

absl::Status Refuse(absl::string_view message) { return absl::InvalidArgumentError(message); }

// A first pass over the header that the DOM parser cannot do: it refuses duplicate keys (which
// nlohmann::json silently overwrites), bounds the number of tensors before the DOM spends memory
// on them, bounds nesting, and keeps the parser's message on a syntax error.
class HeaderChecker final : public nlohmann::json_sax<Json> {
 public:
  explicit HeaderChecker(int64_t max_tensors) : max_tensors_(max_tensors) {}
  const std::string& error() const { return error_; }

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    keys_.emplace_back();
    return Open();
  }
  bool key(string_t& key) override {
    if (!keys_.back().insert(key).second) {
      return Fail(absl::StrCat("header has a duplicate key ", Quote(key)));
    }
    if (depth_ == 1 && key != kSafetensorsMetadataKey && ++tensors_ > max_tensors_) {
      return Fail(absl::StrCat("too many tensors: the header lists more than ", max_tensors_,
                               " (SafetensorsReadOptions::max_tensors)"));
    }
    return true;
  }
  bool end_object() override {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override { return Open(); }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    return Fail(absl::StrCat("header is not valid JSON: ", Clip(e.what())));
  }

 private:
  bool Open() {
    if (++depth_ > kMaxJsonDepth) {
      return Fail(absl::StrCat("header nests JSON deeper than ", kMaxJsonDepth, " levels"));
    }
    return true;
  }
  bool Fail(std::string message) {
    error_ = std::move(message);
    return false;
  }

  const int64_t max_tensors_;
  int depth_ = 0;
  int64_t tensors_ = 0;
  std::vector<std::unordered_set<std::string>> keys_;  // one set per open object
  std::string error_;
};

absl::StatusOr<Json> ParseHeader(absl::string_view text, int64_t max_tensors) {
  // nlohmann's lexer takes a NUL byte for the end of the input and would ignore what follows; a
  // raw NUL is never valid JSON.
  if (const size_t nul = text.find('\0'); nul != absl::string_view::npos) {
    return Refuse(absl::StrCat("header is not valid JSON: a NUL byte at offset ", nul));
  }
  HeaderChecker checker(max_tensors);
  if (!Json::sax_parse(text.begin(), text.end(), &checker)) return Refuse(checker.error());
  Json header = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return Refuse("header is not valid JSON");
  if (!header.is_object()) return Refuse("header is not a JSON object");
  return header;
}

// One tensor's entry, checked against itself and the size of the data region.
struct Entry {
  std::string name;
  const Dtype* dtype = nullptr;
  std::vector<int64_t> shape;
  int64_t elements = 1;
  uint64_t begin = 0;
  uint64_t end = 0;
};

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Reads a JSON array of non-negative integers into `out`; false when it is not one.
bool UnsignedArray(const Json& j, std::vector<uint64_t>& out) {
  if (!j.is_array()) return false;
  for (const Json& e : j) {
    if (!e.is_number_unsigned()) return false;
    out.push_back(e.get<uint64_t>());
  }
  return true;
}

absl::StatusOr<Entry> ParseEntry(const std::string& name, const Json& j, uint64_t data_size) {
  const std::string t = absl::StrCat("tensor ", Quote(name));
  if (!j.is_object()) return Refuse(absl::StrCat(t, ": its entry is not a JSON object"));
  Entry e;
  e.name = name;
  auto dtype = j.find("dtype");
  if (dtype == j.end()) return Refuse(absl::StrCat(t, " has no \"dtype\""));
  if (!dtype->is_string()) return Refuse(absl::StrCat(t, " has a \"dtype\" that is not a string"));
  auto shape = j.find("shape");
  if (shape == j.end()) return Refuse(absl::StrCat(t, " has no \"shape\""));
  std::vector<uint64_t> dims;
  if (!UnsignedArray(*shape, dims)) {
    return Refuse(
        absl::StrCat(t, " has a \"shape\" that is not an array of non-negative integers"));
  }
  auto offsets = j.find("data_offsets");
  if (offsets == j.end()) return Refuse(absl::StrCat(t, " has no \"data_offsets\""));
  std::vector<uint64_t> range;
  if (!UnsignedArray(*offsets, range) || range.size() != 2) {
    return Refuse(absl::StrCat(t, " has \"data_offsets\" that are not two non-negative integers"));
  }
  e.begin = range[0];
  e.end = range[1];

  const std::string& dtype_name = dtype->get_ref<const std::string&>();
  e.dtype = FindDtype(dtype_name);
  if (e.dtype == nullptr) return Refuse(absl::StrCat(t, " has unknown dtype ", Quote(dtype_name)));
  for (uint64_t d : dims) {
    if (d == 0) {
      return Refuse(absl::StrCat(t, " has a zero-sized dimension (shape [",
                                 absl::StrJoin(dims, ", "),
                                 "]); a model's tensors need positive dimensions"));
    }
  }
  for (uint64_t d : dims) {
    if (d > static_cast<uint64_t>(kMaxModelFloats / e.elements)) {
      return Refuse(absl::StrCat(t, " has more than ", kMaxModelFloats, " elements (shape [",
                                 absl::StrJoin(dims, ", "), "])"));
    }
    e.elements *= static_cast<int64_t>(d);
    e.shape.push_back(static_cast<int64_t>(d));
  }
  if (e.begin > e.end) {
    return Refuse(absl::StrCat(t, " has data_offsets [", e.begin, ", ", e.end,
                               "] whose begin is past their end"));
  }
  if (e.end > data_size) {
    return Refuse(absl::StrCat(t, " has data_offsets [", e.begin, ", ", e.end,
                               "] past the end of the data (", data_size, " bytes)"));
  }
  // elements <= 2^38 and bits <= 64: no overflow.
  const uint64_t bits = static_cast<uint64_t>(e.elements) * static_cast<uint64_t>(e.dtype->bits);
  if (bits % 8 != 0 || bits / 8 != e.end - e.begin) {
    return Refuse(absl::StrCat(t, " has ", e.end - e.begin, " bytes of data but its shape ",
                               ShapeText(e.shape), " of ", e.dtype->name, " needs ", bits / 8,
                               bits % 8 != 0 ? " and a fraction" : "", " (size does not match)"));
  }
  return e;
}

// Refuses overlaps and bytes that no tensor covers; `entries` must be sorted by offsets.
absl::Status CheckLayout(const std::vector<Entry>& entries, uint64_t data_size) {
  uint64_t covered = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (e.begin < covered) {
      const Entry& prev = entries[i - 1];
      return Refuse(absl::StrCat("tensors ", Quote(prev.name), " and ", Quote(e.name),
                                 " overlap (data_offsets [", prev.begin, ", ", prev.end, "] and [",
                                 e.begin, ", ", e.end, "])"));
    }
    if (e.begin > covered) {
      return Refuse(absl::StrCat("gap in the data: bytes [", covered, ", ", e.begin,
                                 ") belong to no tensor (before ", Quote(e.name), ")"));
    }
    covered = e.end;
  }
  if (covered != data_size) {
    return Refuse(absl::StrCat("gap in the data: bytes [", covered, ", ", data_size,
                               ") after the last tensor belong to no tensor"));
  }
  return absl::OkStatus();
}

absl::Status NonFinite(const Entry& e, float value, int64_t index) {
  return Refuse(absl::StrCat("tensor ", Quote(e.name), " has a non-finite value (", value,
                             ") at element ", index));
}

// Exact for every half, infinities and NaNs included.
float HalfToFloat(uint16_t h) {
  const bool negative = (h & 0x8000u) != 0;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  const uint32_t sign = negative ? 0x80000000u : 0u;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float v = std::ldexp(static_cast<float>(mantissa), -24);
    return negative ? -v : v;
  }
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

// Converts the tensor's bytes into `out` (e.elements floats), refusing non-finite values.
absl::Status Convert(const Entry& e, const std::byte* in, std::span<float> out) {
  const int64_t n = e.elements;
  switch (e.dtype->kind) {
    case DtypeKind::kF32:
      std::memcpy(out.data(), in, static_cast<size_t>(n) * sizeof(float));
      for (int64_t i = 0; i < n; ++i) {
        if (!std::isfinite(out[i])) return NonFinite(e, out[i], i);
      }
      return absl::OkStatus();
    case DtypeKind::kF16:
    case DtypeKind::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, in + 2 * i, sizeof(h));
        out[i] = e.dtype->kind == DtypeKind::kF16 ? HalfToFloat(h)
                                                  : std::bit_cast<float>(uint32_t{h} << 16);
        if (!std::isfinite(out[i])) return NonFinite(e, out[i], i);
      }
      return absl::OkStatus();
    case DtypeKind::kF64:
      for (int64_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, in + 8 * i, sizeof(v));
        if (!std::isfinite(v)) return NonFinite(e, static_cast<float>(v), i);
        if (std::fabs(v) > std::numeric_limits<float>::max()) {
          return Refuse(absl::StrCat("tensor ", Quote(e.name), " has value ", v, " at element ", i,
                                     ", beyond the range of float32"));
        }
        out[i] = static_cast<float>(v);
      }
      return absl::OkStatus();
    case DtypeKind::kInteger:
    case DtypeKind::kUnsupported:
      break;
  }
  return absl::InternalError("unreachable: dtype checked before conversion");
}

absl::Status CheckDtype(const Entry& e) {
  switch (e.dtype->kind) {
    case DtypeKind::kInteger:
      return Refuse(absl::StrCat("tensor ", Quote(e.name), " has dtype ", e.dtype->name,
                                 "; only floating-point tensors (F32, F16, BF16, F64) can be "
                                 "federated"));
    case DtypeKind::kUnsupported:
      return Refuse(absl::StrCat("tensor ", Quote(e.name), " has dtype ", e.dtype->name,
                                 ", which is not supported; only F32, F16, BF16 and F64 tensors "
                                 "can be read"));
    default:
      return absl::OkStatus();
  }
}

absl::StatusOr<std::map<std::string, std::string>> ParseMetadata(const Json& j) {
  if (!j.is_object()) return Refuse("\"__metadata__\" is not a JSON object of strings");
  std::map<std::string, std::string> metadata;
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string()) {
      return Refuse(absl::StrCat("\"__metadata__\" value of key ", Quote(key), " is not a string"));
    }
    metadata.emplace(key, value.get<std::string>());
  }
  return metadata;
}

absl::StatusOr<SafetensorsFile> Parse(std::span<const std::byte> bytes,
                                      const SafetensorsReadOptions& options) {
  if (bytes.size() < kSafetensorsSizeBytes) {
    return Refuse(
        absl::StrCat("the file is ", bytes.size(), " bytes, shorter than the 8-byte header size"));
  }
  uint64_t header_size;
  std::memcpy(&header_size, bytes.data(), sizeof(header_size));
  if (header_size > kSafetensorsMaxHeaderBytes) {
    return Refuse(absl::StrCat("header size ", header_size, " is over the limit of ",
                               kSafetensorsMaxHeaderBytes, " bytes"));
  }
  if (header_size > bytes.size() - kSafetensorsSizeBytes) {
    return Refuse(absl::StrCat("header size ", header_size, " runs past the end of the file (",
                               bytes.size(), " bytes)"));
  }
  const absl::string_view text(reinterpret_cast<const char*>(bytes.data()) + kSafetensorsSizeBytes,
                               static_cast<size_t>(header_size));
  const std::span<const std::byte> data = bytes.subspan(kSafetensorsSizeBytes + header_size);
  absl::StatusOr<Json> header = ParseHeader(text, options.max_tensors);
  if (!header.ok()) return header.status();

  std::map<std::string, std::string> metadata;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header->items()) {
    if (name == kSafetensorsMetadataKey) {
      absl::StatusOr<std::map<std::string, std::string>> m = ParseMetadata(value);
      if (!m.ok()) return m.status();
      metadata = *std::move(m);
      continue;
    }
    absl::StatusOr<Entry> e = ParseEntry(name, value, data.size());
    if (!e.ok()) return e.status();
    entries.push_back(*std::move(e));
  }
  if (entries.empty()) return Refuse("the file holds no tensors");
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::pair(a.begin, a.end) < std::pair(b.begin, b.end);
  });
  if (absl::Status s = CheckLayout(entries, data.size()); !s.ok()) return s;
  const int64_t max_floats = std::min(options.max_floats, kMaxModelFloats);
  int64_t floats = 0;
  std::vector<TensorSpec> specs;
  for (const Entry& e : entries) {
    if (absl::Status s = CheckDtype(e); !s.ok()) return s;
    floats += e.elements;  // each <= 2^38, at most 2^16 or so of them: no overflow
    if (floats > max_floats) {
      return Refuse(absl::StrCat("model has more than ", max_floats,
                                 " parameters (the limit; reached at tensor ", Quote(e.name), ")"));
    }
    specs.push_back({e.name, e.shape});
  }
  ModelSpec spec(std::move(specs));
  if (absl::Status s = spec.Validate(); !s.ok()) return s;
  SafetensorsFile file{Model(std::move(spec)), std::move(metadata)};
  for (size_t i = 0; i < entries.size(); ++i) {
    absl::Status s = Convert(entries[i], data.data() + entries[i].begin, file.model.tensor(i));
    if (!s.ok()) return s;
  }
  return file;
}

}  // namespace

absl::StatusOr<SafetensorsFile> ParseSafetensors(std::span<const std::byte> bytes,
                                                 SafetensorsReadOptions options) {
  try {
    return Parse(bytes, options);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory while parsing a safetensors header");
  } catch (const std::exception& e) {  // nlohmann::json; not expected after the checks above
    return Refuse(absl::StrCat("header is malformed: ", Clip(e.what())));
  }
}

absl::StatusOr<SafetensorsFile> ReadSafetensorsFile(const std::string& path,
                                                    SafetensorsReadOptions options) {
  absl::StatusOr<std::string> contents = ReadFile(path);
  if (!contents.ok()) return contents.status();
  absl::StatusOr<SafetensorsFile> file =
      ParseSafetensors(std::as_bytes(std::span(*contents)), options);
  if (!file.ok()) {
    return absl::Status(file.status().code(),
                        absl::StrCat("safetensors file '", path, "': ", file.status().message()));
  }
  return file;
}

absl::StatusOr<Model> ReadSafetensors(const std::string& path, SafetensorsReadOptions options) {
  absl::StatusOr<SafetensorsFile> file = ReadSafetensorsFile(path, options);
  if (!file.ok()) return file.status();
  return std::move(file->model);
}

}  // namespace fl
