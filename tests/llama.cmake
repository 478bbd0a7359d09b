# tests/llama.cmake — the llama.cpp adapter on the real model (MEMDECAY_LLAMA=ON).
# The model path comes from MEMDECAY_LLAMA_MODEL (cache or environment) or
# from .deps/llama.env, written by scripts/setup_llama.sh.
if(NOT MEMDECAY_LLAMA OR NOT TARGET md_llama)
  return()
endif()

set(MEMDECAY_LLAMA_MODEL "$ENV{MEMDECAY_LLAMA_MODEL}" CACHE FILEPATH "GGUF model for the llama tests")
if(NOT MEMDECAY_LLAMA_MODEL AND EXISTS "${PROJECT_SOURCE_DIR}/.deps/llama.env")
  file(STRINGS "${PROJECT_SOURCE_DIR}/.deps/llama.env" _md_env REGEX "^MEMDECAY_LLAMA_MODEL=")
  string(REGEX REPLACE "^MEMDECAY_LLAMA_MODEL=" "" _md_model "${_md_env}")
  set(MEMDECAY_LLAMA_MODEL "${_md_model}" CACHE FILEPATH "GGUF model for the llama tests" FORCE)
endif()
if(NOT EXISTS "${MEMDECAY_LLAMA_MODEL}")
  message(WARNING "llama tests: no model (run scripts/setup_llama.sh); tests not registered")
  return()
endif()

add_executable(check_llama ${CMAKE_CURRENT_LIST_DIR}/check_llama.c)
target_link_libraries(check_llama PRIVATE md_llama PkgConfig::CHECK)
set_target_properties(check_llama PROPERTIES BUILD_RPATH "${MD_LLAMA_LIBDIR}")

set(_md_llama_env "MEMDECAY_LLAMA_MODEL=${MEMDECAY_LLAMA_MODEL}")
if(TARGET memdecayd)
  list(APPEND _md_llama_env "MEMDECAYD=$<TARGET_FILE:memdecayd>")
endif()
# One ctest entry per case, so a failure names the behaviour.
foreach(case transparency cell_map eviction two_sequences unreachable_budget fail_open reattach labels
             tier tier_daemon)
  add_test(NAME llama_${case} COMMAND check_llama)
  set_tests_properties(llama_${case} PROPERTIES
    ENVIRONMENT "${_md_llama_env};MD_LLAMA_TEST=${case};CK_DEFAULT_TIMEOUT=240"
    LABELS "llama" TIMEOUT 300)
endforeach()

# Gemma 3 270M, a model with sliding-window layers (two KV caches in llama.cpp):
# the adapter's two cell maps against llama.cpp's dumps, and the Gemma chat format.
set(MEMDECAY_GEMMA_GGUF "$ENV{MEMDECAY_GEMMA_GGUF}" CACHE FILEPATH "Gemma 3 GGUF for the llama tests")
if(NOT MEMDECAY_GEMMA_GGUF AND EXISTS "${PROJECT_SOURCE_DIR}/.deps/llama.env")
  file(STRINGS "${PROJECT_SOURCE_DIR}/.deps/llama.env" _md_genv REGEX "^MEMDECAY_GEMMA_GGUF=")
  string(REGEX REPLACE "^MEMDECAY_GEMMA_GGUF=" "" _md_gemma "${_md_genv}")
  set(MEMDECAY_GEMMA_GGUF "${_md_gemma}" CACHE FILEPATH "Gemma 3 GGUF for the llama tests" FORCE)
endif()
if(EXISTS "${MEMDECAY_GEMMA_GGUF}")
  add_executable(check_llama_gemma ${CMAKE_CURRENT_LIST_DIR}/check_llama_gemma.c)
  target_link_libraries(check_llama_gemma PRIVATE md_llama PkgConfig::CHECK)
  set_target_properties(check_llama_gemma PROPERTIES BUILD_RPATH "${MD_LLAMA_LIBDIR}")
  foreach(case gemma_swa gemma_labels)
    add_test(NAME llama_${case} COMMAND check_llama_gemma)
    set_tests_properties(llama_${case} PROPERTIES
      ENVIRONMENT "MEMDECAY_GEMMA_GGUF=${MEMDECAY_GEMMA_GGUF};MD_LLAMA_TEST=${case};CK_DEFAULT_TIMEOUT=240"
      LABELS "llama" TIMEOUT 300)
  endforeach()
else()
  message(WARNING "llama tests: no Gemma 3 GGUF (run scripts/setup_llama.sh); Gemma tests not registered")
endif()

# The installed llama.cpp holds no instruction a machine of our kind may refuse.
add_test(NAME llama_portable_build
  COMMAND ${CMAKE_CURRENT_LIST_DIR}/llama/portable_build.sh "${MD_LLAMA_LIBDIR}"
          "${PROJECT_SOURCE_DIR}/.deps/llama.env")
set_tests_properties(llama_portable_build PROPERTIES LABELS "llama" TIMEOUT 300)

# The llama.cpp facts the adapter relies on, on this build.
add_test(NAME llama_graph_facts
  COMMAND ${CMAKE_CURRENT_LIST_DIR}/llama/graph_probe.sh
          $<TARGET_FILE:md_llama_graph_probe> "${MEMDECAY_LLAMA_MODEL}")
set_tests_properties(llama_graph_facts PROPERTIES LABELS "llama" TIMEOUT 120)

# The agent end to end: fail-open with no daemon, and a daemon killed mid-trace.
if(TARGET memdecay-agent)
  add_test(NAME llama_agent_fail_open
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/llama/agent_fail_open.sh
            $<TARGET_FILE:memdecay-agent> "${MEMDECAY_LLAMA_MODEL}"
            ${PROJECT_SOURCE_DIR}/examples/agent_trace.jsonl)
  set_tests_properties(llama_agent_fail_open PROPERTIES LABELS "llama" TIMEOUT 600)
  # Its private daemon dies with it: SIGKILL or a crash mid-trace.
  add_test(NAME llama_agent_private_daemon
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/llama/agent_private_daemon.sh
            $<TARGET_FILE:memdecay-agent> "${MEMDECAY_LLAMA_MODEL}"
            ${PROJECT_SOURCE_DIR}/examples/agent_trace.jsonl)
  set_tests_properties(llama_agent_private_daemon PROPERTIES LABELS "llama" TIMEOUT 300)
  # A malformed trace is refused with the file, line and column or key at fault.
  add_test(NAME llama_agent_bad_trace
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/llama/agent_bad_trace.sh
            $<TARGET_FILE:memdecay-agent> "${MEMDECAY_LLAMA_MODEL}")
  set_tests_properties(llama_agent_bad_trace PROPERTIES LABELS "llama" TIMEOUT 60)
endif()
