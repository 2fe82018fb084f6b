# All third-party dependencies, found once. Everything comes from Debian's packages, except CUDA
# and cuDNN, which live under /usr/local/cuda.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)

find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_program(GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)
find_package(spdlog CONFIG REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
pkg_check_modules(PQXX REQUIRED IMPORTED_TARGET libpqxx)
pkg_check_modules(CBC REQUIRED IMPORTED_TARGET cbc)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
# prometheus-cpp (Debian's prometheus-cpp-dev 1.0.1): core, the registry and the text format;
# pull, the /metrics endpoint over CivetWeb (metrics/).
find_package(prometheus-cpp CONFIG REQUIRED)
# cpp-httplib: the HTTP client of the tests and of ucudnn-bench-server, which scrape /metrics (the
# metrics endpoint is prometheus-cpp's, metrics/include/ucudnn/metrics/endpoint.h). Debian ships a
# compiled library with a pkg-config file but no CMake package, so without httplib::httplib it
# comes through pkg-config; its compile definitions (OpenSSL/zlib/brotli support) change class
# layouts, so they must come along. Link ${UCUDNN_HTTPLIB_TARGET}.
find_package(httplib QUIET)
if(TARGET httplib::httplib)
  set(UCUDNN_HTTPLIB_TARGET httplib::httplib)
else()
  pkg_check_modules(CPP_HTTPLIB REQUIRED IMPORTED_TARGET GLOBAL cpp-httplib)
  set(UCUDNN_HTTPLIB_TARGET PkgConfig::CPP_HTTPLIB)
endif()
find_package(nlohmann_json REQUIRED)  # every JSON the binaries write

# ---- CUDA + cuDNN (optional) ------------------------------------------------------------------
if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
  set(CUDAToolkit_ROOT /usr/local/cuda)
endif()
find_package(CUDAToolkit QUIET)
find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_ROOT}/include /usr/local/cuda/include)
find_library(CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_ROOT}/lib64 /usr/local/cuda/lib64)
if(CUDAToolkit_FOUND AND CUDNN_INCLUDE_DIR AND CUDNN_LIBRARY)
  set(UCUDNN_CUDNN_FOUND ON)
else()
  set(UCUDNN_CUDNN_FOUND OFF)
endif()
option(UCUDNN_ENABLE_CUDNN "Build the cuDNN backend (default: on when CUDA and cuDNN are found)"
       ${UCUDNN_CUDNN_FOUND})
if(UCUDNN_ENABLE_CUDNN AND NOT UCUDNN_CUDNN_FOUND)
  message(FATAL_ERROR "UCUDNN_ENABLE_CUDNN=ON but CUDA or cuDNN was not found under /usr/local/cuda")
endif()
if(UCUDNN_ENABLE_CUDNN)
  add_library(ucudnn_cudnn_sdk INTERFACE)
  # cuDNN 9 marks its legacy convolution API deprecated; we use it on purpose (docs/design.md,
  # "Backends"), so the warning is silenced for that one header by including it as a system header.
  target_include_directories(ucudnn_cudnn_sdk SYSTEM INTERFACE ${CUDNN_INCLUDE_DIR})
  target_link_libraries(ucudnn_cudnn_sdk INTERFACE ${CUDNN_LIBRARY} CUDA::cudart)
  message(STATUS "ucudnn: cuDNN backend ON (${CUDNN_LIBRARY})")
else()
  message(STATUS "ucudnn: cuDNN backend OFF")
endif()
