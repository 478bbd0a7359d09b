# The Python binding (engine_adapters/python) against the real libmemdecay and
# a real memdecayd.  Python's interpreter is not built with ASan, so the test
# runs in the normal build only (no_asan); check_client covers the C side.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_executable(py_layout ${CMAKE_CURRENT_SOURCE_DIR}/python/layout.c)
  target_link_libraries(py_layout PRIVATE memdecay)
  add_test(NAME python_binding
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_binding.py)
  set_tests_properties(python_binding PROPERTIES
    LABELS "python;no_asan" TIMEOUT 120
    ENVIRONMENT "MEMDECAY_LIBRARY=$<TARGET_FILE:memdecay>;MEMDECAY_BIN=$<TARGET_FILE_DIR:memdecayd>;MEMDECAY_LAYOUT=$<TARGET_FILE:py_layout>")
  # the region and policy names Python reads from the library are the ABI's
  add_test(NAME python_names
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_names.py)
  set_tests_properties(python_names PROPERTIES
    LABELS "python;no_asan" TIMEOUT 60
    ENVIRONMENT "MEMDECAY_LIBRARY=$<TARGET_FILE:memdecay>")
endif()
