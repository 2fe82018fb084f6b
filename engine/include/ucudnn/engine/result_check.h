// A configuration's result checked before its timing is stored (issue 39): a configuration that
// computes a wrong result on this device and library version is recorded as such (kFailed, "wrong
// result: ...") and so is never planned anywhere in the cluster for this device fingerprint (its
// GPU and cuDNN version); no library version is turned off wholesale, only the configurations
// that are wrong.
//
// The reference is the backend's reference algorithm (ConvBackend::ReferenceAlgorithms: the first
// that runs of legacy 1 and 0 for cuDNN's backward-data, legacy 0 otherwise) in strict fp32 (fp32
// data, FMA math: no TF32, no tensor cores) on the same input values, widened from the problem's
// data type: code apart from the tensor-core engines whose wrong results users met (PyTorch
// #163539: fp16 3-D convolutions on cuDNN 9.8-9.14), at a precision above the one checked.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ucudnn/core/backend.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/core/status.h"

namespace ucudnn {

// What a timing's error starts with when its configuration gave a wrong result.
inline constexpr std::string_view kWrongResultError = "wrong result: ";

// The largest relative L2 error a correct configuration of `p`'s precision shows against the
// fp32 reference on random inputs exact in that precision: fp16 2e-2, bf16 3e-2 (outputs rounded
// to 11 and 8 bits, transform algorithms amplifying it), fp32 in FMA math 1e-3, fp32 that may
// use TF32 1e-2. A wrong layout, stride, group or race is off by order 1.
double ResultBound(const ConvProblem& p);

// ||got - want|| / ||want|| (||got|| where want is all zero); infinity for a NaN or infinity in
// `got` (an element never written: outputs are poisoned with NaN before each checked run).
double RelativeL2(const std::vector<float>& got, const std::vector<float>& want);
// The same from the squared norms ||got - want||^2 and ||want||^2 (ConvBackend::DifferenceNorms).
double RelativeL2FromNorms(double difference_squares, double want_squares);

// Checks configurations of one problem on the benchmark's operands (`operands`: the problem's
// tensors at `operands.samples` samples, the op's inputs holding data). The inputs are widened to
// fp32 on the device once; the reference is computed once per problem where the output is per
// sample (forward, backward-data: each size's is a prefix of the largest's); a backward-filter's
// (a sum over the samples) grows with the sizes checked, each adding its samples beyond the last
// size's, so checks in increasing sizes cost one reference over the largest. Where the backend has
// device numerics (ConvBackend::WidenToFloat, DifferenceNorms), nothing is copied to the host but
// two norms per check; their answer is compared with the host's at a problem's first check, and not
// used again if they disagree.
class ResultChecker {
 public:
  // `max_reference_workspace`: the most workspace a reference algorithm other than the backend's
  // last one may take (the benchmark's cap); the last one runs with whatever it needs.
  ResultChecker(ConvBackend& backend, const ConvProblem& problem, const ConvOperands& operands,
                uint64_t max_reference_workspace = uint64_t{2} << 30);

  // The relative L2 error of `algo`'s result at micro-batch `batch` (`workspace`: at least its
  // workspace) against the fp32 reference; nullopt when no reference can run here (the
  // configuration stays unchecked: a backend without an fp32 reference for this layout). An error
  // when the configuration's own run fails (the caller records it as a failed run).
  Result<std::optional<double>> Check(int64_t batch, const Algorithm& algo, void* workspace,
                                      size_t workspace_bytes);

  // Milliseconds spent computing references so far (for the benchmark's summary line).
  double reference_ms() const { return reference_ms_; }

 private:
  // The fp32 reference output at `batch` in fp32_[2], or one it is a prefix of (false where none
  // could run); cheapest when callers check in increasing sizes.
  Result<bool> Reference(int64_t batch);
  // Runs the reference over samples [from, to) into fp32_[2] (added to it when from > 0).
  Result<bool> RunReference(int64_t from, int64_t to);
  // The relative L2 error of the output against the reference, both read to the host.
  Result<double> HostError(int64_t batch);
  // The op's inputs widened to fp32 on the device (every sample the operands hold) and an fp32
  // output as large; once.
  Status WidenInputs();
  // The backend's device numerics (WidenToFloat, DifferenceNorms) are not used again: `why`.
  void NoDeviceNumerics(const Status& why);

  ConvBackend& backend_;
  const ConvProblem& problem_;
  const ConvOperands& operands_;
  // The reference algorithms still to try, the one that ran first once one has (a backward-
  // filter's reference grows over several runs, all of one algorithm).
  std::vector<Algorithm> references_;
  uint64_t max_reference_workspace_;
  std::unique_ptr<BackendBuffer> fp32_[3];  // first input, second input, reference output
  int64_t reference_batch_ = 0;             // the size fp32_[2] holds the reference of
  bool reference_ok_ = false;
  std::optional<std::vector<float>> host_reference_;  // fp32_[2] on the host, when asked
  double reference_ms_ = 0;
  bool device_numerics_ = true;
  bool device_numerics_verified_ = false;  // agreed with the host on this problem's first check
};

}  // namespace ucudnn
