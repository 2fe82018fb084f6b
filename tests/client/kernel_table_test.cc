// The lock-free kernel table and its allocation-free key hash.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "kernel_table.h"
#include "test_util.h"

namespace ucudnn::testing {
namespace {

using client::KernelKeyHash;
using client::KernelState;
using client::KernelTable;

std::unique_ptr<KernelState> State(const ConvProblem& p, int64_t batch) {
  auto s = std::make_unique<KernelState>();
  s->problem = p;
  s->batch = batch;
  s->hash = KernelKeyHash(p, batch);
  return s;
}

TEST(KernelKeyHashTest, EveryFieldMatters) {
  const ConvProblem base = SmallProblem(ConvOp::kForward);
  std::set<uint64_t> hashes = {KernelKeyHash(base, 8), KernelKeyHash(base, 9)};
  std::vector<ConvProblem> variants(14, base);
  variants[0].op = ConvOp::kBackwardData;
  variants[1].c = 4;
  variants[2].h = 10;
  variants[3].w = 10;
  variants[4].k = 5;
  variants[5].r = 1;
  variants[6].s = 1;
  variants[7].pad_h = 0;
  variants[8].stride_w = 2;
  variants[9].dilation_h = 2;
  variants[10].data_type = DataType::kFloat16;
  variants[11].layout = Layout::kNHWC;
  variants[12].math = MathMode::kTensorOp;
  variants[13].compute_type = DataType::kFloat16;
  for (const ConvProblem& v : variants) hashes.insert(KernelKeyHash(v, 8));
  EXPECT_EQ(hashes.size(), 16u);
  EXPECT_EQ(KernelKeyHash(base, 8), KernelKeyHash(SmallProblem(ConvOp::kForward), 8));
}

TEST(KernelTableTest, FindsWhatWasInsertedAndNothingElse) {
  KernelTable table(64);
  const ConvProblem p = SmallProblem(ConvOp::kForward);
  EXPECT_EQ(table.Find(KernelKeyHash(p, 8), p, 8), nullptr);
  KernelState* inserted = table.Insert(State(p, 8));
  ASSERT_NE(inserted, nullptr);
  EXPECT_EQ(table.Find(KernelKeyHash(p, 8), p, 8), inserted);
  EXPECT_EQ(table.Find(KernelKeyHash(p, 16), p, 16), nullptr);
  EXPECT_EQ(table.size(), 1u);
}

TEST(KernelTableTest, CollidingHashesAreTellApartByTheProblem) {
  KernelTable table(8);
  ConvProblem a = SmallProblem(ConvOp::kForward);
  ConvProblem b = SmallProblem(ConvOp::kBackwardData);
  auto sa = State(a, 4);
  auto sb = State(b, 4);
  sb->hash = sa->hash;  // forced collision
  KernelState* ka = table.Insert(std::move(sa));
  KernelState* kb = table.Insert(std::move(sb));
  EXPECT_EQ(table.Find(ka->hash, a, 4), ka);
  EXPECT_EQ(table.Find(ka->hash, b, 4), kb);
}

TEST(KernelTableTest, RefusesBeyondItsCapacity) {
  KernelTable table(3);
  for (int64_t batch = 1; batch <= 3; ++batch) {
    ASSERT_NE(table.Insert(State(SmallProblem(ConvOp::kForward), batch)), nullptr);
  }
  EXPECT_EQ(table.Insert(State(SmallProblem(ConvOp::kForward), 4)), nullptr);
  for (int64_t batch = 1; batch <= 3; ++batch) {
    const ConvProblem p = SmallProblem(ConvOp::kForward);
    EXPECT_NE(table.Find(KernelKeyHash(p, batch), p, batch), nullptr);
  }
}

TEST(KernelTableTest, ReadersSeeEntriesInsertedConcurrently) {
  KernelTable table(1024);
  std::atomic<bool> done{false};
  std::thread reader([&] {
    // Every pointer a reader finds must be complete (run under TSan/ASan for the real check).
    while (!done.load()) {
      for (int64_t batch = 1; batch <= 500; ++batch) {
        const ConvProblem p = SmallProblem(ConvOp::kForward);
        if (KernelState* s = table.Find(KernelKeyHash(p, batch), p, batch)) {
          EXPECT_EQ(s->batch, batch);
        }
      }
    }
  });
  for (int64_t batch = 1; batch <= 500; ++batch) {
    ASSERT_NE(table.Insert(State(SmallProblem(ConvOp::kForward), batch)), nullptr);
  }
  done = true;
  reader.join();
  EXPECT_EQ(table.size(), 500u);
}

}  // namespace
}  // namespace ucudnn::testing
