// Fuzz target for the IDX loader of a site's (and the server's evaluation) data
// (fl::client::LoadIdx, fl/client/dataset.h): the magic numbers, the dimensions, truncated data,
// gzip (zlib reads plain files through as they are), and the labels against the classes.
//
// Input: a num_classes byte (0: from the labels), a u32 length, that many bytes of the image
// file, and the rest as the label file (each written to a temporary file: LoadIdx takes paths).
// Any pair of files gives INVALID_ARGUMENT, saying why and naming a file, or a dataset, and a
// dataset is consistent: images of num_features pixels in [0, 1], one label per image in
// [0, num_classes), num_classes the given one when given.
//
// Compiled into the executable with the sanitizers: client_sdk/src/dataset.cc.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fl/client/dataset.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using fl::fuzz::Check;
  static const fl::fuzz::TempFile images("images.idx");
  static const fl::fuzz::TempFile labels("labels.idx");
  fl::fuzz::Reader in(data, size);
  const int32_t num_classes = in.U8();
  const std::string_view image_bytes = in.Bytes(in.U32());
  const std::string_view label_bytes = in.Rest();
  absl::StatusOr<fl::client::Dataset> d =
      fl::client::LoadIdx(images.Write(image_bytes), labels.Write(label_bytes), num_classes);
  if (!d.ok()) {
    fl::fuzz::CheckRefusal(d.status(), absl::StatusCode::kInvalidArgument, "IDX files are refused");
    const std::string message(d.status().message());
    Check(message.find(images.path()) != std::string::npos ||
              message.find(labels.path()) != std::string::npos,
          "a refusal names a file");
    return 0;
  }
  Check(d->num_features >= 1 && d->num_examples() >= 1, "a dataset has rows and features");
  Check(d->features.size() == static_cast<size_t>(d->num_examples() * d->num_features),
        "an image per label");
  Check(d->num_classes >= 1 && (num_classes == 0 || d->num_classes == num_classes),
        "the classes are the given ones or the labels'");
  for (int32_t label : d->labels) Check(label >= 0 && label < d->num_classes, "labels are classes");
  for (float v : d->features) Check(v >= 0 && v <= 1, "pixels are in [0, 1]");
  Check(d->feature_names.empty() && d->keys.empty(), "IDX data has no names and no keys");
  return 0;
}
