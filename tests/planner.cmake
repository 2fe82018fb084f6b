# Planner: per-kernel DP and Pareto fronts, the network-wide ILP (CBC), network plans and tables,
# built-in networks, timing CSV files, and a check against the measured H100 tables (data/h100).
ucudnn_add_test(NAME ucudnn_planner_tests
  SOURCES
    planner/dp_test.cc
    planner/pareto_test.cc
    planner/ilp_test.cc
    planner/planner_test.cc
    planner/never_slower_test.cc
    planner/plan_table_test.cc
    planner/networks_test.cc
    planner/timing_csv_test.cc
    planner/h100_data_test.cc
    planner/engine_planning_test.cc
    planner/framework_planning_test.cc
    planner/kernel_limits_test.cc
  LIBS ucudnn::planner ucudnn::core)
