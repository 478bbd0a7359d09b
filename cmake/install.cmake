# install.cmake — libmemdecay for other builds: the libraries, the headers
# under include/memdecay, memdecay.pc and a CMake package (memdecay::memdecay,
# memdecay::memdecay_static), plus the executables that exist.
include(CMakePackageConfigHelpers)

install(TARGETS memdecay memdecay_static memdecay_abi
  EXPORT memdecayTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/memdecay)
install(FILES
  ${PROJECT_SOURCE_DIR}/engine_adapters/libmemdecay/include/memdecay.h
  ${PROJECT_SOURCE_DIR}/shm_layout/memdecay_abi.h
  ${PROJECT_SOURCE_DIR}/shm_layout/memdecay_ring.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/memdecay)

foreach(exe memdecayd memdecayctl memdecay-loadgen memdecay-bench-policy)
  if(TARGET ${exe})
    install(TARGETS ${exe} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()

install(EXPORT memdecayTargets
  NAMESPACE memdecay::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/memdecay)
file(WRITE ${PROJECT_BINARY_DIR}/memdecayConfig.cmake.in [=[
@PACKAGE_INIT@
include("${CMAKE_CURRENT_LIST_DIR}/memdecayTargets.cmake")
check_required_components(memdecay)
]=])
configure_package_config_file(${PROJECT_BINARY_DIR}/memdecayConfig.cmake.in
  ${PROJECT_BINARY_DIR}/memdecayConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/memdecay)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/memdecayConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/memdecayConfig.cmake
  ${PROJECT_BINARY_DIR}/memdecayConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/memdecay)

# pkg-config: paths relative to ${prefix} so --prefix at install time works.
file(WRITE ${PROJECT_BINARY_DIR}/memdecay.pc.in [=[
prefix=${pcfiledir}/../..
exec_prefix=${prefix}
libdir=${prefix}/@CMAKE_INSTALL_LIBDIR@
includedir=${prefix}/@CMAKE_INSTALL_INCLUDEDIR@

Name: memdecay
Description: MemDecay engine-side client library (KV-cache eviction sidecar)
Version: @PROJECT_VERSION@
Libs: -L${libdir} -lmemdecay
Libs.private: -lm
Cflags: -I${includedir}/memdecay
]=])
configure_file(${PROJECT_BINARY_DIR}/memdecay.pc.in ${PROJECT_BINARY_DIR}/memdecay.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/memdecay.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

if(BUILD_TESTING OR NOT DEFINED BUILD_TESTING)
  add_test(NAME install_consumer
    COMMAND sh ${PROJECT_SOURCE_DIR}/engine_adapters/libmemdecay/tests/install_consumer.sh
            ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR}/engine_adapters/libmemdecay/tests/consumer.c
            ${CMAKE_C_COMPILER} "$<$<BOOL:${MEMDECAY_SANITIZE}>:-fsanitize=address,undefined>")
endif()
