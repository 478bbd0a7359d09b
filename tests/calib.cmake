# Calibration: the estimator, tracker and journal (check_calibrate), then
# integration against a real memdecayd with real memdecay-loadgen engines
# (calibrate --apply changes λ live; --from replays the journal), and the
# CUDA stats-ring HELLO: refused by a build without CUDA, a clean no-device
# error from a CUDA build on a machine without a GPU.
if(TARGET md_calib)
  add_executable(check_calibrate ${CMAKE_CURRENT_SOURCE_DIR}/check_calibrate.c)
  target_link_libraries(check_calibrate PRIVATE md_calib PkgConfig::CHECK m)
  target_compile_definitions(check_calibrate PRIVATE _GNU_SOURCE)
  add_test(NAME check_calibrate COMMAND check_calibrate)
  set_tests_properties(check_calibrate PROPERTIES LABELS "calib" TIMEOUT 120)
endif()

if(TARGET memdecayd AND TARGET memdecayctl AND TARGET memdecay-loadgen)
  set(_md_calib_suite ${CMAKE_CURRENT_SOURCE_DIR}/integration/calib_suite.sh)
  if(MEMDECAY_CUDA)
    set(_md_calib_cuda cuda)
  else()
    set(_md_calib_cuda nocuda)
  endif()
  foreach(scenario apply from cuda_hello)
    add_test(NAME calib_${scenario}
      COMMAND bash ${_md_calib_suite} ${scenario} ${_md_calib_cuda} $<TARGET_FILE_DIR:memdecayd>)
    set_tests_properties(calib_${scenario} PROPERTIES TIMEOUT 120 LABELS "integration;calib")
  endforeach()
endif()
