# Planner server tests. Unit: the pure pieces (configuration, auth, metrics, caches, plan keys,
# the notification watcher with a fake source). Integration: a real gRPC server on an ephemeral
# loopback port with real clients, against a throw-away PostgreSQL (ucudnn::test_postgres).
ucudnn_add_test(NAME ucudnn_server_unit_tests
  SOURCES server/config_test.cc server/auth_test.cc server/metrics_test.cc
          server/caches_test.cc server/watcher_test.cc server/thread_pool_test.cc
          server/request_validation_test.cc
  LIBS ucudnn::server ucudnn::proto ${UCUDNN_HTTPLIB_TARGET}
  LABELS unit)
# The configuration test runs `ucudnn-server --help`.
add_dependencies(ucudnn_server_unit_tests ucudnn-server)
if(TARGET ucudnn::test_postgres)
  ucudnn_add_test(NAME ucudnn_server_tests
    SOURCES server/server_test.cc
    LIBS ucudnn::server ucudnn::planner ucudnn::proto ucudnn::test_postgres
         PkgConfig::PQXX ${UCUDNN_HTTPLIB_TARGET}
    LABELS integration
    TIMEOUT 600)
endif()
