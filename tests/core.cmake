# Unit tests of the core model: convolution problems, device fingerprints, proto conversion, enum
# and algorithm names (checked against the CPU backend's own list), and the shared process helpers
# (back-off, stop signals).
ucudnn_add_test(NAME ucudnn_core_tests
  SOURCES core/problem_test.cc core/fingerprint_test.cc core/proto_convert_test.cc
          core/algorithm_names_test.cc core/engine_config_test.cc core/enum_names_test.cc
          core/backoff_test.cc core/stop_signals_test.cc core/compiled_plans_test.cc
  LIBS ucudnn::core ucudnn::proto ucudnn::stop_signals ucudnn::backend_cpu)
