# The shared metrics code (metrics/): registry helpers and the /metrics endpoint over
# prometheus-cpp, and both binaries' families served through it.
ucudnn_add_test(NAME ucudnn_metrics_tests
  SOURCES metrics/registry_test.cc metrics/endpoint_test.cc metrics/shared_test.cc
  LIBS ucudnn::metrics ucudnn::server ucudnn::worker ${UCUDNN_HTTPLIB_TARGET})
