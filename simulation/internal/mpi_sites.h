// Virtual sites spread over the ranks of an MPI job (`mpirun -n R fl sim --mpi ...`, or `srun`):
// rank 0 runs the server (on a port every rank can reach) and the driver; every other rank owns
// the sites i with i % (R - 1) == rank - 1, joins them and runs their tasks on its own pool of
// workers, each site connecting to rank 0's server over gRPC with its own certificate. The driver
// keeps the simulated clock and the order of deliveries, so the model is the one a single
// process gives for the same seed. Every rank reads the same options (the same command line) and
// makes the same data and partition; certificates are written to the run's directory, which must
// be on a file system every rank sees (as usual under Slurm).
//
// Messages between ranks are MPI point-to-point on MPI_COMM_WORLD, made only by the thread that
// called JoinMpiJob. Without MPI in the build every function returns UNIMPLEMENTED.
#ifndef FL_SIMULATION_INTERNAL_MPI_SITES_H_
#define FL_SIMULATION_INTERNAL_MPI_SITES_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client_sdk/internal/transport.h"
#include "simulation/internal/site_executor.h"

namespace fl::simulation::internal {

struct MpiJob {
  int rank = 0;
  int size = 1;
};

// Initialises MPI once per process (MPI_THREAD_FUNNELED) and says where this process stands;
// MPI is finalised at exit. UNIMPLEMENTED (saying how to get MPI) in a build without it.
absl::StatusOr<MpiJob> JoinMpiJob();

// Prints "error: rank R: <status>" to stderr and ends every rank of the job (MPI_Abort): an error
// on one rank must not leave the others waiting for it.
[[noreturn]] void AbortMpiJob(const MpiJob& job, const absl::Status& status);

// What the workers need from rank 0 before they can work.
struct MpiSetup {
  std::string work_dir;        // the run's directory, its certificates under work_dir/certs
  std::string server_address;  // host:port of rank 0's server
  bool tls = true;
  int64_t run_id = 0;
  // Not empty: rank 0 failed before its sites could work (why); the other ranks then stop.
  std::string error;
};

// Rank 0 sends `setup`; the other ranks receive it into `setup`. Once per job.
absl::Status BroadcastSetup(const MpiJob& job, MpiSetup& setup);
// Whether this process (rank 0) has sent its setup: until then the other ranks wait for it.
bool SetupWasBroadcast();

// The rank that owns site `site` in a job of `size` ranks (never 0 when size > 1).
int OwnerOfSite(int32_t site, int size);

// Rank 0's executor: each site's work goes to its owner's executor. Its destructor tells every
// rank to stop.
std::unique_ptr<SiteExecutor> MakeMpiSiteExecutor(const MpiJob& job);

// A rank above 0: serves rank 0's executor with `local` until told to stop. Work sent here has
// no task: each site polls run `run_id` for it over its own transport (the production path).
absl::Status ServeMpiSites(const MpiJob& job, SiteExecutor& local, int64_t run_id,
                           const client::JoinRequestInfo& join);

}  // namespace fl::simulation::internal

#endif  // FL_SIMULATION_INTERNAL_MPI_SITES_H_
