// Every refusal of fl::ParseSafetensors, each with the message it must give, and the lenient
// inputs that the reference reader accepts too.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fl/common/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/safetensors_test_util.h"

namespace fl {
namespace {

using ::testing::HasSubstr;

// `"<name>":{"dtype":"<dtype>","shape":<shape>,"data_offsets":[begin,end]}`
std::string Entry(const std::string& name, uint64_t begin, uint64_t end,
                  const std::string& shape = "[1]", const std::string& dtype = "F32") {
  return absl::StrCat(R"(")", name, R"(":{"dtype":")", dtype, R"(","shape":)", shape,
                      R"(,"data_offsets":[)", begin, ",", end, "]}");
}

// "{<entries joined by commas>}": a header.
std::string Braced(const std::vector<std::string>& entries) {
  return absl::StrCat("{", absl::StrJoin(entries, ","), "}");
}

std::string U64(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }

struct Malformed {
  std::string test_name;
  std::string bytes;
  std::string message;  // a substring of the refusal's message
  SafetensorsReadOptions options = {};
};

class SafetensorsMalformedTest : public ::testing::TestWithParam<Malformed> {};

TEST_P(SafetensorsMalformedTest, IsRefusedSayingWhatIsWrong) {
  absl::StatusOr<SafetensorsFile> file = Parse(GetParam().bytes, GetParam().options);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << file.status();
  EXPECT_THAT(file.status().message(), HasSubstr(GetParam().message));
}

const std::string kZeros(64, '\0');

std::vector<Malformed> MalformedCases() {
  const std::string a4 = Entry("a", 0, 4);
  const std::string deep = std::string(70, '[') + "1" + std::string(70, ']');
  return {
      {"EmptyFile", "", "the file is 0 bytes, shorter than the 8-byte header size"},
      {"ShorterThanHeaderSize", "\x01\x02\x03", "the file is 3 bytes"},
      {"HeaderSizeOverLimit", U64(100'000'001) + "{}",
       "header size 100000001 is over the limit of 100000000 bytes"},
      {"HeaderSizeOfAllOnes", U64(~uint64_t{0}) + "{}", "is over the limit"},
      {"HeaderSizePastTheEnd", U64(64) + "{}", "header size 64 runs past the end of the file (10"},
      {"HeaderNotJson", SafetensorsBytes(R"({"a":)", ""), "header is not valid JSON"},
      {"HeaderNotUtf8", SafetensorsBytes("{\"\xff\":1}", ""), "header is not valid JSON"},
      {"GarbageAfterTheJson", SafetensorsBytes(Braced({a4}) + "x", kZeros.substr(0, 4)),
       "header is not valid JSON"},
      {"PaddedWithNulsNotSpaces",
       SafetensorsBytes(Braced({a4}) + std::string(3, '\0'), kZeros.substr(0, 4), false),
       "header is not valid JSON"},
      {"HeaderNotAnObject", SafetensorsBytes("[1,2]", ""), "header is not a JSON object"},
      {"EntryNotAnObject", SafetensorsBytes(R"({"a":[1]})", ""),
       "tensor 'a': its entry is not a JSON object"},
      {"MissingDtype", SafetensorsBytes(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", kZeros),
       "tensor 'a' has no \"dtype\""},
      {"MissingShape", SafetensorsBytes(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", kZeros),
       "tensor 'a' has no \"shape\""},
      {"MissingOffsets", SafetensorsBytes(R"({"a":{"dtype":"F32","shape":[1]}})", kZeros),
       "tensor 'a' has no \"data_offsets\""},
      {"DtypeNotAString",
       SafetensorsBytes(R"({"a":{"dtype":32,"shape":[1],"data_offsets":[0,4]}})", kZeros),
       "tensor 'a' has a \"dtype\" that is not a string"},
      {"ShapeNotAnArray", SafetensorsBytes(Braced({Entry("a", 0, 4, "1")}), kZeros),
       "tensor 'a' has a \"shape\" that is not an array of non-negative integers"},
      {"NegativeDimension", SafetensorsBytes(Braced({Entry("a", 0, 4, "[-1]")}), kZeros),
       "\"shape\" that is not an array of non-negative integers"},
      {"FractionalDimension", SafetensorsBytes(Braced({Entry("a", 0, 4, "[1.0]")}), kZeros),
       "\"shape\" that is not an array"},
      {"DimensionBeyondU64",
       SafetensorsBytes(Braced({Entry("a", 0, 4, "[18446744073709551616]")}), kZeros),
       "\"shape\" that is not an array"},
      {"OneOffset", SafetensorsBytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4]}})", ""),
       "tensor 'a' has \"data_offsets\" that are not two non-negative integers"},
      {"NegativeOffset",
       SafetensorsBytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", ""),
       "\"data_offsets\" that are not two non-negative integers"},
      {"UnknownDtype", SafetensorsBytes(Braced({Entry("a", 0, 4, "[1]", "F128")}), kZeros),
       "tensor 'a' has unknown dtype 'F128'"},
      {"ZeroSizedDimension", SafetensorsBytes(Braced({Entry("a", 0, 0, "[2, 0]")}), ""),
       "tensor 'a' has a zero-sized dimension (shape [2, 0])"},
      {"TensorAboveMaxModelFloats",
       SafetensorsBytes(Braced({Entry("a", 0, 4, "[1048576,1048577]")}), kZeros),
       "tensor 'a' has more than 274877906944 elements"},
      {"ShapeProductOverflowsInt64",
       SafetensorsBytes(Braced({Entry("a", 0, 4, "[4294967296,4294967296,4294967296]")}), kZeros),
       "tensor 'a' has more than 274877906944 elements"},
      {"DimensionOfAllOnes",
       SafetensorsBytes(Braced({Entry("a", 0, 4, "[1,18446744073709551615]")}), kZeros),
       "tensor 'a' has more than"},
      {"BeginPastEnd", SafetensorsBytes(Braced({Entry("a", 8, 4)}), kZeros.substr(0, 8)),
       "tensor 'a' has data_offsets [8, 4] whose begin is past their end"},
      {"OffsetsPastTheEnd", SafetensorsBytes(Braced({Entry("a", 0, 16)}), kZeros.substr(0, 8)),
       "tensor 'a' has data_offsets [0, 16] past the end of the data (8 bytes)"},
      {"EndOfAllOnes", SafetensorsBytes(Braced({Entry("a", 0, ~uint64_t{0})}), kZeros),
       "past the end of the data"},
      {"SizeDoesNotMatchShape",
       SafetensorsBytes(Braced({Entry("a", 0, 12, "[2]")}), kZeros.substr(0, 12)),
       "tensor 'a' has 12 bytes of data but its shape [2] of F32 needs 8 (size does not match)"},
      {"SizeOfAFractionOfAByte",
       SafetensorsBytes(Braced({Entry("a", 0, 1, "[3]", "F4")}), kZeros.substr(0, 1)),
       "needs 1 and a fraction"},
      {"OverlappingTensors",
       SafetensorsBytes(Braced({Entry("a", 0, 8, "[2]"), Entry("b", 4, 12, "[2]")}),
                        kZeros.substr(0, 12)),
       "tensors 'a' and 'b' overlap (data_offsets [0, 8] and [4, 12])"},
      {"TensorsAtTheSameOffsets",
       SafetensorsBytes(Braced({Entry("b", 0, 4), Entry("a", 0, 4)}), kZeros.substr(0, 4)),
       "overlap"},
      {"GapBetweenTensors",
       SafetensorsBytes(Braced({Entry("a", 0, 4), Entry("b", 8, 12)}), kZeros.substr(0, 12)),
       "gap in the data: bytes [4, 8) belong to no tensor (before 'b')"},
      {"GapBeforeTheFirstTensor", SafetensorsBytes(Braced({Entry("a", 4, 8)}), kZeros.substr(0, 8)),
       "gap in the data: bytes [0, 4)"},
      {"BytesAfterTheLastTensor", SafetensorsBytes(Braced({a4}), kZeros.substr(0, 8)),
       "gap in the data: bytes [4, 8) after the last tensor"},
      {"DuplicateTensorName", SafetensorsBytes(Braced({a4, Entry("a", 4, 8)}), kZeros.substr(0, 8)),
       "header has a duplicate key 'a'"},
      {"DuplicateKeyInAnEntry",
       SafetensorsBytes(R"({"a":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})",
                        kZeros.substr(0, 4)),
       "header has a duplicate key 'dtype'"},
      {"TooManyTensors",
       SafetensorsBytes(Braced({a4, Entry("b", 4, 8), Entry("c", 8, 12)}), kZeros.substr(0, 12)),
       "too many tensors: the header lists more than 2",
       {.max_tensors = 2}},
      {"ModelAboveMaxFloats",
       SafetensorsBytes(Braced({Entry("a", 0, 8, "[2]"), Entry("b", 8, 16, "[2]")}),
                        kZeros.substr(0, 16)),
       "model has more than 3 parameters (the limit; reached at tensor 'b')",
       {.max_floats = 3}},
      {"NoTensors", SafetensorsBytes("{}", ""), "the file holds no tensors"},
      {"OnlyMetadata", SafetensorsBytes(R"({"__metadata__":{"a":"b"}})", ""), "holds no tensors"},
      {"EmptyTensorName", SafetensorsBytes(Braced({Entry("", 0, 4)}), kZeros.substr(0, 4)),
       "tensor without a name"},
      {"MetadataNotAnObject",
       SafetensorsBytes(R"({"__metadata__":["a"],)" + a4 + "}", kZeros.substr(0, 4)),
       "\"__metadata__\" is not a JSON object of strings"},
      {"MetadataValueNotAString",
       SafetensorsBytes(R"({"__metadata__":{"epoch":3},)" + a4 + "}", kZeros.substr(0, 4)),
       "\"__metadata__\" value of key 'epoch' is not a string"},
      {"NestedTooDeeply",
       SafetensorsBytes(R"({"a":{"x":)" + deep +
                            R"(,"dtype":"F32","shape":[1],)"
                            R"("data_offsets":[0,4]}})",
                        kZeros.substr(0, 4)),
       "header nests JSON deeper than 64 levels"},
  };
}

INSTANTIATE_TEST_SUITE_P(Refusals, SafetensorsMalformedTest, ::testing::ValuesIn(MalformedCases()),
                         [](const ::testing::TestParamInfo<Malformed>& info) {
                           return info.param.test_name;
                         });

TEST(SafetensorsLenientTest, AcceptsWhatTheReferenceReaderAccepts) {
  const std::string data = std::string("\0\0\x80?", 4);  // 1.0f
  const std::string a4 = Entry("a", 0, 4);
  for (const std::string& header : std::vector<std::string>{
           Braced({a4}),                     // unpadded
           Braced({a4}) + "    \n\t",        // trailing whitespace
           absl::StrCat(" ", Braced({a4})),  // leading whitespace
           R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":{"k":[1]}}})",
           R"({"__metadata__":{},)" + a4 + "}",  // empty metadata
       }) {
    SCOPED_TRACE(header);
    absl::StatusOr<SafetensorsFile> file = Parse(SafetensorsBytes(header, data, false));
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_EQ(file->model.spec().tensors()[0], (TensorSpec{"a", {1}}));
    EXPECT_EQ(file->model.data()[0], 1.0f);
  }
}

TEST(SafetensorsLenientTest, OrdersTensorsByOffsetsNotByKeys) {
  const std::string header = Braced({Entry("z", 0, 4), Entry("m", 8, 12), Entry("a", 4, 8)});
  absl::StatusOr<SafetensorsFile> file = Parse(SafetensorsBytes(header, std::string(12, '\0')));
  ASSERT_TRUE(file.ok()) << file.status();
  const auto& tensors = file->model.spec().tensors();
  ASSERT_EQ(tensors.size(), 3u);
  EXPECT_EQ(tensors[0].name, "z");
  EXPECT_EQ(tensors[1].name, "a");
  EXPECT_EQ(tensors[2].name, "m");
}

}  // namespace
}  // namespace fl
