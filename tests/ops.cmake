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
    endif()
  endif()
endif()
