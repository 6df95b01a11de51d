//===- BackwardSchedule.cpp - what both backward schedules share ----------===//

#include "fa4/Transforms/BackwardSchedule.h"

#include "fa4/Transforms/TileConfig.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"

using namespace mlir;
using namespace mlir::fa4;

/// The first op of type `Op` in `func` (level B builds each once per
/// query loop; the masked loop's come first).
template <typename Op> static Op firstOf(func::FuncOp func) {
  Op found;
  func.walk([&](Op op) {
    found = op;
    return WalkResult::interrupt();
  });
  return found;
}

FailureOr<BackwardTemplates>
BackwardTemplates::read(func::FuncOp func, StringRef pass, StringRef family) {
  BackwardTemplates t;
  t.range = firstOf<QBlockRangeOp>(func);
  t.mask = firstOf<MaskOp>(func);
  t.softcap = firstOf<SoftcapOp>(func);
  t.scoreMod = firstOf<ScoreModOp>(func);
  t.probs = firstOf<ProbsFromLseOp>(func);
  t.softmaxGrad = firstOf<SoftmaxGradOp>(func);
  t.softcapGrad = firstOf<SoftcapGradOp>(func);
  t.scoreModGrad = firstOf<ScoreModGradOp>(func);
  if (!t.range || !t.probs || !t.softmaxGrad)
    return func.emitOpError()
           << "carries fa4.backward_spec but holds no backward tile program "
              "(fa4.q_block_range, fa4.probs_from_lse, fa4.softmax_grad) for "
           << pass << " to schedule";
  if (firstOf<WarpSpecializeOp>(func))
    return func.emitOpError() << "is already scheduled (it holds "
                                 "fa4.warp_specialize)";
  BackwardSpecAttr spec = getBackwardSpec(func);
  for (BackwardArgument role : {kBwdQ, kBwdK}) {
    auto type =
        cast<MemRefType>(func.getArgument(spec.getArguments()[role]).getType());
    if (type.getRank() != 4 || type.isDynamicDim(2) || type.isDynamicDim(3))
      return func.emitOpError()
             << "has Q or K of type " << type << "; the " << family
             << " backward needs rank-4 memrefs with static heads and head "
                "dim";
  }
  return t;
}

LogicalResult BackwardScheduleBuilder::begin() {
  auto qType = cast<MemRefType>(argument(kBwdQ).getType());
  auto kType = cast<MemRefType>(argument(kBwdK).getType());
  headDim = qType.getDimSize(3);
  element = qType.getElementType();
  kvHeads = kType.getDimSize(2);
  packing = t.range.getGqaRatio();
  int64_t qHeads = qType.getDimSize(2);
  if (stepRows % packing != 0)
    return t.range.emitOpError()
           << "packs " << packing << " query heads per row block; the "
           << family << " backward's steps are " << stepRows
           << " rows, so the packing must divide " << stepRows;
  groupsPerKv = qHeads / kvHeads / packing;

  // The old body goes once the new one is built (the templates are in it).
  Block &body = func.getBody().front();
  for (Operation &op : body.without_terminator())
    levelB.push_back(&op);
  b.setInsertionPointToStart(&body);
  Value zero = index(0), one = index(1);
  batches = memref::DimOp::create(b, loc, argument(kBwdQ), zero);
  seqQ = memref::DimOp::create(b, loc, argument(kBwdQ), one);
  seqK = memref::DimOp::create(b, loc, argument(kBwdK), one);
  nBlocks = arith::CeilDivUIOp::create(b, loc, seqK,
                                       index(TileConfig::kBlockN));
  numTasks = arith::MulIOp::create(b, loc, mul(batches, kvHeads), nBlocks);
  PrepareBackwardOp::create(b, loc, argument(kBwdOut), argument(kBwdDout),
                            argument(kBwdDelta), argument(kBwdDqAccum));
  return success();
}

void BackwardScheduleBuilder::end() {
  FinishDqOp::create(b, loc, argument(kBwdDqAccum), argument(kBwdDq),
                     spec.getScale());
  for (Operation *op : llvm::reverse(levelB)) {
    op->dropAllUses();
    op->erase();
  }
}

Value BackwardScheduleBuilder::smem(StringRef name, int64_t rows, int64_t cols,
                                    Type elementType, int64_t stages) {
  return SmemAllocOp::create(
      b, loc,
      SmemType::get(func.getContext(), rows, cols, elementType, stages),
      b.getStringAttr(name));
}

scf::ForOp BackwardScheduleBuilder::buildTaskLoop(
    function_ref<Value(BackwardTask &)> body) {
  // The persistent loop (the tile scheduler gives it each CTA's share):
  // over tasks (batch, K/V head, K/V block); in the deterministic order
  // over (batch, K/V head) pairs instead, the pair's K/V blocks walked in
  // ascending order inside, so that one CTA adds every dQ part of a K/V
  // head, in the same order on every run.
  bool deterministic = spec.getDeterministic();
  Value outerCount =
      deterministic ? Value(mul(batches, kvHeads)) : Value(numTasks);
  auto loop = scf::ForOp::create(b, loc, index(0), outerCount, index(1),
                                 ValueRange{index(0), index(0)});
  loop->setAttr("fa4.task_loop", b.getUnitAttr());
  dropImplicitYield(loop);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  // Task = (batch · kv_heads + kv_head) · n_blocks + n_block.
  auto task = [&](Value head, Value nBlock, ValueRange counts) {
    BackwardTask task;
    task.kvHead = arith::RemUIOp::create(b, loc, head, index(kvHeads));
    task.batch = arith::DivUIOp::create(b, loc, head, index(kvHeads));
    task.col = mul(nBlock, TileConfig::kBlockN);
    task.taskCount = counts[0];
    task.stepBase = counts[1];
    Value steps = body(task);
    return SmallVector<Value>{add(task.taskCount, index(1)),
                              add(task.stepBase, steps)};
  };
  Value position = loop.getInductionVar();
  if (!deterministic && (t.range.getMask() != MaskKind::none ||
                         !t.range.getMaskMod().empty())) {
    // Masked tasks differ in work (under a causal mask K/V block j sees the
    // query blocks from j on): heaviest first, every (batch, K/V head) of a
    // K/V block together, as the forward's lpt order; fa4-tile-scheduler
    // deals the positions out in a snake (order = lpt), so that each CTA's
    // share sums to about the same work. Round robin over blocks fastest
    // left the busiest CTA 1.3-1.6 times the mean at causal 1k-16k.
    Value heads = mul(batches, kvHeads);
    Value nBlock = arith::DivUIOp::create(b, loc, position, heads);
    Value head = arith::RemUIOp::create(b, loc, position, heads);
    loop->setAttr(kTaskOrderAttrName,
                  TaskOrderAttr::get(func.getContext(), TaskOrder::lpt));
    scf::YieldOp::create(b, loc, task(head, nBlock, loop.getRegionIterArgs()));
    return loop;
  }
  if (!deterministic) {
    // Unmasked tasks are alike: blocks fastest, so that the CTAs at work
    // at once share a few heads' Q and dO in L2.
    Value nBlock = arith::RemUIOp::create(b, loc, position, nBlocks);
    Value head = arith::DivUIOp::create(b, loc, position, nBlocks);
    scf::YieldOp::create(b, loc, task(head, nBlock, loop.getRegionIterArgs()));
    return loop;
  }
  auto blocks = scf::ForOp::create(b, loc, index(0), nBlocks, index(1),
                                   loop.getRegionIterArgs());
  dropImplicitYield(blocks);
  {
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPointToStart(blocks.getBody());
    scf::YieldOp::create(b, loc,
                         task(position, blocks.getInductionVar(),
                              blocks.getRegionIterArgs()));
  }
  scf::YieldOp::create(b, loc, blocks.getResults());
  return loop;
}

SmallVector<Value> BackwardScheduleBuilder::forEachStep(
    const BackwardTask &task, ValueRange init,
    function_ref<SmallVector<Value>(const Step &, ValueRange)> step) {
  // The query heads of the K/V head: groupsPerKv groups of `packing`
  // packed heads, one after the other, as level B visits them.
  SmallVector<Value> groupInit{index(0)};
  groupInit.append(init.begin(), init.end());
  auto groups = scf::ForOp::create(b, loc, index(0), index(groupsPerKv),
                                   index(1), groupInit);
  dropImplicitYield(groups);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(groups.getBody());
  Value group = groups.getInductionVar();
  ValueRange carried = groups.getRegionIterArgs();
  Step at;
  at.head = add(mul(task.kvHead, groupsPerKv), group);
  IRMapping mapping;
  mapping.map(t.range.getCol(), task.col);
  mapping.map(t.range.getSeqQ(), seqQ);
  mapping.map(t.range.getSeqK(), seqK);
  at.range = cast<QBlockRangeOp>(b.clone(*t.range, mapping));
  at.range.setRows(stepRows);
  Value count = sub(at.range.getEnd(), at.range.getBegin());
  auto steps =
      scf::ForOp::create(b, loc, index(0), count, index(1), carried.drop_front());
  dropImplicitYield(steps);
  {
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPointToStart(steps.getBody());
    Value i = steps.getInductionVar();
    at.block = add(at.range.getBegin(), i);
    at.row = mul(at.block, stepRows);
    at.item = add(add(task.stepBase, carried[0]), i);
    scf::YieldOp::create(b, loc, step(at, steps.getRegionIterArgs()));
  }
  SmallVector<Value> next{add(carried[0], count)};
  next.append(steps.getResults().begin(), steps.getResults().end());
  scf::YieldOp::create(b, loc, next);
  return SmallVector<Value>(groups.getResults());
}

void BackwardScheduleBuilder::buildRoles(
    ArrayRef<RoleSpec> roles,
    function_ref<void(const RoleSpec &, RoleOp)> body) {
  auto specialize = WarpSpecializeOp::create(b, loc);
  Block *block = new Block();
  specialize.getRoles().push_back(block);
  for (const RoleSpec &role : roles) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToEnd(block);
    auto op = RoleOp::create(b, loc, role.name, role.firstWarp, role.numWarps,
                             role.registers);
    b.setInsertionPointToStart(&op.getBody().emplaceBlock());
    body(role, op);
  }
}

void BackwardScheduleBuilder::buildLoader(Value k, Value v, Value q,
                                          Value dout, Value stats) {
  scf::ForOp tasks = buildTaskLoop([&](BackwardTask &task) {
    for (auto [buffer, role] : {std::pair{k, kBwdK}, {v, kBwdV}}) {
      ProducerAcquireOp::create(b, loc, buffer, task.taskCount);
      TmaLoadOp::create(b, loc, argument(role), task.batch, task.kvHead,
                        task.col, buffer, task.taskCount, Value(), Value(),
                        Value(), Value(), 1);
      ProducerCommitOp::create(b, loc, buffer, task.taskCount);
    }
    return forEachStep(
        task, ValueRange(),
        [&](const Step &at, ValueRange) -> SmallVector<Value> {
          for (auto [buffer, role] :
               {std::pair{q, kBwdQ}, {dout, kBwdDout}}) {
            ProducerAcquireOp::create(b, loc, buffer, at.item);
            TmaLoadOp::create(b, loc, argument(role), task.batch, at.head,
                              at.row, buffer, at.item, Value(), Value(),
                              Value(), Value(), packing);
            ProducerCommitOp::create(b, loc, buffer, at.item);
          }
          if (stats) {
            // The step's LSE and delta, rows 0 and 1 of the item, copied by
            // the loading warp's threads (rows past seq_q as 0).
            auto rowType = RankedTensorType::get({stepRows}, b.getF32Type());
            ProducerAcquireOp::create(b, loc, stats, at.item);
            for (auto [row, role] : {std::pair{0, kBwdLse}, {1, kBwdDelta}}) {
              Value values =
                  LoadRowTileOp::create(b, loc, rowType, argument(role),
                                        task.batch, at.head, at.row, packing,
                                        /*transposed=*/false);
              SmemStoreOp::create(b, loc, values, stats, at.item, Value(),
                                  b.getI64IntegerAttr(row));
            }
            ProducerCommitOp::create(b, loc, stats, at.item);
          }
          return {};
        })[0];
  });
  // Every stage of every ring back from its consumers before the role
  // ends.
  for (Value buffer : {k, v})
    for (int64_t s = 0; s < cast<SmemType>(buffer.getType()).getStages(); ++s)
      ProducerAcquireOp::create(b, loc, buffer,
                                add(tasks.getResult(0), index(s)));
  SmallVector<Value, 3> rings{q, dout};
  if (stats)
    rings.push_back(stats);
  for (int64_t s = 0; s < 2; ++s)
    for (Value buffer : rings)
      ProducerAcquireOp::create(b, loc, buffer,
                                add(tasks.getResult(1), index(s)));
}

Operation *BackwardScheduleBuilder::cloneTransposed(Operation *op,
                                                    IRMapping &mapping,
                                                    Type type) {
  Operation *clone = b.clone(*op, mapping);
  clone->getResult(0).setType(type);
  if (!isa<SoftcapOp, SoftcapGradOp>(clone))
    clone->setAttr("transposed", b.getUnitAttr());
  return clone;
}

void BackwardScheduleBuilder::place(IRMapping &mapping, Value rowOf,
                                    Value colOf, Value seqQOf, Value seqKOf,
                                    Value rowBegin, Value keyBegin) {
  mapping.map(rowOf, rowBegin);
  mapping.map(colOf, keyBegin);
  mapping.map(seqQOf, seqQ);
  mapping.map(seqKOf, seqK);
}

BackwardScheduleBuilder::Scores
BackwardScheduleBuilder::modScores(Value raw, const BackwardTask &task,
                                   const Step &at, Value keyBegin,
                                   Value rowBegin) {
  Type type = raw.getType();
  Scores out;
  out.raw = raw;
  out.scores = raw;
  if (t.softcap) {
    IRMapping mapping;
    mapping.map(t.softcap.getScores(), raw);
    out.scores = cloneTransposed(t.softcap, mapping, type)->getResult(0);
  }
  if (t.scoreMod) {
    IRMapping mapping;
    mapping.map(t.scoreMod.getScores(), raw);
    mapping.map(t.scoreMod.getBatch(), task.batch);
    mapping.map(t.scoreMod.getHead(), at.head);
    place(mapping, t.scoreMod.getRow(), t.scoreMod.getCol(),
          t.scoreMod.getSeqQ(), t.scoreMod.getSeqK(), rowBegin, keyBegin);
    out.scores = cloneTransposed(t.scoreMod, mapping, type)->getResult(0);
  }
  out.visible = out.scores;
  if (!t.mask)
    return out;
  // Only steps straddling the band's edges pay for the mask.
  QBlockRangeOp range = at.range;
  Value straddles = arith::OrIOp::create(
      b, loc, cmp(arith::CmpIPredicate::slt, at.block, range.getFullBegin()),
      cmp(arith::CmpIPredicate::sge, at.block, range.getFullEnd()));
  auto branch = scf::IfOp::create(b, loc, type, straddles, true);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(branch.thenBlock());
  IRMapping mapping;
  mapping.map(t.mask.getScores(), out.scores);
  place(mapping, t.mask.getRow(), t.mask.getCol(), t.mask.getSeqQ(),
        t.mask.getSeqK(), rowBegin, keyBegin);
  if (t.mask.getBatch()) {
    mapping.map(t.mask.getBatch(), task.batch);
    mapping.map(t.mask.getHead(), at.head);
  }
  scf::YieldOp::create(b, loc,
                       cloneTransposed(t.mask, mapping, type)->getResult(0));
  b.setInsertionPointToStart(branch.elseBlock());
  scf::YieldOp::create(b, loc, out.scores);
  b.setInsertionPointAfter(branch);
  out.visible = branch.getResult(0);
  return out;
}

Value BackwardScheduleBuilder::probs(const Scores &scores, Value lse) {
  IRMapping mapping;
  mapping.map(t.probs.getScores(), scores.visible);
  mapping.map(t.probs.getLse(), lse);
  return cloneTransposed(t.probs, mapping, scores.raw.getType())->getResult(0);
}

Value BackwardScheduleBuilder::gradient(const Scores &scores, Value probs,
                                        Value dprobs, Value delta,
                                        const BackwardTask &task,
                                        const Step &at, Value keyBegin,
                                        Value rowBegin) {
  Type type = scores.raw.getType();
  IRMapping gradMapping;
  gradMapping.map(t.softmaxGrad.getProbs(), probs);
  gradMapping.map(t.softmaxGrad.getDprobs(), dprobs);
  gradMapping.map(t.softmaxGrad.getDelta(), delta);
  Value ds = cloneTransposed(t.softmaxGrad, gradMapping, type)->getResult(0);
  if (t.softcapGrad) {
    IRMapping mapping;
    mapping.map(t.softcapGrad.getGrad(), ds);
    mapping.map(t.softcapGrad.getCapped(), scores.scores);
    ds = cloneTransposed(t.softcapGrad, mapping, type)->getResult(0);
  }
  if (t.scoreModGrad) {
    IRMapping mapping;
    mapping.map(t.scoreModGrad.getGrad(), ds);
    mapping.map(t.scoreModGrad.getScores(), scores.raw);
    mapping.map(t.scoreModGrad.getBatch(), task.batch);
    mapping.map(t.scoreModGrad.getHead(), at.head);
    place(mapping, t.scoreModGrad.getRow(), t.scoreModGrad.getCol(),
          t.scoreModGrad.getSeqQ(), t.scoreModGrad.getSeqK(), rowBegin,
          keyBegin);
    ds = cloneTransposed(t.scoreModGrad, mapping, type)->getResult(0);
  }
  return ds;
}
