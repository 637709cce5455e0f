# Part of accel's CMake package (installed beside accelConfig.cmake) and of accel's own build:
# checks that the torch libraries found all belong to the torch whose headers were found.
# TorchConfig.cmake looks for some of its libraries (c10, kineto, ...) with find_library, which
# searches the system's directories before torch's own lib/: with Debian's libtorch in /usr/lib, a
# project would compile against one torch's headers and link another's libraries, and fail at link
# time with undefined c10 symbols, or worse at run time. accel_prefer_torch_prefix() makes the
# search start at torch's own prefix; accel_check_torch_libraries() refuses what still slipped.

# Torch_DIR (<prefix>/share/cmake/Torch) -> <prefix>, the directory holding torch's lib/ and include/.
function(accel_torch_prefix_of torch_dir out)
  get_filename_component(prefix "${torch_dir}/../../.." ABSOLUTE)
  set(${out} "${prefix}" PARENT_SCOPE)
endfunction()

# Call before find_package(Torch): torch's own prefix comes first in CMAKE_PREFIX_PATH, which
# find_library searches before the system's directories.
macro(accel_prefer_torch_prefix torch_dir)
  if(NOT "${torch_dir}" STREQUAL "" AND EXISTS "${torch_dir}")
    accel_torch_prefix_of("${torch_dir}" _accel_torch_prefix)
    list(PREPEND CMAKE_PREFIX_PATH "${_accel_torch_prefix}")
  endif()
endmacro()

# Call after find_package(Torch). Sets `ok` FALSE and `message` to what was found where when one
# of torch's own libraries (libtorch*, libc10*, libkineto) in TORCH_LIBRARIES / TORCH_LIBRARY lies
# outside <torch prefix>/lib. (The CUDA libraries TORCH_LIBRARIES names, nvrtc, are the toolkit's.)
function(accel_check_torch_libraries ok message)
  accel_torch_prefix_of("${Torch_DIR}" prefix)
  get_filename_component(want "${prefix}/lib" REALPATH)
  set(strays "")
  foreach(lib IN LISTS TORCH_LIBRARIES TORCH_LIBRARY)
    if(IS_ABSOLUTE "${lib}" AND lib MATCHES "/lib(torch|c10|kineto)[^/]*\\.so")
      get_filename_component(dir "${lib}" DIRECTORY)
      get_filename_component(dir "${dir}" REALPATH)
      if(NOT dir STREQUAL want)
        list(APPEND strays "${lib}")
      endif()
    endif()
  endforeach()
  if(strays)
    list(REMOVE_DUPLICATES strays)
    list(JOIN strays ", " strays)
    set(${ok} FALSE PARENT_SCOPE)
    set(${message} "the torch found at ${Torch_DIR} (headers and libraries in ${want}) came with libraries "
                   "from another torch: ${strays}. Another libtorch on the system's library path (Debian's "
                   "python3-torch puts one in /usr/lib) was found first. Remove those entries from the CMake "
                   "cache (c10_LIBRARY, kineto_LIBRARY, TORCH_LIBRARY) and configure again, or uninstall the other libtorch."
        PARENT_SCOPE)
  else()
    set(${ok} TRUE PARENT_SCOPE)
    set(${message} "" PARENT_SCOPE)
  endif()
endfunction()
