# GPU tests: the cuDNN backend against the CPU reference on real layer shapes, the benchmark
# engine on both backends, the backend factory and the GPU fingerprint. One binary, label "gpu".
# Cases that need a GPU skip visibly (GTEST_SKIP with the reason) where GpuCount() == 0; the
# CPU-backend engine cases and the cuDNN error-helper cases run everywhere.
# On a GPU machine: scripts/gpu_suite.sh (docs/gpu.md).
set(UCUDNN_GPU_TEST_SOURCES
  gpu/gpu_test_util.cc
  gpu/cudnn_equivalence_test.cc
  gpu/engine_test.cc
  gpu/backend_factory_test.cc
)
set(UCUDNN_GPU_TEST_LIBS ucudnn::engine ucudnn::backends ucudnn::core)
if(UCUDNN_ENABLE_CUDNN)
  list(APPEND UCUDNN_GPU_TEST_SOURCES gpu/cudnn_backend_test.cc gpu/compiled_plans_test.cc)
  list(APPEND UCUDNN_GPU_TEST_LIBS ucudnn::cudnn)
endif()
ucudnn_add_test(NAME ucudnn_gpu_tests
  SOURCES ${UCUDNN_GPU_TEST_SOURCES}
  LIBS ${UCUDNN_GPU_TEST_LIBS}
  LABELS gpu
  TIMEOUT 600)
if(UCUDNN_ENABLE_CUDNN)
  # cuda_check.h is internal to the backend; its tests reach it directly.
  target_include_directories(ucudnn_gpu_tests PRIVATE ${PROJECT_SOURCE_DIR}/backends/src/cudnn)
endif()
# Inside a bundle (scripts/bundle.sh) the binary finds its libraries in ../lib.
set_target_properties(ucudnn_gpu_tests PROPERTIES BUILD_RPATH "$ORIGIN/../lib")
