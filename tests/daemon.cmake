# memdecayd tests: Check suites for control parsing and the event-loop
# backends, then integration scenarios (real daemon, real loadgen processes,
# a private socket directory each) on both backends.
if(TARGET md_ctl_parse)
  add_executable(check_control ${CMAKE_CURRENT_SOURCE_DIR}/check_control.c)
  target_link_libraries(check_control PRIVATE md_ctl_parse PkgConfig::CHECK)
  add_test(NAME check_control COMMAND check_control)
endif()
# the daemon's metrics table against its three renderings
if(TARGET md_daemon)
  add_executable(check_metrics ${CMAKE_CURRENT_SOURCE_DIR}/check_metrics.c)
  target_link_libraries(check_metrics PRIVATE md_daemon PkgConfig::CHECK)
  target_compile_definitions(check_metrics PRIVATE _GNU_SOURCE)
  add_test(NAME check_metrics COMMAND check_metrics)
endif()
if(TARGET md_loop)
  add_executable(check_loop ${CMAKE_CURRENT_SOURCE_DIR}/check_loop.c)
  target_link_libraries(check_loop PRIVATE md_loop PkgConfig::CHECK)
  target_compile_definitions(check_loop PRIVATE _GNU_SOURCE)
  add_test(NAME check_loop COMMAND check_loop)
endif()

if(TARGET memdecayd AND TARGET memdecayctl AND TARGET memdecay-loadgen)
  # The engine of the `nap` scenario (daemon.nap_ms): steps on a fixed period
  # and reads the daemon's sleeping flag (libmemdecay's internals).
  add_executable(nap_engine ${CMAKE_CURRENT_SOURCE_DIR}/nap_engine.c)
  target_link_libraries(nap_engine PRIVATE memdecay_static)
  target_include_directories(nap_engine PRIVATE ${PROJECT_SOURCE_DIR}/engine_adapters/libmemdecay/src)
  target_compile_definitions(nap_engine PRIVATE _GNU_SOURCE)
  # The engine of the `seqopts` scenario: per-sequence options (ABI 1.2)
  # spoken by hand, and a 1.1 engine beside them.
  add_executable(seqopts_engine ${CMAKE_CURRENT_SOURCE_DIR}/seqopts_engine.c)
  target_link_libraries(seqopts_engine PRIVATE memdecay_abi)
  target_compile_definitions(seqopts_engine PRIVATE _GNU_SOURCE)
  # The same through libmemdecay's md_seq_set_options and md_seq_floor.
  add_executable(seqopts_client ${CMAKE_CURRENT_SOURCE_DIR}/seqopts_client.c)
  target_link_libraries(seqopts_client PRIVATE memdecay_static)
  set(_md_suite ${CMAKE_CURRENT_SOURCE_DIR}/integration/daemon_suite.sh)
  foreach(backend uring epoll)
    foreach(scenario basic ctl_errors robustness reload lambda policy eight kill9 shutdown nap
            seqopts global)
      add_test(NAME daemon_${scenario}_${backend}
        COMMAND bash ${_md_suite} ${scenario} ${backend} $<TARGET_FILE_DIR:memdecayd>)
      set_tests_properties(daemon_${scenario}_${backend} PROPERTIES TIMEOUT 120
        LABELS "integration;daemon")
    endforeach()
  endforeach()
endif()
