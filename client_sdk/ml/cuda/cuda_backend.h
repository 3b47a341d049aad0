// The CUDA backend of the built-in models (cuBLAS for the matrix products, small kernels for the
// rest), built only when CMake finds a CUDA compiler (FL_HAVE_CUDA). Callers go through
// CudaAvailable() and MakeCudaBackend() in ml/backend.h, which work in every build; this header
// includes no CUDA header.
#ifndef FL_CLIENT_ML_CUDA_CUDA_BACKEND_H_
#define FL_CLIENT_ML_CUDA_CUDA_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client_sdk/ml/backend.h"

namespace fl::client::ml {

// Whether the CUDA driver is loaded and reports at least one device. When not, `why` (if given)
// says what the runtime answered, e.g. "CUDA driver version is insufficient for CUDA runtime
// version" or "no CUDA-capable device is detected". Safe to call from any thread.
bool CudaDevicePresent(std::string* why);

// A "cuda" backend on device 0, with its own stream and cuBLAS handle. UNAVAILABLE, with the
// runtime's reason, when no device is present or the driver or cuBLAS cannot be initialised.
// The backend is used from one thread at a time; ops run in order on its stream.
absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackendImpl();

}  // namespace fl::client::ml

#endif  // FL_CLIENT_ML_CUDA_CUDA_BACKEND_H_
