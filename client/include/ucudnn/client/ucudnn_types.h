/* Types shared by the C APIs of the ucudnn client library (ucudnn_c.h over cuDNN descriptors,
 * ucudnn_shape.h over problem dimensions).
 *
 * Part of the public API (include prefix ucudnn/client/): C only. */
#ifndef UCUDNN_CLIENT_UCUDNN_TYPES_H_
#define UCUDNN_CLIENT_UCUDNN_TYPES_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Counters, as ucudnn::ClientStats. */
typedef struct ucudnnStats {
  uint64_t kernels;
  uint64_t kernels_planned;
  uint64_t planned_calls;
  uint64_t fallback_calls;
  uint64_t rejected_plan_calls;
  uint64_t passthrough_calls;
  uint64_t untracked_calls;
  uint64_t plan_requests;
  uint64_t plan_request_failures;
  uint64_t plans_received;
  uint64_t plans_from_cache;
  uint64_t failed_plans;
  uint64_t recovered_calls;
  uint64_t contributed_problems;
  uint64_t contributed_timings;
  uint64_t contribution_failures;
  /* Calls of kernels whose plan is the framework's own convolution (UCUDNN_FRAMEWORK). */
  uint64_t framework_calls;
} ucudnnStats_t;

/* Which convolution a kernel computes. */
typedef enum {
  UCUDNN_CONVOLUTION_FORWARD = 0,
  UCUDNN_CONVOLUTION_BACKWARD_DATA = 1,
  UCUDNN_CONVOLUTION_BACKWARD_FILTER = 2
} ucudnnConvolutionOp_t;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* UCUDNN_CLIENT_UCUDNN_TYPES_H_ */
