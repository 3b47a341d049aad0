// Helpers of the tests that run the real `fl server` as a process on a data directory and kill,
// stop, starve or break it (restart_test.cc, storage_fault_test.cc): its command line, what it has
// committed as another process sees it, the SQLite file's own check, three slow sites.
#ifndef FL_TESTS_INTEGRATION_SERVER_RUN_UTIL_H_
#define FL_TESTS_INTEGRATION_SERVER_RUN_UTIL_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "fl/server/store.h"
#include "tests/integration/test_federation.h"

namespace fl::testing {

// `fl server` for these tests: 4 rounds of 3 sites; `extra` flags replace these or add to them.
std::vector<std::string> RunCommand(const ProvisionedFiles& pki, const std::string& data_dir,
                                    int port, const std::vector<std::string>& extra = {});

// Committed rounds of the (only) run in `data_dir`, by round number; read from another process's
// point of view, while the server may be writing. `attempts`: the number of round records.
std::map<int, server::RoundRecord> CommittedRounds(const std::string& data_dir,
                                                   int* attempts = nullptr);

// Sites 0-2 of `pki` on `port`: softmax on 1,000 Fashion-MNIST rows each, sleeping `delay`
// before each fit so that rounds last long enough to interrupt.
std::vector<std::unique_ptr<ClientThread>> StartSlowClients(const ProvisionedFiles& pki, int port,
                                                            absl::Duration delay);

// The SQLite file's own consistency check ("ok"), from another process's connection.
std::string IntegrityCheck(const std::string& data_dir);

}  // namespace fl::testing

#endif  // FL_TESTS_INTEGRATION_SERVER_RUN_UTIL_H_
