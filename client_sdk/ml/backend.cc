// Choosing a backend at run time. The CUDA backend exists only in builds where CMake found nvcc
// (FL_HAVE_CUDA); every other build answers UNAVAILABLE, saying so.
#include "client_sdk/ml/backend.h"

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#ifdef FL_HAVE_CUDA
#include "client_sdk/ml/cuda/cuda_backend.h"
#endif

namespace fl::client::ml {

bool CudaAvailable(std::string* why) {
#ifdef FL_HAVE_CUDA
  return CudaDevicePresent(why);
#else
  if (why != nullptr)
    *why = "this build has no CUDA backend (nvcc was not found at configure time)";
  return false;
#endif
}

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend() {
#ifdef FL_HAVE_CUDA
  std::string why;
  if (!CudaDevicePresent(&why)) {
    return absl::UnavailableError(absl::StrCat("no usable CUDA device: ", why));
  }
  return MakeCudaBackendImpl();
#else
  return absl::UnavailableError(
      "the cuda backend is unavailable: this build has no CUDA backend (nvcc was not found at "
      "configure time)");
#endif
}

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(std::string_view name, int cpu_threads) {
  if (name == "cpu") return MakeCpuBackend(cpu_threads);
  if (name == "cuda") return MakeCudaBackend();
  if (name == "auto") {
    if (CudaAvailable()) {
      absl::StatusOr<std::unique_ptr<Backend>> cuda = MakeCudaBackend();
      if (cuda.ok()) return cuda;
    }
    return MakeCpuBackend(cpu_threads);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown backend \"", std::string(name),
                                                 "\"; choose \"auto\", \"cpu\" or \"cuda\""));
}

}  // namespace fl::client::ml
