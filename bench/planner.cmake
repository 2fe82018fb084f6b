# ucudnn-bench-planner: DP, Pareto and ILP (CBC) times on AlexNet and ResNet-50/152 (--json).
add_executable(ucudnn-bench-planner bench_planner.cc)
target_link_libraries(ucudnn-bench-planner PRIVATE
  ucudnn::planner ucudnn::core CLI11::CLI11 nlohmann_json::nlohmann_json)
# The measured H100 tables that calibrate its timing model (--data overrides).
target_compile_definitions(ucudnn-bench-planner PRIVATE UCUDNN_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
