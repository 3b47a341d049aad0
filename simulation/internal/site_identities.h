// The identities of simulated sites in secure aggregation (fl/aggregation/secagg/identity.h):
// each site signs its keys and the survivor set with a certificate of the run's CA, and checks
// its peers' against that CA, as a deployed site does with its mutual-TLS files. Without them a
// simulated secure round would test a protocol no deployment runs.
#ifndef FL_SIMULATION_INTERNAL_SITE_IDENTITIES_H_
#define FL_SIMULATION_INTERNAL_SITE_IDENTITIES_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client_sdk/internal/transport.h"
#include "fl/aggregation/secagg/identity.h"

namespace fl::simulation {

class SiteIdentities {
 public:
  virtual ~SiteIdentities() = default;
  // Site `index`'s signer (its certificate named `name`) and the shared verifier. Thread-safe.
  virtual absl::StatusOr<client::internal::SecAggIdentity> For(int32_t index,
                                                               const std::string& name) = 0;
  // The verifier the server's engine checks the sites' signatures with (EngineHooks).
  virtual std::shared_ptr<const secagg::IdentityVerifier> verifier() const = 0;
};

// A fresh CA in memory; each site's certificate and key are made when the site first needs them.
absl::StatusOr<std::shared_ptr<SiteIdentities>> MakeInMemorySiteIdentities();

// The certificates a gRPC simulation provisioned under `certs_dir`: ca.pem and
// clients/site-<index>.pem and .key (read when the site first needs them).
absl::StatusOr<std::shared_ptr<SiteIdentities>> LoadSiteIdentities(const std::string& certs_dir);

}  // namespace fl::simulation

#endif  // FL_SIMULATION_INTERNAL_SITE_IDENTITIES_H_
