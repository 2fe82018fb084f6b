#include "kernel_table.h"

#include <bit>

namespace ucudnn::client {
namespace {

// splitmix64's finaliser: every input bit affects every output bit.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

uint64_t Combine(uint64_t seed, uint64_t value) {
  return Mix(seed ^ (value + 0x9e3779b97f4a7c15ULL));
}

}  // namespace

uint64_t KernelKeyHash(const ConvProblem& p, int64_t batch) {
  uint64_t h = 0x75636375646e6e31ULL;  // "ucucudnn1"
  for (int64_t v :
       {p.c, p.h, p.w, p.k, p.r, p.s, p.pad_h, p.pad_w, p.stride_h, p.stride_w, p.dilation_h,
        p.dilation_w, p.groups, batch, p.d, p.t, p.pad_d, p.stride_d, p.dilation_d}) {
    h = Combine(h, static_cast<uint64_t>(v));
  }
  const uint64_t enums = static_cast<uint64_t>(p.op) | static_cast<uint64_t>(p.data_type) << 8 |
                         static_cast<uint64_t>(p.compute_type) << 16 |
                         static_cast<uint64_t>(p.layout) << 24 |
                         static_cast<uint64_t>(p.math) << 32;
  return Combine(h, enums);
}

KernelTable::KernelTable(size_t max_kernels) {
  max_entries_ = max_kernels == 0 ? 1 : max_kernels;
  const size_t capacity = std::bit_ceil(max_entries_ * 2);
  slots_ = std::make_unique<std::atomic<KernelState*>[]>(capacity);
  for (size_t i = 0; i < capacity; ++i) slots_[i].store(nullptr, std::memory_order_relaxed);
  mask_ = capacity - 1;
  owned_.reserve(max_entries_);
}

KernelTable::~KernelTable() = default;

KernelState* KernelTable::Insert(std::unique_ptr<KernelState> state) {
  if (owned_.size() >= max_entries_) return nullptr;
  size_t i = state->hash & mask_;
  while (slots_[i].load(std::memory_order_relaxed) != nullptr) i = (i + 1) & mask_;
  KernelState* raw = state.get();
  owned_.push_back(std::move(state));
  // Release: a reader that sees the pointer sees the identity fields written before it.
  slots_[i].store(raw, std::memory_order_release);
  return raw;
}

}  // namespace ucudnn::client
