#include "ucudnn/engine/result_check.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <limits>
#include <memory>
#include <utility>

#include "ucudnn/core/random_fill.h"

namespace ucudnn {
namespace {

const void* FirstInput(const ConvProblem& p, const ConvOperands& o) {
  return p.op == ConvOp::kBackwardData ? o.dy : o.x;
}
const void* SecondInput(const ConvProblem& p, const ConvOperands& o) {
  return p.op == ConvOp::kBackwardFilter ? o.dy : o.w;
}
void* Output(const ConvProblem& p, const ConvOperands& o) {
  return p.op == ConvOp::kForward ? o.y : p.op == ConvOp::kBackwardData ? o.dx : o.dw;
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

Status ResultChecker::WidenInputs() {
  if (fp32_[0] != nullptr) return Status::Ok();
  const OpTensorSizes all = OpSizes(problem_, operands_.samples);
  UCUDNN_ASSIGN_OR_RETURN(
      std::vector<float> first,
      ReadAsFloat(backend_, FirstInput(problem_, operands_), all.first_input, problem_.data_type));
  UCUDNN_ASSIGN_OR_RETURN(std::vector<float> second,
                          ReadAsFloat(backend_, SecondInput(problem_, operands_), all.second_input,
                                      problem_.data_type));
  UCUDNN_ASSIGN_OR_RETURN(fp32_[0], Upload(backend_, first));
  UCUDNN_ASSIGN_OR_RETURN(fp32_[1], Upload(backend_, second));
  UCUDNN_ASSIGN_OR_RETURN(fp32_[2], backend_.Allocate(all.output * sizeof(float)));
  return Status::Ok();
}

Result<std::optional<std::vector<float>>> ResultChecker::Reference(int64_t batch) {
  if (auto it = references_.find(batch); it != references_.end()) return it->second;
  // The same input values in fp32 (the first `batch` samples of the widened ones: samples lead
  // in both layouts), strict fp32 math, the backend's reference algorithm.
  ConvProblem fp32 = problem_;
  fp32.data_type = fp32.compute_type = DataType::kFloat32;
  fp32.math = MathMode::kFma;
  auto run = [&]() -> Result<std::vector<float>> {
    UCUDNN_RETURN_IF_ERROR(WidenInputs());
    const Algorithm reference(0);
    UCUDNN_ASSIGN_OR_RETURN(size_t workspace_bytes, backend_.WorkspaceSize(fp32, batch, reference));
    UCUDNN_ASSIGN_OR_RETURN(std::unique_ptr<BackendBuffer> workspace,
                            backend_.Allocate(std::max<size_t>(workspace_bytes, 1)));
    const ConvOperands o =
        BindOperands(problem_.op, fp32_[0]->data(), fp32_[1]->data(), fp32_[2]->data());
    UCUDNN_RETURN_IF_ERROR(
        backend_.Run(fp32, batch, reference, o, workspace->data(), workspace_bytes, 1.0f, 0.0f));
    UCUDNN_RETURN_IF_ERROR(backend_.Synchronize());
    return ReadAsFloat(backend_, fp32_[2]->data(), OpSizes(problem_, batch).output,
                       DataType::kFloat32);
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
  const size_t out_count = OpSizes(problem_, batch).output;
  const size_t out_bytes = out_count * ElementSize(problem_.data_type);
  const std::vector<unsigned char> poison(out_bytes, 0xFF);
  UCUDNN_RETURN_IF_ERROR(
      backend_.CopyToDevice(Output(problem_, operands_), poison.data(), poison.size()));
  ConvOperands o = operands_;
  o.samples = 0;  // the call's batch
  UCUDNN_RETURN_IF_ERROR(
      backend_.Run(problem_, batch, algo, o, workspace, workspace_bytes, 1.0f, 0.0f));
  UCUDNN_RETURN_IF_ERROR(backend_.Synchronize());
  UCUDNN_ASSIGN_OR_RETURN(std::vector<float> got, ReadAsFloat(backend_, Output(problem_, operands_),
                                                              out_count, problem_.data_type));
  return std::optional<double>(RelativeL2(got, *reference));
}

}  // namespace ucudnn
