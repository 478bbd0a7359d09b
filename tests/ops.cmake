# Operating memdecayd like a node daemon (docs/operations.md): systemd
# notification and socket activation, the Prometheus endpoint scraped by a
# real Prometheus, the .deb, the man pages and unit files.  Each test makes a
# private temp directory, uses loopback only, and stops what it starts.
if(TARGET memdecayd AND TARGET memdecayctl)
  find_package(Python3 COMPONENTS Interpreter)
  set(_ops ${CMAKE_CURRENT_SOURCE_DIR}/ops)
  if(Python3_Interpreter_FOUND)
    add_test(NAME ops_systemd_notify
      COMMAND ${Python3_EXECUTABLE} ${_ops}/notify.py $<TARGET_FILE_DIR:memdecayd>)
    add_test(NAME ops_socket_activation
      COMMAND ${Python3_EXECUTABLE} ${_ops}/socket_activation.py $<TARGET_FILE_DIR:memdecayd>)
    set_tests_properties(ops_systemd_notify ops_socket_activation PROPERTIES
      TIMEOUT 120 LABELS "integration;ops")
    if(TARGET memdecay-loadgen)
      add_test(NAME ops_prometheus
        COMMAND ${Python3_EXECUTABLE} ${_ops}/prometheus.py $<TARGET_FILE_DIR:memdecayd>)
      set_tests_properties(ops_prometheus PROPERTIES TIMEOUT 180 LABELS "integration;ops")
      add_test(NAME ops_syscall_filter
        COMMAND ${Python3_EXECUTABLE} ${_ops}/syscalls.py $<TARGET_FILE_DIR:memdecayd>
                ${PROJECT_SOURCE_DIR}/packaging/systemd/memdecayd.service)
      set_tests_properties(ops_syscall_filter PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77
        LABELS "integration;ops")
    endif()
  endif()
endif()

# The .deb: cpack from this build tree, unpacked by dpkg into a scratch root.
find_program(MD_DPKG_DEB dpkg-deb)
if(TARGET memdecayd AND TARGET memdecayctl AND MD_DPKG_DEB)
  add_test(NAME ops_deb COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ops/deb.sh ${PROJECT_BINARY_DIR})
  set_tests_properties(ops_deb PROPERTIES TIMEOUT 300 LABELS "ops;package")
endif()

# The man pages render without groff warnings and agree with --help and
# docs/operations.md.
if(TARGET memdecayd AND TARGET memdecayctl)
  add_test(NAME ops_man COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ops/man.sh
    ${PROJECT_SOURCE_DIR}/man $<TARGET_FILE_DIR:memdecayd> ${PROJECT_SOURCE_DIR}/docs/operations.md)
  set_tests_properties(ops_man PROPERTIES TIMEOUT 60 LABELS "ops")
endif()
