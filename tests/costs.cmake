# Expected seconds of the long tests (docs/testing.md, "The table"): ctest starts
# the costliest first, so both model lanes are busy from the first minute and the
# short suites fill the gaps.  A fresh build directory has no measured costs of
# its own (ctest keeps them in Testing/Temporary/CTestCostData.txt after a run,
# and those win from then on).
set(_md_costs
  kvpress_quick 300 vllm_sessions 200 transformers_tier 120 vllm_pool 130
  vllm_requests 120 vllm_offline 110 vllm_serve 100 transformers_adapter 90
  vllm_replicas 80 fault_peer_resync_order 60 llama_agent_fail_open 70
  vllm_plugin 60 kvpress_fair 60 transformers_gemma 40)
while(_md_costs)
  list(POP_FRONT _md_costs _name _cost)
  if(TEST ${_name})
    set_tests_properties(${_name} PROPERTIES COST ${_cost})
  endif()
endwhile()
