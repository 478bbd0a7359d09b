# The GPU publisher and the CUDA stats ring, everything a machine without a
# device can check (docs/kernels.md §4-5):
#   gpu_records    device-ring records built on the CPU with the kernel's own
#                  completion code, against host-ring records and the host's
#                  validation
#   gpu_publisher  libmemdecay's md_gpu_* without CUDA or without a device
#                  (clear error, client untouched, host ring still serving a
#                  real memdecayd), and bad arguments
#   gpu_ipc_e2e    two processes on a device (bench/gpu/gpu_e2e.c): engine
#                  with synthetic attention on the GPU, memdecayd draining the
#                  CUDA IPC ring, evictions back, against the host ring; SKIP
#                  (exit 77) without a device
add_executable(check_gpu_records ${CMAKE_CURRENT_SOURCE_DIR}/check_gpu_records.c)
target_link_libraries(check_gpu_records PRIVATE md_host md_kernels memdecay_abi PkgConfig::CHECK m)
target_compile_definitions(check_gpu_records PRIVATE _GNU_SOURCE)
add_test(NAME gpu_records COMMAND check_gpu_records)
set_tests_properties(gpu_records PROPERTIES LABELS "kernels;gpu" TIMEOUT 120)

if(TARGET memdecayd)
  add_executable(check_gpu_publisher ${CMAKE_CURRENT_SOURCE_DIR}/check_gpu_publisher.c)
  target_link_libraries(check_gpu_publisher PRIVATE memdecay_static md_kernels_gpu memdecay_abi
                        PkgConfig::CHECK Threads::Threads)
  target_compile_definitions(check_gpu_publisher PRIVATE _GNU_SOURCE)
  add_test(NAME gpu_publisher COMMAND check_gpu_publisher $<TARGET_FILE:memdecayd>)
  set_tests_properties(gpu_publisher PROPERTIES LABELS "gpu" TIMEOUT 120)
endif()

if(TARGET memdecay-gpu-e2e AND TARGET memdecayd AND TARGET memdecayctl)
  add_test(NAME gpu_ipc_e2e COMMAND memdecay-gpu-e2e --daemon $<TARGET_FILE:memdecayd>
           --ctl $<TARGET_FILE:memdecayctl>)
  set_tests_properties(gpu_ipc_e2e PROPERTIES LABELS "gpu;cuda" TIMEOUT 120
                       SKIP_RETURN_CODE 77)
  # Its harness and host-ring baseline, which need no device.
  add_test(NAME gpu_ipc_e2e_baseline COMMAND memdecay-gpu-e2e --daemon $<TARGET_FILE:memdecayd>
           --ctl $<TARGET_FILE:memdecayctl> --host-only)
  set_tests_properties(gpu_ipc_e2e_baseline PROPERTIES LABELS "gpu" TIMEOUT 120)
endif()
