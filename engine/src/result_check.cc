#include "ucudnn/engine/result_check.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <limits>
#include <memory>
#include <utility>

#include "ucudnn/core/random_fill.h"

namespace ucudnn {
namespace {

// The op's two inputs and its output: (a, b, out) in backend.h's order, as element counts at
// `batch` and as pointers into `o`.
struct OpTensors {
  size_t a = 0, b = 0, out = 0;
};

OpTensors Counts(const ConvProblem& p, int64_t batch) {
  const size_t in = static_cast<size_t>(batch * p.input_elements_per_sample());
  const size_t out = static_cast<size_t>(batch * p.output_elements_per_sample());
  const size_t filter = static_cast<size_t>(p.filter_elements());
  switch (p.op) {
    case ConvOp::kForward:
      return {in, filter, out};
    case ConvOp::kBackwardData:
      return {out, filter, in};
    case ConvOp::kBackwardFilter:
      break;
  }
  return {in, out, filter};
}

const void* InputA(const ConvProblem& p, const ConvOperands& o) {
  return p.op == ConvOp::kBackwardData ? o.dy : o.x;
}
const void* InputB(const ConvProblem& p, const ConvOperands& o) {
  return p.op == ConvOp::kBackwardFilter ? o.dy : o.w;
}
void* Output(const ConvProblem& p, const ConvOperands& o) {
  return p.op == ConvOp::kForward ? o.y : p.op == ConvOp::kBackwardData ? o.dx : o.dw;
}

// Binds (a, b, out) as the op's operands.
ConvOperands Bind(ConvOp op, const void* a, const void* b, void* out) {
  ConvOperands o;
  switch (op) {
    case ConvOp::kForward:
      o.x = a, o.w = b, o.y = out;
      break;
    case ConvOp::kBackwardData:
      o.dy = a, o.w = b, o.dx = out;
      break;
    case ConvOp::kBackwardFilter:
      o.x = a, o.dy = b, o.dw = out;
      break;
  }
  return o;
}

Result<std::vector<float>> ReadAsFloat(ConvBackend& backend, const void* device, size_t count,
                                       DataType type) {
  std::vector<unsigned char> bytes(count * ElementSize(type));
  UCUDNN_RETURN_IF_ERROR(backend.CopyToHost(bytes.data(), device, bytes.size()));
  return ToFloat(bytes.data(), count, type);
}

// Device memory holding `values` as fp32.
Result<std::unique_ptr<BackendBuffer>> Upload(ConvBackend& backend,
                                              const std::vector<float>& values) {
  UCUDNN_ASSIGN_OR_RETURN(std::unique_ptr<BackendBuffer> buffer,
                          backend.Allocate(values.size() * sizeof(float)));
  UCUDNN_RETURN_IF_ERROR(
      backend.CopyToDevice(buffer->data(), values.data(), values.size() * sizeof(float)));
  return buffer;
}

// A status that ends the check of every configuration: the device is gone.
bool Fatal(const Status& s) { return s.code() == StatusCode::kDeviceLost; }

}  // namespace

double ResultBound(const ConvProblem& p) {
  switch (p.data_type) {
    case DataType::kFloat16:
      return 2e-2;
    case DataType::kBFloat16:
      return 3e-2;
    case DataType::kFloat32:
      break;
  }
  return p.math == MathMode::kFma ? 1e-3 : 1e-2;
}

double RelativeL2(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    const double d = static_cast<double>(got[i]) - static_cast<double>(want[i]);
    diff += d * d;
    norm += static_cast<double>(want[i]) * static_cast<double>(want[i]);
  }
  return norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

ResultChecker::ResultChecker(ConvBackend& backend, const ConvProblem& problem,
                             const ConvOperands& operands)
    : backend_(backend), problem_(problem), operands_(operands) {}

Result<std::vector<float>> ResultChecker::ReadOutput(int64_t batch) {
  return ReadAsFloat(backend_, Output(problem_, operands_), Counts(problem_, batch).out,
                     problem_.data_type);
}

Result<std::optional<std::vector<float>>> ResultChecker::Reference(int64_t batch) {
  if (auto it = references_.find(batch); it != references_.end()) return it->second;
  const OpTensors counts = Counts(problem_, batch);
  const DataType type = problem_.data_type;
  // The same input values in fp32, strict fp32 math, the backend's reference algorithm.
  ConvProblem fp32 = problem_;
  fp32.data_type = fp32.compute_type = DataType::kFloat32;
  fp32.math = MathMode::kFma;
  auto run = [&]() -> Result<std::vector<float>> {
    UCUDNN_ASSIGN_OR_RETURN(std::vector<float> a,
                            ReadAsFloat(backend_, InputA(problem_, operands_), counts.a, type));
    UCUDNN_ASSIGN_OR_RETURN(std::vector<float> b,
                            ReadAsFloat(backend_, InputB(problem_, operands_), counts.b, type));
    UCUDNN_ASSIGN_OR_RETURN(std::unique_ptr<BackendBuffer> a_buffer, Upload(backend_, a));
    UCUDNN_ASSIGN_OR_RETURN(std::unique_ptr<BackendBuffer> b_buffer, Upload(backend_, b));
    UCUDNN_ASSIGN_OR_RETURN(std::unique_ptr<BackendBuffer> out,
                            backend_.Allocate(counts.out * sizeof(float)));
    const Algorithm reference(0);
    UCUDNN_ASSIGN_OR_RETURN(size_t workspace_bytes, backend_.WorkspaceSize(fp32, batch, reference));
    UCUDNN_ASSIGN_OR_RETURN(std::unique_ptr<BackendBuffer> workspace,
                            backend_.Allocate(std::max<size_t>(workspace_bytes, 1)));
    const ConvOperands o = Bind(problem_.op, a_buffer->data(), b_buffer->data(), out->data());
    UCUDNN_RETURN_IF_ERROR(
        backend_.Run(fp32, batch, reference, o, workspace->data(), workspace_bytes, 1.0f, 0.0f));
    UCUDNN_RETURN_IF_ERROR(backend_.Synchronize());
    return ReadAsFloat(backend_, out->data(), counts.out, DataType::kFloat32);
  };
  Result<std::vector<float>> reference = run();
  if (!reference.ok()) {
    if (Fatal(reference.status())) return reference.status();
    spdlog::debug(
        "result check {} micro-batch {}: no fp32 reference here ({}); its "
        "configurations stay unchecked",
        CanonicalKey(problem_), batch, reference.status().ToString());
    return references_[batch] = std::nullopt;
  }
  return references_[batch] = std::move(reference).value();
}

Result<std::optional<double>> ResultChecker::Check(int64_t batch, const Algorithm& algo,
                                                   void* workspace, size_t workspace_bytes) {
  UCUDNN_ASSIGN_OR_RETURN(std::optional<std::vector<float>> reference, Reference(batch));
  if (!reference) return std::optional<double>();
  // Poisoned first (all ones bytes: NaN in every data type), so an element the configuration
  // never writes fails the check.
  const size_t out_bytes = Counts(problem_, batch).out * ElementSize(problem_.data_type);
  const std::vector<unsigned char> poison(out_bytes, 0xFF);
  UCUDNN_RETURN_IF_ERROR(
      backend_.CopyToDevice(Output(problem_, operands_), poison.data(), poison.size()));
  ConvOperands o = operands_;
  o.samples = 0;  // the call's batch
  UCUDNN_RETURN_IF_ERROR(
      backend_.Run(problem_, batch, algo, o, workspace, workspace_bytes, 1.0f, 0.0f));
  UCUDNN_RETURN_IF_ERROR(backend_.Synchronize());
  UCUDNN_ASSIGN_OR_RETURN(std::vector<float> got, ReadOutput(batch));
  return std::optional<double>(RelativeL2(got, *reference));
}

}  // namespace ucudnn
