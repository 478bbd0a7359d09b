# The transformers adapter (engine_adapters/transformers) against the real
# parts: a private memdecayd, libmemdecay through the Python binding, kvpress
# and SmolLM2 in HF format, from the venv scripts/setup_kvpress.sh makes
# (.deps/kvpress.env).  Without that file the test is skipped (77), never
# passed.  Python is not built with ASan: normal build only.  These tests take
# turns on the machine's last core (RESOURCE_LOCK model_core_last, MEMDECAY_TEST_PIN:
# tests/transformers/run.sh), beside the vLLM tests' lane on core 0.
if(TARGET memdecayd AND TARGET memdecayctl AND TARGET memdecay)
  add_test(NAME transformers_adapter
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/transformers/run.sh
      ${PROJECT_SOURCE_DIR}/engine_adapters/transformers/tests/test_adapter.py)
  set_tests_properties(transformers_adapter PROPERTIES
    LABELS "transformers;no_asan" TIMEOUT 300 SKIP_RETURN_CODE 77 RESOURCE_LOCK model_core_last
    ENVIRONMENT "MEMDECAY_LIBRARY=$<TARGET_FILE:memdecay>;MEMDECAY_BIN=$<TARGET_FILE_DIR:memdecayd>;MEMDECAY_DEPS=${PROJECT_SOURCE_DIR}/.deps;MEMDECAY_SRC=${PROJECT_SOURCE_DIR};MEMDECAY_TEST_PIN=last")
endif()

# The host tier and recall (docs/tier.md) in the online adapter: restored
# entries bit for bit, logits equal to the never-evicted reference's, the tier
# budget live, memdecayd killed mid-recall.  About a minute.
if(TARGET memdecayd AND TARGET memdecayctl AND TARGET memdecay)
  add_test(NAME transformers_tier
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/transformers/run.sh
      ${PROJECT_SOURCE_DIR}/engine_adapters/transformers/tests/test_tier.py)
  set_tests_properties(transformers_tier PROPERTIES
    LABELS "transformers;no_asan" TIMEOUT 300 SKIP_RETURN_CODE 77 RESOURCE_LOCK model_core_last
    ENVIRONMENT "MEMDECAY_LIBRARY=$<TARGET_FILE:memdecay>;MEMDECAY_BIN=$<TARGET_FILE_DIR:memdecayd>;MEMDECAY_DEPS=${PROJECT_SOURCE_DIR}/.deps;MEMDECAY_SRC=${PROJECT_SOURCE_DIR};MEMDECAY_TEST_PIN=last")
endif()

# The same adapter on Gemma 3 270M, whose layers mix a sliding window with full
# attention: the cache that keeps every entry, the window by true position, the
# Gemma chat format, one-shot and online past the window.  About 20 s; skipped
# (77) when setup_kvpress.sh has not made the Gemma model.
if(TARGET memdecayd AND TARGET memdecayctl AND TARGET memdecay)
  add_test(NAME transformers_gemma
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/transformers/run.sh
      ${PROJECT_SOURCE_DIR}/engine_adapters/transformers/tests/test_gemma.py)
  set_tests_properties(transformers_gemma PROPERTIES
    LABELS "transformers;no_asan" TIMEOUT 300 SKIP_RETURN_CODE 77 RESOURCE_LOCK model_core_last
    ENVIRONMENT "MEMDECAY_LIBRARY=$<TARGET_FILE:memdecay>;MEMDECAY_BIN=$<TARGET_FILE_DIR:memdecayd>;MEMDECAY_DEPS=${PROJECT_SOURCE_DIR}/.deps;MEMDECAY_SRC=${PROJECT_SOURCE_DIR};MEMDECAY_TEST_PIN=last")
endif()

# The kvpress comparison's quick mode (bench/kvpress): every row in both modes
# on one trace, and the report's completeness check; then the recall rows (a
# host tier, each question through the engine) and the recall report's.  About
# 11 minutes.
if(TARGET memdecayd AND TARGET memdecayctl AND TARGET memdecay)
  add_test(NAME kvpress_quick
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/transformers/kvpress_quick.sh)
  set_tests_properties(kvpress_quick PROPERTIES
    LABELS "transformers;no_asan" TIMEOUT 1200 SKIP_RETURN_CODE 77 RESOURCE_LOCK model_core_last
    ENVIRONMENT "MEMDECAY_LIBRARY=$<TARGET_FILE:memdecay>;MEMDECAY_BIN=$<TARGET_FILE_DIR:memdecayd>;MEMDECAY_DEPS=${PROJECT_SOURCE_DIR}/.deps;MEMDECAY_SRC=${PROJECT_SOURCE_DIR};MEMDECAY_TEST_PIN=last")
endif()

# The fair comparison's harness (bench/kvpress/fair.py): online StreamingLLM keeps exactly
# sinks plus the newest tokens (read back from the cache), kvpress's own top-k order does not,
# and the pinned and paged variants keep what they promise.  About a minute.
if(TARGET memdecayd AND TARGET memdecayctl AND TARGET memdecay)
  add_test(NAME kvpress_fair
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/transformers/run.sh
      ${PROJECT_SOURCE_DIR}/bench/kvpress/test_fair.py)
  set_tests_properties(kvpress_fair PROPERTIES
    LABELS "transformers;no_asan" TIMEOUT 600 SKIP_RETURN_CODE 77 RESOURCE_LOCK model_core0
    ENVIRONMENT "MEMDECAY_LIBRARY=$<TARGET_FILE:memdecay>;MEMDECAY_BIN=$<TARGET_FILE_DIR:memdecayd>;MEMDECAY_DEPS=${PROJECT_SOURCE_DIR}/.deps;MEMDECAY_SRC=${PROJECT_SOURCE_DIR};MEMDECAY_TEST_PIN=first")
endif()

