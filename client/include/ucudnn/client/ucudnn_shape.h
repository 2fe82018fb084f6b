/* The shape-level C API of the ucudnn client library: convolutions given by their dimensions and
 * raw pointers instead of cuDNN descriptors, for frameworks that do not call cuDNN through a
 * handle the library can wrap (PyTorch: python/ucudnn/torch/ calls this through ctypes).
 *
 *   ucudnnShapeContext_t ctx;  ucudnnShapeCreate(&ctx, "cudnn", NULL);   current GPU, UCUDNN_*
 *   ucudnnConvShape_t shape = {UCUDNN_CONVOLUTION_FORWARD, n, c, h, w, k, r, s, ...};
 *   size_t bytes;
 *   if (ucudnnShapeWorkspaceSize(ctx, &shape, 0, &bytes) == UCUDNN_SHAPE_SUCCESS &&
 *       ucudnnShapeConvolution(ctx, &shape, x, w, y, stream, ws, bytes, 1, 0)
 *           == UCUDNN_SHAPE_SUCCESS) { ... ran as the plan's micro-batches ... }
 *   else { ... run the framework's own convolution ... }
 *
 * Per-call cost: a framework that calls the same kernels every step resolves each once
 * (ucudnnShapeGetKernel) and runs it with one call (ucudnnShapeKernelRun), which reads no shape
 * and looks nothing up:
 *
 *   ucudnnShapeKernel_t kernel;  ucudnnShapeGetKernel(ctx, &shape, 0, &kernel);     once
 *   switch (ucudnnShapeKernelRun(kernel, x, w, y, stream, ws, ws_bytes)) {           every call
 *     case UCUDNN_SHAPE_SUCCESS: break;                      ran as the plan's micro-batches
 *     case UCUDNN_SHAPE_WORKSPACE_TOO_SMALL: ...             ucudnnShapeKernelWorkspaceSize, grow
 * ws, call again default: ...                                           run the framework's own
 * convolution
 *   }
 *
 * A kernel without a plan that can run now answers UCUDNN_SHAPE_NO_PLAN and writes nothing: the
 * caller runs its own convolution (the framework's choice stays in force until a plan arrives).
 * With UCUDNN_FRAMEWORK set, the framework's own convolution is a candidate of the plan too
 * (ucudnnShapeSubmitFrameworkTimings submits its times): a kernel whose plan chose it answers
 * UCUDNN_SHAPE_FRAMEWORK from the run and workspace calls, and the caller runs its own.
 * The first sight of a kernel asks the planner for it in the background; nothing here waits for
 * the server.
 *
 * Part of the public API (include prefix ucudnn/client/): C only (no cuDNN or CUDA headers). */
#ifndef UCUDNN_CLIENT_UCUDNN_SHAPE_H_
#define UCUDNN_CLIENT_UCUDNN_SHAPE_H_

#include <stddef.h>
#include <stdint.h>

#include "ucudnn/client/ucudnn_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ucudnnShapeContextImpl* ucudnnShapeContext_t;
/* A kernel of a context, resolved once (ucudnnShapeGetKernel); valid until the context is
 * destroyed. */
typedef struct ucudnnShapeKernelImpl* ucudnnShapeKernel_t;

typedef enum {
  UCUDNN_SHAPE_SUCCESS = 0,
  /* No plan for this kernel can run now (none yet, none possible, disabled, too many kernels):
   * nothing was written; run your own convolution. */
  UCUDNN_SHAPE_NO_PLAN = 1,
  /* A field of the shape or an argument is wrong; ucudnnShapeLastError() names it. */
  UCUDNN_SHAPE_BAD_PARAM = 2,
  /* The backend is not in this build or has no device (ucudnnShapeCreate). */
  UCUDNN_SHAPE_UNAVAILABLE = 3,
  /* The plan's run failed and the output may be partly written (beta != 0 only; with beta = 0
   * a failed plan answers UCUDNN_SHAPE_NO_PLAN). */
  UCUDNN_SHAPE_EXECUTION_FAILED = 4,
  UCUDNN_SHAPE_ALLOC_FAILED = 5,
  UCUDNN_SHAPE_INTERNAL_ERROR = 6,
  /* ucudnnShapeKernelRun: the kernel's plan needs more workspace than was passed; nothing was
   * written or counted. ucudnnShapeKernelWorkspaceSize says how much. */
  UCUDNN_SHAPE_WORKSPACE_TOO_SMALL = 7,
  /* The plan chose the framework's own convolution (it was measured faster than every ucudnn
   * configuration, UCUDNN_FRAMEWORK): run your own; nothing written. Counted as a framework
   * call (ucudnnStats_t.framework_calls), not a fallback. */
  UCUDNN_SHAPE_FRAMEWORK = 8
} ucudnnShapeStatus_t;

typedef enum {
  UCUDNN_SHAPE_FLOAT = 0,
  UCUDNN_SHAPE_HALF = 1,
  UCUDNN_SHAPE_BFLOAT16 = 2
} ucudnnShapeDataType_t;

typedef enum { UCUDNN_SHAPE_NCHW = 0, UCUDNN_SHAPE_NHWC = 1 } ucudnnShapeLayout_t;

/* cuDNN's math types; FMA is strict fp32 (no TF32), what PyTorch asks for with TF32 off. */
typedef enum {
  UCUDNN_SHAPE_MATH_DEFAULT = 0,
  UCUDNN_SHAPE_MATH_TENSOR_OP = 1,
  UCUDNN_SHAPE_MATH_TENSOR_OP_ALLOW_CONVERSION = 2,
  UCUDNN_SHAPE_MATH_FMA = 3
} ucudnnShapeMath_t;

/* One convolution (cross-correlation) at mini-batch n. Tensors: x n x c x h x w, w k x (c/groups)
 * x r x s, y n x k x out_h x out_w, all dense in `layout` (the filter too: KCRS or KRSC). The
 * data type is that of every tensor; accumulation is fp32.
 * A 3-D convolution sets the depth fields too: x n x c x d x h x w, w k x (c/groups) x t x r x s,
 * in NCDHW (UCUDNN_SHAPE_NCHW) or NDHWC (UCUDNN_SHAPE_NHWC). Left 0 (as by `= {...}` or memset),
 * the depth fields describe a 2-D convolution: d, t, stride_d and dilation_d read as 1. A 1-D
 * convolution is a 2-D one with h = r = 1 (as cuDNN runs it); a transposed convolution is the
 * backward-data of its forward, its backward passes that forward and a backward-filter.
 * (The depth fields were added at the end: a caller built against a header without them must be
 * rebuilt.) */
typedef struct ucudnnConvShape {
  ucudnnConvolutionOp_t op;
  int64_t n, c, h, w, k, r, s;
  int64_t pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w, groups;
  ucudnnShapeDataType_t data_type;
  ucudnnShapeLayout_t layout;
  ucudnnShapeMath_t math;
  int64_t d, t, pad_d, stride_d, dilation_d;
} ucudnnConvShape_t;

/* Whether the library can plan `shape` at all: UCUDNN_SHAPE_SUCCESS, or UCUDNN_SHAPE_BAD_PARAM
 * with the reason (ucudnnShapeLastError), for a shape outside its limits (an empty batch, a
 * batch over 65536, a spatial size over 32768: a Conv1d over 3 s of 16 kHz audio), which the
 * framework runs itself. Needs no context and declares nothing. */
ucudnnShapeStatus_t ucudnnShapeCheck(const ucudnnConvShape_t* shape);

/* A context on `backend`: "cudnn" (a cuDNN handle of the library's own on the calling thread's
 * current GPU; operands are device pointers on it) or "cpu" (host pointers; fp32 NCHW). Configured
 * like ucudnnCreateWithOptions: the UCUDNN_* environment, overridden by `options` ("NAME=value"
 * pairs separated by ';' or newlines; NULL or ""). In per-kernel mode without
 * UCUDNN_WORKSPACE_BYTES, each kernel's limit is 64 MiB unless its calls give one. */
ucudnnShapeStatus_t ucudnnShapeCreate(ucudnnShapeContext_t* context, const char* backend,
                                      const char* options);
/* The same on the caller's cuDNN handle (a cudnnHandle_t of the calling thread's current GPU, from
 * the same cuDNN library instance as this library's), which must outlive the context and which
 * the context never destroys: a framework's own handle, so that the library adds no handle of its
 * own to the device (its memory, its loaded kernels). Its stream is set at every call, since its
 * owner sets its own between calls; its owner must not use it concurrently with a call of this
 * context. UCUDNN_SHAPE_UNAVAILABLE in a build without the cuDNN backend. */
ucudnnShapeStatus_t ucudnnShapeCreateOnHandle(ucudnnShapeContext_t* context, void* cudnn_handle,
                                              const char* options);
ucudnnShapeStatus_t ucudnnShapeDestroy(ucudnnShapeContext_t context);

/* The workspace (bytes) the kernel's plan needs from the caller: 0 when it runs in the library's
 * own workspace (total modes). UCUDNN_SHAPE_NO_PLAN when it has none now: the caller runs its own
 * convolution, counted as a fallback call in the stats; UCUDNN_SHAPE_FRAMEWORK when its plan is
 * the framework's own convolution (run yours; counted as a framework call). The first sight of a
 * kernel declares it
 * and asks for its plan for `limit` bytes in per-kernel mode (0: the configured limit). Call it
 * once per convolution, before ucudnnShapeConvolution. */
ucudnnShapeStatus_t ucudnnShapeWorkspaceSize(ucudnnShapeContext_t context,
                                             const ucudnnConvShape_t* shape, size_t limit,
                                             size_t* bytes);

/* Runs the plan of `shape`'s kernel (the one declared first, whatever its limit; a kernel of
 * another limit runs through its handle, ucudnnShapeKernelRun) on `stream` (a cudaStream_t;
 * ignored on cpu):
 *   forward:          a = x,  b = w,  out = y     y  = alpha * conv(x, w)   + beta * y
 *   backward-data:    a = dy, b = w,  out = dx    dx = alpha * convT(dy, w) + beta * dx
 *   backward-filter:  a = x,  b = dy, out = dw    dw = alpha * corr(x, dy)  + beta * dw
 * `workspace` holds workspace_bytes (at least what ucudnnShapeWorkspaceSize answered).
 * UCUDNN_SHAPE_NO_PLAN: nothing usable (no plan, not enough workspace, or the plan failed and
 * the output is to be rewritten whole): run your own convolution. UCUDNN_SHAPE_FRAMEWORK: the
 * plan chose your own convolution; run it (nothing written). */
ucudnnShapeStatus_t ucudnnShapeConvolution(ucudnnShapeContext_t context,
                                           const ucudnnConvShape_t* shape, const void* a,
                                           const void* b, void* out, void* stream, void* workspace,
                                           size_t workspace_bytes, float alpha, float beta);

/* The kernel of `shape` at `limit` (declared at first sight as by ucudnnShapeWorkspaceSize), for
 * the calls below. Every call of one context for the same shape and limit answers the same
 * handle; in per-kernel mode the same shape at another limit is another kernel with a plan of its
 * own (a budget changed, or plans at several limits side by side). A
 * kernel the context does not track (disabled, or beyond the most kernels it holds) gets a
 * handle too: its runs answer UCUDNN_SHAPE_NO_PLAN. */
ucudnnShapeStatus_t ucudnnShapeGetKernel(ucudnnShapeContext_t context,
                                         const ucudnnConvShape_t* shape, size_t limit,
                                         ucudnnShapeKernel_t* kernel);

/* The workspace (bytes) the kernel's plan needs from the caller now, as ucudnnShapeWorkspaceSize
 * but counting nothing; UCUDNN_SHAPE_NO_PLAN when it has none, UCUDNN_SHAPE_FRAMEWORK when its
 * plan is the framework's own convolution. */
ucudnnShapeStatus_t ucudnnShapeKernelWorkspaceSize(ucudnnShapeKernel_t kernel, size_t* bytes);

/* ucudnnShapeWorkspaceSize and ucudnnShapeConvolution (alpha = 1, beta = 0: out is written whole)
 * in one call: runs the kernel's plan on `stream` with the caller's workspace when it needs at
 * most `workspace_bytes`. UCUDNN_SHAPE_WORKSPACE_TOO_SMALL: it needs more (nothing written or
 * counted; grow the workspace and call again). UCUDNN_SHAPE_NO_PLAN: run your own convolution
 * (counted as a fallback call). UCUDNN_SHAPE_FRAMEWORK: the plan chose your own convolution; run
 * it (counted as a framework call). */
ucudnnShapeStatus_t ucudnnShapeKernelRun(ucudnnShapeKernel_t kernel, const void* a, const void* b,
                                         void* out, void* stream, void* workspace,
                                         size_t workspace_bytes);

/* Declares `count` kernels up front and plans now (the total modes plan them together under one
 * budget), as ucudnnPrepareKernels. `limit` as in ucudnnShapeWorkspaceSize. */
ucudnnShapeStatus_t ucudnnShapePrepare(ucudnnShapeContext_t context,
                                       const ucudnnConvShape_t* shapes, size_t count, size_t limit);
/* Waits up to timeout_ms for every kernel's answer from the server: UCUDNN_SHAPE_SUCCESS when
 * none is still waiting, UCUDNN_SHAPE_NO_PLAN on timeout. Then builds what the first call of each
 * plan that arrived needs (cuDNN execution plans: a runtime-compiled one takes up to a second), so
 * that the training steps after it run at full speed from the first. Not for training steps. */
ucudnnShapeStatus_t ucudnnShapeWaitForPlans(ucudnnShapeContext_t context, int64_t timeout_ms);
ucudnnShapeStatus_t ucudnnShapeGetStats(ucudnnShapeContext_t context, ucudnnStats_t* stats);

/* Where a kernel stands. */
typedef struct ucudnnShapeKernelInfo {
  int32_t state;       /* 0 waiting (no answer yet), 1 planned (ucudnn's configuration), 2
                          framework (the plan chose the framework), 3 no plan (infeasible,
                          disabled, server away, failed), 4 missing (no plan while the cluster
                          benchmarks its problem: asked again later) */
  int32_t segments;    /* segments of the plan, 0 without one */
  double predicted_ms; /* the plan's predicted time, 0 without one */
  double framework_ms; /* the framework's measured time known to the server for this kernel,
                          0 when unknown */
  double undivided_ms; /* the plan's undivided baseline, 0 when unknown */
  uint64_t workspace_bytes;
} ucudnnShapeKernelInfo_t;
ucudnnShapeStatus_t ucudnnShapeGetKernelInfo(ucudnnShapeKernel_t kernel,
                                             ucudnnShapeKernelInfo_t* info);
/* The workspace (bytes) of the framework's own convolution whose time ucudnnShapeKernelInfo_t's
 * framework_ms gives, 0 when unknown: with the memory free at the kernel's point of a step, a
 * caller tells whether the framework's own fits there. (A function of its own, not a field, so
 * that the struct's layout stays that of earlier libraries.) */
ucudnnShapeStatus_t ucudnnShapeGetKernelFrameworkWorkspace(ucudnnShapeKernel_t kernel,
                                                           uint64_t* workspace_bytes);

/* Submits the framework's own measured times (fastest-of-its-own-choice, full batch = shape.n)
 * for `count` kernels, as timings with algo -2 and the context's UCUDNN_FRAMEWORK identity; needs
 * UCUDNN_TOKEN with the role SubmitTimings needs. Then asks the server again for those kernels'
 * plans (in the background). spread_ms and workspace_bytes may be NULL (0 each). UNAVAILABLE
 * (ucudnnShapeLastError says why) without a server, framework or token, or when the server
 * refuses; BAD_PARAM for a bad shape or time. Waits for the server: not for training steps. */
ucudnnShapeStatus_t ucudnnShapeSubmitFrameworkTimings(
    ucudnnShapeContext_t context, const ucudnnConvShape_t* shapes, const double* time_ms,
    const double* spread_ms, const uint64_t* workspace_bytes, size_t count);

/* What the last call on this thread that failed with UCUDNN_SHAPE_BAD_PARAM or
 * UCUDNN_SHAPE_UNAVAILABLE found wrong ("c: must be in [1, 65536], got 0"); "" if none. */
const char* ucudnnShapeLastError(void);

/* The library's version ("0.1.0"): what `ucudnn-doctor` reports. */
const char* ucudnnShapeGetVersion(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* UCUDNN_CLIENT_UCUDNN_SHAPE_H_ */
