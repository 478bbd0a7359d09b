# Core suites: params, policies, page state and the eviction index (md_host).
foreach(suite params policy index tier)
  add_executable(check_${suite} ${CMAKE_CURRENT_SOURCE_DIR}/check_${suite}.c)
  target_link_libraries(check_${suite} PRIVATE md_host PkgConfig::CHECK)
  add_test(NAME check_${suite} COMMAND check_${suite})
  set_tests_properties(check_${suite} PROPERTIES TIMEOUT 300)
endforeach()

# The daemon side's rooms depend one way and hold no include circle, and the
# files of md_host, md_daemon and md_loop call each other along a DAG: read
# from their objects
# (docs/architecture.md, "Rooms").
add_test(NAME layering COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/layout/layering.py
  --root ${PROJECT_SOURCE_DIR} --objects $<TARGET_FILE:md_host>
  --objects $<TARGET_FILE:md_daemon> --objects $<TARGET_FILE:md_loop> --nm ${CMAKE_NM})
set_tests_properties(layering PROPERTIES LABELS "no_asan" TIMEOUT 60)

# The policy bench's own cross-check at a small size, for every policy: its
# naive pick, the index and the oracle must agree (it exits 1 on a mismatch).
# One test per row of the policy table, read from the built bench when ctest
# starts (a new policy needs no edit here).
if(TARGET memdecay-bench-policy)
  set(_md_bench_policy_tests ${CMAKE_CURRENT_BINARY_DIR}/bench_policy_oracle_tests.cmake)
  file(GENERATE OUTPUT ${_md_bench_policy_tests} CONTENT [[
set(_bench "$<TARGET_FILE:memdecay-bench-policy>")
execute_process(COMMAND "${_bench}" --list-policies OUTPUT_VARIABLE _pols RESULT_VARIABLE _rc)
string(REGEX MATCHALL "[^\n]+" _pols "${_pols}")
if(NOT _rc EQUAL 0 OR NOT _pols)
  add_test(bench_policy_oracle_list "${_bench}" --list-policies)
endif()
foreach(_pol IN LISTS _pols)
  add_test(bench_policy_oracle_${_pol} "${_bench}" --pages 1000,5000 --policy ${_pol})
  set_tests_properties(bench_policy_oracle_${_pol} PROPERTIES TIMEOUT 120)
endforeach()
]])
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${_md_bench_policy_tests})
endif()

# md_common's JSON string writer, read back by jansson.
if(TARGET md_common)
  pkg_check_modules(JANSSON_CHECK REQUIRED IMPORTED_TARGET jansson)
  add_executable(check_common ${CMAKE_CURRENT_SOURCE_DIR}/check_common.c)
  target_link_libraries(check_common PRIVATE md_common PkgConfig::JANSSON_CHECK PkgConfig::CHECK)
  add_test(NAME check_common COMMAND check_common)
endif()
