# memdecayd and memdecayctl (included by sidecar/CMakeLists.txt).
# md_loop and md_ctl_parse need no policy host, so their unit tests build
# even before sidecar/host does.
add_library(md_loop STATIC
  ${CMAKE_CURRENT_SOURCE_DIR}/loop.c
  ${CMAKE_CURRENT_SOURCE_DIR}/loop_uring.c
  ${CMAKE_CURRENT_SOURCE_DIR}/loop_epoll.c)
target_include_directories(md_loop PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(md_loop PUBLIC PkgConfig::URING)
target_compile_definitions(md_loop PRIVATE _GNU_SOURCE)

add_library(md_ctl_parse STATIC ${CMAKE_CURRENT_SOURCE_DIR}/ctl_parse.c)
target_include_directories(md_ctl_parse PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(md_ctl_parse PUBLIC memdecay_abi m)

# Calibration: the estimator, the journal and the report, shared by memdecayd
# (live) and memdecayctl (calibrate --from FILE).  Needs md__sbuf_* from the
# program (sbuf.c).
add_library(md_calib STATIC
  ${CMAKE_CURRENT_SOURCE_DIR}/calibrate.c
  ${CMAKE_CURRENT_SOURCE_DIR}/journal.c
  ${CMAKE_CURRENT_SOURCE_DIR}/calib_report.c)
target_include_directories(md_calib PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(md_calib PUBLIC memdecay_abi m)
target_compile_definitions(md_calib PRIVATE _GNU_SOURCE)

add_executable(memdecayctl ${CMAKE_CURRENT_SOURCE_DIR}/memdecayctl.c
  ${CMAKE_CURRENT_SOURCE_DIR}/ctl_calibrate.c
  ${CMAKE_CURRENT_SOURCE_DIR}/sbuf.c)
target_link_libraries(memdecayctl PRIVATE md_ctl_parse md_calib memdecay_abi m)
target_compile_definitions(memdecayctl PRIVATE _GNU_SOURCE)
install(TARGETS memdecayctl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

if(TARGET md_host)
  add_executable(memdecayd
    ${CMAKE_CURRENT_SOURCE_DIR}/memdecayd.c
    ${CMAKE_CURRENT_SOURCE_DIR}/server.c
    ${CMAKE_CURRENT_SOURCE_DIR}/attach.c
    ${CMAKE_CURRENT_SOURCE_DIR}/engine.c
    ${CMAKE_CURRENT_SOURCE_DIR}/control.c
    ${CMAKE_CURRENT_SOURCE_DIR}/log.c
    ${CMAKE_CURRENT_SOURCE_DIR}/sbuf.c
    ${CMAKE_CURRENT_SOURCE_DIR}/calib_daemon.c
    ${CMAKE_CURRENT_SOURCE_DIR}/cuda_transport.c
    ${CMAKE_CURRENT_SOURCE_DIR}/notify.c
    ${CMAKE_CURRENT_SOURCE_DIR}/metrics_http.c)
  # md_kernels_gpu: the CUDA IPC ring reader, or its stub without MEMDECAY_CUDA.
  target_link_libraries(memdecayd PRIVATE md_host md_loop md_ctl_parse md_calib md_kernels_gpu
    memdecay_abi
    PkgConfig::URING PkgConfig::MICROHTTPD Threads::Threads m)
  target_compile_definitions(memdecayd PRIVATE _GNU_SOURCE)
  install(TARGETS memdecayd RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
else()
  message(STATUS "memdecayd: md_host not there yet; building memdecayctl and the loop only")
endif()
