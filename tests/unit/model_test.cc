#include "fl/common/model.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "fl/common/crypto.h"
#include "fl/common/page_buffer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/proc_status.h"

namespace fl {
namespace {

using fl::testing::ProcStatusMiB;
using ::testing::HasSubstr;

// w: 2x3 = 6 floats, b: 3 floats, s: a scalar (1 float).
ModelSpec SmallSpec() { return ModelSpec({{"w", {2, 3}}, {"b", {3}}, {"s", {}}}); }

// --- ModelSpec ---

TEST(ModelSpecTest, ValidSpecPasses) { EXPECT_TRUE(SmallSpec().Validate().ok()); }

// A borrowed model reads the memory it was given, copies and moves like any other, and releases
// its keeper (not the memory) when the last owner goes.
TEST(ModelTest, ABorrowedModelViewsTheBufferAndReleasesItsKeeperOnce) {
  const ModelSpec spec = SmallSpec();
  auto buffer = std::make_shared<std::vector<float>>(static_cast<size_t>(spec.NumFloats()));
  for (size_t i = 0; i < buffer->size(); ++i) (*buffer)[i] = static_cast<float>(i);
  std::weak_ptr<std::vector<float>> watch = buffer;
  {
    Model borrowed = Model::Borrow(spec, buffer->data(), buffer);
    buffer.reset();  // the model's keeper holds it now
    EXPECT_FALSE(watch.expired());
    EXPECT_EQ(borrowed.data().data(), watch.lock()->data()) << "no copy";
    EXPECT_EQ(borrowed.tensor(1)[0], static_cast<float>(spec.OffsetOf(1)));
    Model clone = borrowed.Clone();
    EXPECT_NE(clone.data().data(), borrowed.data().data());
    EXPECT_EQ(clone.Sha256Hex(), borrowed.Sha256Hex());
    Model moved = std::move(borrowed);
    EXPECT_FALSE(watch.expired());
    moved = Model(spec);  // the borrowed buffer's keeper goes with the assignment
    EXPECT_TRUE(watch.expired());
  }
}

TEST(ModelSpecTest, ValidateRefusesEmptySpec) {
  absl::Status s = ModelSpec().Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("no tensors"));
}

TEST(ModelSpecTest, ValidateRefusesUnnamedTensor) {
  absl::Status s = ModelSpec({{"w", {2}}, {"", {3}}}).Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("without a name"));
}

TEST(ModelSpecTest, ValidateRefusesDuplicateNamesNamingTheTensor) {
  absl::Status s = ModelSpec({{"dense_kernel", {2}}, {"b", {1}}, {"dense_kernel", {3}}}).Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("'dense_kernel'"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("twice"));
}

TEST(ModelSpecTest, ValidateRefusesZeroDimensionNamingTheTensor) {
  absl::Status s = ModelSpec({{"w", {2, 3}}, {"bias", {4, 0}}}).Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("'bias'"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("non-positive dimension 0"));
}

TEST(ModelSpecTest, ValidateRefusesNegativeDimension) {
  absl::Status s = ModelSpec({{"w", {-1}}}).Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("'w'"));
}

TEST(ModelSpecTest, ValidateRefusesSpecsTooLargeToAllocate) {
  // 2^32 x 2^32 elements would overflow int64 byte counts; a peer may send such a spec.
  absl::StatusOr<ModelSpec> huge =
      ModelSpec::FromJson(R"([{"name": "w", "shape": [4294967296, 4294967296]}])");
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(huge.status().message().find("tensor 'w' has more than"), absl::string_view::npos)
      << huge.status();
  ModelSpec many({{"a", {1 << 20, 1 << 17}}, {"b", {1 << 20, 1 << 17}}, {"c", {1}}});
  EXPECT_NE(many.Validate().message().find("more than 274877906944 parameters"),
            absl::string_view::npos)
      << many.Validate();
}

TEST(ModelSpecTest, NumFloatsAndOffsets) {
  ModelSpec spec = SmallSpec();
  EXPECT_EQ(spec.tensors()[2].NumElements(), 1);  // scalar
  EXPECT_EQ(spec.NumFloats(), 10);
  EXPECT_EQ(spec.NumBytes(), 40);
  EXPECT_EQ(spec.OffsetOf(0), 0);
  EXPECT_EQ(spec.OffsetOf(1), 6);
  EXPECT_EQ(spec.OffsetOf(2), 9);
  EXPECT_EQ(spec.OffsetOf(3), 10);  // one past the last tensor: the payload size
}

TEST(ModelSpecTest, JsonRoundTrip) {
  ModelSpec spec({{"conv/kernel", {3, 3, 1, 8}}, {"conv/bias", {8}}, {"scale", {}}});
  std::string json = spec.ToJson();
  absl::StatusOr<ModelSpec> parsed = ModelSpec::FromJson(json);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, spec);
}

TEST(ModelSpecTest, FromJsonAcceptsDocumentedForm) {
  absl::StatusOr<ModelSpec> parsed =
      ModelSpec::FromJson(R"([{"name": "w", "shape": [10, 784]}, {"name": "b", "shape": [10]}])");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, ModelSpec({{"w", {10, 784}}, {"b", {10}}}));
  EXPECT_EQ(parsed->NumFloats(), 7850);
}

TEST(ModelSpecTest, FromJsonRefusesNonArray) {
  for (const char* text : {R"({"name": "w", "shape": [1]})", "not json at all", "", "42"}) {
    absl::StatusOr<ModelSpec> parsed = ModelSpec::FromJson(text);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("not a JSON array")) << text;
  }
}

TEST(ModelSpecTest, FromJsonRefusesMissingShape) {
  absl::StatusOr<ModelSpec> parsed = ModelSpec::FromJson(R"([{"name": "w"}])");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("'shape'"));
}

TEST(ModelSpecTest, FromJsonRefusesMissingNameAndNonObjectEntries) {
  for (const char* text : {R"([{"shape": [1]}])", R"([{"name": 3, "shape": [1]}])",
                           R"([{"name": "w", "shape": 4}])", R"([7])"}) {
    absl::StatusOr<ModelSpec> parsed = ModelSpec::FromJson(text);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
}

TEST(ModelSpecTest, FromJsonRefusesNonIntegerDimension) {
  for (const char* text :
       {R"([{"name": "w", "shape": [2, 1.5]}])", R"([{"name": "w", "shape": ["2"]}])"}) {
    absl::StatusOr<ModelSpec> parsed = ModelSpec::FromJson(text);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("'w'")) << text;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("non-integer")) << text;
  }
}

TEST(ModelSpecTest, FromJsonRefusesInvalidSpec) {
  absl::StatusOr<ModelSpec> parsed = ModelSpec::FromJson(R"([{"name": "w", "shape": [0]}])");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("non-positive"));
  EXPECT_EQ(ModelSpec::FromJson("[]").status().code(), absl::StatusCode::kInvalidArgument);
}

// --- Model ---

TEST(ModelTest, ZeroInitialisedAndAligned) {
  // An odd size, so that the buffer size is not already a multiple of the alignment.
  Model model(ModelSpec({{"w", {7, 13}}, {"b", {5}}}));
  EXPECT_EQ(model.data().size(), 96u);
  EXPECT_EQ(model.NumBytes(), 96 * 4);
  EXPECT_EQ(model.bytes().size(), 96u * 4);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(model.data().data()) % 64, 0u);
  for (float v : model.data()) ASSERT_EQ(v, 0.0f);
}

TEST(ModelTest, TensorViewsAtTheRightOffsets) {
  Model model(SmallSpec());
  std::span<float> data = model.data();
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);

  std::span<float> w = model.tensor(0);
  std::span<float> b = model.tensor(1);
  std::span<float> s = model.tensor(2);
  EXPECT_EQ(w.data(), data.data());
  EXPECT_EQ(w.size(), 6u);
  EXPECT_EQ(b.data(), data.data() + 6);
  EXPECT_EQ(b.size(), 3u);
  EXPECT_EQ(s.data(), data.data() + 9);
  EXPECT_EQ(s.size(), 1u);
  EXPECT_EQ(b[0], 6.0f);
  EXPECT_EQ(s[0], 9.0f);

  const Model& const_model = model;
  EXPECT_EQ(const_model.tensor(1).data(), b.data());
  EXPECT_EQ(const_model.tensor(1).size(), 3u);

  absl::StatusOr<std::span<float>> by_name = model.tensor("b");
  ASSERT_TRUE(by_name.ok()) << by_name.status();
  EXPECT_EQ(by_name->data(), b.data());
  EXPECT_EQ(by_name->size(), 3u);

  // Writes through a view land in the payload.
  (*by_name)[2] = -1.5f;
  EXPECT_EQ(model.data()[8], -1.5f);
}

TEST(ModelTest, MissingTensorIsNotFound) {
  Model model(SmallSpec());
  absl::StatusOr<std::span<float>> missing = model.tensor("missing");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("'missing'"));
}

TEST(ModelTest, CloneIsADeepCopy) {
  Model model(SmallSpec());
  for (size_t i = 0; i < model.data().size(); ++i) model.data()[i] = 0.25f * static_cast<float>(i);

  Model copy = model.Clone();
  EXPECT_EQ(copy.spec(), model.spec());
  EXPECT_NE(copy.data().data(), model.data().data());
  ASSERT_EQ(copy.data().size(), model.data().size());
  for (size_t i = 0; i < model.data().size(); ++i) EXPECT_EQ(copy.data()[i], model.data()[i]);
  EXPECT_EQ(copy.Sha256Hex(), model.Sha256Hex());

  copy.data()[3] = 100.0f;
  EXPECT_EQ(model.data()[3], 0.75f);
  model.data()[4] = -7.0f;
  EXPECT_EQ(copy.data()[4], 1.0f);
}

TEST(ModelTest, MoveKeepsTheBuffer) {
  Model model(SmallSpec());
  model.data()[0] = 3.0f;
  const float* buffer = model.data().data();
  Model moved = std::move(model);
  EXPECT_EQ(moved.data().data(), buffer);
  EXPECT_EQ(moved.data()[0], 3.0f);
}

TEST(ModelTest, Sha256IsThePayloadDigestAndTracksValues) {
  Model model(SmallSpec());
  for (size_t i = 0; i < model.data().size(); ++i) model.data()[i] = 1.0f + static_cast<float>(i);
  const std::string before = model.Sha256Hex();
  EXPECT_EQ(before, fl::Sha256Hex(model.bytes()));
  EXPECT_EQ(before.size(), 64u);

  model.data()[7] = std::nextafter(model.data()[7], 100.0f);  // the smallest possible change
  const std::string after = model.Sha256Hex();
  EXPECT_NE(after, before);
  EXPECT_EQ(after, fl::Sha256Hex(model.bytes()));
}

TEST(ModelTest, ZeroModelsOfDifferentSizeHashDifferently) {
  Model a(ModelSpec({{"w", {4}}}));
  Model b(ModelSpec({{"w", {5}}}));
  EXPECT_NE(a.Sha256Hex(), b.Sha256Hex());
}

TEST(PageBufferTest, PagesCostMemoryOnlyOnceWrittenAndReleasedOnesReadZero) {
  constexpr size_t kBytes = size_t{64} << 20;
  const double before = ProcStatusMiB("RssAnon");
  PageBuffer buf(kBytes);
  ASSERT_NE(buf.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buf.data()) % 4096, 0u);
  EXPECT_LT(ProcStatusMiB("RssAnon") - before, 8) << "an unwritten buffer is not resident";
  std::memset(buf.data(), 0x5a, kBytes);
  EXPECT_GT(ProcStatusMiB("RssAnon") - before, 56);

  // Release the second half, from an offset inside a page: that page keeps its bytes.
  buf.Release(kBytes / 2 - 100, kBytes);
  EXPECT_LT(ProcStatusMiB("RssAnon") - before, 40);
  const auto* bytes = static_cast<const unsigned char*>(buf.data());
  EXPECT_EQ(bytes[kBytes / 2 - 1], 0x5a) << "a page partly outside the range is kept";
  EXPECT_EQ(bytes[kBytes / 2 + 4096], 0) << "released pages read as zero";
  EXPECT_EQ(bytes[kBytes - 1], 0);

  PageBuffer moved(std::move(buf));
  EXPECT_EQ(buf.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(moved.size(), kBytes);
  EXPECT_EQ(static_cast<const unsigned char*>(moved.data())[0], 0x5a);
}

TEST(PageBufferTest, PopulateMakesEveryPageResidentAndKeepsTheBytes) {
  constexpr size_t kBytes = size_t{32} << 20;
  PageBuffer buf(kBytes);
  auto* bytes = static_cast<unsigned char*>(buf.data());
  bytes[0] = 7;
  bytes[kBytes - 1] = 9;
  const double before = ProcStatusMiB("RssAnon");
  buf.Populate(0, kBytes / 2);
  const double half = ProcStatusMiB("RssAnon") - before;
  EXPECT_GT(half, 12);
  EXPECT_LT(half, 20);
  buf.Populate(kBytes / 2, kBytes);  // a length past the end stops at the end
  EXPECT_GT(ProcStatusMiB("RssAnon") - before, 28);
  EXPECT_EQ(bytes[0], 7);
  EXPECT_EQ(bytes[kBytes - 1], 9);
  EXPECT_EQ(bytes[kBytes / 2], 0);
}

TEST(ModelTest, ALargeModelIsZeroAndResidentOnlyAsItIsWritten) {
  const ModelSpec spec({{"w", {16 << 20}}});  // 64 MiB
  const double before = ProcStatusMiB("RssAnon");
  Model m(spec);
  EXPECT_LT(ProcStatusMiB("RssAnon") - before, 8);
  for (float v : m.data().subspan(0, 1000)) ASSERT_EQ(v, 0.0f);
  EXPECT_EQ(m.data().back(), 0.0f);
  std::span<float> w = m.data();
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 7);
  EXPECT_GT(ProcStatusMiB("RssAnon") - before, 56);
  Model copy = m.Clone();
  EXPECT_EQ(copy.Sha256Hex(), m.Sha256Hex());
  { Model gone = std::move(copy); }
  // Freed models go back to the system at once (no allocator keeps them).
  EXPECT_LT(ProcStatusMiB("RssAnon") - before, 72);
}

}  // namespace
}  // namespace fl
