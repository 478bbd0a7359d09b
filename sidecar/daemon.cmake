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

add_executable(memdecayctl ${CMAKE_CURRENT_SOURCE_DIR}/memdecayctl.c)
target_link_libraries(memdecayctl PRIVATE md_ctl_parse memdecay_abi)
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
    ${CMAKE_CURRENT_SOURCE_DIR}/sbuf.c)
  target_link_libraries(memdecayd PRIVATE md_host md_loop md_ctl_parse memdecay_abi
    PkgConfig::URING Threads::Threads m)
  target_compile_definitions(memdecayd PRIVATE _GNU_SOURCE)
  install(TARGETS memdecayd RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
else()
  message(STATUS "memdecayd: md_host not there yet; building memdecayctl and the loop only")
endif()
