# ucudnn-bench-engine: how long the benchmark engine takes per op and how repeatable its tables
# are (the worker issue's targets), compared with the measured H100 tables in data/h100/.
add_executable(ucudnn-bench-engine bench_engine.cc pruning_replay.cc)
target_link_libraries(ucudnn-bench-engine PRIVATE
  ucudnn::engine ucudnn::backends ucudnn::planner ucudnn::core CLI11::CLI11
  nlohmann_json::nlohmann_json
  spdlog::spdlog)
target_compile_definitions(ucudnn-bench-engine PRIVATE UCUDNN_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
# Inside a bundle (scripts/bundle.sh) the binary finds its libraries in ../lib.
set_target_properties(ucudnn-bench-engine PROPERTIES BUILD_RPATH "$ORIGIN/../lib")

# ucudnn-engine-probe: the graph API's engine configurations beside the legacy algorithms on real
# shapes (needs a GPU to run; built wherever cuDNN is found).
if(TARGET ucudnn::cudnn)
  add_executable(ucudnn-engine-probe engine_probe.cc)
  target_link_libraries(ucudnn-engine-probe PRIVATE
    ucudnn::cudnn ucudnn::core CLI11::CLI11 nlohmann_json::nlohmann_json spdlog::spdlog)
  set_target_properties(ucudnn-engine-probe PROPERTIES BUILD_RPATH "$ORIGIN/../lib")
endif()
