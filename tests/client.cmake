# libmemdecay and memdecay-loadgen: Check suites and the no-daemon loadgen run.
foreach(t ring seqlock client)
  add_executable(check_${t} ${CMAKE_CURRENT_LIST_DIR}/check_${t}.c)
  target_link_libraries(check_${t} PRIVATE memdecay_abi PkgConfig::CHECK Threads::Threads)
  target_compile_definitions(check_${t} PRIVATE _GNU_SOURCE)
  add_test(NAME check_${t} COMMAND check_${t})
endforeach()
target_link_libraries(check_client PRIVATE memdecay_static)
# Count allocations made by the library on its hot paths.
target_link_options(check_client PRIVATE -Wl,--wrap=malloc -Wl,--wrap=calloc -Wl,--wrap=realloc)

# The engine contract (docs/adapters.md) against a fake 1.1, 1.2, 1.3 and 1.4
# daemon (1.4: the host tier, docs/tier.md).
add_executable(check_contract ${CMAKE_CURRENT_LIST_DIR}/check_contract.c)
target_link_libraries(check_contract PRIVATE memdecay_abi memdecay_static PkgConfig::CHECK
  Threads::Threads)
target_compile_definitions(check_contract PRIVATE _GNU_SOURCE)
target_link_options(check_contract PRIVATE -Wl,--wrap=malloc -Wl,--wrap=calloc -Wl,--wrap=realloc)
add_test(NAME check_contract COMMAND check_contract)

if(TARGET memdecay-loadgen)
  add_test(NAME loadgen_fail_open
    COMMAND memdecay-loadgen --socket /nonexistent/memdecayd.sock --seqs 4
            --pages-per-seq 16 --steps 600 --budget-pages 20 --json)
  set_tests_properties(loadgen_fail_open PROPERTIES
    PASS_REGULAR_EXPRESSION "\"pinned_evicted\": 0, \"protected_evicted\": 0, \"stale_applied\": 0, \"double_freed\": 0, \"over_budget_max_pages\": [01],")
endif()

# Against the real daemon: kill -9 and restart it under two running engines
# (memdecayctl and python3 read the daemon's stats to pace the run).
if(TARGET memdecay-loadgen AND TARGET memdecayd AND TARGET memdecayctl)
  add_test(NAME loadgen_daemon_restart
    COMMAND sh ${PROJECT_SOURCE_DIR}/engine_adapters/loadgen/tests/e2e_reattach.sh
            ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(loadgen_daemon_restart PROPERTIES TIMEOUT 60)
endif()
