# The worker daemon. Unit tests of its pure logic (flags), of the benchmark engine
# and the offline mode on a CPU backend playing a GPU in trouble (lost device, out of memory),
# and integration tests against a throw-away PostgreSQL: the daemon in-process and the real
# ucudnn-worker binary as a child process (SIGKILL, SIGTERM, SIGSTOP, --once). CPU backend and
# tiny problems throughout.
ucudnn_add_test(NAME ucudnn_worker_unit_tests
  SOURCES worker/options_test.cc worker/benchmark_test.cc worker/result_check_test.cc
    worker/offline_test.cc worker/metrics_test.cc worker/idle_gate_test.cc
    worker/search_prior_test.cc worker/size_rule_test.cc worker/compile_pool_test.cc
  LIBS ucudnn::worker ucudnn::backends)

ucudnn_add_test(NAME ucudnn_worker_tests
  SOURCES worker/daemon_test.cc worker/process_test.cc
  LIBS ucudnn::worker ucudnn::backends ucudnn::test_postgres ${UCUDNN_HTTPLIB_TARGET}
       PkgConfig::PQXX
  LABELS integration
  TIMEOUT 300)
# The process tests start bin/ucudnn-worker.
add_dependencies(ucudnn_worker_tests ucudnn-worker)
