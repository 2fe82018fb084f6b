// The one checking helper for CUDA runtime and cuDNN calls: a failed call becomes a Status that
// reads like a sentence in the log, with the call's text, the library's error and where it was:
//   "cudnnGetConvolutionForwardWorkspaceSize(...) failed: CUDNN_STATUS_NOT_SUPPORTED at
//    cudnn_backend.cc:123"
// Internal to the cuDNN backend (backends/src/cudnn/); nothing outside includes it.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstring>
#include <string>
#include <string_view>

#include "ucudnn/core/status.h"

namespace ucudnn::gpu {

// Errors after which the CUDA context is unusable: the runtime documents each of them as leaving
// "the process in an inconsistent state" (every later call returns the same error) or the device
// unusable until the process is relaunched. Kernel faults (illegal address, launch failure,
// device-side assert, ...) are reported asynchronously, at the next synchronising call, so whatever
// call observes one reports it; an uncorrectable ECC or NVLink error is a hardware fault that
// makes the device's state (and every allocation on it) untrustworthy.
inline bool IsStickyError(cudaError_t error) {
  switch (error) {
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContained:
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorTensorMemoryLeak:
    case cudaErrorMpsClientTerminated:
    case cudaErrorExternalDevice:
      return true;
    default:
      return false;
  }
}

// What a CUDA runtime error means to a caller: out of memory, no usable GPU/driver, a lost device
// (sticky error), or a bug.
inline StatusCode CodeFor(cudaError_t error) {
  if (IsStickyError(error)) return StatusCode::kDeviceLost;
  switch (error) {
    case cudaErrorMemoryAllocation:
      return StatusCode::kResourceExhausted;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorInitializationError:
    case cudaErrorStubLibrary:
      return StatusCode::kUnavailable;
    default:
      return StatusCode::kInternal;
  }
}

// cuDNN 9 groups its status codes by thousands: 2xxx bad parameter, 3xxx not supported, 4xxx
// internal, 5xxx execution failed. A 3xxx is cuDNN declining this configuration (shape, data type,
// layout, padding, architecture, shared memory, launch parameters), except the few that say the
// installation (driver, runtime, sub-library) is unusable. A 2xxx is never a decline: the cuDNN
// API reference gives CUDNN_STATUS_BAD_PARAM for inconsistent arguments (null descriptors,
// descriptors whose dimensions, data types or feature maps disagree) and NOT_SUPPORTED for "this
// combination of descriptors is not supported for the specified algorithm", so a BAD_PARAM is our
// bug (e.g. a wrong filter layout) and stays kInternal. A 5xxx may hide a lost device (a kernel
// fault is reported by whichever call comes next); ConvBackend::Healthy() tells.
inline StatusCode CodeFor(cudnnStatus_t status) {
  const int code = static_cast<int>(status);
  switch (code) {
    case 3005:  // CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER
    case 3006:  // CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART
    case 3008:  // CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING
    case 3009:  // CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE
    case 1001:  // CUDNN_STATUS_NOT_INITIALIZED
    case 1002:  // CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH
    case 1008:  // CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED
      return StatusCode::kUnavailable;
    case 4003:  // CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED
    case 4004:  // CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED
      return StatusCode::kResourceExhausted;
    default:
      break;
  }
  if (code / 1000 == 3) return StatusCode::kUnsupported;
  return StatusCode::kInternal;
}

// "cudaErrorMemoryAllocation (out of memory)"
inline std::string ErrorText(cudaError_t error) {
  return std::string(cudaGetErrorName(error)) + " (" + cudaGetErrorString(error) + ")";
}

// "CUDNN_STATUS_NOT_SUPPORTED", plus cuDNN's own explanation of the last failure when it has one.
inline std::string ErrorText(cudnnStatus_t status) {
  std::string text = cudnnGetErrorString(status);
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  if (detail[0] != '\0') text += std::string(" (") + detail + ")";
  return text;
}

// The call as written, whitespace collapsed; long argument lists shortened to "(...)".
inline std::string CallText(std::string_view call) {
  std::string text;
  text.reserve(call.size());
  bool space = false;
  for (char ch : call) {
    if (ch == ' ' || ch == '\n' || ch == '\t' || ch == '\r') {
      space = !text.empty();
      continue;
    }
    if (space) text += ' ';
    space = false;
    text += ch;
  }
  constexpr size_t kMaxCallText = 80;
  const size_t paren = text.find('(');
  if (text.size() > kMaxCallText && paren != std::string::npos)
    text = text.substr(0, paren) + "(...)";
  return text;
}

inline const char* BaseName(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash != nullptr ? slash + 1 : path;
}

template <typename Error>
Status Failure(Error error, const char* call, const char* file, int line) {
  return Status(CodeFor(error), CallText(call) + " failed: " + ErrorText(error) + " at " +
                                    BaseName(file) + ":" + std::to_string(line));
}

inline Status CheckCall(cudaError_t error, const char* call, const char* file, int line) {
  if (error == cudaSuccess) return Status::Ok();
  // Clears the runtime's per-thread "last error" so a later, unrelated query does not report it
  // again (sticky errors such as an illegal address stay sticky regardless).
  (void)cudaGetLastError();
  return Failure(error, call, file, line);
}

inline Status CheckCall(cudnnStatus_t status, const char* call, const char* file, int line) {
  if (status == CUDNN_STATUS_SUCCESS) return Status::Ok();
  return Failure(status, call, file, line);
}

}  // namespace ucudnn::gpu

// The Status of a CUDA runtime or cuDNN call (OK on success).
#define UCUDNN_GPU_STATUS(call) ::ucudnn::gpu::CheckCall((call), #call, __FILE__, __LINE__)
// Returns the failure from the enclosing function (which returns Status or Result<T>).
#define UCUDNN_GPU_CHECK(call) UCUDNN_RETURN_IF_ERROR(UCUDNN_GPU_STATUS(call))

namespace ucudnn::gpu {

// OK when `device_index` names a visible GPU; InvalidArgument for a negative index, Unavailable
// for one past the last visible GPU.
inline Status CheckDeviceIndex(int device_index) {
  if (device_index < 0) {
    return InvalidArgument("device_index: must be >= 0, got " + std::to_string(device_index));
  }
  int count = 0;
  UCUDNN_GPU_CHECK(cudaGetDeviceCount(&count));
  if (device_index >= count) {
    return Unavailable("GPU " + std::to_string(device_index) + " does not exist (" +
                       std::to_string(count) + " visible)");
  }
  return Status::Ok();
}

}  // namespace ucudnn::gpu
