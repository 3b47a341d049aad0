// Virtual sites over MPI ranks (simulation/internal/mpi_sites.h). Rank 0 sends commands, each an
// array of int64: {op, args...}; the owner answers with a byte buffer for those that need one.
// MPI keeps the order of messages between two ranks, so a command never overtakes an earlier one.
#include "simulation/internal/mpi_sites.h"

// The C API only: OpenMPI and MPICH would otherwise bring in their deprecated C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace fl::simulation::internal {
namespace {

constexpr int kCommandTag = 1;
constexpr int kReplyTag = 2;

enum Op : int64_t { kJoin = 1, kRun = 2, kDeliver = 3, kDiscard = 4, kRelease = 5, kStop = 6 };

// A byte buffer of int64s and strings, written and read in the same order.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(std::string bytes) : bytes_(std::move(bytes)) {}
  void PutInt(int64_t v) { bytes_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void PutString(const std::string& s) {
    PutInt(static_cast<int64_t>(s.size()));
    bytes_ += s;
  }
  int64_t Int() {
    int64_t v = 0;
    if (at_ + sizeof v <= bytes_.size()) std::memcpy(&v, bytes_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  std::string String() {
    const auto n = static_cast<size_t>(Int());
    std::string s = at_ + n <= bytes_.size() ? bytes_.substr(at_, n) : std::string();
    at_ += n;
    return s;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
  size_t at_ = 0;
};

void Send(const Buffer& b, int to, int tag) {
  MPI_Send(b.bytes().data(), static_cast<int>(b.bytes().size()), MPI_BYTE, to, tag, MPI_COMM_WORLD);
}

Buffer Receive(int from, int tag, int* source = nullptr) {
  MPI_Status status;
  MPI_Probe(from, tag, MPI_COMM_WORLD, &status);
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  std::string bytes(static_cast<size_t>(count), '\0');
  MPI_Recv(bytes.data(), count, MPI_BYTE, status.MPI_SOURCE, tag, MPI_COMM_WORLD,
           MPI_STATUS_IGNORE);
  if (source != nullptr) *source = status.MPI_SOURCE;
  return Buffer(std::move(bytes));
}

absl::Status StatusFrom(Buffer& b) {
  const auto code = static_cast<absl::StatusCode>(b.Int());
  std::string message = b.String();
  return code == absl::StatusCode::kOk ? absl::OkStatus() : absl::Status(code, message);
}

void PutStatus(Buffer& b, const absl::Status& s) {
  b.PutInt(static_cast<int64_t>(s.code()));
  b.PutString(std::string(s.message()));
}

class MpiSiteExecutor final : public SiteExecutor {
 public:
  explicit MpiSiteExecutor(const MpiJob& job) : job_(job) {}
  ~MpiSiteExecutor() override {
    Buffer stop;
    stop.PutInt(kStop);
    for (int r = 1; r < job_.size; ++r) Send(stop, r, kCommandTag);
  }

  absl::Status Join(const std::vector<int32_t>& sites, const client::JoinRequestInfo&,
                    const std::function<void(int32_t joined)>& on_joined) override {
    std::map<int, std::vector<int32_t>> by_rank = ByRank(sites);
    for (const auto& [rank, mine] : by_rank) {
      Buffer b;
      b.PutInt(kJoin);
      b.PutInt(static_cast<int64_t>(mine.size()));
      for (int32_t site : mine) b.PutInt(site);
      Send(b, rank, kCommandTag);
    }
    absl::Status first;
    int32_t joined = 0;
    for (const auto& [rank, mine] : by_rank) {
      Buffer reply = Receive(rank, kReplyTag);
      absl::Status s = StatusFrom(reply);
      if (!s.ok() && first.ok()) {
        first = absl::Status(s.code(), absl::StrCat("rank ", rank, ": ", s.message()));
      }
      if (!s.ok()) continue;
      joined += static_cast<int32_t>(mine.size());
      if (on_joined && first.ok()) on_joined(joined);
    }
    return first;
  }

  void Run(std::vector<SiteWork>& wave) override {
    std::map<int, std::vector<SiteWork*>> by_rank;
    for (SiteWork& w : wave) by_rank[OwnerOfSite(w.site, job_.size)].push_back(&w);
    for (const auto& [rank, mine] : by_rank) {
      Buffer b;
      b.PutInt(kRun);
      b.PutInt(static_cast<int64_t>(mine.size()));
      for (const SiteWork* w : mine) b.PutInt(w->site);
      Send(b, rank, kCommandTag);
    }
    for (const auto& [rank, mine] : by_rank) {  // the ranks work at once
      Buffer reply = Receive(rank, kReplyTag);
      for (SiteWork* w : mine) {
        w->num_examples = reply.Int();
        w->bytes_up = reply.Int();
        absl::Status s = StatusFrom(reply);
        if (!s.ok())
          w->error = absl::Status(s.code(), absl::StrCat("rank ", rank, ": ", s.message()));
      }
    }
  }

  int Deliver(int32_t site) override {
    const int rank = OwnerOfSite(site, job_.size);
    Command(kDeliver, site, 0, rank);
    return static_cast<int>(Receive(rank, kReplyTag).Int());
  }

  void Discard(int32_t site) override { Command(kDiscard, site, 0, OwnerOfSite(site, job_.size)); }

  void Release(int32_t site, bool keep_client) override {
    Command(kRelease, site, keep_client ? 1 : 0, OwnerOfSite(site, job_.size));
  }

 private:
  std::map<int, std::vector<int32_t>> ByRank(const std::vector<int32_t>& sites) const {
    std::map<int, std::vector<int32_t>> by_rank;
    for (int32_t site : sites) by_rank[OwnerOfSite(site, job_.size)].push_back(site);
    return by_rank;
  }
  void Command(Op op, int64_t a, int64_t b, int rank) {
    Buffer m;
    m.PutInt(op);
    m.PutInt(a);
    m.PutInt(b);
    Send(m, rank, kCommandTag);
  }

  const MpiJob job_;
};

}  // namespace

absl::StatusOr<MpiJob> JoinMpiJob() {
  static std::once_flag once;
  static MpiJob job;
  static absl::Status status;
  std::call_once(once, [] {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
      status = absl::UnavailableError(
          "MPI_Init_thread failed: is this process started by "
          "mpirun or srun?");
      return;
    }
    std::atexit([] { MPI_Finalize(); });
    MPI_Comm_rank(MPI_COMM_WORLD, &job.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &job.size);
  });
  if (!status.ok()) return status;
  return job;
}

void AbortMpiJob(const MpiJob& job, const absl::Status& status) {
  std::fprintf(stderr, "error: rank %d: %s\n", job.rank, status.ToString().c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();  // MPI_Abort does not return
}

std::atomic<bool> g_setup_broadcast{false};

bool SetupWasBroadcast() { return g_setup_broadcast.load(); }

absl::Status BroadcastSetup(const MpiJob& job, MpiSetup& setup) {
  Buffer b;
  if (job.rank == 0) {
    b.PutString(setup.work_dir);
    b.PutString(setup.server_address);
    b.PutInt(setup.tls ? 1 : 0);
    b.PutInt(setup.run_id);
    b.PutString(setup.error);
    g_setup_broadcast = true;
  }
  int64_t size = static_cast<int64_t>(b.bytes().size());
  MPI_Bcast(&size, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  std::string bytes = b.bytes();
  bytes.resize(static_cast<size_t>(size));
  MPI_Bcast(bytes.data(), static_cast<int>(size), MPI_BYTE, 0, MPI_COMM_WORLD);
  if (job.rank != 0) {
    Buffer in(std::move(bytes));
    setup.work_dir = in.String();
    setup.server_address = in.String();
    setup.tls = in.Int() != 0;
    setup.run_id = in.Int();
    setup.error = in.String();
  }
  return absl::OkStatus();
}

int OwnerOfSite(int32_t site, int size) { return size <= 1 ? 0 : 1 + site % (size - 1); }

std::unique_ptr<SiteExecutor> MakeMpiSiteExecutor(const MpiJob& job) {
  return std::make_unique<MpiSiteExecutor>(job);
}

absl::Status ServeMpiSites(const MpiJob& job, SiteExecutor& local, int64_t run_id,
                           const client::JoinRequestInfo& join) {
  while (true) {
    Buffer command = Receive(0, kCommandTag);
    switch (command.Int()) {
      case kJoin: {
        std::vector<int32_t> sites(static_cast<size_t>(command.Int()));
        for (int32_t& site : sites) site = static_cast<int32_t>(command.Int());
        Buffer reply;
        PutStatus(reply, local.Join(sites, join, {}));
        Send(reply, 0, kReplyTag);
        break;
      }
      case kRun: {
        std::vector<SiteWork> wave(static_cast<size_t>(command.Int()));
        for (SiteWork& w : wave) {
          w.site = static_cast<int32_t>(command.Int());
          w.poll_run_id = run_id;  // the site fetches its task itself
        }
        local.Run(wave);
        Buffer reply;
        for (const SiteWork& w : wave) {
          reply.PutInt(w.num_examples);
          reply.PutInt(w.bytes_up);
          PutStatus(reply, w.error);
        }
        Send(reply, 0, kReplyTag);
        break;
      }
      case kDeliver: {
        Buffer reply;
        reply.PutInt(local.Deliver(static_cast<int32_t>(command.Int())));
        Send(reply, 0, kReplyTag);
        break;
      }
      case kDiscard:
        local.Discard(static_cast<int32_t>(command.Int()));
        break;
      case kRelease: {
        const auto site = static_cast<int32_t>(command.Int());
        local.Release(site, command.Int() != 0);
        break;
      }
      case kStop:
        return absl::OkStatus();
      default:
        return absl::InternalError(
            absl::StrCat("rank ", job.rank, ": unknown command from rank 0"));
    }
  }
}

}  // namespace fl::simulation::internal
