# The Python package (python/ucudnn): ucudnn.torch against the CPU backend of the shared library,
# under Debian's /usr/bin/python3 with its python3-torch (scripts/lib.sh installs it; a python3
# earlier on the PATH, pyenv's say, has no torch). Planned kernels come from a plan cache file
# written by ucudnn_test_write_plan_cache. UCUDNN_SYSTEM_PYTHON3 is found in CMakeLists.txt.
add_executable(ucudnn_test_write_plan_cache tools/write_plan_cache.cc)
target_link_libraries(ucudnn_test_write_plan_cache PRIVATE ucudnn::client_core ucudnn::backend_cpu
                      ucudnn::core)
target_include_directories(ucudnn_test_write_plan_cache PRIVATE
  ${PROJECT_SOURCE_DIR}/client/src)

foreach(python_suite test_torch_options test_torch_module test_torch_routing
                     test_torch_host_bound test_torch_budgets test_torch_decision test_torch_zoo
                     test_torch_pickle test_torch_nd
                     test_curve test_torch_bench_script test_torch_models_script
                     test_plots test_worker_search)
  add_test(NAME python_${python_suite}
           COMMAND ${UCUDNN_SYSTEM_PYTHON3} -m unittest -v ${python_suite}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/python/tests)
  set_tests_properties(python_${python_suite} PROPERTIES
    LABELS unit
    TIMEOUT 600
    ENVIRONMENT
      "PYTHONPATH=${PROJECT_SOURCE_DIR}/python;UCUDNN_LIBRARY=$<TARGET_FILE:ucudnn_client>;UCUDNN_TEST_PLAN_CACHE_TOOL=$<TARGET_FILE:ucudnn_test_write_plan_cache>;UCUDNN_LOG_LEVEL=warn;OMP_NUM_THREADS=1")
endforeach()

# The package as a user installs it: pip install into a venv, the library from cmake --install
# through the system loader, ucudnn-doctor (tests/tools/python_package_test.sh).
add_test(NAME python_package_install
         COMMAND bash ${PROJECT_SOURCE_DIR}/tests/tools/python_package_test.sh ${PROJECT_SOURCE_DIR}
                 ${PROJECT_BINARY_DIR} ${UCUDNN_SYSTEM_PYTHON3})
set_tests_properties(python_package_install PROPERTIES LABELS unit TIMEOUT 300)
