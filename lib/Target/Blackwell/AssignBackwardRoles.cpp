//===- AssignBackwardRoles.cpp - the backward on Blackwell's roles --------===//
//
// Level B -> level C of fa4.attention_backward for sm_100a, in the
// FlashAttention-4 style (docs/Backward.md, "The Blackwell schedule"): the
// products in tensor memory, issued by one thread, the pointwise work on
// TMEM rows.
//
//   fa4.prepare_backward            a kernel: delta = rowsum(O ∘ dO), the dQ
//                                   accumulator cleared
//   fa4.warp_specialize             the main kernel, one task per (batch,
//                                   K/V head, 128 keys):
//     load   loads K and V once per task, then Q and dO for each visited
//            step of 128 packed query rows into two-stage rings (TMA), and
//            the step's LSE and delta into a two-stage ring beside them;
//     mma    per step: Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ into TMEM (the forward's
//            score MMA with the operands swapped, so that a TMEM lane is a
//            key), then dV += Pᵀ·dO and dK += dSᵀ·Q with Pᵀ and dSᵀ read
//            from TMEM (the forward's value MMA: the A operand in TMEM),
//            then dQ = dS·K with dSᵀ read from shared memory as the M-major
//            A operand;
//     grad   one key per thread: per 32 columns of the step, Sᵀ and dPᵀ
//            from TMEM, Pᵀ from the LSE (shared memory), dSᵀ = Pᵀ ∘ (dPᵀ − delta) back
//            through the mods; Pᵀ and dSᵀ rounded into TMEM over the
//            columns they came from, dSᵀ also into shared memory; after the
//            task's last step dK (times the scale) and dV from TMEM to
//            global memory;
//     dq     one packed query row per thread: the step's dQ part from TMEM,
//            added to the f32 accumulator;
//   fa4.finish_dq                   a kernel: dQ = accumulator · scale.
//
// Tensor memory, as FlashAttention-4's backward lays it out: Sᵀ (P in its
// 16-bit view), dPᵀ (dS in its 16-bit view, and the step's dQ over the
// same columns: the dQ MMA is issued after the dK MMA that reads dSᵀ, and
// tensor-core ops of one thread run in issue order), dV and dK — 512
// columns at head dim 128.
//
//===----------------------------------------------------------------------===//

#include "fa4/Target/Blackwell/Backward.h"

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Target/Blackwell/ScheduleConfig.h"
#include "fa4/Transforms/BackwardSchedule.h"
#include "fa4/Transforms/TileConfig.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::fa4;

namespace {

constexpr int64_t kStep = ScheduleConfig::kBackwardStep;
constexpr int64_t kChunk = ScheduleConfig::kGradChunk;

class BackwardProgramBuilder : BackwardScheduleBuilder {
public:
  BackwardProgramBuilder(func::FuncOp func, BackwardSpecAttr spec,
                         BackwardTemplates templates)
      : BackwardScheduleBuilder(func, spec, templates, kStep, "Blackwell") {}

  LogicalResult build();

private:
  void createBuffers();
  Value buildMma(const BackwardTask &task);
  Value buildGrad(const BackwardTask &task);
  void buildGradStep(const BackwardTask &task, const Step &at);
  /// dK or dV of the task's keys from `acc` to `dest`, times `scale`; zero
  /// when the task saw no query row (`visited` false: `acc` was never
  /// written).
  void storeGradient(const BackwardTask &task, Value acc, Value dest,
                     APFloat scale, Value visited);
  Value buildDq(const BackwardTask &task);

  Value kBuffer, vBuffer, qBuffer, doBuffer, dsBuffer, statsBuffer;
  /// TMEM: Sᵀ and its Pᵀ view, dPᵀ and its dSᵀ and dQ views, dV, dK.
  Value scoresT, probsT, dprobsT, dscoresT, dq, dv, dk;
};

} // namespace

void BackwardProgramBuilder::createBuffers() {
  MLIRContext *context = func.getContext();
  Type f32 = b.getF32Type();
  kBuffer = smem("k", TileConfig::kBlockN, headDim, element, 1);
  vBuffer = smem("v", TileConfig::kBlockN, headDim, element, 1);
  qBuffer = smem("q", kStep, headDim, element, 2);
  doBuffer = smem("do", kStep, headDim, element, 2);
  // dSᵀ as the grad warps hold it (keys × packed rows), for dQ's MMA.
  dsBuffer = smem("ds", TileConfig::kBlockN, kStep, element, 1);
  // The step's LSE (row 0) and delta (row 1), copied by the load warp
  // beside Q and dO, as FlashAttention-4's backward stages them: every
  // grad thread reads all of a chunk's, which from global memory cost a
  // guarded load per column and thread (2 KB: at head dim 128 the last
  // shared memory there is).
  statsBuffer = smem("stats", 2, kStep, f32, 2);
  auto tmem = [&](StringRef name, int64_t cols) -> Value {
    return TmemAllocOp::create(
        b, loc, TmemType::get(context, TileConfig::kBlockN, cols, f32),
        b.getStringAttr(name), IntegerAttr());
  };
  auto view = [&](StringRef name, Value source, int64_t lanes, int64_t cols,
                  Type type) -> Value {
    return TmemViewOp::create(b, loc, TmemType::get(context, lanes, cols, type),
                              b.getStringAttr(name), source);
  };
  scoresT = tmem("ST", kStep);
  dprobsT = tmem("dPT", kStep);
  dv = tmem("dV", headDim);
  dk = tmem("dK", headDim);
  probsT = view("PT", scoresT, TileConfig::kBlockN, kStep, element);
  dscoresT = view("dST", dprobsT, TileConfig::kBlockN, kStep, element);
  dq = view("dQ", dprobsT, kStep, headDim, f32);
}

Value BackwardProgramBuilder::buildMma(const BackwardTask &task) {
  Value taskItem = task.taskCount;
  ConsumerWaitOp::create(b, loc, kBuffer, taskItem);
  ConsumerWaitOp::create(b, loc, vBuffer, taskItem);
  // The task's dV and dK: the grad warps have read the previous task's.
  ProducerAcquireOp::create(b, loc, dv, taskItem);
  ProducerAcquireOp::create(b, loc, dk, taskItem);
  Value steps = forEachStep(
      task, ValueRange(),
      [&](const Step &at, ValueRange) -> SmallVector<Value> {
        Value i = at.item;
        // The task's first step overwrites dV and dK; later ones add.
        Value accumulate = cmp(arith::CmpIPredicate::ne, i, task.stepBase);
        ConsumerWaitOp::create(b, loc, qBuffer, i);
        ProducerAcquireOp::create(b, loc, scoresT, i);
        ScoreMmaAsyncOp::create(b, loc, kBuffer, taskItem, qBuffer, i,
                                scoresT);
        ProducerCommitOp::create(b, loc, scoresT, i);
        // dPᵀ's columns are also the previous step's dQ: the dq warps must
        // have read it out.
        ConsumerWaitOp::create(b, loc, doBuffer, i);
        ProducerAcquireOp::create(b, loc, dprobsT, i);
        ProducerAcquireOp::create(b, loc, dq, i);
        ScoreMmaAsyncOp::create(b, loc, vBuffer, taskItem, doBuffer, i,
                                dprobsT);
        ProducerCommitOp::create(b, loc, dprobsT, i);
        // dV += Pᵀ·dO.
        ConsumerWaitOp::create(b, loc, probsT, i);
        ValueMmaAsyncOp::create(b, loc, probsT, doBuffer, i, dv, accumulate);
        ConsumerReleaseOp::create(b, loc, probsT, i);
        ConsumerReleaseOp::create(b, loc, doBuffer, i);
        // dK += dSᵀ·Q.
        ConsumerWaitOp::create(b, loc, dscoresT, i);
        ValueMmaAsyncOp::create(b, loc, dscoresT, qBuffer, i, dk, accumulate);
        ConsumerReleaseOp::create(b, loc, dscoresT, i);
        ConsumerReleaseOp::create(b, loc, qBuffer, i);
        // dQ = dS·K, over dSᵀ's columns once the dK MMA has read them.
        ConsumerWaitOp::create(b, loc, dsBuffer, i);
        TransposedMmaAsyncOp::create(b, loc, dsBuffer, i, kBuffer, taskItem,
                                     dq);
        ProducerCommitOp::create(b, loc, dq, i);
        ConsumerReleaseOp::create(b, loc, dsBuffer, i);
        return {};
      })[0];
  ProducerCommitOp::create(b, loc, dv, taskItem);
  ProducerCommitOp::create(b, loc, dk, taskItem);
  ConsumerReleaseOp::create(b, loc, kBuffer, taskItem);
  ConsumerReleaseOp::create(b, loc, vBuffer, taskItem);
  return steps;
}

void BackwardProgramBuilder::buildGradStep(const BackwardTask &task,
                                           const Step &at) {
  Type f32 = b.getF32Type();
  auto chunkType = tile(TileConfig::kBlockN, kChunk, f32);
  auto lowType = tile(TileConfig::kBlockN, kChunk, element);
  auto columnType = RankedTensorType::get({kChunk}, f32);
  Value i = at.item;
  ConsumerWaitOp::create(b, loc, scoresT, i);
  ConsumerWaitOp::create(b, loc, dprobsT, i);
  ProducerAcquireOp::create(b, loc, probsT, i);
  ProducerAcquireOp::create(b, loc, dscoresT, i);
  ProducerAcquireOp::create(b, loc, dsBuffer, i);
  ConsumerWaitOp::create(b, loc, statsBuffer, i);
  // Chunk c's 16-bit Pᵀ and dSᵀ land on 32-bit columns [c/2, c/2 + 16) of
  // Sᵀ and dPᵀ, which chunks up to c have already read.
  for (int64_t c = 0; c < kStep; c += kChunk) {
    Value column = index(c);
    Value rowBegin = add(at.row, column);
    // The LSE and delta of the chunk's packed rows, along its columns.
    auto statsRow = [&](int64_t row) -> Value {
      return SmemLoadOp::create(b, loc, columnType, statsBuffer, i,
                                b.getI64IntegerAttr(row), b.getUnitAttr(),
                                b.getI64IntegerAttr(c));
    };
    Value lse = statsRow(0);
    Value raw = TmemLoadOp::create(b, loc, chunkType, scoresT, column);
    Scores scores = modScores(raw, task, at, task.col, rowBegin);
    Value probs = this->probs(scores, lse);
    Value dprobs = TmemLoadOp::create(b, loc, chunkType, dprobsT, column);
    Value delta = statsRow(1);
    Value ds = gradient(scores, probs, dprobs, delta, task, at, task.col,
                        rowBegin);
    Value probsLow =
        ConvertTileOp::create(b, loc, lowType, probs, APFloat(1.0f));
    Value dsLow = ConvertTileOp::create(b, loc, lowType, ds, APFloat(1.0f));
    TmemStoreOp::create(b, loc, probsLow, probsT, column);
    TmemStoreOp::create(b, loc, dsLow, dscoresT, column);
    SmemStoreOp::create(b, loc, dsLow, dsBuffer, i, column, IntegerAttr());
  }
  ProducerCommitOp::create(b, loc, probsT, i);
  ProducerCommitOp::create(b, loc, dscoresT, i);
  ProducerCommitOp::create(b, loc, dsBuffer, i);
  ConsumerReleaseOp::create(b, loc, statsBuffer, i);
  ConsumerReleaseOp::create(b, loc, scoresT, i);
  ConsumerReleaseOp::create(b, loc, dprobsT, i);
}

void BackwardProgramBuilder::storeGradient(const BackwardTask &task, Value acc,
                                           Value dest, APFloat scale,
                                           Value visited) {
  auto accType = tile(TileConfig::kBlockN, headDim, b.getF32Type());
  auto outType = tile(TileConfig::kBlockN, headDim, element);
  ConsumerWaitOp::create(b, loc, acc, task.taskCount);
  auto branch = scf::IfOp::create(b, loc, TypeRange{outType}, visited, true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(branch.thenBlock());
    Value sum = TmemLoadOp::create(b, loc, accType, acc, index(0));
    scf::YieldOp::create(
        b, loc, ValueRange{ConvertTileOp::create(b, loc, outType, sum, scale)});
    b.setInsertionPointToStart(branch.elseBlock());
    scf::YieldOp::create(b, loc, splat(outType, 0.0f));
  }
  ConsumerReleaseOp::create(b, loc, acc, task.taskCount);
  StoreKvTileOp::create(b, loc, branch.getResult(0), dest, task.batch,
                        task.kvHead, task.col);
}

Value BackwardProgramBuilder::buildGrad(const BackwardTask &task) {
  Value steps = forEachStep(task, ValueRange(),
                            [&](const Step &at, ValueRange) {
                              buildGradStep(task, at);
                              return SmallVector<Value>();
                            })[0];
  // dK with respect to K carries the softmax scale; dV does not.
  Value visited = cmp(arith::CmpIPredicate::ne, steps, index(0));
  storeGradient(task, dv, argument(kBwdDv), APFloat(1.0f), visited);
  storeGradient(task, dk, argument(kBwdDk), spec.getScale(), visited);
  return steps;
}

Value BackwardProgramBuilder::buildDq(const BackwardTask &task) {
  return forEachStep(
      task, ValueRange(),
      [&](const Step &at, ValueRange) -> SmallVector<Value> {
        // 32 columns at a time, read out and added from registers; the
        // columns go back once the last chunk is read (the next step's
        // dPᵀ goes over them). In the deterministic order every element of
        // dQ has one thread adding to it, the same on every task of the K/V
        // head, whose adds the PTX memory model keeps in program order.
        ConsumerWaitOp::create(b, loc, dq, at.item);
        for (int64_t column = 0; column < headDim; column += kChunk) {
          auto partType = tile(kStep, std::min(kChunk, headDim - column),
                               b.getF32Type());
          Value part = TmemLoadOp::create(b, loc, partType, dq, index(column));
          if (column + kChunk >= headDim)
            ConsumerReleaseOp::create(b, loc, dq, at.item);
          auto accumulate =
              AccumulateDqOp::create(b, loc, part, argument(kBwdDqAccum),
                                     task.batch, at.head, at.row, packing);
          accumulate.setColumn(column);
        }
        return {};
      })[0];
}

LogicalResult BackwardProgramBuilder::build() {
  // 1. delta and the cleared accumulator.
  if (failed(begin()))
    return failure();
  if (headDim > kStep)
    return t.range.emitOpError()
           << "has head dim " << headDim
           << "; the Blackwell backward's tensor memory holds dQ over dPᵀ's "
           << kStep << " columns, so head dims up to " << kStep << " run";

  // 2. The main kernel.
  createBuffers();
  buildRoles(ScheduleConfig::backwardRoles(),
             [&](const RoleSpec &role, RoleOp) {
               if (role.name == role::kLoad)
                 buildLoader(kBuffer, vBuffer, qBuffer, doBuffer,
                             statsBuffer);
               else if (role.name == role::kMma)
                 buildTaskLoop(
                     [&](BackwardTask &task) { return buildMma(task); });
               else if (role.name == role::kGrad)
                 buildTaskLoop(
                     [&](BackwardTask &task) { return buildGrad(task); });
               else if (role.name == role::kDq)
                 buildTaskLoop(
                     [&](BackwardTask &task) { return buildDq(task); });
             });

  // 3. dQ from the accumulator.
  end();
  return success();
}

LogicalResult mlir::fa4::blackwell::scheduleBackward(func::FuncOp func,
                                                     StringRef pass) {
  FailureOr<BackwardTemplates> templates =
      BackwardTemplates::read(func, pass, "Blackwell");
  if (failed(templates))
    return failure();
  return BackwardProgramBuilder(func, getBackwardSpec(func), *templates)
      .build();
}
