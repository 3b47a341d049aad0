// The helpers of the tests that run the real `fl server` as a process (server_run_util.h).
#include "tests/integration/server_run_util.h"

#include <sqlite3.h>

#include "fl/client/softmax_trainer.h"
#include "fl/server/store.h"
#include "gtest/gtest.h"

namespace fl::testing {

std::vector<std::string> RunCommand(const ProvisionedFiles& pki, const std::string& data_dir,
                                    int port, const std::vector<std::string>& extra) {
  std::vector<std::string> flags = {
      "--rounds", "4", "--min-clients", "3",  "--min-fit-clients", "3", "--round-timeout", "60",
      "--grace",  "2", "--lr",          "0.1"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  return ServerCommand(pki, data_dir, port, flags);
}

std::map<int, server::RoundRecord> CommittedRounds(const std::string& data_dir, int* attempts) {
  std::map<int, server::RoundRecord> out;
  absl::StatusOr<std::unique_ptr<server::Store>> store = server::Store::OpenReadOnly(data_dir);
  if (!store.ok()) return out;
  absl::StatusOr<std::vector<server::RoundRecord>> rounds = (*store)->Rounds(1);
  if (!rounds.ok()) return out;
  for (const server::RoundRecord& r : *rounds) {
    if (r.status != server::RoundStatus::kCommitted) continue;
    EXPECT_EQ(out.count(r.round), 0u) << "round " << r.round << " committed twice";
    out[r.round] = r;
  }
  if (attempts != nullptr) *attempts = static_cast<int>(rounds->size());
  return out;
}

std::vector<std::unique_ptr<ClientThread>> StartSlowClients(const ProvisionedFiles& pki, int port,
                                                            absl::Duration delay) {
  std::vector<std::unique_ptr<ClientThread>> clients;
  for (int i = 0; i < 3; ++i) {
    client::ClientOptions options = TlsClientOptions(pki, i, port);
    options.reconnect_timeout = absl::Seconds(60);
    clients.push_back(std::make_unique<ClientThread>(
        options,
        std::make_unique<SlowTrainer>(
            client::MakeSoftmaxRegressionTrainer(FashionTrainSlice(i * 1000, 1000), {}), delay)));
  }
  return clients;
}

std::string IntegrityCheck(const std::string& data_dir) {
  sqlite3* db = nullptr;
  std::string result = "cannot open";
  if (sqlite3_open_v2((data_dir + "/federation.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr) ==
      SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
      result = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return result;
}

}  // namespace fl::testing
