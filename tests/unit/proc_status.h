// Memory figures of this test process, for the tests that bound what a component keeps resident.
#ifndef FL_TESTS_UNIT_PROC_STATUS_H_
#define FL_TESTS_UNIT_PROC_STATUS_H_

#include <fstream>
#include <string>

namespace fl::testing {

// A "<field>:   1234 kB" line of /proc/self/status (VmHWM, VmRSS, RssAnon), in MiB; -1 when
// absent.
inline double ProcStatusMiB(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == field + ":") {
      double kb = 0;
      in >> kb;
      return kb / 1024.0;
    }
    std::getline(in, key);
  }
  return -1;
}

}  // namespace fl::testing

#endif  // FL_TESTS_UNIT_PROC_STATUS_H_
