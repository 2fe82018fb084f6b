# The client library (issue 6). CPU tests against a fake PlannerService on loopback; the GPU test
# (label gpu) skips visibly without a GPU.
set(ucudnn_client_test_libs ucudnn::client_core ucudnn::backend_cpu ucudnn::core ucudnn::proto
    gRPC::grpc++)
ucudnn_add_test(NAME ucudnn_client_tests
  SOURCES
    client/config_test.cc
    client/kernel_table_test.cc
    client/plan_cache_test.cc
    client/session_test.cc
    client/recovery_test.cc
    client/contribution_test.cc
    client/shape_problem_test.cc
  LIBS ${ucudnn_client_test_libs}
  TIMEOUT 120)
target_include_directories(ucudnn_client_tests PRIVATE ${PROJECT_SOURCE_DIR}/client/src)

# Its own binary: it replaces the global operator new to count allocations.
ucudnn_add_test(NAME ucudnn_client_hot_path_tests
  SOURCES client/hot_path_test.cc
  LIBS ${ucudnn_client_test_libs}
  TIMEOUT 60)
target_include_directories(ucudnn_client_hot_path_tests PRIVATE
  ${PROJECT_SOURCE_DIR}/client/src)

if(UCUDNN_ENABLE_CUDNN)
  ucudnn_add_test(NAME ucudnn_client_gpu_tests
    SOURCES client/cudnn_handle_test.cc client/descriptors_test.cc client/c_api_compiles.c
    LIBS ucudnn::client_cudnn ucudnn::backends ucudnn::proto gRPC::grpc++
    LABELS gpu
    TIMEOUT 600)
  target_include_directories(ucudnn_client_gpu_tests PRIVATE ${PROJECT_SOURCE_DIR}/client/src)
endif()

# The installed package: find_package(ucudnn) (shared and static) and pkg-config consumers.
add_test(NAME ucudnn_client_package
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/client/package_test.sh ${PROJECT_BINARY_DIR})
set_tests_properties(ucudnn_client_package PROPERTIES LABELS unit TIMEOUT 300)

# The example, on the CPU backend with timings it measures itself and plans in process.
if(TARGET ucudnn-example-train-step)
  add_test(NAME ucudnn_example_train_step_cpu
    COMMAND ucudnn-example-train-step --backend cpu --network alexnet --batch 2
            --limits-mib 1,16 --total-budget-mib 32 --measure --measure-runs 1
            --measure-warmup 0 --steps 1 --warmup 0 --json)
  set_tests_properties(ucudnn_example_train_step_cpu PROPERTIES LABELS unit TIMEOUT 300
    PASS_REGULAR_EXPRESSION "\"planned_kernels\": 15,[ \n]*\"distinct_kernels\": 15")
endif()

# The framework's own convolution as a planning candidate, end to end: the shape-level C API on
# the CPU backend against a real planner server (in process) over a throw-away PostgreSQL.
if(TARGET ucudnn::test_postgres)
  ucudnn_add_test(NAME ucudnn_client_framework_tests
    SOURCES client/framework_candidate_test.cc
    LIBS ucudnn::client_shape ucudnn::server ucudnn::store ucudnn::test_postgres
         ${ucudnn_client_test_libs}
    LABELS integration
    TIMEOUT 300)
  target_include_directories(ucudnn_client_framework_tests PRIVATE
    ${PROJECT_SOURCE_DIR}/client/src)
endif()
