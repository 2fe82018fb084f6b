# ucudnn-bench-server: the planner server under load (GetPlan latency and throughput, cache tiers,
# waiting calls) with --json. It starts its own throw-away PostgreSQL through the test fixture
# library unless given --database-url, so it is only built with the tests (tests/store.cmake
# defines ucudnn::test_postgres later in the configure; names resolve at the end).
if(UCUDNN_BUILD_TESTS)
  add_executable(ucudnn-bench-server bench_server.cc)
  target_link_libraries(ucudnn-bench-server PRIVATE ucudnn::server ucudnn::proto
                        ucudnn::test_postgres ucudnn::test_support spdlog::spdlog absl::synchronization CLI11::CLI11
                        nlohmann_json::nlohmann_json ${UCUDNN_HTTPLIB_TARGET})
  target_compile_definitions(ucudnn-bench-server PRIVATE UCUDNN_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
endif()
