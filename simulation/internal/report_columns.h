// The column sets shared by the report's HTML table (simulation/src/report_html.cc) and its CSV
// (simulation/src/report.cc), so that both list the same columns in the same order.
//
// Internal to fl::simulation: include it as "simulation/internal/report_columns.h".
#ifndef FL_SIMULATION_INTERNAL_REPORT_COLUMNS_H_
#define FL_SIMULATION_INTERNAL_REPORT_COLUMNS_H_

#include <string>
#include <vector>

#include "fl/simulation/report.h"

namespace fl::simulation::internal {

// The union of the metric names of all rounds, sorted (byte order), without duplicates.
std::vector<std::string> ReportMetricNames(const RunReport& report);

// The union of the phase names (ReportRound::phase_seconds) of all rounds, sorted.
std::vector<std::string> ReportPhaseNames(const RunReport& report);

}  // namespace fl::simulation::internal

#endif  // FL_SIMULATION_INTERNAL_REPORT_COLUMNS_H_
