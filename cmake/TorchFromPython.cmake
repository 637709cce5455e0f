# Locates libtorch for find_package(Torch): PyTorch's own build, the torch wheel in accel's Python
# environment (scripts/setup.sh creates it), unless the user points CMake elsewhere.
# Order: Torch_DIR or CMAKE_PREFIX_PATH set by the user (a libtorch zip works), then the Python
# interpreter ACCEL_PYTHON (default: $ACCEL_VENV/bin/python, ACCEL_VENV defaulting to
# ~/.cache/accel/venv-torch2.11), asked for torch.utils.cmake_prefix_path.
# Sets ACCEL_PYTHON (cached) for the tests and scripts that need the same torch.
if(NOT DEFINED ACCEL_VENV)
  if(DEFINED ENV{ACCEL_VENV})
    set(ACCEL_VENV "$ENV{ACCEL_VENV}")
  else()
    set(ACCEL_VENV "$ENV{HOME}/.cache/accel/venv-torch2.11")
  endif()
endif()
set(ACCEL_PYTHON "${ACCEL_VENV}/bin/python" CACHE FILEPATH
    "Python with torch (the reference scripts, numerics tests and, unless Torch_DIR is set, libtorch itself)")

if(NOT Torch_DIR AND NOT CMAKE_PREFIX_PATH)
  if(NOT EXISTS "${ACCEL_PYTHON}")
    message(FATAL_ERROR "accel: no libtorch found. Run scripts/setup.sh (it creates ${ACCEL_VENV} with "
                        "torch 2.11), or pass -DTorch_DIR=<libtorch>/share/cmake/Torch, or "
                        "-DACCEL_PYTHON=<a python with torch>.")
  endif()
  execute_process(COMMAND "${ACCEL_PYTHON}" -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
                  OUTPUT_VARIABLE _accel_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE _accel_torch_rc ERROR_VARIABLE _accel_torch_err)
  if(NOT _accel_torch_rc EQUAL 0)
    message(FATAL_ERROR "accel: ${ACCEL_PYTHON} cannot import torch: ${_accel_torch_err}\n"
                        "Rerun scripts/setup.sh, or pass -DTorch_DIR=<libtorch>/share/cmake/Torch.")
  endif()
  # The torch package root too (prefix/share/cmake -> the root): TorchConfig's find_library calls
  # search CMAKE_PREFIX_PATH's lib/ before the system directories, so a Debian libtorch in
  # /usr/lib cannot be picked up beside the wheel's headers.
  get_filename_component(_accel_torch_root "${_accel_torch_prefix}/../.." ABSOLUTE)
  list(APPEND CMAKE_PREFIX_PATH "${_accel_torch_prefix}" "${_accel_torch_root}")
endif()

# The CUDA wheel's Caffe2 config looks for the CUDA toolkit; /usr/local/cuda is where NVIDIA's
# packages put it and where the CI and GPU machines have it.
if(NOT CUDAToolkit_ROOT AND NOT DEFINED ENV{CUDAToolkit_ROOT} AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CUDAToolkit_ROOT /usr/local/cuda)
  if(NOT CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
endif()
