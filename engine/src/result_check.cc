#include "ucudnn/engine/result_check.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>

#include "ucudnn/core/random_fill.h"

namespace ucudnn {
namespace {

using Clock = std::chrono::steady_clock;

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

double RelativeL2FromNorms(double difference_squares, double want_squares) {
  if (!std::isfinite(difference_squares)) return std::numeric_limits<double>::infinity();
  return want_squares == 0 ? std::sqrt(difference_squares)
                           : std::sqrt(difference_squares / want_squares);
}

ResultChecker::ResultChecker(ConvBackend& backend, const ConvProblem& problem,
                             const ConvOperands& operands, uint64_t max_reference_workspace)
    : backend_(backend),
      problem_(problem),
      operands_(operands),
      references_(backend.ReferenceAlgorithms(problem.op)),
      max_reference_workspace_(max_reference_workspace) {}

Status ResultChecker::WidenInputs() {
  if (fp32_[0] != nullptr) return Status::Ok();
  const OpTensorSizes all = OpSizes(problem_, operands_.samples);
  const std::pair<const void*, size_t> inputs[2] = {
      {FirstInput(problem_, operands_), all.first_input},
      {SecondInput(problem_, operands_), all.second_input}};
  for (int i = 0; i < 2; ++i) {
    const auto [source, count] = inputs[i];
    UCUDNN_ASSIGN_OR_RETURN(fp32_[i], backend_.Allocate(count * sizeof(float)));
    // On the device where the backend can (hundreds of MB a problem at batch 256: the host's
    // round trip took an H200 worker a second and more per problem).
    if (device_numerics_) {
      const Status widened =
          backend_.WidenToFloat(fp32_[i]->data(), source, problem_.data_type, count);
      if (widened.ok()) continue;
      if (Fatal(widened)) return widened;
      NoDeviceNumerics(widened);
    }
    UCUDNN_ASSIGN_OR_RETURN(std::vector<float> values,
                            ReadAsFloat(backend_, source, count, problem_.data_type));
    UCUDNN_RETURN_IF_ERROR(
        backend_.CopyToDevice(fp32_[i]->data(), values.data(), count * sizeof(float)));
  }
  UCUDNN_ASSIGN_OR_RETURN(fp32_[2], backend_.Allocate(all.output * sizeof(float)));
  return Status::Ok();
}

void ResultChecker::NoDeviceNumerics(const Status& why) {
  if (device_numerics_ && why.code() != StatusCode::kUnsupported) {
    spdlog::warn("result check {}: device numerics failed, checking on the host: {}",
                 CanonicalKey(problem_), why.ToString());
  }
  device_numerics_ = false;
}

Result<bool> ResultChecker::Reference(int64_t batch) {
  // A forward or backward-data output is per sample, and samples lead in both layouts: the
  // reference of every size is a prefix of the largest one's, computed once (the reference runs
  // in strict fp32 and is a large part of a check's cost). A backward-filter output sums over
  // the samples: a larger size's reference adds the samples it has beyond the one held (beta 1),
  // so checks in increasing sizes cost one reference run over the largest size.
  const bool per_sample = problem_.op != ConvOp::kBackwardFilter;
  if (per_sample && reference_ok_ && reference_batch_ >= batch) return true;
  if (reference_batch_ == batch) return reference_ok_;
  if (per_sample && reference_batch_ == 0 && operands_.samples > batch) {
    UCUDNN_ASSIGN_OR_RETURN(const bool largest, RunReference(0, operands_.samples));
    if (largest) return true;  // else each size's own, as a backward-filter's
  }
  if (!per_sample && reference_ok_ && reference_batch_ < batch) {
    return RunReference(reference_batch_, batch);
  }
  return RunReference(0, batch);
}

Result<bool> ResultChecker::RunReference(int64_t from, int64_t to) {
  // The same input values in fp32 (samples [from, to) of the widened ones: samples lead in both
  // layouts), strict fp32 math, the backend's reference algorithm, into fp32_[2]; added to what
  // it holds when `from` > 0 (a backward-filter's sum over more samples).
  const Clock::time_point start = Clock::now();
  ConvProblem fp32 = problem_;
  fp32.data_type = fp32.compute_type = DataType::kFloat32;
  fp32.math = MathMode::kFma;
  const int64_t batch = to - from;
  reference_batch_ = to;
  host_reference_.reset();
  auto run_with = [&](const Algorithm& reference, bool last) -> Status {
    UCUDNN_ASSIGN_OR_RETURN(size_t workspace_bytes, backend_.WorkspaceSize(fp32, batch, reference));
    if (!last && workspace_bytes > max_reference_workspace_) {
      return ResourceExhausted(fmt::format("algorithm {} needs {} bytes of workspace",
                                           AlgorithmText(reference), workspace_bytes));
    }
    UCUDNN_ASSIGN_OR_RETURN(std::unique_ptr<BackendBuffer> workspace,
                            backend_.Allocate(std::max<size_t>(workspace_bytes, 1)));
    float* first = static_cast<float*>(fp32_[0]->data());
    float* second = static_cast<float*>(fp32_[1]->data());
    if (from > 0) {  // backward-filter only: x and dy, both per sample
      first += from * problem_.input_elements_per_sample();
      second += from * problem_.output_elements_per_sample();
    }
    const ConvOperands o = BindOperands(problem_.op, first, second, fp32_[2]->data());
    UCUDNN_RETURN_IF_ERROR(backend_.Run(fp32, batch, reference, o, workspace->data(),
                                        workspace_bytes, 1.0f, from > 0 ? 1.0f : 0.0f));
    return backend_.Synchronize();
  };
  auto run = [&]() -> Status {
    UCUDNN_RETURN_IF_ERROR(WidenInputs());
    Status failed = Unsupported("no reference algorithm on this backend");
    for (size_t k = 0; k < references_.size(); ++k) {
      failed = run_with(references_[k], k + 1 == references_.size());
      if (failed.ok()) {
        references_ = {references_[k]};  // every later run of this problem's reference
        return failed;
      }
      if (Fatal(failed)) return failed;
      spdlog::debug("result check {}: reference algorithm {} did not run at {} ({})",
                    CanonicalKey(problem_), AlgorithmText(references_[k]), to, failed.ToString());
    }
    return failed;
  };
  const Status ran = run();
  reference_ms_ += std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  if (!ran.ok()) {
    if (Fatal(ran)) return ran;
    spdlog::debug(
        "result check {} micro-batch {}: no fp32 reference here ({}); its "
        "configurations stay unchecked",
        CanonicalKey(problem_), to, ran.ToString());
  }
  return reference_ok_ = ran.ok();
}

Result<double> ResultChecker::HostError(int64_t batch) {
  const size_t count = OpSizes(problem_, batch).output;
  if (!host_reference_ || host_reference_->size() != count) {  // a prefix, or another size's
    UCUDNN_ASSIGN_OR_RETURN(std::vector<float> reference,
                            ReadAsFloat(backend_, fp32_[2]->data(), count, DataType::kFloat32));
    host_reference_ = std::move(reference);
  }
  UCUDNN_ASSIGN_OR_RETURN(std::vector<float> got, ReadAsFloat(backend_, Output(problem_, operands_),
                                                              count, problem_.data_type));
  return RelativeL2(got, *host_reference_);
}

Result<std::optional<double>> ResultChecker::Check(int64_t batch, const Algorithm& algo,
                                                   void* workspace, size_t workspace_bytes) {
  UCUDNN_ASSIGN_OR_RETURN(const bool reference, Reference(batch));
  if (!reference) return std::optional<double>();
  // Poisoned first (all ones bytes: NaN in every data type), so an element the configuration
  // never writes fails the check.
  const size_t out_count = OpSizes(problem_, batch).output;
  const size_t out_bytes = out_count * ElementSize(problem_.data_type);
  UCUDNN_RETURN_IF_ERROR(backend_.FillBytes(Output(problem_, operands_), 0xFF, out_bytes));
  if (device_numerics_ && !device_numerics_verified_) {
    // Before a problem's first check is trusted to the device: the poisoned output must come out
    // as not finite there (a NaN that propagates), or the device's norms are not used.
    Result<std::pair<double, double>> poisoned = backend_.DifferenceNorms(
        Output(problem_, operands_), problem_.data_type, fp32_[2]->data(), out_count);
    if (!poisoned.ok() && Fatal(poisoned.status())) return poisoned.status();
    if (!poisoned.ok()) {
      NoDeviceNumerics(poisoned.status());
    } else if (std::isfinite(RelativeL2FromNorms(poisoned->first, poisoned->second))) {
      NoDeviceNumerics(Internal("the device's norms of an output of NaNs are finite"));
    }
  }
  ConvOperands o = operands_;
  o.samples = 0;  // the call's batch
  UCUDNN_RETURN_IF_ERROR(
      backend_.Run(problem_, batch, algo, o, workspace, workspace_bytes, 1.0f, 0.0f));
  UCUDNN_RETURN_IF_ERROR(backend_.Synchronize());
  if (device_numerics_) {
    Result<std::pair<double, double>> norms = backend_.DifferenceNorms(
        Output(problem_, operands_), problem_.data_type, fp32_[2]->data(), out_count);
    if (norms.ok()) {
      const double error = RelativeL2FromNorms(norms->first, norms->second);
      if (device_numerics_verified_) return std::optional<double>(error);
      // The device's answer against the host's once per problem (at its first check, the
      // smallest size checked): a backend whose numerics disagree is not trusted with the rest.
      UCUDNN_ASSIGN_OR_RETURN(const double host, HostError(batch));
      const bool agree = (std::isinf(error) && std::isinf(host)) ||
                         std::abs(error - host) <= 1e-3 * std::max(1.0, std::abs(host));
      if (agree) {
        device_numerics_verified_ = true;
        return std::optional<double>(error);
      }
      NoDeviceNumerics(Internal(
          fmt::format("relative L2 error {:.6g} on the device, {:.6g} on the host", error, host)));
      return std::optional<double>(host);
    }
    if (Fatal(norms.status())) return norms.status();
    NoDeviceNumerics(norms.status());
  }
  UCUDNN_ASSIGN_OR_RETURN(const double error, HostError(batch));
  return std::optional<double>(error);
}

}  // namespace ucudnn
