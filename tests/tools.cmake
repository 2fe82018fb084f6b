# Command-line tools and repository checks, run as processes: the `ucudnn` CLI, the offline
# validation of deploy/, and the proto lint (where buf is installed).
set(UCUDNN_CLI $<TARGET_FILE:ucudnn>)

add_test(NAME cli_problem_resnet50_unique
         COMMAND bash -c "test \"$(${UCUDNN_CLI} problem --network resnet50 --unique | tail -n +2 | wc -l)\" = 69")
add_test(NAME cli_networks_lists_builtins COMMAND ${UCUDNN_CLI} networks)
set_tests_properties(cli_networks_lists_builtins PROPERTIES
  PASS_REGULAR_EXPRESSION "densenet121 +120 +66")
add_test(NAME cli_unknown_network_is_a_clear_error
         COMMAND bash -c "${UCUDNN_CLI} problem --network resnet51 2>&1; test $? -eq 1")
set_tests_properties(cli_unknown_network_is_a_clear_error PROPERTIES
  PASS_REGULAR_EXPRESSION "INVALID_ARGUMENT: network: unknown name 'resnet51'")
# The issue's `ucudnn cpu-bench`, on a tiny user network file so it stays fast.
add_test(NAME cli_cpu_bench_user_network
         COMMAND ${UCUDNN_CLI} cpu-bench --network ${CMAKE_CURRENT_SOURCE_DIR}/tools/tiny_net.csv
                 --batch 4 --workspace 1MiB)
set_tests_properties(cli_cpu_bench_user_network PROPERTIES
  PASS_REGULAR_EXPRESSION "down/bwd_filter[^\n]*x\n.*total" LABELS unit TIMEOUT 300)
add_test(NAME cli_bad_workspace_is_a_clear_error
         COMMAND bash -c "${UCUDNN_CLI} cpu-bench --network alexnet --workspace 64XB 2>&1; test $? -eq 1")
set_tests_properties(cli_bad_workspace_is_a_clear_error PROPERTIES
  PASS_REGULAR_EXPRESSION "unknown unit 'xb'")

find_package(Python3 COMPONENTS Interpreter)
if(Python3_FOUND)
  add_test(NAME deploy_validate
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/deploy/validate.py
                   --bin-dir ${PROJECT_BINARY_DIR}/bin)
  set_tests_properties(deploy_validate PROPERTIES LABELS unit)
endif()

find_program(BUF_PROGRAM buf HINTS ${PROJECT_BINARY_DIR}/tools/node_modules/.bin)
add_test(NAME proto_lint
         COMMAND bash -c "if [ -z '${BUF_PROGRAM}' ] || [ ! -x '${BUF_PROGRAM}' ]; then echo 'buf not installed'; exit 77; fi; cd ${PROJECT_SOURCE_DIR} && '${BUF_PROGRAM}' lint")
set_tests_properties(proto_lint PROPERTIES SKIP_RETURN_CODE 77 LABELS unit)
