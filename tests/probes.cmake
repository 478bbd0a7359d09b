# The eviction-probe benchmark (bench/probes/): the generator's self-checks, the runner's pipeline
# against a stand-in agent (no model needed), and — when memdecay-agent was built and the model is
# installed — the `--quick` smoke run on the real model (exit 77 = skipped otherwise).
find_program(MEMDECAY_PYTHON3 NAMES python3)
if(MEMDECAY_PYTHON3)
  set(_probes ${CMAKE_SOURCE_DIR}/bench/probes)
  add_test(NAME probes_gen_selfcheck
           COMMAND ${MEMDECAY_PYTHON3} ${_probes}/gen_traces.py --self-check)
  add_test(NAME probes_pipeline_fake
           COMMAND ${MEMDECAY_PYTHON3} ${_probes}/selftest.py --workdir ${CMAKE_CURRENT_BINARY_DIR}/probes-selftest)
  add_test(NAME probes_quick
           COMMAND ${MEMDECAY_PYTHON3} ${_probes}/run.py --quick --skip-missing
                   --agent ${CMAKE_BINARY_DIR}/bin/memdecay-agent
                   --out ${CMAKE_CURRENT_BINARY_DIR}/probes-quick/runs.jsonl --fresh)
  set_tests_properties(probes_gen_selfcheck probes_pipeline_fake PROPERTIES LABELS "no_asan;probes")
  set_tests_properties(probes_quick PROPERTIES LABELS "no_asan;probes;model" SKIP_RETURN_CODE 77
                       RUN_SERIAL TRUE TIMEOUT 600)
endif()
