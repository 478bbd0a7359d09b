# Kernels: CPU page mass and flash reference against double references
# (check_kernels), the CUDA API's clean failures without a device
# (check_kernels_cuda, CUDA builds only) and the CUDA ring's error paths
# (check_kernels_ring: stub or no-device).
add_executable(check_kernels ${CMAKE_CURRENT_SOURCE_DIR}/check_kernels.c)
target_link_libraries(check_kernels PRIVATE md_kernels PkgConfig::CHECK m)
add_test(NAME kernels COMMAND check_kernels)
set_tests_properties(kernels PROPERTIES LABELS "kernels" TIMEOUT 300)

add_executable(check_kernels_ring ${CMAKE_CURRENT_SOURCE_DIR}/check_kernels_ring.c)
target_link_libraries(check_kernels_ring PRIVATE md_kernels_gpu memdecay_abi PkgConfig::CHECK)
add_test(NAME kernels_ring COMMAND check_kernels_ring)
set_tests_properties(kernels_ring PROPERTIES LABELS "kernels" TIMEOUT 120)

if(MEMDECAY_CUDA)
  add_executable(check_kernels_cuda ${CMAKE_CURRENT_SOURCE_DIR}/check_kernels_cuda.c)
  target_link_libraries(check_kernels_cuda PRIVATE md_kernels_cuda PkgConfig::CHECK m)
  add_test(NAME kernels_cuda COMMAND check_kernels_cuda)
  set_tests_properties(kernels_cuda PROPERTIES LABELS "kernels;cuda" TIMEOUT 300)
endif()
