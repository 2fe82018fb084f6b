# Command-line tools and repository checks, run as processes: the `ucudnn` CLI, the offline
# validation of deploy/, and the proto lint (where buf is installed).
# Each CLI case is a function of tools/cli_test.sh that checks the exit status and the output.
foreach(cli_case
        problem_resnet50_unique
        networks_lists_builtins
        unknown_network_is_a_clear_error
        bad_network_file_names_the_line
        cpu_bench_user_network
        bad_workspace_is_a_clear_error
        flags_beat_the_environment
        usage_errors_exit_2
        local_commands_print_json)
  add_test(NAME cli_${cli_case}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tools/cli_test.sh $<TARGET_FILE:ucudnn>
                   ${cli_case})
  set_tests_properties(cli_${cli_case} PROPERTIES LABELS unit TIMEOUT 300)
endforeach()

# The cpu-bench table (pure formatting).
ucudnn_add_test(NAME ucudnn_cli_tests
  SOURCES tools/bench_table_test.cc tools/explain_table_test.cc tools/curve_test.cc
          tools/printable_test.cc
  LIBS ucudnn::cli_table)

# deploy/validate.py runs under Debian's /usr/bin/python3 (UCUDNN_SYSTEM_PYTHON3), where
# scripts/lib.sh installs PyYAML, jsonschema, the Kubernetes models and docker-compose's schema. It
# exits 77 (skipped, visibly) when a module it needs is missing.
add_test(NAME deploy_validate
         COMMAND ${UCUDNN_SYSTEM_PYTHON3} ${PROJECT_SOURCE_DIR}/deploy/validate.py
                 --bin-dir ${PROJECT_BINARY_DIR}/bin)
set_tests_properties(deploy_validate PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 120)
# docs/ holds prose (.md, .svg) of at most 100 KB a file, and the README's and docs' relative
# links resolve (issue 38); docs_check_catches_mistakes shows the check is not vacuous.
add_test(NAME docs_check
         COMMAND ${UCUDNN_SYSTEM_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/tools/docs_test.py
                 ${PROJECT_SOURCE_DIR})
add_test(NAME docs_check_catches_mistakes
         COMMAND ${UCUDNN_SYSTEM_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/tools/docs_test.py --self-test)
set_tests_properties(docs_check docs_check_catches_mistakes PROPERTIES LABELS unit TIMEOUT 60)

# ... and it is not vacuous: each mistake it is meant to catch, made in a copy, makes it fail.
add_test(NAME deploy_validate_catches_mistakes
         COMMAND ${UCUDNN_SYSTEM_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/tools/validate_mutations.py
                 ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/bin)
set_tests_properties(deploy_validate_catches_mistakes PROPERTIES
  LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 300)

# The relocatable bundle runs with an empty environment (systemd, Docker, Kubernetes start it so):
# every library is found through RUNPATHs, and nothing resolves outside the bundle but glibc, the
# GCC runtime, the NVIDIA driver and cuDNN.
add_test(NAME bundle_runs_without_environment
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tools/bundle_test.sh ${PROJECT_SOURCE_DIR}
                 ${PROJECT_BINARY_DIR})
set_tests_properties(bundle_runs_without_environment PROPERTIES
  LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 300)

# The scripts an operator or CI runs are shellcheck-clean.
add_test(NAME deploy_scripts_shellcheck
         COMMAND bash -c "command -v shellcheck >/dev/null || { echo 'SKIP: shellcheck not installed (Debian package shellcheck)'; exit 77; }; cd ${PROJECT_SOURCE_DIR} && shellcheck -x scripts/*.sh tests/tools/*.sh && echo 'shellcheck: clean'")
set_tests_properties(deploy_scripts_shellcheck PROPERTIES LABELS unit SKIP_RETURN_CODE 77)

# buf is looked up when the test runs, not when CMake configures: scripts/test.sh and demo.sh
# install it (npm) into build/tools after the build tree may already be configured.
add_test(NAME proto_lint
         COMMAND bash -c "buf='${PROJECT_BINARY_DIR}/tools/node_modules/.bin/buf'; [ -x \"$buf\" ] || buf=\"$(command -v buf || true)\"; if [ -z \"$buf\" ]; then echo 'SKIP: buf not installed (scripts/test.sh installs it with npm)'; exit 77; fi; cd ${PROJECT_SOURCE_DIR} && \"$buf\" lint && echo \"buf lint: clean ($buf)\"")
set_tests_properties(proto_lint PROPERTIES SKIP_RETURN_CODE 77 LABELS unit)

# scripts/peer_bench.sh's argument handling and bench/peer_table.py's table, on fake step outputs
# (the benchmark itself needs the GPU machine).
add_test(NAME peer_bench_args_and_table
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tools/peer_bench_test.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(peer_bench_args_and_table PROPERTIES LABELS unit TIMEOUT 120)

# cmake --install: the server, worker and CLI binaries and the client library, each in its
# component (issue 14).
add_test(NAME install_tree_components
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tools/install_tree_test.sh ${PROJECT_BINARY_DIR})
set_tests_properties(install_tree_components PROPERTIES LABELS unit TIMEOUT 300)

# Every binary's --help lists every flag, with help text, and its environment variables: one test
# per binary, against the lists in tools/help_test.py (a flag added without them fails).
foreach(binary ucudnn ucudnn-worker ucudnn-bench-engine ucudnn-bench-planner ucudnn-engine-probe
        ucudnn-example-train-step)
  if(TARGET ${binary})
    add_test(NAME help_${binary}
             COMMAND ${UCUDNN_SYSTEM_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/tools/help_test.py
                     $<TARGET_FILE:${binary}>)
    set_tests_properties(help_${binary} PROPERTIES LABELS unit TIMEOUT 120)
  endif()
endforeach()

# The limit-aware size rule replayed on the measured H100 tables: its invariants, not its numbers.
if(TARGET ucudnn-bench-engine)
  add_test(NAME replay_sizes
           COMMAND ${UCUDNN_SYSTEM_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/tools/replay_sizes_test.py
                   $<TARGET_FILE:ucudnn-bench-engine> ${PROJECT_SOURCE_DIR}/data/h100)
  set_tests_properties(replay_sizes PROPERTIES LABELS unit TIMEOUT 60)
endif()
