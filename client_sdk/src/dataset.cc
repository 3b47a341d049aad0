#include "fl/client/dataset.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fl/common/random.h"

namespace fl::client {

Dataset Dataset::Subset(const std::vector<int64_t>& indices) const {
  Dataset out;
  out.num_features = num_features;
  out.num_classes = num_classes;
  out.feature_names = feature_names;
  out.features.resize(indices.size() * static_cast<size_t>(num_features));
  out.labels.reserve(indices.size());
  float* dst = out.features.data();
  for (int64_t i : indices) {
    std::copy_n(row(i), num_features, dst);
    dst += num_features;
    out.labels.push_back(labels[static_cast<size_t>(i)]);
    if (!keys.empty()) out.keys.push_back(keys[static_cast<size_t>(i)]);
  }
  return out;
}

namespace {

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

absl::StatusOr<std::vector<std::vector<int64_t>>> SplitIid(int64_t num_examples, int32_t num_parts,
                                                           uint64_t seed) {
  if (num_parts < 1 || num_parts > num_examples) {
    return absl::InvalidArgumentError(
        absl::StrCat(num_parts, " parts is not in [1, ", num_examples, "] (the number of rows)"));
  }
  std::mt19937_64 rng(seed);
  std::vector<int64_t> perm(static_cast<size_t>(num_examples));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  Shuffle(perm, rng);
  // As numpy.array_split: the first (num_examples % num_parts) parts get one more.
  const int64_t base = num_examples / num_parts;
  const int64_t extra = num_examples % num_parts;
  std::vector<std::vector<int64_t>> parts(static_cast<size_t>(num_parts));
  auto it = perm.begin();
  for (int32_t i = 0; i < num_parts; ++i) {
    const int64_t size = base + (i < extra ? 1 : 0);
    parts[static_cast<size_t>(i)].assign(it, it + size);
    it += size;
  }
  return parts;
}

}  // namespace fl::client
