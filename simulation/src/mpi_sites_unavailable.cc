// simulation/internal/mpi_sites.h in a build without MPI: every entry point says how to get it.
#include <cstdio>
#include <cstdlib>

#include "simulation/internal/mpi_sites.h"

namespace fl::simulation::internal {
namespace {

absl::Status NoMpi() {
  return absl::UnimplementedError(
      "this build of fl has no MPI: install Debian's libopenmpi-dev and openmpi-bin "
      "(scripts/install-deps.sh does) and rebuild, then run it under mpirun or srun");
}

}  // namespace

absl::StatusOr<MpiJob> JoinMpiJob() { return NoMpi(); }
absl::Status BroadcastSetup(const MpiJob&, MpiSetup&) { return NoMpi(); }
bool SetupWasBroadcast() { return false; }
void AbortMpiJob(const MpiJob&, const absl::Status& status) {
  std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
  std::exit(1);
}
int OwnerOfSite(int32_t, int) { return 0; }
std::unique_ptr<SiteExecutor> MakeMpiSiteExecutor(const MpiJob&) { return nullptr; }
absl::Status ServeMpiSites(const MpiJob&, SiteExecutor&, int64_t, const client::JoinRequestInfo&) {
  return NoMpi();
}

}  // namespace fl::simulation::internal
