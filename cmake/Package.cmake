# The installable package (docs/design/0016): `cmake --install <build> --prefix <p>` gives
#   <p>/bin/accel                               the launcher (no torch)
#   <p>/libexec/accel/accel-worker              what it starts: ranks, merge-weights (links torch)
#   <p>/libexec/accel/accel-report              what `accel report` starts (links cairo)
#   <p>/lib/libaccel.so                         the public API (accel::accel)
#   <p>/lib/libaccel_cuda.so                    its CUDA plugin, loaded on a GPU (with the CUDA wheel)
#   <p>/include/accel/*.hpp                     its headers (torch and the standard library only)
#   <p>/lib/cmake/accel/accelConfig.cmake       find_package(accel), which finds the same torch
# and the build tree holds the same config, so find_package(accel) works against either.
include(CMakePackageConfigHelpers)
set(ACCEL_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/accel")

install(TARGETS accel RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS accel-worker RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/accel)
install(TARGETS accel-report RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/accel)
install(TARGETS accel_api EXPORT accelTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TARGET accel_cuda)  # accel's CUDA plugin, beside libaccel.so (docs/design/0029)
  install(TARGETS accel_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/accel DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT accelTargets NAMESPACE accel:: DESTINATION ${ACCEL_CMAKE_DIR})
export(EXPORT accelTargets NAMESPACE accel:: FILE ${PROJECT_BINARY_DIR}/accelTargets.cmake)

# What the config checks a consumer's torch against: libtorch has no stable C++ ABI across releases.
set(ACCEL_TORCH_VERSION "${Torch_VERSION}")
get_filename_component(ACCEL_TORCH_DIR "${Torch_DIR}" ABSOLUTE)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/accelConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/accelConfig.cmake
                              INSTALL_DESTINATION ${ACCEL_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/accelConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
# The torch-libraries check travels with the config (the build tree's config finds it beside itself).
configure_file(${PROJECT_SOURCE_DIR}/cmake/accelTorchCheck.cmake ${PROJECT_BINARY_DIR}/accelTorchCheck.cmake COPYONLY)
install(FILES ${PROJECT_BINARY_DIR}/accelConfig.cmake ${PROJECT_BINARY_DIR}/accelConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/accelTorchCheck.cmake
        DESTINATION ${ACCEL_CMAKE_DIR})
