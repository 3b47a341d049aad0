// fl/common/safetensors.h: round trips, the reference writer's bytes, dtype conversion and the
// refusals of malformed files (each with its message). safetensors_malformed_test.cc has the rest.
#include "fl/common/safetensors.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fl/common/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/safetensors_test_util.h"

namespace fl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class SafetensorsFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("fl_safetensors_test_", ::getpid(), "_", info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

Model ThreeTensorModel() {
  Model model(ModelSpec({{"layer.w", {2, 3}}, {"layer.b", {3}}, {"scale", {}}}));
  for (size_t i = 0; i < model.data().size(); ++i) model.data()[i] = 0.25f * i - 1.0f;
  return model;
}

TEST_F(SafetensorsFileTest, WriteThenReadRoundTripsSpecValuesAndMetadata) {
  const Model model = ThreeTensorModel();
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"round", "12"}};
  const std::string path = Path("model.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, model, metadata).ok());

  absl::StatusOr<SafetensorsFile> file = ReadSafetensorsFile(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->model.spec(), model.spec());  // names, shapes and order
  EXPECT_THAT(file->model.spec().tensors()[2].shape, ElementsAre());
  EXPECT_TRUE(std::equal(model.data().begin(), model.data().end(), file->model.data().begin(),
                         file->model.data().end()));
  EXPECT_EQ(file->metadata, metadata);

  absl::StatusOr<Model> only_model = ReadSafetensors(path);
  ASSERT_TRUE(only_model.ok()) << only_model.status();
  EXPECT_EQ(only_model->Sha256Hex(), model.Sha256Hex());

  // Overwriting leaves one file, no temporary beside it.
  ASSERT_TRUE(WriteSafetensors(path, model).ok());
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), {}), 1);
  file = ReadSafetensorsFile(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->metadata.empty());
}

TEST(SafetensorsTest, SerializeWritesWhatPythonSafetensorsWrites) {
  // safetensors.numpy.save({"a": np.array([1, 2], np.float32)}), byte for byte.
  Model model(ModelSpec({{"a", {2}}}));
  model.data()[0] = 1.0f;
  model.data()[1] = 2.0f;
  const std::string expected =
      SafetensorsBytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                       std::string("\0\0\x80?\0\0\0@", 8));
  ASSERT_EQ(expected.substr(0, 8), std::string("\x38\0\0\0\0\0\0\0", 8));  // 56: padded by 2
  absl::StatusOr<std::string> bytes = SerializeSafetensors(model);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, expected);

  // With metadata, "__metadata__" comes first; the data region starts at a multiple of 8.
  bytes = SerializeSafetensors(model, {{"format", "np"}});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  uint64_t header_size;
  std::memcpy(&header_size, bytes->data(), 8);
  EXPECT_EQ(header_size % 8, 0u);
  EXPECT_THAT(bytes->substr(8, header_size),
              StartsWith(R"({"__metadata__":{"format":"np"},"a":{"dtype":"F32")"));
}

TEST(SafetensorsTest, ReadsAFileWrittenByPythonSafetensorsInFileOrder) {
  // safetensors.numpy.save({"a": f32 [1, -2.5], "b": f16 [[1, .5], [-2, 65504]], "c": f64 .25},
  // metadata={"format": "np", "round": "7"}): the writer orders tensors by dtype size, then name.
  const std::string header = R"({"__metadata__":{"format":"np","round":"7"},)"
                             R"("c":{"dtype":"F64","shape":[],"data_offsets":[0,8]},)"
                             R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                             R"("b":{"dtype":"F16","shape":[2,2],"data_offsets":[16,24]}} )";
  const std::string data("\0\0\0\0\0\0\xd0?\0\0\x80?\0\0 \xc0\0<\08\0\xc0\xff{", 24);
  std::string bytes = std::string("\xd0\0\0\0\0\0\0\0", 8) + header + data;
  ASSERT_EQ(header.size(), 0xd0u);
  absl::StatusOr<SafetensorsFile> file = Parse(bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  const auto& tensors = file->model.spec().tensors();
  ASSERT_EQ(tensors.size(), 3u);
  EXPECT_EQ(tensors[0], (TensorSpec{"c", {}}));
  EXPECT_EQ(tensors[1], (TensorSpec{"a", {2}}));
  EXPECT_EQ(tensors[2], (TensorSpec{"b", {2, 2}}));
  EXPECT_THAT(Values(file->model), ElementsAre(0.25f, 1.0f, -2.5f, 1.0f, 0.5f, -2.0f, 65504.0f));
  EXPECT_EQ(file->metadata, (std::map<std::string, std::string>{{"format", "np"}, {"round", "7"}}));
}

TEST(SafetensorsTest, ConvertsF16Exactly) {
  // 1, -2, largest, smallest normal, smallest subnormal, -0, 1/3 rounded.
  const std::vector<uint16_t> halves = {0x3C00, 0xC000, 0x7BFF, 0x0400, 0x0001, 0x8000, 0x3555};
  absl::StatusOr<SafetensorsFile> file = Parse(OneTensor("h", "F16", halves));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_THAT(Values(file->model), ElementsAre(1.0f, -2.0f, 65504.0f, std::ldexp(1.0f, -14),
                                               std::ldexp(1.0f, -24), -0.0f, 0.333251953125f));
  EXPECT_TRUE(std::signbit(file->model.data()[5]));
}

TEST(SafetensorsTest, ConvertsBF16Exactly) {
  // 1, -3, 3.140625, largest, a float32 subnormal (2^-133).
  const std::vector<uint16_t> values = {0x3F80, 0xC040, 0x4049, 0x7F7F, 0x0001};
  absl::StatusOr<SafetensorsFile> file = Parse(OneTensor("b", "BF16", values));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_THAT(Values(file->model),
              ElementsAre(1.0f, -3.0f, 3.140625f, 3.38953139e38f, std::ldexp(1.0f, -133)));
}

TEST(SafetensorsTest, ConvertsF64ToNearestFloat) {
  const double max_float = std::numeric_limits<float>::max();
  const std::vector<double> values = {0.1, -2.5, 1e-50, max_float, -max_float};
  absl::StatusOr<SafetensorsFile> file = Parse(OneTensor("d", "F64", values));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_THAT(Values(file->model), ElementsAre(0.1f, -2.5f, 0.0f, std::numeric_limits<float>::max(),
                                               -std::numeric_limits<float>::max()));
}

TEST(SafetensorsTest, RefusesF64BeyondFloat32NamingTensorAndElement) {
  absl::StatusOr<SafetensorsFile> file =
      Parse(OneTensor("big", "F64", std::vector<double>{1.0, 2.0, -1e39}));
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(file.status().message(),
              HasSubstr("tensor 'big' has value -1e+39 at element 2, beyond the range of float32"));
}

TEST(SafetensorsTest, RefusesNonFiniteValuesNamingTensorAndElement) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  absl::StatusOr<SafetensorsFile> file =
      Parse(OneTensor("w", "F32", std::vector<float>{1.0f, 2.0f, nan}));
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(file.status().message(), HasSubstr("tensor 'w' has a non-finite value (nan) at "
                                                 "element 2"));
  file = Parse(OneTensor("h", "F16", std::vector<uint16_t>{0x3C00, 0xFC00}));
  EXPECT_THAT(file.status().message(), HasSubstr("tensor 'h' has a non-finite value (-inf) at "
                                                 "element 1"));
  file = Parse(OneTensor("b", "BF16", std::vector<uint16_t>{0x7FC0}));
  EXPECT_THAT(file.status().message(), HasSubstr("tensor 'b' has a non-finite value (nan) at "
                                                 "element 0"));
  file = Parse(OneTensor(
      "d", "F64", std::vector<double>{0.0, 0.0, 0.0, std::numeric_limits<double>::infinity()}));
  EXPECT_THAT(file.status().message(), HasSubstr("tensor 'd' has a non-finite value (inf) at "
                                                 "element 3"));
}

TEST(SafetensorsTest, RefusesAnIntegerTensorNamingItAndItsDtype) {
  const std::string bytes =
      SafetensorsBytes(R"({"embed.w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                       R"("embed.ids":{"dtype":"I64","shape":[1],"data_offsets":[4,12]}})",
                       std::string(12, '\0'));
  absl::StatusOr<SafetensorsFile> file = Parse(bytes);
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(file.status().message(),
              HasSubstr("tensor 'embed.ids' has dtype I64; only floating-point tensors (F32, F16, "
                        "BF16, F64) can be federated"));
  for (const char* dtype : {"BOOL", "U8", "I8"}) {
    file = Parse(SafetensorsBytes(
        absl::StrCat(R"({"m":{"dtype":")", dtype, R"(","shape":[4],"data_offsets":[0,4]}})"),
        std::string(4, '\0')));
    EXPECT_THAT(file.status().message(),
                HasSubstr(absl::StrCat("tensor 'm' has dtype ", dtype, "; only floating-point")));
  }
  file = Parse(SafetensorsBytes(R"({"q":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}})",
                                std::string(4, '\0')));
  EXPECT_THAT(file.status().message(), HasSubstr("tensor 'q' has dtype F8_E4M3, which is not "
                                                 "supported"));
}

TEST_F(SafetensorsFileTest, ReadNamesTheFileInEveryRefusal) {
  const std::string path = Path("broken.safetensors");
  ASSERT_TRUE(WriteFileAtomic(path, std::string("\x10\0\0\0\0\0\0\0{}", 10)).ok());
  absl::StatusOr<Model> model = ReadSafetensors(path);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(model.status().message()),
              StartsWith(absl::StrCat("safetensors file '", path,
                                      "': header size 16 runs past "
                                      "the end of the file (10 bytes)")));

  model = ReadSafetensors(Path("missing.safetensors"));
  EXPECT_EQ(model.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(model.status().message(), HasSubstr("missing.safetensors"));
}

TEST(SafetensorsTest, SerializeRefusesWhatNoReaderCouldRead) {
  EXPECT_THAT(SerializeSafetensors(Model(ModelSpec())).status().message(), HasSubstr("no tensors"));
  EXPECT_THAT(SerializeSafetensors(Model(ModelSpec({{"__metadata__", {1}}}))).status().message(),
              HasSubstr("reserved"));
  EXPECT_THAT(SerializeSafetensors(Model(ModelSpec({{"a", {1}}, {"a", {1}}}))).status().message(),
              HasSubstr("tensor 'a' twice"));
  absl::StatusOr<std::string> bytes =
      SerializeSafetensors(Model(ModelSpec({{"a", {1}}})), {{"key", "\xff\xfe"}});
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bytes.status().message(), HasSubstr("not UTF-8"));
}

}  // namespace
}  // namespace fl
