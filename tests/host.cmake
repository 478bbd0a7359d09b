# The policy table with a test-only policy added the documented way
# (docs/policies.md "Adding a policy"): md_host's own sources built again with
# MEMDECAY_TEST_POLICY, which switches on sidecar/host/policy_test_lifo.c, its
# row in policy.c and its host-side id after the ABI's (MD__POLICY_TEST_LIFO,
# policy.h) — nothing else; the ABI header is the same in every build.  check_policy_table runs
# it through names, parameters and decisions; check_index_test_policy runs the
# oracle comparison on it (only that tcase: the rest is check_index's).
add_library(md_host_test_policy STATIC ${MD_HOST_SOURCES})
target_include_directories(md_host_test_policy PUBLIC ${PROJECT_SOURCE_DIR}/sidecar/host)
target_compile_definitions(md_host_test_policy PUBLIC MEMDECAY_TEST_POLICY)
target_link_libraries(md_host_test_policy PUBLIC memdecay_abi m)

add_executable(check_policy_table ${CMAKE_CURRENT_SOURCE_DIR}/check_policy_table.c)
target_link_libraries(check_policy_table PRIVATE md_host_test_policy PkgConfig::CHECK)
add_test(NAME check_policy_table COMMAND check_policy_table)
set_tests_properties(check_policy_table PROPERTIES TIMEOUT 120)

add_executable(check_index_test_policy ${CMAKE_CURRENT_SOURCE_DIR}/check_index.c)
target_link_libraries(check_index_test_policy PRIVATE md_host_test_policy PkgConfig::CHECK)
add_test(NAME check_index_test_policy COMMAND check_index_test_policy)
set_tests_properties(check_index_test_policy PROPERTIES TIMEOUT 300
  ENVIRONMENT "CK_RUN_CASE=test_policy")
