# End-to-end and fault tests (issue 7): the real ucudnn-server and ucudnn-worker binaries as child
# processes against a throw-away PostgreSQL, CPU backend, tiny problems; plus libFuzzer targets
# over request validation and plan decoding, built with clang as a separate little CMake project
# (fuzz/) and run for a bounded time.
ucudnn_add_test(NAME ucudnn_e2e_tests
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/e2e/e2e_util.cc
    ${CMAKE_CURRENT_LIST_DIR}/e2e/cluster_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/e2e/faults_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/e2e/bad_input_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/e2e/load_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/e2e/bounded_load_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/e2e/operator_cli_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/e2e/ops_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/e2e/engine_configs_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/e2e/kernel_limits_json_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/e2e/readme_recipes_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/e2e/python_job_test.cc
  LIBS ucudnn::test_postgres ucudnn::client_core ucudnn::backend_cpu ucudnn::store ucudnn::proto
       ucudnn::core gRPC::grpc++ PkgConfig::PQXX Threads::Threads nlohmann_json::nlohmann_json
  LABELS e2e
  TIMEOUT 180)
# The client library's session (the training client of the fault tests) is an internal header.
target_include_directories(ucudnn_e2e_tests PRIVATE ${PROJECT_SOURCE_DIR}/client/src)
# The tests start these binaries, and a PyTorch job (tests/e2e/cold_job.py) under Debian's
# python3 with python3-torch (tools.cmake) over the client library.
add_dependencies(ucudnn_e2e_tests ucudnn-server ucudnn-worker ucudnn ucudnn_client)
target_compile_definitions(ucudnn_e2e_tests PRIVATE
  UCUDNN_TEST_PYTHON3="${UCUDNN_SYSTEM_PYTHON3}"
  UCUDNN_TEST_CLIENT_LIBRARY="$<TARGET_FILE:ucudnn_client>")

# ---- Fuzzing ------------------------------------------------------------------------------------
# The project compiles with g++; libFuzzer needs clang. fuzz/ is its own CMake project, configured
# with clang++ by tests/e2e/run_fuzz.sh into ${PROJECT_BINARY_DIR}/fuzz, compiling the sources it
# exercises (validation, conversions, the client's plan-cache parser, the generated messages of
# this build) with -fsanitize=fuzzer-no-link,address,undefined so the fuzzer sees their coverage.
# Each ctest test builds (a no-op when up to date) and runs one target for a bounded time over the
# committed seed corpus; without clang it skips (exit code 77).
set(UCUDNN_FUZZ_SECONDS 20 CACHE STRING "Seconds each libFuzzer target runs in the test suite")
set(ucudnn_fuzz_targets plan_request_fuzzer plan_decode_fuzzer plan_cache_fuzzer compiled_plan_fuzzer
    rpc_request_fuzzer)
# Builds the fuzzers ahead of the tests (ninja ucudnn_fuzzers); the tests build them otherwise.
add_custom_target(ucudnn_fuzzers
  COMMAND ${CMAKE_CURRENT_LIST_DIR}/e2e/run_fuzz.sh --build-only ${PROJECT_SOURCE_DIR}
          ${PROJECT_BINARY_DIR}
  USES_TERMINAL
  COMMENT "Building the libFuzzer targets with clang (fuzz/)")
foreach(target IN LISTS ucudnn_fuzz_targets)
  add_test(NAME ucudnn_fuzz_${target}
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/e2e/run_fuzz.sh ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}
            ${target} ${UCUDNN_FUZZ_SECONDS})
  set_tests_properties(ucudnn_fuzz_${target} PROPERTIES
    LABELS "e2e;fuzz"
    TIMEOUT 600
    SKIP_RETURN_CODE 77
    # One clang build at a time: the first test builds every target, the others find them built.
    RESOURCE_LOCK ucudnn_fuzz_build)
endforeach()
