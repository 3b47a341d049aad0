// Choosing a backend at run time. The CUDA backend is a plugin (ml/cuda/plugin.h) loaded the
// first time CUDA is asked for, so that nothing here links the CUDA runtime or cuBLAS.
#include "client_sdk/ml/backend.h"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client_sdk/ml/cuda/plugin.h"

namespace fl::client::ml {
namespace {

// The plugin once loaded, or why it could not be.
struct CudaPlugin {
  FlCudaDevicePresentFn device_present = nullptr;
  FlCudaBackendCreateFn create = nullptr;
  std::string load_error;  // empty when loaded
};

// The directory of the running program, or empty.
std::string ProgramDir() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return "";
  std::string exe(path, static_cast<size_t>(n));
  const size_t slash = exe.rfind('/');
  return slash == std::string::npos ? "" : exe.substr(0, slash);
}

// Where the plugin may be, in the order tried: $FL_CUDA_PLUGIN (a file), next to the program and
// in ../lib from it (an installed tree), the build tree and the install prefix it was built for.
std::vector<std::string> PluginCandidates() {
  std::vector<std::string> paths;
  if (const char* env = std::getenv("FL_CUDA_PLUGIN"); env != nullptr && *env != '\0') {
    paths.emplace_back(env);
    return paths;  // an explicit choice: nothing else is tried
  }
  if (std::string dir = ProgramDir(); !dir.empty()) {
    paths.push_back(absl::StrCat(dir, "/", kCudaPluginFileName));
    paths.push_back(absl::StrCat(dir, "/../lib/", kCudaPluginFileName));
  }
#ifdef FL_CUDA_PLUGIN_BUILD_PATH
  paths.emplace_back(FL_CUDA_PLUGIN_BUILD_PATH);
#endif
#ifdef FL_CUDA_PLUGIN_INSTALL_PATH
  paths.emplace_back(FL_CUDA_PLUGIN_INSTALL_PATH);
#endif
  return paths;
}

CudaPlugin LoadCudaPlugin() {
  CudaPlugin plugin;
  std::vector<std::string> errors;
  for (const std::string& path : PluginCandidates()) {
    if (access(path.c_str(), F_OK) != 0) {
      errors.push_back(absl::StrCat(path, ": no such file"));
      continue;
    }
    // Never closed: backends it made may live until the process ends.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* error = dlerror();
      errors.push_back(error != nullptr ? std::string(error) : absl::StrCat(path, ": dlopen failed"));
      continue;
    }
    auto abi = reinterpret_cast<FlCudaPluginAbiFn>(dlsym(handle, FL_CUDA_PLUGIN_ABI_SYMBOL));
    plugin.device_present =
        reinterpret_cast<FlCudaDevicePresentFn>(dlsym(handle, FL_CUDA_DEVICE_PRESENT_SYMBOL));
    plugin.create =
        reinterpret_cast<FlCudaBackendCreateFn>(dlsym(handle, FL_CUDA_BACKEND_CREATE_SYMBOL));
    if (abi == nullptr || plugin.device_present == nullptr || plugin.create == nullptr) {
      errors.push_back(absl::StrCat(path, ": not an fl CUDA plugin (entry points missing)"));
    } else if (abi() != kCudaPluginAbi) {
      errors.push_back(absl::StrCat(path, ": built for plugin ABI ", abi(), ", this program needs ",
                                    kCudaPluginAbi, " (use the plugin of the same build)"));
    } else {
      return plugin;
    }
    dlclose(handle);  // nothing of it was used
    plugin = CudaPlugin{};
  }
#ifdef FL_CUDA_PLUGIN_BUILD_PATH
  const char* built = "";
#else
  const char* built = "this build has no CUDA backend (nvcc was not found at configure time); ";
#endif
  const char* env = std::getenv("FL_CUDA_PLUGIN");
  const bool chosen = env != nullptr && *env != '\0';
  plugin.load_error = absl::StrCat(
      built, "the CUDA plugin ", kCudaPluginFileName, " could not be loaded",
      chosen ? " from FL_CUDA_PLUGIN" : " (set FL_CUDA_PLUGIN to its path)", ": ",
      absl::StrJoin(errors, "; "));
  return plugin;
}

const CudaPlugin& Plugin() {
  static const CudaPlugin* plugin = new CudaPlugin(LoadCudaPlugin());
  return *plugin;
}

}  // namespace

bool CudaAvailable(std::string* why) {
  const CudaPlugin& plugin = Plugin();
  if (!plugin.load_error.empty()) {
    if (why != nullptr) *why = plugin.load_error;
    return false;
  }
  return plugin.device_present(why);
}

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend() {
  std::string why;
  if (!CudaAvailable(&why)) {
    return absl::UnavailableError(absl::StrCat("the cuda backend is unavailable: ", why));
  }
  absl::Status status;
  std::unique_ptr<Backend> backend(Plugin().create(&status));
  if (backend == nullptr) return status;
  return backend;
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
