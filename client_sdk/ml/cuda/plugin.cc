// The entry points of libfl_cuda.so (see plugin.h) over the CUDA backend of cuda_backend.cc.
#include "client_sdk/ml/cuda/plugin.h"

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "client_sdk/ml/cuda/cuda_backend.h"

extern "C" {

__attribute__((visibility("default"))) int fl_cuda_plugin_abi() {
  return fl::client::ml::kCudaPluginAbi;
}

__attribute__((visibility("default"))) bool fl_cuda_device_present(std::string* why) {
  return fl::client::ml::CudaDevicePresent(why);
}

__attribute__((visibility("default"))) fl::client::ml::Backend* fl_cuda_backend_create(
    absl::Status* status) {
  absl::StatusOr<std::unique_ptr<fl::client::ml::Backend>> backend =
      fl::client::ml::MakeCudaBackendImpl();
  if (!backend.ok()) {
    *status = backend.status();
    return nullptr;
  }
  *status = absl::OkStatus();
  return backend->release();
}

}  // extern "C"
