# Core suites: params, policies, page state and the eviction index (md_host).
foreach(suite params policy index)
  add_executable(check_${suite} ${CMAKE_CURRENT_SOURCE_DIR}/check_${suite}.c)
  target_link_libraries(check_${suite} PRIVATE md_host PkgConfig::CHECK)
  add_test(NAME check_${suite} COMMAND check_${suite})
  set_tests_properties(check_${suite} PROPERTIES TIMEOUT 300)
endforeach()

# The daemon side's rooms depend one way and hold no include circle, and the
# host's files call each other along a DAG: read from md_host's objects
# (docs/architecture.md, "Rooms").
add_test(NAME layering COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/layout/layering.py
  --root ${PROJECT_SOURCE_DIR} --objects $<TARGET_FILE:md_host> --nm ${CMAKE_NM})
set_tests_properties(layering PROPERTIES LABELS "no_asan" TIMEOUT 60)

# The policy bench's own cross-check at a small size, for every policy: its
# naive pick, the index and the oracle must agree (it exits 1 on a mismatch).
if(TARGET memdecay-bench-policy)
  foreach(pol memdecay memdecay-norm h2o recency random memdecay-turn)
    add_test(NAME bench_policy_oracle_${pol}
      COMMAND memdecay-bench-policy --pages 1000,5000 --policy ${pol})
    set_tests_properties(bench_policy_oracle_${pol} PROPERTIES TIMEOUT 120)
  endforeach()
endif()

# md_common's JSON string writer, read back by jansson.
if(TARGET md_common)
  pkg_check_modules(JANSSON_CHECK REQUIRED IMPORTED_TARGET jansson)
  add_executable(check_common ${CMAKE_CURRENT_SOURCE_DIR}/check_common.c)
  target_link_libraries(check_common PRIVATE md_common PkgConfig::JANSSON_CHECK PkgConfig::CHECK)
  add_test(NAME check_common COMMAND check_common)
endif()
