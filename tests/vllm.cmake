# The vLLM plugin (engine_adapters/vllm) against the real parts: vLLM's CPU
# build and SmolLM2 from the venv scripts/setup_vllm.sh makes (.deps/vllm.env),
# memdecayd daemons of the tests' own (sockets in temporary directories), the
# openai client, memdecay-agent and memdecay-loadgen.  Without the venv the
# tests are skipped (77), never passed.  Python is not built with ASan: normal
# build only.  A test that runs a model runs in one of the two model lanes
# (docs/testing.md, "Two model lanes"), one test at a time in each: core 0
# (RESOURCE_LOCK model_core0, where vLLM's CPU worker binds by itself) or the
# machine's last core (model_core_last; MEMDECAY_TEST_PIN=last makes the harness
# bind vLLM's worker there).  Tests that run no model (vLLM's engine core, its
# attention kernel, the hook table, a `vllm serve` refused before it loads the
# model) take no lane.
if(TARGET memdecayd AND TARGET memdecayctl AND TARGET memdecay)
  set(_md_vllm_env
    "MEMDECAY_LIBRARY=$<TARGET_FILE:memdecay>;MEMDECAY_BUILD=${PROJECT_BINARY_DIR};MEMDECAY_DEPS=${PROJECT_SOURCE_DIR}/.deps")
  foreach(_t plugin core holes offline serve adopt options tier)
    add_test(NAME vllm_${_t}
      COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/vllm/run.sh
        ${PROJECT_SOURCE_DIR}/engine_adapters/vllm/tests/test_${_t}.py)
    set_tests_properties(vllm_${_t} PROPERTIES
      LABELS "vllm;no_asan" TIMEOUT 1500 SKIP_RETURN_CODE 77
      ENVIRONMENT "${_md_vllm_env}")
    if(NOT _t MATCHES "^(plugin|core|holes)$")
      set_tests_properties(vllm_${_t} PROPERTIES RESOURCE_LOCK model_core0)
    endif()
  endforeach()
  # bad requests through the OpenAI endpoint; --quick: the cases, 120 fuzzed
  # requests and one fault server (the full run is test_requests.py alone)
  # sessions across turns (three vLLM starts); --quick: 3-turn conversations
  # pool mode (three vLLM starts); --quick: 2- and 3-turn conversations
  # replicas behind vllm-router (scripts/replicas.py: two vLLMs at once, one core
  # each); --quick: 3-turn conversations
  foreach(_t requests sessions pool replicas)
    add_test(NAME vllm_${_t}
      COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/vllm/run.sh
        ${PROJECT_SOURCE_DIR}/engine_adapters/vllm/tests/test_${_t}.py --quick)
    set_tests_properties(vllm_${_t} PROPERTIES
      LABELS "vllm;no_asan" TIMEOUT 1500 SKIP_RETURN_CODE 77
      RESOURCE_LOCK model_core0 ENVIRONMENT "${_md_vllm_env}")
  endforeach()
  # the lanes' balance: sessions on the last core; the replicas' two vLLMs take both
  set_tests_properties(vllm_sessions PROPERTIES RESOURCE_LOCK model_core_last
    ENVIRONMENT "${_md_vllm_env};MEMDECAY_TEST_PIN=last")
  set_tests_properties(vllm_replicas PROPERTIES RESOURCE_LOCK "model_core0;model_core_last")
  # the hook table of the installed vLLM and the start-up refusals (V2 model
  # runner, async scheduling, another platform); --serve: `vllm serve` itself
  # with the V2 runner selected, refused by name
  add_test(NAME vllm_hooks
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/vllm/run.sh
      ${PROJECT_SOURCE_DIR}/engine_adapters/vllm/tests/test_hooks.py --serve)
  set_tests_properties(vllm_hooks PROPERTIES
    LABELS "vllm;no_asan" TIMEOUT 1500 SKIP_RETURN_CODE 77
    ENVIRONMENT "${_md_vllm_env}")
  # vLLM 0.33.0's engine core: its wheel's Python sources over the same CPU stack
  # (scripts/setup_vllm033.sh, .deps/vllm033.env; skipped without it).  No model
  # runs there: the engine-core test and the hook-table check.
  foreach(_t core hooks)
    add_test(NAME vllm033_${_t}
      COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/vllm/run.sh
        ${PROJECT_SOURCE_DIR}/engine_adapters/vllm/tests/test_${_t}.py)
    set_tests_properties(vllm033_${_t} PROPERTIES
      LABELS "vllm;no_asan" TIMEOUT 1500 SKIP_RETURN_CODE 77
      ENVIRONMENT "${_md_vllm_env};MEMDECAY_VLLM_SETUP=vllm033")
  endforeach()
endif()
