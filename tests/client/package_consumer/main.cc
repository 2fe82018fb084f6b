// Uses the installed public headers only; without a GPU it stops before touching cuDNN.
#include <cstdio>

#include "ucudnn/client/config.h"
#include "ucudnn/client/stats.h"
#if __has_include("ucudnn/client/handle.h")
#include "ucudnn/client/handle.h"
#include "ucudnn/client/ucudnn_c.h"
#endif

int main() {
  const ucudnn::ClientConfig config =
      ucudnn::ClientConfig::FromEnvironment().WithOptions("UCUDNN_WORKSPACE_BYTES=64MiB");
  std::printf("workspace %llu mode %s\n", static_cast<unsigned long long>(config.workspace_bytes),
              std::string(ucudnn::ToString(config.workspace_mode)).c_str());
#if __has_include("ucudnn/client/handle.h")
  ucudnnHandle_t handle = nullptr;
  // A null cuDNN handle is refused without touching the GPU.
  if (ucudnnCreate(&handle, nullptr) != CUDNN_STATUS_BAD_PARAM) return 1;
  // A training binary calls cuDNN itself too: the package's link line must carry libcudnn.
  if (cudnnGetVersion() == 0) return 1;
#endif
  return config.workspace_bytes == (64u << 20) ? 0 : 1;
}
