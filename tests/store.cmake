# Store tests, and the throw-away PostgreSQL fixture that the server, worker and end-to-end tests
# use as well (this file is included before theirs): link `ucudnn::test_postgres` and derive the
# test fixture from ucudnn::test_support::PostgresTest (tests/support/postgres_fixture.h).
add_library(ucudnn_test_postgres STATIC ${CMAKE_CURRENT_LIST_DIR}/support/postgres_fixture.cc)
add_library(ucudnn::test_postgres ALIAS ucudnn_test_postgres)
target_include_directories(ucudnn_test_postgres PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(ucudnn_test_postgres PUBLIC ucudnn::core GTest::gtest
                      PRIVATE PkgConfig::PQXX Threads::Threads)

ucudnn_add_test(NAME ucudnn_store_tests
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/store/values_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/store/migrations_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/store/timings_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/store/jobs_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/store/catalog_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/store/faults_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/store/enums_test.cc
  LIBS ucudnn::store ucudnn::proto ucudnn::test_postgres PkgConfig::PQXX Threads::Threads
  LABELS integration
  TIMEOUT 300)
# The unit tests of the value conversions and the error mapping reach the internal headers.
target_include_directories(ucudnn_store_tests PRIVATE ${PROJECT_SOURCE_DIR}/store/src)
