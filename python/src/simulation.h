// fl._fl.simulate and fl._fl.partition (python/src/simulation.cc; the package's fl.simulation).
#ifndef FL_PYTHON_SIMULATION_H_
#define FL_PYTHON_SIMULATION_H_

#include <nanobind/nanobind.h>

namespace fl::python {

void RegisterSimulation(nanobind::module_& m);

}  // namespace fl::python

#endif  // FL_PYTHON_SIMULATION_H_
