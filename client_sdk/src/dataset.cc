#include "fl/client/dataset.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fl::client {

Dataset Dataset::Subset(const std::vector<int64_t>& indices) const {
  Dataset out;
  out.num_features = num_features;
  out.num_classes = num_classes;
  out.features.resize(indices.size() * static_cast<size_t>(num_features));
  out.labels.reserve(indices.size());
  float* dst = out.features.data();
  for (int64_t i : indices) {
    std::copy_n(row(i), num_features, dst);
    dst += num_features;
    out.labels.push_back(labels[static_cast<size_t>(i)]);
  }
  return out;
}

namespace {

// ---------------------------------------------------------------------------------------------
// IDX

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Reads exactly `n` bytes into `dst`; false on a short read or an error.
bool ReadExactly(gzFile f, void* dst, size_t n) {
  auto* p = static_cast<unsigned char*>(dst);
  while (n > 0) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n, 1u << 30));
    const int got = gzread(f, p, chunk);
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

absl::StatusOr<GzFile> OpenGz(const std::string& path) {
  errno = 0;
  GzFile f(gzopen(path.c_str(), "rb"));
  if (f == nullptr) {
    const int err = errno;
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot open: ", err != 0 ? std::strerror(err) : "gzopen failed"));
  }
  gzbuffer(f.get(), 1 << 17);
  return f;
}

// Reads `count` big-endian uint32 header fields.
absl::StatusOr<std::vector<int64_t>> ReadHeader(gzFile f, const std::string& path, int count) {
  std::vector<int64_t> out;
  for (int i = 0; i < count; ++i) {
    unsigned char b[4];
    if (!ReadExactly(f, b, sizeof(b))) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": truncated IDX header"));
    }
    out.push_back((int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | b[3]);
  }
  return out;
}

// Opens an IDX file, checks its magic number, stores its `ndims` dimensions in `dims` and
// returns the payload: one byte per element, as many as the dimensions' product.
absl::StatusOr<std::vector<uint8_t>> ReadIdx(const std::string& path, uint32_t magic, int ndims,
                                             std::vector<int64_t>* dims) {
  absl::StatusOr<GzFile> f = OpenGz(path);
  if (!f.ok()) return f.status();
  absl::StatusOr<std::vector<int64_t>> header = ReadHeader(f->get(), path, 1 + ndims);
  if (!header.ok()) return header.status();
  if ((*header)[0] != magic) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": wrong IDX magic number 0x", absl::Hex((*header)[0], absl::kZeroPad8),
                     ", expected 0x", absl::Hex(magic, absl::kZeroPad8)));
  }
  dims->assign(header->begin() + 1, header->end());
  int64_t total = 1;
  for (int64_t d : *dims) {
    if (d == 0) return absl::InvalidArgumentError(absl::StrCat(path, ": IDX dimension is 0"));
    // Every dimension is < 2^32; refuse products that could not be held in memory anyway.
    if (total > (int64_t{1} << 40) / d) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": IDX dimensions are too large"));
    }
    total *= d;
  }
  // Read in pieces so that a lying header fails as truncated instead of allocating its size.
  std::vector<uint8_t> data;
  constexpr int64_t kPiece = int64_t{16} << 20;
  while (static_cast<int64_t>(data.size()) < total) {
    const int64_t n = std::min(kPiece, total - static_cast<int64_t>(data.size()));
    const size_t old = data.size();
    data.resize(old + static_cast<size_t>(n));
    if (!ReadExactly(f->get(), data.data() + old, static_cast<size_t>(n))) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": truncated IDX data: the header announces ", total, " bytes of data"));
    }
  }
  return data;
}

// ---------------------------------------------------------------------------------------------
// CSV

// This abseil build has its own string_view type, which StrCat takes but std::string_view is not.
absl::string_view Sv(std::string_view s) { return {s.data(), s.size()}; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// Splits on commas and trims each field; a header name may also be wrapped in double quotes.
std::vector<std::string_view> SplitFields(std::string_view line, bool unquote) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    std::string_view f = Trim(line.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (unquote && f.size() >= 2 && f.front() == '"' && f.back() == '"') {
      f = f.substr(1, f.size() - 2);
    }
    fields.push_back(f);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return fields;
}

// Parses the whole of `text` as a finite double into `out`: nullopt on success, else the reason.
std::optional<std::string> ParseFinite(std::string_view text, double* out) {
  if (text.empty()) return "empty value";
  std::string_view digits = text;
  if (digits.front() == '+') digits.remove_prefix(1);
  const char* end = digits.data() + digits.size();
  auto [ptr, ec] = std::from_chars(digits.data(), end, *out);
  if (ec == std::errc::result_out_of_range) return absl::StrCat("out of range: '", Sv(text), "'");
  if (ec != std::errc() || ptr != end) return absl::StrCat("not a number: '", Sv(text), "'");
  if (std::isnan(*out)) return absl::StrCat("NaN is not allowed: '", Sv(text), "'");
  if (std::isinf(*out)) return absl::StrCat("infinity is not allowed: '", Sv(text), "'");
  return std::nullopt;
}

}  // namespace

absl::StatusOr<Dataset> LoadIdx(const std::string& images_path, const std::string& labels_path,
                                int32_t num_classes) {
  std::vector<int64_t> image_dims;
  absl::StatusOr<std::vector<uint8_t>> pixels = ReadIdx(images_path, 0x803, 3, &image_dims);
  if (!pixels.ok()) return pixels.status();
  std::vector<int64_t> label_dims;
  absl::StatusOr<std::vector<uint8_t>> labels = ReadIdx(labels_path, 0x801, 1, &label_dims);
  if (!labels.ok()) return labels.status();
  if (image_dims[0] != label_dims[0]) {
    return absl::InvalidArgumentError(absl::StrCat(images_path, " holds ", image_dims[0],
                                                   " images but ", labels_path, " holds ",
                                                   label_dims[0], " labels"));
  }
  Dataset d;
  d.num_features = image_dims[1] * image_dims[2];
  d.features.resize(pixels->size());
  std::transform(pixels->begin(), pixels->end(), d.features.begin(),
                 [](uint8_t p) { return static_cast<float>(p) / 255.0f; });
  d.labels.assign(labels->begin(), labels->end());
  if (num_classes > 0) {
    for (size_t i = 0; i < d.labels.size(); ++i) {
      if (d.labels[i] >= num_classes) {
        return absl::InvalidArgumentError(absl::StrCat(
            labels_path, ": item ", i, ": label ", d.labels[i], " is outside the model's ",
            num_classes, " classes [0, ", num_classes, ")"));
      }
    }
    d.num_classes = num_classes;
    return d;
  }
  d.num_classes = 1 + *std::max_element(d.labels.begin(), d.labels.end());
  return d;
}

absl::StatusOr<Dataset> LoadCsv(const std::string& path, std::string_view label_column,
                                int32_t num_classes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  std::string line;
  if (!std::getline(in, line)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": empty file, expected a header row"));
  }
  // Copies: the header line's buffer is reused for the data rows.
  std::vector<std::string> names;
  for (std::string_view f : SplitFields(line, /*unquote=*/true)) names.emplace_back(f);
  const size_t num_fields = names.size();
  const auto label_it = std::find(names.begin(), names.end(), label_column);
  if (label_it == names.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": row 1: no label column named '", Sv(label_column),
                     "' (columns: ", absl::StrJoin(names, ", "), ")"));
  }
  if (std::find(label_it + 1, names.end(), label_column) != names.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": row 1: label column '", Sv(label_column), "' appears twice"));
  }
  const size_t label_index = static_cast<size_t>(label_it - names.begin());
  if (num_fields < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": row 1: no feature columns besides '", Sv(label_column), "'"));
  }

  Dataset d;
  d.num_features = static_cast<int64_t>(num_fields - 1);
  int64_t max_label = -1;
  for (int64_t row = 2; std::getline(in, line); ++row) {
    if (Trim(line).empty()) continue;  // blank lines (e.g. at the end) carry no data
    const std::vector<std::string_view> fields = SplitFields(line, /*unquote=*/false);
    if (fields.size() != num_fields) {
      // Name the first column without a value, or the first value without a column.
      const std::string where =
          fields.size() < num_fields
              ? absl::StrCat("column '", names[fields.size()], "' and after are missing")
              : absl::StrCat("value ", num_fields + 1, " ('", Sv(fields[num_fields]),
                             "') is past the last column '", names.back(), "'");
      return absl::InvalidArgumentError(absl::StrCat(path, ": row ", row, ": expected ", num_fields,
                                                     " fields, found ", fields.size(), ": ",
                                                     where));
    }
    for (size_t c = 0; c < num_fields; ++c) {
      double value = 0;
      std::optional<std::string> error = ParseFinite(fields[c], &value);
      if (!error && c == label_index) {
        if (value < 0 || value != std::floor(value)) {
          error = absl::StrCat("label must be a non-negative integer: '", Sv(fields[c]), "'");
        } else if (value >= std::numeric_limits<int32_t>::max()) {
          error = absl::StrCat("label is too large: '", Sv(fields[c]), "'");
        } else if (num_classes > 0 && value >= num_classes) {
          error = absl::StrCat("label ", Sv(fields[c]), " is outside the model's ", num_classes,
                               " classes [0, ", num_classes, ")");
        }
      }
      if (!error && c != label_index && std::abs(value) > std::numeric_limits<float>::max()) {
        error = absl::StrCat("out of range for float32: '", Sv(fields[c]), "'");
      }
      if (error) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": row ", row, ", column '", names[c], "': ", *error));
      }
      if (c == label_index) {
        d.labels.push_back(static_cast<int32_t>(value));
        max_label = std::max(max_label, static_cast<int64_t>(value));
      } else {
        d.features.push_back(static_cast<float>(value));
      }
    }
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  if (d.labels.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no data rows after the header"));
  }
  d.num_classes = num_classes > 0 ? num_classes : static_cast<int32_t>(max_label + 1);
  return d;
}

}  // namespace fl::client
