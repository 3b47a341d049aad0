// The CUDA backend as a plugin: a shared library (libfl_cuda.so) that the SDK loads with dlopen
// the first time a program asks for CUDA, so that programs and libraries built with the CUDA
// backend start, and train on the CPU, on machines without the CUDA toolkit, cuBLAS or a driver.
//
// The plugin exports the C-linkage entry points below; ml/backend.cc looks them up by name. They
// pass C++ types, so the plugin must come from the same build as the program (same compiler and
// standard library): kCudaPluginAbi is checked first, and a plugin of another ABI is refused.
#ifndef FL_CLIENT_ML_CUDA_PLUGIN_H_
#define FL_CLIENT_ML_CUDA_PLUGIN_H_

#include <string>

#include "absl/status/status.h"
#include "client_sdk/ml/backend.h"

namespace fl::client::ml {

// Bumped whenever Backend or the entry points change (2: Backend::host_memory).
inline constexpr int kCudaPluginAbi = 2;

// The plugin's file name, as CMake builds and installs it (into <prefix>/lib).
inline constexpr char kCudaPluginFileName[] = "libfl_cuda.so";

}  // namespace fl::client::ml

extern "C" {
// Returns kCudaPluginAbi of the build the plugin comes from.
using FlCudaPluginAbiFn = int (*)();
// CudaDevicePresent (cuda_backend.h): whether a device is usable; else `why` says what is not.
using FlCudaDevicePresentFn = bool (*)(std::string* why);
// MakeCudaBackendImpl: a new backend the caller owns (delete through Backend's virtual
// destructor), or null with the reason in `*status`.
using FlCudaBackendCreateFn = fl::client::ml::Backend* (*)(absl::Status* status);
}

#define FL_CUDA_PLUGIN_ABI_SYMBOL "fl_cuda_plugin_abi"
#define FL_CUDA_DEVICE_PRESENT_SYMBOL "fl_cuda_device_present"
#define FL_CUDA_BACKEND_CREATE_SYMBOL "fl_cuda_backend_create"

#endif  // FL_CLIENT_ML_CUDA_PLUGIN_H_
