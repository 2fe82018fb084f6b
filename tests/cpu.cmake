# The CPU backend (checked against a float64 reference), the micro-batch executor, random data
# and the backend factory. Small problems: the whole binary runs in seconds.
ucudnn_add_test(NAME ucudnn_cpu_tests
  SOURCES
    ${CMAKE_CURRENT_SOURCE_DIR}/cpu/cpu_backend_test.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/cpu/executor_test.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/cpu/random_fill_test.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/cpu/backend_factory_test.cc
  LIBS ucudnn::core ucudnn::backends)
