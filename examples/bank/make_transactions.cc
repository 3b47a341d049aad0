// Writes synthetic card transactions for one bank: a CSV with a header, ten numeric features and
// the label column "fraud" (1 for 1 to 2 % of rows, by bank: imbalanced, as fraud is).
//
//   make_transactions --bank 0 --rows 20000 --seed 7 --out bank-a.csv
//
// What makes it realistic enough to be worth a federation: fraud depends on the features through
// interactions (a large amount far from home at night, many transactions in an hour on a young
// account, card-not-present abroad), not through any single column, and each bank has its own
// customers (amounts, foreign share, night share) and its own fraud rate, so no bank sees the
// whole picture. Features are on comparable scales (logs, 0/1 flags, sin/cos of the hour), so no
// site needs another's statistics to standardise them.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <string_view>

namespace {

struct BankProfile {
  double mean_log_amount;  // typical purchase, log of currency units
  double foreign_share;    // of legitimate transactions
  double night_share;      // of legitimate transactions between 0:00 and 6:00
  double fraud_bias;       // shifts this bank's fraud rate
};

constexpr BankProfile kBanks[] = {
    {3.4, 0.05, 0.08, 0.0},   // a retail bank
    {4.1, 0.20, 0.10, 0.3},   // a bank for travellers
    {3.0, 0.02, 0.15, -0.2},  // an online-first bank, young customers
    {4.6, 0.10, 0.05, 0.1},   // a private bank
};

int Usage(const char* why) {
  std::cerr << "make_transactions: " << why
            << "\nusage: make_transactions --bank 0..3 --rows N --seed S --out FILE\n";
  return 2;
}

// Draws from uniform [0, 1) with the generator's bits only, so every platform writes the same file.
double Uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }
double Normal(std::mt19937_64& rng) {
  // Box-Muller; 1 - u keeps the log finite.
  const double u = 1.0 - Uniform(rng);
  const double v = Uniform(rng);
  return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * M_PI * v);
}
bool Bernoulli(std::mt19937_64& rng, double p) { return Uniform(rng) < p; }

}  // namespace

int main(int argc, char** argv) {
  int bank = -1;
  long rows = 0;
  uint64_t seed = 1;
  std::string out;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (i + 1 >= argc) return Usage("every flag takes a value");
    const char* value = argv[++i];
    if (flag == "--bank") {
      bank = std::atoi(value);
    } else if (flag == "--rows") {
      rows = std::atol(value);
    } else if (flag == "--seed") {
      seed = std::strtoull(value, nullptr, 10);
    } else if (flag == "--out") {
      out = value;
    } else {
      return Usage("unknown flag");
    }
  }
  if (bank < 0 || bank > 3) return Usage("--bank must be 0, 1, 2 or 3");
  if (rows < 100 || rows > 100'000'000) return Usage("--rows must be in [100, 10^8]");
  if (out.empty()) return Usage("--out is required");
  std::ofstream file(out);
  if (!file) {
    std::cerr << "make_transactions: cannot write " << out << "\n";
    return 1;
  }
  const BankProfile& p = kBanks[bank];
  std::mt19937_64 rng(seed * 4 + static_cast<uint64_t>(bank));
  file << "log_amount,hour_sin,hour_cos,log_distance_km,foreign,card_present,"
          "log_tx_last_hour,log_account_age_days,merchant_risk,amount_vs_usual,fraud\n";
  long frauds = 0;
  for (long r = 0; r < rows; ++r) {
    // The customer and the context.
    const double usual = p.mean_log_amount + 0.5 * Normal(rng);
    const double account_age_days = std::exp(5.5 + 1.2 * Normal(rng));
    const bool foreign = Bernoulli(rng, p.foreign_share);
    const bool night = Bernoulli(rng, p.night_share);
    const double hour = night ? 6.0 * Uniform(rng) : 6.0 + 18.0 * Uniform(rng);
    const double log_amount = usual + 0.8 * Normal(rng);
    const double log_distance = foreign ? 6.5 + 1.0 * Normal(rng) : 1.5 + 1.2 * Normal(rng);
    const bool card_present = Bernoulli(rng, foreign ? 0.4 : 0.7);
    const double tx_last_hour = std::floor(std::exp(0.3 + 0.6 * Normal(rng)));
    const double merchant_risk = Uniform(rng) * Uniform(rng);  // most merchants are safe
    // The fraud score: interactions, each plausible on its own.
    const double big = log_amount - usual;
    double score = -6.1 + p.fraud_bias;
    score += 1.6 * (night ? 1.0 : 0.0) * (big > 0.6 ? 1.0 : 0.0);
    score += 0.35 * std::max(0.0, log_distance - 3.0) * (card_present ? 0.3 : 1.0);
    score += 0.9 * std::log1p(tx_last_hour) * (account_age_days < 90 ? 1.6 : 0.6);
    score += 1.6 * (foreign && !card_present ? 1.0 : 0.0);
    score += 2.2 * merchant_risk * merchant_risk;
    score += 0.5 * std::max(0.0, big);
    const bool fraud = Bernoulli(rng, 1.0 / (1.0 + std::exp(-score)));
    frauds += fraud ? 1 : 0;
    // What the bank observes; a fraudster also shifts what it can: bigger, odder amounts.
    const double observed_amount = fraud ? log_amount + 0.4 + 0.3 * Normal(rng) : log_amount;
    char line[512];
    std::snprintf(line, sizeof(line), "%.4f,%.4f,%.4f,%.4f,%d,%d,%.4f,%.4f,%.4f,%.4f,%d\n",
                  observed_amount - 3.5, std::sin(2 * M_PI * hour / 24),
                  std::cos(2 * M_PI * hour / 24), log_distance / 3.0 - 1.0, foreign ? 1 : 0,
                  card_present ? 1 : 0, std::log1p(tx_last_hour),
                  std::log(account_age_days) / 3.0 - 1.8, merchant_risk * 2.0,
                  observed_amount - usual, fraud ? 1 : 0);
    file << line;
  }
  file.close();
  if (!file) {
    std::cerr << "make_transactions: writing " << out << " failed\n";
    return 1;
  }
  std::cout << out << ": " << rows << " transactions, " << frauds << " fraudulent ("
            << 100.0 * static_cast<double>(frauds) / static_cast<double>(rows) << " %)\n";
  return 0;
}
