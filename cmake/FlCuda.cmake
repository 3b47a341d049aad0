# The optional CUDA backend of the client SDK's built-in models.
#
# FL_ENABLE_CUDA:
#   AUTO (default) builds it when a CUDA compiler is found (check_language) and the toolkit has
#        cuBLAS; otherwise it is skipped with a message and everything else builds as before.
#   ON   requires it: configuring fails, saying what is missing.
#   OFF  never looks for CUDA.
# Sets FL_CUDA_BACKEND (ON/OFF) for the folders below, and the reason in FL_CUDA_BACKEND_REASON.
#
# Architectures: unless CMAKE_CUDA_ARCHITECTURES is given, "90", i.e. SASS for sm_90 (H100/H200)
# plus compute_90 PTX that the driver JIT-compiles for newer GPUs. One target keeps the build
# quick; pass -DCMAKE_CUDA_ARCHITECTURES="80;90" (or "native") for other devices.
set(FL_ENABLE_CUDA AUTO CACHE STRING
    "Build the CUDA backend of the built-in models: AUTO, ON or OFF")
set_property(CACHE FL_ENABLE_CUDA PROPERTY STRINGS AUTO ON OFF)
string(TOUPPER "${FL_ENABLE_CUDA}" _fl_cuda_mode)
if(_fl_cuda_mode MATCHES "^(1|YES|Y|TRUE)$")
  set(_fl_cuda_mode ON)
elseif(_fl_cuda_mode MATCHES "^(0|NO|N|FALSE)$")
  set(_fl_cuda_mode OFF)
endif()
if(NOT _fl_cuda_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "FL_ENABLE_CUDA must be AUTO, ON or OFF, not '${FL_ENABLE_CUDA}'")
endif()

set(FL_CUDA_BACKEND OFF)
set(FL_CUDA_BACKEND_REASON "")
if(_fl_cuda_mode STREQUAL "OFF")
  set(FL_CUDA_BACKEND_REASON "FL_ENABLE_CUDA=OFF")
else()
  include(CheckLanguage)
  check_language(CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    set(FL_CUDA_BACKEND_REASON
        "no CUDA compiler found (put nvcc on the PATH or set CMAKE_CUDA_COMPILER)")
  else()
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit)
    if(NOT CUDAToolkit_FOUND)
      set(FL_CUDA_BACKEND_REASON "the CUDA toolkit next to ${CMAKE_CUDA_COMPILER} was not found")
    elseif(NOT TARGET CUDA::cublas)
      set(FL_CUDA_BACKEND_REASON "cuBLAS was not found in ${CUDAToolkit_LIBRARY_DIR}")
    elseif(NOT TARGET CUDA::cudart_static AND NOT TARGET CUDA::cudart)
      set(FL_CUDA_BACKEND_REASON "the CUDA runtime was not found in ${CUDAToolkit_LIBRARY_DIR}")
    else()
      set(FL_CUDA_BACKEND ON)
      get_filename_component(FL_CUDA_TOOLKIT_ROOT "${CUDAToolkit_BIN_DIR}" DIRECTORY)
      if(TARGET CUDA::cudart_static)
        set(FL_CUDA_RUNTIME CUDA::cudart_static)
      else()
        set(FL_CUDA_RUNTIME CUDA::cudart)
      endif()
      set(FL_CUDA_BACKEND_REASON
          "nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}, \
${FL_CUDA_RUNTIME} + CUDA::cublas")
    endif()
  endif()
endif()

if(FL_CUDA_BACKEND)
  message(STATUS "fl: CUDA backend: built (${FL_CUDA_BACKEND_REASON})")
elseif(_fl_cuda_mode STREQUAL "ON")
  message(FATAL_ERROR "fl: FL_ENABLE_CUDA=ON but the CUDA backend cannot be built: "
                      "${FL_CUDA_BACKEND_REASON}")
else()
  message(STATUS "fl: CUDA backend: not built (${FL_CUDA_BACKEND_REASON}); the cpu backend only")
endif()
