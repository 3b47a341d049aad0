#include "fl/common/chunking.h"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fl/common/crypto.h"
#include "fl/common/model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fl {
namespace {

using ::testing::HasSubstr;

std::string_view AsChars(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// A one-tensor model of normally distributed values.
Model RandomModel(int64_t num_floats, uint32_t seed) {
  Model model(ModelSpec({{"w", {num_floats}}}));
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& v : model.data()) v = dist(rng);
  return model;
}

// 2.5 MiB of float32: two full chunks and a half one.
constexpr int64_t kTwoAndAHalfMiBFloats = (5 * kMaxChunkBytes / 2) / 4;

TEST(ChunkingTest, MultiChunkPayloadReassembles) {
  Model model = RandomModel(kTwoAndAHalfMiBFloats, 1);
  ASSERT_EQ(model.NumBytes(), 5 * kMaxChunkBytes / 2);

  ChunkAssembler assembler(model.NumBytes());
  std::vector<int64_t> offsets;
  std::vector<int64_t> sizes;
  std::string reassembled;
  absl::Status s = ForEachChunk(model.bytes(), kMaxChunkBytes,
                                [&](int64_t offset, std::span<const std::byte> chunk) {
                                  offsets.push_back(offset);
                                  sizes.push_back(static_cast<int64_t>(chunk.size()));
                                  reassembled.append(AsChars(chunk));
                                  return assembler.Add(offset, AsChars(chunk));
                                });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, kMaxChunkBytes, 2 * kMaxChunkBytes}));
  EXPECT_EQ(sizes, (std::vector<int64_t>{kMaxChunkBytes, kMaxChunkBytes, kMaxChunkBytes / 2}));
  EXPECT_TRUE(assembler.complete());
  EXPECT_EQ(assembler.received(), model.NumBytes());
  EXPECT_EQ(reassembled, AsChars(model.bytes()));
  s = assembler.Finish(model.Sha256Hex());
  EXPECT_TRUE(s.ok()) << s;
}

TEST(ChunkingTest, SmallChunksReassemble) {
  Model model = RandomModel(1001, 2);  // 4004 bytes: 15 chunks of 256 and one of 164
  ChunkAssembler assembler(model.NumBytes());
  int calls = 0;
  absl::Status s =
      ForEachChunk(model.bytes(), 256, [&](int64_t offset, std::span<const std::byte> c) {
        ++calls;
        return assembler.Add(offset, AsChars(c));
      });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(calls, 16);
  EXPECT_TRUE(assembler.Finish(model.Sha256Hex()).ok());
}

TEST(ChunkingTest, ForEachChunkStopsAtFirstError) {
  Model model = RandomModel(1024, 3);
  int calls = 0;
  absl::Status s =
      ForEachChunk(model.bytes(), 1024, [&](int64_t offset, std::span<const std::byte>) {
        ++calls;
        if (offset == 1024) return absl::UnavailableError("transport gone");
        return absl::OkStatus();
      });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(calls, 2);
}

TEST(ChunkingTest, RefusesOutOfOrderOffset) {
  const std::string chunk(16, 'x');
  ChunkAssembler assembler(64);
  ASSERT_TRUE(assembler.Add(0, chunk).ok());
  // A gap, a repeat and a rewind are all out of order.
  for (int64_t offset : {32, 0, 8}) {
    absl::Status s = assembler.Add(offset, chunk);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << offset;
    EXPECT_THAT(std::string(s.message()), HasSubstr("out of order")) << offset;
    EXPECT_THAT(std::string(s.message()), HasSubstr("expected offset 16")) << offset;
  }
  EXPECT_EQ(assembler.received(), 16);  // refused chunks do not count
  EXPECT_TRUE(assembler.Add(16, chunk).ok());
}

TEST(ChunkingTest, RefusesEmptyChunk) {
  ChunkAssembler assembler(64);
  absl::Status s = assembler.Add(0, std::string_view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("empty chunk"));
}

TEST(ChunkingTest, RefusesOversizedChunk) {
  const std::string big(kMaxChunkBytes + 4, '\0');
  ChunkAssembler assembler(4 * kMaxChunkBytes);
  absl::Status s = assembler.Add(0, big);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("more than the limit"));
  EXPECT_THAT(std::string(s.message()), HasSubstr(std::to_string(kMaxChunkBytes + 4)));
  EXPECT_EQ(assembler.received(), 0);
  // Exactly the limit is fine.
  EXPECT_TRUE(assembler.Add(0, std::string_view(big).substr(0, kMaxChunkBytes)).ok());
}

TEST(ChunkingTest, RefusesChunkThatIsNotWholeFloats) {
  ChunkAssembler assembler(64);
  for (size_t n : {1u, 2u, 3u, 6u, 7u}) {
    absl::Status s = assembler.Add(0, std::string(n, 'a'));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << n;
    EXPECT_THAT(std::string(s.message()), HasSubstr("not a whole number of float32")) << n;
  }
  EXPECT_EQ(assembler.received(), 0);
}

TEST(ChunkingTest, RefusesChunkPastTheEnd) {
  ChunkAssembler assembler(24);
  ASSERT_TRUE(assembler.Add(0, std::string(16, 'a')).ok());
  absl::Status s = assembler.Add(16, std::string(12, 'b'));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("runs past the payload size of 24"));
  EXPECT_FALSE(assembler.complete());
  EXPECT_TRUE(assembler.Add(16, std::string(8, 'b')).ok());
  EXPECT_TRUE(assembler.complete());
  // Anything after a complete payload runs past the end.
  s = assembler.Add(24, std::string(4, 'c'));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("runs past"));
}

TEST(ChunkingTest, MissingLastChunkIsTruncated) {
  Model model = RandomModel(kTwoAndAHalfMiBFloats, 4);
  ChunkAssembler assembler(model.NumBytes());
  absl::Status s = ForEachChunk(model.bytes(), kMaxChunkBytes,
                                [&](int64_t offset, std::span<const std::byte> chunk) {
                                  if (offset == 2 * kMaxChunkBytes)
                                    return absl::OkStatus();  // lost
                                  return assembler.Add(offset, AsChars(chunk));
                                });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_FALSE(assembler.complete());
  s = assembler.Finish(model.Sha256Hex());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("truncated"));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("received " + std::to_string(2 * kMaxChunkBytes) + " of " +
                        std::to_string(model.NumBytes()) + " bytes"));
}

TEST(ChunkingTest, WrongShaIsMismatch) {
  Model model = RandomModel(kTwoAndAHalfMiBFloats, 5);
  Model other = model.Clone();
  other.data()[12345] += 1.0f;

  ChunkAssembler assembler(model.NumBytes());
  absl::Status s = ForEachChunk(model.bytes(), kMaxChunkBytes,
                                [&](int64_t offset, std::span<const std::byte> chunk) {
                                  return assembler.Add(offset, AsChars(chunk));
                                });
  ASSERT_TRUE(s.ok()) << s;
  s = assembler.Finish(other.Sha256Hex());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("mismatch"));
  EXPECT_THAT(std::string(s.message()), HasSubstr(model.Sha256Hex()));
}

TEST(ChunkingTest, CheckFiniteAcceptsFiniteValues) {
  const std::vector<float> values = {0.0f, -1.0f, std::numeric_limits<float>::max(),
                                     std::numeric_limits<float>::lowest(),
                                     std::numeric_limits<float>::denorm_min()};
  EXPECT_TRUE(CheckFinite(values, 0).ok());
  EXPECT_TRUE(CheckFinite({}, 17).ok());
}

TEST(ChunkingTest, CheckFiniteFindsNan) {
  std::vector<float> values(10, 1.0f);
  values[3] = std::numeric_limits<float>::quiet_NaN();
  values[7] = std::numeric_limits<float>::infinity();
  absl::Status s = CheckFinite(values, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("(nan) at parameter 3"));

  // The index counts from first_index, as for a chunk in the middle of the payload.
  s = CheckFinite(values, 262144);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("(nan) at parameter 262147"));
}

TEST(ChunkingTest, CheckFiniteFindsInfinity) {
  std::vector<float> values(10, 1.0f);
  values[9] = std::numeric_limits<float>::infinity();
  absl::Status s = CheckFinite(values, 1000);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("(inf) at parameter 1009"));

  values[9] = 1.0f;
  values[0] = -std::numeric_limits<float>::infinity();
  s = CheckFinite(values, 5);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("(inf) at parameter 5"));
}

// Long chunks are checked in blocks: the first bad value is found whether it sits in a block or
// in the tail after the last whole block, and values at the edge of finite pass.
TEST(ChunkingTest, CheckFiniteFindsTheFirstBadValueInALongChunk) {
  std::vector<float> values(1000, std::numeric_limits<float>::max());
  EXPECT_TRUE(CheckFinite(values, 0).ok());
  for (size_t bad : {size_t{0}, size_t{63}, size_t{64}, size_t{130}, size_t{959}, size_t{960},
                     size_t{999}}) {
    SCOPED_TRACE(bad);
    std::vector<float> v = values;
    v[bad] = -std::numeric_limits<float>::infinity();
    if (bad + 1 < v.size()) v[bad + 1] = std::numeric_limits<float>::quiet_NaN();
    absl::Status s = CheckFinite(v, 100);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()),
                HasSubstr(absl::StrCat("(inf) at parameter ", 100 + bad)));
  }
}

}  // namespace
}  // namespace fl
