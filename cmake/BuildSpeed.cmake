# Build time on small machines (2 cores): libtorch's headers cost 8-15 s of parsing and template
# instantiation in every translation unit that includes them, and full debug info for them half as
# much again. Three measures, each with a switch (docs/design/0021-build-time.md has the figures):
#  - RelWithDebInfo keeps line tables only (-g1: backtraces, perf and gdb's `bt` with file:line),
#    unless ACCEL_FULL_DEBUG_INFO is ON;
#  - one precompiled header of the torch headers accel uses, built once (position-independent)
#    and reused by every target that links torch (ACCEL_TORCH_PCH);
#  - unity builds (ACCEL_UNITY_BUILD): a target's sources are compiled a few at a time as one
#    translation unit, so the torch headers are read and their templates instantiated once per
#    batch instead of once per file.
# ccache still hits: the precompiled header is created through ccache too, and the sloppiness
# ccache needs for precompiled headers is set on its command line (see the launcher below).

option(ACCEL_FULL_DEBUG_INFO "RelWithDebInfo with full debug info (-g) instead of line tables (-g1)" OFF)
option(ACCEL_TORCH_PCH "Precompile the torch headers once and reuse them in every torch target" ON)
option(ACCEL_UNITY_BUILD "Compile each target's sources in batches (unity build)" ON)
set(ACCEL_UNITY_BATCH_SIZE 8 CACHE STRING "Sources per unity translation unit")
option(ACCEL_LIGHT_TEST_OPTIMIZATION "Compile the tests' and examples' own code at -Og (RelWithDebInfo)" ON)

if(NOT ACCEL_FULL_DEBUG_INFO)
  # Comes after CMake's -g in the command line, and the last -g option wins.
  add_compile_options($<$<CONFIG:RelWithDebInfo>:-g1>)
endif()

find_program(CCACHE_PROGRAM ccache)
if(CCACHE_PROGRAM)
  # pch_defines,time_macros: ccache's conditions for caching compiles that use a precompiled header;
  # include_file_mtime/ctime: the header is rebuilt moments before its users compile.
  set(CMAKE_CXX_COMPILER_LAUNCHER
      ${CMAKE_COMMAND} -E env
      "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
      ${CCACHE_PROGRAM})
endif()

# lld links a torch-linked executable in a fraction of GNU ld's time (test_engine: 0.3 s of CPU and
# 1-2 s of wall against 1.3 s and 7-8 s on a loaded 2-core machine), and a full build links about 30
# of them; GNU ld where lld is not installed.
option(ACCEL_USE_LLD "Link with lld (Debian's lld package) when it is installed" ON)
if(ACCEL_USE_LLD)
  include(CheckLinkerFlag)
  check_linker_flag(CXX -fuse-ld=lld ACCEL_HAVE_LLD)
  if(ACCEL_HAVE_LLD)
    add_link_options(-fuse-ld=lld)
  endif()
endif()

if(ACCEL_UNITY_BUILD)
  set(CMAKE_UNITY_BUILD ON)
  set(CMAKE_UNITY_BUILD_BATCH_SIZE ${ACCEL_UNITY_BATCH_SIZE})
endif()

# The torch headers accel's own code includes (the examples' <torch/torch.h> is a user program's
# choice and is not precompiled).
set(ACCEL_TORCH_PCH_HEADERS
  <ATen/ATen.h>
  <torch/nn/module.h>
  <torch/optim/optimizer.h>
  <torch/csrc/autograd/custom_function.h>
  <torch/csrc/distributed/c10d/Store.hpp>
)

# True when `target` links libtorch, directly or through accel's own libraries.
function(_accel_links_torch target result)
  get_property(known GLOBAL PROPERTY _accel_torch_link_${target} SET)
  if(known)
    get_property(value GLOBAL PROPERTY _accel_torch_link_${target})
    set(${result} ${value} PARENT_SCOPE)
    return()
  endif()
  set(value FALSE)
  get_target_property(type ${target} TYPE)
  set(links "")
  if(NOT type STREQUAL "INTERFACE_LIBRARY")
    get_target_property(direct ${target} LINK_LIBRARIES)
    if(direct)
      list(APPEND links ${direct})
    endif()
  endif()
  get_target_property(interface ${target} INTERFACE_LINK_LIBRARIES)
  if(interface)
    list(APPEND links ${interface})
  endif()
  foreach(item IN LISTS links)
    string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" item "${item}")
    if(item STREQUAL "torch" OR item STREQUAL "accel_torch_cpu" OR item IN_LIST TORCH_LIBRARIES)
      set(value TRUE)
    elseif(TARGET ${item} AND NOT item MATCHES "^(torch|torch_cpu|torch_cuda|c10|c10_cuda)$")
      get_target_property(imported ${item} IMPORTED)
      if(NOT imported)
        _accel_links_torch(${item} sub)
        if(sub)
          set(value TRUE)
        endif()
      endif()
    endif()
    if(value)
      break()
    endif()
  endforeach()
  set_property(GLOBAL PROPERTY _accel_torch_link_${target} ${value})
  set(${result} ${value} PARENT_SCOPE)
endfunction()

function(_accel_targets_in dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _accel_targets_in(${sub} more)
    list(APPEND targets ${more})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

# Call once, after every target is defined: the tests' and examples' own code (the targets defined
# under the directories given) at
# -Og, a fifth less compile time than -O2 for a test translation unit. Their hot loops are libtorch's and
# accel's libraries', which stay at -O2; -Og still defines __OPTIMIZE__, so the precompiled torch
# header, built at -O2, stays valid (-Winvalid-pch). Floating point is the same at either level (no
# contraction or reassociation on x86-64 without -march/-ffast-math). Benchmarks (bench_*) keep -O2.
# -Og's lighter flow analysis gives false -Wmaybe-uninitialized (gcc 12: std::optional<at::Generator>
# inlined from torch's headers into test_sync_batch_norm.cpp), so that one warning is off here; the
# libraries, and the tests under -DACCEL_LIGHT_TEST_OPTIMIZATION=OFF, keep it.
function(accel_optimize_tests_lightly)
  if(NOT ACCEL_LIGHT_TEST_OPTIMIZATION)
    return()
  endif()
  _accel_targets_in(${PROJECT_SOURCE_DIR} targets)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    get_target_property(dir ${target} SOURCE_DIR)
    foreach(prefix IN LISTS ARGN)
      if(dir MATCHES "^${prefix}(/|$)" AND type MATCHES "^(STATIC_LIBRARY|OBJECT_LIBRARY|EXECUTABLE)$"
         AND NOT target MATCHES "^bench_")
        target_compile_options(${target} PRIVATE "$<$<CONFIG:RelWithDebInfo>:-Og;-Wno-maybe-uninitialized>")
      endif()
    endforeach()
  endforeach()
endfunction()

# Call once, after every target is defined: gives each C++ target that links torch the shared
# precompiled header of its kind.
function(accel_share_torch_pch)
  if(NOT ACCEL_TORCH_PCH)
    return()
  endif()
  set(anchor ${PROJECT_BINARY_DIR}/generated/torch_pch_anchor.cpp)
  file(WRITE ${anchor} "// Owns the shared precompiled torch header (cmake/BuildSpeed.cmake).\n")
  add_library(accel_torch_pch_pic STATIC ${anchor})
  set_target_properties(accel_torch_pch_pic PROPERTIES UNITY_BUILD OFF POSITION_INDEPENDENT_CODE ON)
  target_link_libraries(accel_torch_pch_pic PRIVATE accel_torch_cpu)
  target_precompile_headers(accel_torch_pch_pic PRIVATE ${ACCEL_TORCH_PCH_HEADERS})

  _accel_targets_in(${PROJECT_SOURCE_DIR} targets)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    if(NOT type MATCHES "^(STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY|EXECUTABLE)$"
       OR target MATCHES "^accel_torch_pch_")
      continue()
    endif()
    get_target_property(no_pch ${target} DISABLE_PRECOMPILE_HEADERS)
    if(no_pch)
      continue()
    endif()
    _accel_links_torch(${target} uses_torch)
    if(NOT uses_torch)
      continue()
    endif()
    # One header for every kind of code: executables' and tests' objects are compiled
    # position-independent as libaccel.so's are (gcc takes a header only with the -fPIC it was built
    # with; -Winvalid-pch, an error here, says when not). A second, position-dependent header cost
    # 50 s of a 2-core first build; -fPIC in an executable costs nothing measurable (its hot loops
    # are libtorch's).
    get_target_property(pic ${target} POSITION_INDEPENDENT_CODE)
    if(NOT pic AND NOT type MATCHES "^(SHARED_LIBRARY|MODULE_LIBRARY)$")
      target_compile_options(${target} PRIVATE -fPIC)
    endif()
    target_precompile_headers(${target} REUSE_FROM accel_torch_pch_pic)
  endforeach()
endfunction()
