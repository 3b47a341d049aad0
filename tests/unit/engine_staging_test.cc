// The engine over a staging that fails (fl/server/staging.h): an upload whose staging cannot be
// made or written is refused with the staging's own message and the round goes on with the
// others; one that cannot be read back half-way through folding spoils the streaming aggregate,
// so that attempt fails, and the retry commits.
#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "fl/server/staging.h"
#include "gmock/gmock.h"
#include "tests/unit/engine_test_fixture.h"

namespace fl::server {
namespace {

using ::testing::HasSubstr;

// Files, as the engine's default, but the Nth upload staged (0, 1, 2, ... in the order uploads
// begin) fails as `fault` says: at Create, at its `call`-th Write or Read.
struct Fault {
  int upload = -1;
  enum class Op { kCreate, kWrite, kRead } op = Op::kCreate;
  int call = 0;
};

class FaultyStaging final : public StagingSpace {
 public:
  FaultyStaging(std::shared_ptr<StagingSpace> files, Fault fault)
      : files_(std::move(files)), fault_(fault) {}

  absl::StatusOr<std::unique_ptr<StagedUpload>> Create(const std::string& name) override {
    const int index = created_++;
    if (index == fault_.upload && fault_.op == Fault::Op::kCreate) {
      return absl::ResourceExhaustedError("no space left to stage " + name);
    }
    absl::StatusOr<std::unique_ptr<StagedUpload>> file = files_->Create(name);
    if (!file.ok()) return file;
    return std::make_unique<FaultyUpload>(*std::move(file),
                                          index == fault_.upload ? fault_ : Fault{});
  }

 private:
  class FaultyUpload final : public StagedUpload {
   public:
    FaultyUpload(std::unique_ptr<StagedUpload> file, Fault fault)
        : file_(std::move(file)), fault_(fault) {}
    absl::Status Write(int64_t offset, std::span<const std::byte> bytes) override {
      if (fault_.op == Fault::Op::kWrite && writes_++ == fault_.call) {
        return absl::InternalError("cannot stage the update: disk full (injected)");
      }
      return file_->Write(offset, bytes);
    }
    absl::Status Read(int64_t offset, std::span<std::byte> out) const override {
      if (fault_.op == Fault::Op::kRead && reads_++ == fault_.call) {
        return absl::InternalError("cannot read back the staged update: I/O error (injected)");
      }
      return file_->Read(offset, out);
    }

   private:
    std::unique_ptr<StagedUpload> file_;
    Fault fault_;
    int writes_ = 0;
    mutable int reads_ = 0;
  };

  std::shared_ptr<StagingSpace> files_;
  Fault fault_;
  std::atomic<int> created_{0};
};

class EngineStagingTest : public EngineTest {
 protected:
  void StartWith(Fault fault) {
    // The faults at a second write or read need an update of two chunks.
    ASSERT_GT(Model(TestSpec()).NumBytes(), kMaxChunkBytes);
    hooks_.staging = std::make_shared<FaultyStaging>(MakeFileStaging(options_.spill_dir), fault);
    hooks_.on_round_end = [this](const RoundSummary& s) { ends_.push_back(s); };
    options_.num_rounds = 1;
    StartEngine();
    JoinAll();
  }
  // Each client submits, in order; returns each one's outcome.
  std::vector<absl::Status> SubmitAll() {
    std::vector<absl::Status> out;
    for (size_t i = 0; i < clients_.size(); ++i) {
      const Task t = engine_->Poll(clients_[i]);
      EXPECT_EQ(t.kind, Task::Kind::kFit) << clients_[i];
      out.push_back(Submit(clients_[i], t, RandomModel(i), 1));
    }
    return out;
  }
  std::vector<RoundSummary> ends_;
};

TEST_F(EngineStagingTest, AnUploadThatCannotBeStagedIsRefusedAndTheRoundGoesOn) {
  StartWith({.upload = 1, .op = Fault::Op::kCreate});
  std::vector<absl::Status> outcomes = SubmitAll();
  EXPECT_TRUE(outcomes[0].ok()) << outcomes[0];
  EXPECT_EQ(outcomes[1].code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(outcomes[1].message(), HasSubstr("no space left to stage"));
  EXPECT_TRUE(outcomes[2].ok()) << outcomes[2];
  ASSERT_EQ(ends_.size(), 1u);
  EXPECT_TRUE(ends_[0].committed) << ends_[0].reason;
  EXPECT_EQ(ends_[0].num_accepted, 2);
  absl::StatusOr<std::vector<ParticipationRecord>> parts =
      store_->Participations(engine_->run_id(), 1);
  ASSERT_TRUE(parts.ok());
  int refused = 0;
  for (const ParticipationRecord& p : *parts) {
    if (p.status != ParticipationStatus::kRefused) continue;
    ++refused;
    EXPECT_THAT(p.reason, HasSubstr("no space left to stage"));
  }
  EXPECT_EQ(refused, 1);
}

TEST_F(EngineStagingTest, AWriteThatFailsRefusesTheUpdateWithTheStagingsMessage) {
  StartWith({.upload = 2, .op = Fault::Op::kWrite, .call = 1});  // its second chunk
  std::vector<absl::Status> outcomes = SubmitAll();
  EXPECT_TRUE(outcomes[0].ok());
  EXPECT_TRUE(outcomes[1].ok());
  EXPECT_THAT(outcomes[2].message(), HasSubstr("disk full (injected)"));
  ASSERT_EQ(ends_.size(), 1u);
  EXPECT_TRUE(ends_[0].committed) << ends_[0].reason;
  EXPECT_EQ(ends_[0].num_accepted, 2);
}

TEST_F(EngineStagingTest, AReadThatFailsHalfWayFailsTheAttemptAndTheRetryCommits) {
  // The first upload's second piece cannot be read back: its first is in FedAvg's sum already.
  StartWith({.upload = 0, .op = Fault::Op::kRead, .call = 1});
  std::vector<absl::Status> outcomes = SubmitAll();
  EXPECT_THAT(outcomes[0].message(), HasSubstr("I/O error (injected)"));
  ASSERT_EQ(ends_.size(), 1u);
  EXPECT_FALSE(ends_[0].committed);
  EXPECT_THAT(ends_[0].reason, HasSubstr("could not be folded out of the aggregate"));
  EXPECT_EQ(engine_->committed_round(), 0);
  clock_.Advance(absl::Minutes(2));
  for (const std::string& id : clients_) engine_->Poll(id);
  SubmitAll();  // the retry's uploads are 3, 4, 5: no fault
  ASSERT_EQ(ends_.size(), 2u);
  EXPECT_TRUE(ends_[1].committed) << ends_[1].reason;
  EXPECT_EQ(engine_->committed_round(), 1);
}

}  // namespace
}  // namespace fl::server
