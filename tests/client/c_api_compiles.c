/* The C API headers compile as C (C99 and later) and the descriptor API's functions link; the
 * GPU test calls this. (The shape-level API is exercised through ctypes by python/tests.) */
#include "ucudnn/client/ucudnn_c.h"
#include "ucudnn/client/ucudnn_shape.h"

/* Creates a handle over `cudnn`, reads its counters and destroys it; returns the first failure. */
cudnnStatus_t ucudnn_test_c_api_roundtrip(cudnnHandle_t cudnn, uint64_t* kernels) {
  ucudnnHandle_t handle = NULL;
  ucudnnStats_t stats;
  cudnnStatus_t status = ucudnnCreateWithOptions(&handle, cudnn, "UCUDNN_CACHE_PATH=off");
  if (status != CUDNN_STATUS_SUCCESS) return status;
  if (ucudnnGetCudnnHandle(handle) != cudnn) {
    ucudnnDestroy(handle);
    return CUDNN_STATUS_INTERNAL_ERROR;
  }
  status = ucudnnGetStats(handle, &stats);
  *kernels = stats.kernels;
  if (status == CUDNN_STATUS_SUCCESS) status = ucudnnPrepare(handle);
  ucudnnDestroy(handle);
  return status;
}
