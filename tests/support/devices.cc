#include "support/devices.h"

namespace ucudnn::test_support {

DeviceFingerprint H100() {
  DeviceFingerprint f;
  f.backend = "cudnn";
  f.name = "NVIDIA H100 80GB HBM3";
  f.cc_major = 9;
  f.cc_minor = 0;
  f.sm_count = 132;
  f.memory_bytes = 85045854208ull;
  f.cudnn_version = 91400;
  f.cuda_runtime_version = 13000;
  return f;
}

DeviceFingerprint Xeon() {
  DeviceFingerprint f;
  f.backend = "cpu";
  f.name = "Intel(R) Xeon(R) CPU @ 2.20GHz";
  f.sm_count = 2;
  f.memory_bytes = 8ull << 30;
  f.blas = "openblas 0.3.21 threads:1";
  return f;
}

}  // namespace ucudnn::test_support
