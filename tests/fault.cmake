# Fault suite (docs/design.md §3, docs/reliability.md): real memdecayd, loadgen and
# memdecay-hostile (tests/hostile) processes under crashes, restarts, garbage and overload.
# Each scenario is one Python script in tests/fault/ with its own daemon and
# private socket directory.  Label `fault`; the whole suite runs in ~1 minute
# here (2 cores), plus 1-4 minutes for fault_peer_resync_order (resyncs of
# 4 Mi pages; longer under ASan+UBSan).  The libFuzzer harnesses (fuzz/) are
# built from here when -DMEMDECAY_FUZZ=ON (scripts/fuzz.sh runs them).
if(MEMDECAY_FUZZ)
  add_subdirectory(${PROJECT_SOURCE_DIR}/fuzz ${PROJECT_BINARY_DIR}/fuzz-build)
endif()

find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND AND TARGET memdecayd AND TARGET memdecayctl
   AND TARGET memdecay-loadgen AND TARGET memdecay-hostile)
  set(_fault_dir ${CMAKE_CURRENT_SOURCE_DIR}/fault)
  foreach(t engine_crash daemon_restart hostile permissions overload)
    add_test(NAME fault_${t}
      COMMAND ${Python3_EXECUTABLE} ${_fault_dir}/${t}.py $<TARGET_FILE_DIR:memdecayd>)
    set_tests_properties(fault_${t} PROPERTIES TIMEOUT 300 LABELS "fault;integration"
      SKIP_RETURN_CODE 77)
  endforeach()
  # untrusted peers (tests/fault/peers.py): one entry per promise
  foreach(s work resync_order lockout slow_reader group_scope save weight resync_rate
      segment_cap log_flood)
    add_test(NAME fault_peer_${s}
      COMMAND ${Python3_EXECUTABLE} ${_fault_dir}/peers.py ${s} $<TARGET_FILE_DIR:memdecayd>)
    set_tests_properties(fault_peer_${s} PROPERTIES TIMEOUT 300 LABELS "fault;integration"
      SKIP_RETURN_CODE 77 RESOURCE_LOCK md_fault_cpu)
  endforeach()
  # resyncs of 4 Mi pages, several times over (slow under ASan)
  set_tests_properties(fault_peer_resync_order PROPERTIES TIMEOUT 900)
  # the engine-crash scenario again with memdecayd and a libmemdecay engine
  # under valgrind memcheck (ASan builds cannot run under valgrind: no_asan)
  find_program(MD_VALGRIND valgrind)
  if(MD_VALGRIND AND NOT MEMDECAY_SANITIZE)
    add_test(NAME fault_engine_crash_valgrind
      COMMAND ${Python3_EXECUTABLE} ${_fault_dir}/engine_crash.py $<TARGET_FILE_DIR:memdecayd>)
    set_tests_properties(fault_engine_crash_valgrind PROPERTIES TIMEOUT 300
      LABELS "fault;valgrind;no_asan" ENVIRONMENT "MD_FAULT_VALGRIND=1")
    set(_vg fault_engine_crash_valgrind)
  endif()
  # the load-driving scenarios are timing-sensitive: keep them off each other's cores
  set_tests_properties(fault_engine_crash fault_daemon_restart fault_overload fault_hostile
    ${_vg} PROPERTIES RESOURCE_LOCK md_fault_cpu)
endif()
