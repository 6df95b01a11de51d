//===- AssignBackwardRoles.cpp - the backward on Hopper's warpgroups -------===//
//
// Level B -> level C of fa4.attention_backward for sm_90a, in the
// FlashAttention-3 style (docs/Backward.md, "The Hopper schedule"):
//
//   fa4.prepare_backward            a kernel: delta = rowsum(O ∘ dO), the dQ
//                                   accumulator cleared
//   fa4.warp_specialize             the main kernel, one task per (batch,
//                                   K/V head, 128 keys):
//     producer   its elected thread loads K and V once per task, then Q and
//                dO for each visited step of 64 packed query rows into
//                two-stage rings (TMA); its first warp copies the step's
//                LSE and delta into a two-stage ring beside them;
//     consumer h owns keys [64h, 64h + 64) of the task and holds its dK and
//                dV in registers; per step it computes Sᵀ = K·Qᵀ and
//                dPᵀ = V·dOᵀ (the forward's score MMA with the operands
//                swapped, so that Pᵀ and dSᵀ are in the A-operand layout
//                of the next MMAs), Pᵀ from the LSE, dSᵀ, then
//                dV += Pᵀ·dO and dK += dSᵀ·Q from registers; it stages dSᵀ
//                in its own shared buffer and computes its keys' share of
//                dQ = dS·K from there, which it stages in shared memory
//                and adds to the f32 accumulator with one TMA reduction;
//                after the task's last step it stores its rows of dK
//                (times the scale) and dV;
//   fa4.finish_dq                   a kernel: dQ = accumulator · scale.
//
// The pointwise ops are level B's, cloned onto the transposed 64 × 64 tiles
// (`transposed`: rows are keys, columns packed query rows), so the schedule
// computes what the tile program did. Every MMA completes before its result
// is read (no overlap yet); dQ's parts are added in any order, or, in the
// deterministic order, each K/V head's tasks run on one CTA in ascending
// order and each element of dQ is added to by one thread (vector
// reductions from the registers, not a TMA reduction, whose adds are not
// ordered with the next one's).
//
//===----------------------------------------------------------------------===//

#include "fa4/Target/Hopper/Backward.h"

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Target/Hopper/ScheduleConfig.h"
#include "fa4/Transforms/TileConfig.h"
#include "fa4/Transforms/BackwardSchedule.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"

using namespace mlir;
using namespace mlir::fa4;

namespace {

/// Rows of a query step and keys of a consumer: one wgmma row block.
constexpr int64_t kStep = hopper::ScheduleConfig::kRowsPerConsumer;

class BackwardProgramBuilder : BackwardScheduleBuilder {
public:
  BackwardProgramBuilder(func::FuncOp func, BackwardSpecAttr spec,
                         BackwardTemplates templates)
      : BackwardScheduleBuilder(func, spec, templates, kStep, "Hopper") {}

  LogicalResult build();

private:
  Value buildConsumer(const BackwardTask &task, int64_t half);
  /// One step of consumer `half`: dK and dV after it.
  SmallVector<Value> buildConsumerStep(const BackwardTask &task, int64_t half,
                                       const Step &at, Value dkIn, Value dvIn);

  Value kBuffer, vBuffer, qBuffer, doBuffer, statsBuffer;
  Value dsBuffer[hopper::ScheduleConfig::kConsumers];
  /// Each warpgroup's dQ part staged for its TMA reduction (null in the
  /// deterministic order, whose threads add their elements themselves).
  Value dqBuffer[hopper::ScheduleConfig::kConsumers];
  /// The named barriers of the dQ staging, one per warpgroup.
  static constexpr int64_t kDqBarrier = 1;
};

} // namespace

Value BackwardProgramBuilder::buildConsumer(const BackwardTask &task,
                                            int64_t half) {
  auto gradType = tile(kStep, headDim, b.getF32Type());
  Value keyBegin = add(task.col, index(half * kStep));

  ConsumerWaitOp::create(b, loc, kBuffer, task.taskCount);
  ConsumerWaitOp::create(b, loc, vBuffer, task.taskCount);
  // dK and dV of the warpgroup's keys, across the task's steps.
  Value zero = splat(gradType, 0.0f);
  SmallVector<Value> done = forEachStep(
      task, ValueRange{zero, zero},
      [&](const Step &at, ValueRange carried) -> SmallVector<Value> {
        return buildConsumerStep(task, half, at, carried[0], carried[1]);
      });
  ConsumerReleaseOp::create(b, loc, kBuffer, task.taskCount);
  ConsumerReleaseOp::create(b, loc, vBuffer, task.taskCount);
  // dK with respect to K carries the softmax scale; dV does not.
  auto kvType = tile(kStep, headDim, element);
  Value dkOut = ConvertTileOp::create(b, loc, kvType, done[1],
                                      spec.getScale());
  Value dvOut = ConvertTileOp::create(b, loc, kvType, done[2],
                                      APFloat(1.0f));
  StoreKvTileOp::create(b, loc, dkOut, argument(kBwdDk), task.batch,
                        task.kvHead, keyBegin);
  StoreKvTileOp::create(b, loc, dvOut, argument(kBwdDv), task.batch,
                        task.kvHead, keyBegin);
  return done[0];
}

SmallVector<Value>
BackwardProgramBuilder::buildConsumerStep(const BackwardTask &task,
                                          int64_t half, const Step &at,
                                          Value dkIn, Value dvIn) {
  Type f32 = b.getF32Type();
  auto scoreType = tile(kStep, kStep, f32);
  auto lowType = tile(kStep, kStep, element);
  auto rowType = RankedTensorType::get({kStep}, f32);
  int64_t keyOffset = half * kStep;
  Value keyBegin = add(task.col, index(keyOffset));
  Value row = at.row;
  ConsumerWaitOp::create(b, loc, qBuffer, at.item);
  ConsumerWaitOp::create(b, loc, doBuffer, at.item);
  // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ issued together; Pᵀ is computed while dPᵀ
  // is still on the tensor core.
  auto scoreMma = WarpgroupScoreMmaOp::create(b, loc, scoreType, kBuffer,
                                              task.taskCount, keyOffset,
                                              qBuffer, at.item);
  scoreMma.setAsync(true);
  auto dprobsMma = WarpgroupScoreMmaOp::create(b, loc, scoreType, vBuffer,
                                               task.taskCount, keyOffset,
                                               doBuffer, at.item);
  dprobsMma.setAsync(true);
  // The LSE and delta of the step's packed rows, along the tiles' columns,
  // from the ring the producer fills (as FA3's, which loads them into
  // shared memory beside Q and dO), waited for while the MMAs run: read
  // from global memory here, each thread's sixteen of each were on the
  // step's critical path.
  ConsumerWaitOp::create(b, loc, statsBuffer, at.item);
  auto lseLoad = SmemLoadOp::create(b, loc, rowType, statsBuffer, at.item,
                                    b.getI64IntegerAttr(0), UnitAttr(), IntegerAttr());
  lseLoad.setTransposed(true);
  Value lse = lseLoad;
  Value raw = WarpgroupWaitOp::create(b, loc, scoreMma, 1);
  // The scores' mods at the step's place: packed rows from `row`, keys
  // from the warpgroup's first.
  Scores scores = modScores(raw, task, at, keyBegin, row);
  Value probs = this->probs(scores, lse);
  // dSᵀ = Pᵀ ∘ (dPᵀ − delta), back through the mods.
  Value dprobs = WarpgroupWaitOp::create(b, loc, dprobsMma, 0);
  // Delta read only now: its 16 values a thread are not live beside Sᵀ,
  // dPᵀ and the LSE's (at head dim 128 every register counts).
  auto deltaLoad = SmemLoadOp::create(b, loc, rowType, statsBuffer, at.item,
                                      b.getI64IntegerAttr(1), UnitAttr(), IntegerAttr());
  deltaLoad.setTransposed(true);
  Value delta = deltaLoad;
  Value ds = gradient(scores, probs, dprobs, delta, task, at, keyBegin, row);
  ConsumerReleaseOp::create(b, loc, statsBuffer, at.item);
  // dSᵀ staged in the warpgroup's own buffer first (the MMAs below read
  // the registers it comes from: nothing may touch them until they are
  // done), for dQ = dS·K, which reads it back as its transposed A operand.
  Value probsLow =
      ConvertTileOp::create(b, loc, lowType, probs, APFloat(1.0f));
  Value dsLow = ConvertTileOp::create(b, loc, lowType, ds, APFloat(1.0f));
  Value staging = dsBuffer[half];
  ProducerAcquireOp::create(b, loc, staging, at.item);
  SmemStoreOp::create(b, loc, dsLow, staging, at.item, Value(),
                      IntegerAttr());
  ProducerCommitOp::create(b, loc, staging, at.item);
  // Past 64 columns of head dim the two warpgroups share dQ's step (as
  // FA3): each reads both warpgroups' dSᵀ, all 128 keys, and computes its
  // own 64 columns of the head dim, so that every element of dQ is added
  // to the accumulator once per step, not once per warpgroup. At 64 the
  // halves of a column box are not box-aligned: each warpgroup adds its
  // own keys' share of all 64 columns.
  // In the deterministic order the warpgroups share it at 64 too, the
  // first computing all 64 columns over the 128 keys and the second none:
  // every element of dQ then has one thread adding to it, the same on every
  // task of the K/V head, whose adds the PTX memory model keeps in program
  // order (writes to one location by one thread are coherence-ordered as
  // the program orders them).
  bool shared = headDim > kStep || spec.getDeterministic();
  SmallVector<Value, 2> read{staging};
  if (shared)
    read.assign({dsBuffer[0], dsBuffer[1]});
  for (Value buffer : read)
    ConsumerWaitOp::create(b, loc, buffer, at.item);
  // dV += Pᵀ·dO and dK += dSᵀ·Q (Pᵀ and dSᵀ from registers) and the first
  // 64 columns of the warpgroup's dQ, issued together.
  auto partType = [&](int64_t column) {
    return tile(kStep, std::min(kStep, headDim - column), f32);
  };
  SmallVector<int64_t, 2> columns;
  if (shared) {
    if (half * kStep < headDim)
      columns.push_back(half * kStep);
  } else {
    for (int64_t column = 0; column < headDim; column += kStep)
      columns.push_back(column);
  }
  auto dqMma = [&](int64_t column) {
    auto mma = WarpgroupTransposedMmaOp::create(
        b, loc, partType(column), read[0], at.item,
        shared ? read[1] : Value(), shared ? at.item : Value(), kBuffer,
        task.taskCount, shared ? 0 : keyOffset);
    mma.setColumnOffset(column);
    return mma;
  };
  auto dvMma = WarpgroupValueMmaOp::create(b, loc, probsLow, doBuffer,
                                           at.item, dvIn);
  dvMma.setAsync(true);
  auto dkMma =
      WarpgroupValueMmaOp::create(b, loc, dsLow, qBuffer, at.item, dkIn);
  dkMma.setAsync(true);
  WarpgroupTransposedMmaOp firstPart;
  if (!columns.empty()) {
    firstPart = dqMma(columns.front());
    firstPart.setAsync(true);
  }
  int64_t after = columns.empty() ? 0 : 1;
  Value dvOut = WarpgroupWaitOp::create(b, loc, dvMma, 1 + after);
  ConsumerReleaseOp::create(b, loc, doBuffer, at.item);
  Value dkOut = WarpgroupWaitOp::create(b, loc, dkMma, after);
  ConsumerReleaseOp::create(b, loc, qBuffer, at.item);
  // Each 64 columns of dQ's part added to the accumulator before the next
  // is computed (their registers beside dK and dV).
  for (int64_t column : columns) {
    Value part = column == columns.front()
                     ? Value(WarpgroupWaitOp::create(b, loc, firstPart, 0))
                     : Value(dqMma(column));
    if (Value staging = dqBuffer[half]) {
      // Through shared memory and one TMA reduction (FA3's way): the
      // warpgroup's threads write the part where the previous step's
      // reduction has finished reading (its elected thread waited, a step
      // after issuing it), and its elected thread adds the whole part to
      // the accumulator. Vector reductions from every thread held the
      // part's registers until the memory pipe took them, and queued
      // ahead of the producer's loads.
      int64_t id = kDqBarrier + half;
      int64_t threads = hopper::ScheduleConfig::kThreadsPerRole;
      TmaStoreWaitOp::create(b, loc);
      NamedBarrierSyncOp::create(b, loc, id, threads);
      SmemStoreOp::create(b, loc, part, staging, at.item, Value(),
                          IntegerAttr());
      NamedBarrierSyncOp::create(b, loc, id, threads);
      auto reduce = TmaStoreOp::create(b, loc, staging, at.item,
                                       argument(kBwdDqAccum), task.batch,
                                       at.head, row, packing);
      reduce.setColumn(column);
      reduce.setReduce(true);
      continue;
    }
    auto accumulate =
        AccumulateDqOp::create(b, loc, part, argument(kBwdDqAccum),
                               task.batch, at.head, row, packing);
    accumulate.setColumn(column);
  }
  for (Value buffer : read)
    ConsumerReleaseOp::create(b, loc, buffer, at.item);
  return {dkOut, dvOut};
}

LogicalResult BackwardProgramBuilder::build() {
  // 1. delta and the cleared accumulator.
  if (failed(begin()))
    return failure();

  // 2. The main kernel.
  // K and V in one stage. Two (where shared memory allows: head dim 64, or
  // deterministic) were measured on the H200 (run 33): hd64 causal 4-10 %
  // slower, softcap 17 %, deterministic hd128 causal 17 %, with more
  // spills (hd64: 32 -> 100 bytes); none faster.
  kBuffer = smem("k", TileConfig::kBlockN, headDim, element, 1);
  vBuffer = smem("v", TileConfig::kBlockN, headDim, element, 1);
  qBuffer = smem("q", kStep, headDim, element, 2);
  doBuffer = smem("do", kStep, headDim, element, 2);
  statsBuffer = smem("stats", 2, kStep, b.getF32Type(), 2);
  for (int64_t half = 0; half < hopper::ScheduleConfig::kConsumers; ++half)
    dsBuffer[half] = smem(("ds" + Twine(half)).str(), kStep, kStep, element, 1);
  // dQ's parts: past head dim 64 each warpgroup computes its 64 columns (the
  // last one what is left); at 64 each computes all of them.
  if (!spec.getDeterministic())
    for (int64_t half = 0; half < hopper::ScheduleConfig::kConsumers; ++half) {
      int64_t width = headDim > kStep
                          ? std::min(kStep, headDim - half * kStep)
                          : headDim;
      if (width > 0)
        dqBuffer[half] = smem(("dq" + Twine(half)).str(), kStep, width,
                              b.getF32Type(), 1);
    }

  buildRoles(hopper::ScheduleConfig::backwardRoles(),
             [&](const RoleSpec &role, RoleOp op) {
               if (role.name == hopper::role::kProducer) {
                 op->setAttr("fa4.single_warp", b.getUnitAttr());
                 buildLoader(kBuffer, vBuffer, qBuffer, doBuffer,
                             statsBuffer);
                 return;
               }
               int64_t half = role.name == hopper::role::kConsumer0 ? 0 : 1;
               buildTaskLoop([&](BackwardTask &task) {
                 return buildConsumer(task, half);
               });
               // No reduction may still read shared memory when the CTA
               // exits.
               if (dqBuffer[half])
                 TmaStoreWaitOp::create(b, loc);
             });

  // 3. dQ from the accumulator.
  end();
  return success();
}

LogicalResult mlir::fa4::hopper::scheduleBackward(func::FuncOp func,
                                                  StringRef pass) {
  FailureOr<BackwardTemplates> templates =
      BackwardTemplates::read(func, pass, "Hopper");
  if (failed(templates))
    return failure();
  return BackwardProgramBuilder(func, getBackwardSpec(func), *templates)
      .build();
}
