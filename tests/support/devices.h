// Device fingerprints shared by the tests (library `ucudnn_test_support`).
#pragma once

#include "ucudnn/core/fingerprint.h"

namespace ucudnn::test_support {

// An H100 80GB HBM3 with cuDNN 9.14 and CUDA 13.0, as the cuDNN backend fingerprints it. Its key
// and hash are pinned by fingerprint_test.cc: change a field and the golden values there change.
DeviceFingerprint H100();

// A two-core Xeon as the CPU backend fingerprints it; pinned by fingerprint_test.cc as well.
DeviceFingerprint Xeon();

}  // namespace ucudnn::test_support
