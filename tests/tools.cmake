# Command-line tools and repository checks, run as processes: the `ucudnn` CLI, the offline
# validation of deploy/, and the proto lint (where buf is installed).
# Each CLI case is a function of tools/cli_test.sh that checks the exit status and the output.
foreach(cli_case
        problem_resnet50_unique
        networks_lists_builtins
        unknown_network_is_a_clear_error
        bad_network_file_names_the_line
        cpu_bench_user_network
        bad_workspace_is_a_clear_error)
  add_test(NAME cli_${cli_case}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tools/cli_test.sh $<TARGET_FILE:ucudnn>
                   ${cli_case})
  set_tests_properties(cli_${cli_case} PROPERTIES LABELS unit TIMEOUT 300)
endforeach()

# The cpu-bench table (pure formatting).
ucudnn_add_test(NAME ucudnn_cli_tests
  SOURCES tools/bench_table_test.cc
  LIBS ucudnn_cli_table)

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
