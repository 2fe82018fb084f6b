# ucudnn-bench-fanout: a network's benchmark queue drained by 1, 2, 4 in-process workers of one
# fingerprint (a fake backend that sleeps per timed call), with --json. Like ucudnn-bench-server
# it starts a throw-away PostgreSQL through the test fixture library, so it is built with the
# tests only; it includes the worker tests' fan-out helpers (tests/worker/fanout_util.h).
if(UCUDNN_BUILD_TESTS)
  add_executable(ucudnn-bench-fanout bench_fanout.cc)
  target_include_directories(ucudnn-bench-fanout PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(ucudnn-bench-fanout PRIVATE ucudnn::worker ucudnn::backends
                        ucudnn::test_postgres CLI11::CLI11 nlohmann_json::nlohmann_json
                        spdlog::spdlog)
endif()
