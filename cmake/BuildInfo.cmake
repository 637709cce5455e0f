# Records what `accel env` reports about the build. Versions come from the packages CMake found;
# the git revision is refreshed on every build (not only at configure time) so it never goes stale.
set(ACCEL_GENERATED_DIR ${CMAKE_CURRENT_BINARY_DIR}/generated)
file(MAKE_DIRECTORY ${ACCEL_GENERATED_DIR}/accel)

# Gloo is the copy linked inside libtorch_cpu (runtime/comm/gloo_backend.hpp).
set(ACCEL_GLOO_VERSION "inside libtorch_cpu (torch ${Torch_VERSION})")
configure_file(${CMAKE_CURRENT_LIST_DIR}/build_info.cpp.in ${ACCEL_GENERATED_DIR}/build_info.cpp @ONLY)
set(ACCEL_BUILD_INFO_CPP ${ACCEL_GENERATED_DIR}/build_info.cpp)

add_custom_target(accel_git_revision
  COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${CMAKE_CURRENT_SOURCE_DIR}
          -DOUTPUT=${ACCEL_GENERATED_DIR}/accel/git_revision.hpp
          -P ${CMAKE_CURRENT_LIST_DIR}/git_revision.cmake
  BYPRODUCTS ${ACCEL_GENERATED_DIR}/accel/git_revision.hpp
  COMMENT "Recording git revision")
