# Planner server tests. Unit: the pure pieces (configuration, auth, metrics, caches, plan keys,
# the notification watcher with a fake source). Integration: a real gRPC server on an ephemeral
# loopback port with real clients, against a throw-away PostgreSQL (ucudnn_test_postgres).
if(TARGET httplib::httplib)
  set(UCUDNN_SERVER_TEST_HTTPLIB httplib::httplib)
else()
  set(UCUDNN_SERVER_TEST_HTTPLIB PkgConfig::CPP_HTTPLIB)  # made GLOBAL by server/CMakeLists.txt
endif()
ucudnn_add_test(NAME ucudnn_server_unit_tests
  SOURCES server/config_test.cc server/auth_test.cc server/metrics_test.cc
          server/caches_test.cc server/watcher_test.cc server/thread_pool_test.cc
          server/metrics_http_test.cc server/request_validation_test.cc
  LIBS ucudnn_server_lib ucudnn_proto_convert ${UCUDNN_SERVER_TEST_HTTPLIB}
  LABELS unit)
# The configuration test runs `ucudnn-server --help`.
add_dependencies(ucudnn_server_unit_tests ucudnn-server)
if(TARGET ucudnn_test_postgres)
  ucudnn_add_test(NAME ucudnn_server_tests
    SOURCES server/server_test.cc
    LIBS ucudnn_server_lib ucudnn_planner ucudnn_proto_convert ucudnn_test_postgres
         PkgConfig::PQXX ${UCUDNN_SERVER_TEST_HTTPLIB}
    LABELS integration
    TIMEOUT 600)
endif()
