//===- TileProgram.cpp - what a schedule reads of the tile program --------===//

#include "fa4/Transforms/TileProgram.h"
#include "fa4/Transforms/TileConfig.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <functional>

using namespace mlir;
using namespace mlir::fa4;

FailureOr<std::optional<TileProgram>>
TileProgram::readForSchedule(func::FuncOp func, target::Family family,
                             StringRef pass, int64_t qTilesPerTask) {
  if (failed(checkModuleFamily(func, family, pass)))
    return failure();
  // A family that schedules the backward takes it before reading a forward
  // program (Hopper: fa4-hopper-warpgroup-roles); the others stop here.
  if (getBackwardSpec(func))
    return func.emitOpError()
           << "holds the backward tile program (fa4.backward_spec), which "
           << pass << " cannot schedule: the " << target::familyName(family)
           << " backward has no level-C schedule yet. Stop after 'tile' "
              "(fa4c --backward --stop-after=tile) and run it with fa4-sim";
  bool isKernel = false;
  FailureOr<TileProgram> read = TileProgram::read(func, pass, isKernel);
  if (!isKernel)
    return std::optional<TileProgram>();
  if (failed(read))
    return failure();
  // FP8: both families schedule it (Q and K's head dims 64, 96, 128 and
  // 192, V's 64, 96 and 128). Hopper's with dense K/V only: its V is the
  // transposed copy the runtime prepares, which has no paged or varlen
  // form. Blackwell's V stays as it is (tcgen05 reads an 8-bit B operand
  // MN-major), so paged caches, varlen, seqused_k and split-KV take FP8 as
  // they take 16-bit inputs.
  if (holdsFp8Pieces(func)) {
    StringRef schedule =
        family == target::Family::Hopper ? "sm_90a" : "Blackwell";
    auto dim = [&](TileArgument argument) {
      return cast<MemRefType>(read->arguments[argument].getType())
          .getDimSize(3);
    };
    auto oneOf = [](int64_t d, std::initializer_list<int64_t> dims) {
      return llvm::is_contained(dims, d);
    };
    // Head dim 256 too: Blackwell's one-Q-tile schedule (Q's 32 KB and
    // four 32 KB K/V stages beside O's bf16 staging), Hopper's with K/V
    // blocks of 64 keys where V's head dim is 256 (ScheduleConfig::
    // defaultBlockN: its consumers' registers).
    bool qFits = oneOf(dim(kQ), {64, 96, 128, 192, 256});
    bool vFits = oneOf(dim(kV), {64, 96, 128, 256});
    if (!qFits || !vFits)
      return func.emitOpError()
             << "holds FP8's pieces (e4m3 types, descales or the "
                "probabilities' shift) at head dims ("
             << dim(kQ) << ", " << dim(kV) << "); the " << schedule
             << " FP8 schedule takes Q and K's head dim 64, 96, 128, 192 or "
                "256 and V's 64, 96, 128 or 256 (rows of e4m3 in whole or "
                "part 128-byte swizzle lines)";
    if (failed(verifyFp8Program(func)))
      return failure();
    if (family == target::Family::Hopper &&
        (read->blockTable || read->cuSeqlensQ || read->splitWorkspace ||
         read->seqUsedK))
      return func.emitOpError()
             << "is an FP8 tile program with "
             << (read->blockTable     ? "a paged K/V cache"
                 : read->cuSeqlensQ   ? "variable lengths (varlen)"
                 : read->splitWorkspace ? "split-KV"
                                        : "seqused_k (a KV cache's lengths: "
                                          "fa4c --seqused-k, or --decode)")
             << ", which the sm_90a FP8 schedule does not take: its V is "
                "the transposed copy the runtime prepares of a dense [batch, "
                "seq_k] V (docs/FP8.md); sm_100a and sm_103a take it";
  }
  int64_t rows = read->range.getRows();
  // Hopper's one Q tile a task is 128 rows or 192 (three consumers').
  bool wide = family == target::Family::Hopper && rows == target::kWideQTileRows;
  bool fits = qTilesPerTask > 0
                  ? rows == TileConfig::kBlockM * qTilesPerTask || wide
                  : rows == TileConfig::kBlockM ||
                        rows == 2 * TileConfig::kBlockM;
  if (!fits && family == target::Family::Hopper)
    return read->range.emitOpError()
           << "covers tasks of " << rows
           << " rows; the Hopper schedule runs one Q tile of 128 or 192 "
              "rows per task (fa4c --q-tiles-per-task 1 and --q-tile-rows, "
              "fa4-tile's options of those names)";
  if (!fits)
    return read->range.emitOpError()
           << "covers tasks of " << rows << " rows; the "
           << target::familyName(family) << " schedule runs "
           << (qTilesPerTask == 1   ? "one 128-row Q tile"
               : qTilesPerTask == 2 ? "two 128-row Q tiles"
                                    : "one or two 128-row Q tiles")
           << " per task (fa4c --q-tiles-per-task, fa4-tile's "
              "q-tiles-per-task: "
           << (qTilesPerTask > 0 ? std::to_string(qTilesPerTask) : "1 or 2")
           << ")";
  // The K/V block: one the family's schedule takes, and the keys of every
  // K and V tile and of every score tile.
  int64_t blockN = read->range.getBlockN();
  const target::ChipInfo &chip = getTargetOrDefault(func);
  Type element = cast<MemRefType>(read->arguments[kK].getType()).getElementType();
  if (chip.family == family) {
    std::string problem = target::blockNProblem(
        chip, blockN, element.getIntOrFloatBitWidth());
    if (!problem.empty())
      return read->range.emitOpError() << "block_n: " << problem;
  }
  Operation *stray = nullptr;
  int64_t strayKeys = 0;
  func.walk([&](Operation *op) {
    int64_t keys = blockN;
    if (auto load = dyn_cast<LoadKvTileOp>(op))
      keys = cast<RankedTensorType>(load.getType()).getDimSize(0);
    else if (auto mma = dyn_cast<ScoreMmaOp>(op))
      keys = cast<RankedTensorType>(mma.getType()).getDimSize(1);
    if (keys != blockN && !stray) {
      stray = op;
      strayKeys = keys;
    }
  });
  if (stray)
    return stray->emitOpError()
           << "has tiles of " << strayKeys
           << " keys; the tile program's K/V blocks are "
           << blockN << " (fa4.kv_block_range's block_n)";
  return std::optional<TileProgram>(*read);
}

FailureOr<TileProgram> TileProgram::read(func::FuncOp func, StringRef pass,
                                         bool &isKernel) {
  KernelSpecAttr spec = getKernelSpec(func);
  isKernel = static_cast<bool>(spec);
  if (!spec)
    return failure();
  TileProgram program;
  func.walk([&](Operation *op) {
    if (auto range = dyn_cast<KvBlockRangeOp>(op); range && !program.range)
      program.range = range;
    else if (auto softmax = dyn_cast<OnlineSoftmaxOp>(op);
             softmax && !program.softmax)
      program.softmax = softmax;
    else if (auto normalize = dyn_cast<NormalizeOp>(op);
             normalize && !program.normalize)
      program.normalize = normalize;
    else if (auto mask = dyn_cast<MaskOp>(op); mask && !program.mask)
      program.mask = mask;
    else if (auto softcap = dyn_cast<SoftcapOp>(op);
             softcap && !program.softcap)
      program.softcap = softcap;
    else if (auto scoreMod = dyn_cast<ScoreModOp>(op);
             scoreMod && !program.scoreMod)
      program.scoreMod = scoreMod;
    else if (auto store = dyn_cast<StoreLseTileOp>(op);
             store && !program.lseStore)
      program.lseStore = store;
  });
  if (!program.range || !program.softmax || !program.normalize)
    return func.emitError() << pass
                            << " expects the tile program fa4-tile writes "
                               "(fa4.kv_block_range, fa4.online_softmax and "
                               "fa4.normalize under a function with fa4.spec)";
  // fa4.spec's verifier checks the positions; checked again here, as a
  // pipeline run with verification off must not read past the arguments.
  for (int64_t position : spec.getArguments()) {
    if (position < 0 || position >= func.getNumArguments())
      return func.emitError() << "fa4.spec names argument #" << position
                              << ", which the function does not have";
    program.arguments.push_back(func.getArgument(position));
  }
  // The packing (the tile program's gqa_ratio): whole positions of every
  // packed head in each 128-row tile (and Hopper's 64-row halves), its heads
  // those of one K/V head (gqaPacking's rule, or a smaller power of two).
  auto headsOf = [&](TileArgument argument) {
    return cast<MemRefType>(program.arguments[argument].getType()).getDimSize(2);
  };
  int64_t packing = program.range.getGqaRatio();
  int64_t qHeads = headsOf(kQ), kvHeads = headsOf(kK);
  if (packing > kMaxGqaPacking || (packing & (packing - 1)) != 0 ||
      kvHeads <= 0 || qHeads % kvHeads != 0 || (qHeads / kvHeads) % packing != 0)
    return program.range.emitOpError()
           << "packs " << packing << " query heads per tile, with "
           << qHeads << " query heads over " << kvHeads
           << " K/V heads; the packing must be a power of two of at most "
           << kMaxGqaPacking << " dividing the GQA ratio";
  for (auto [position, table, name] :
       {std::tuple{spec.getSequsedK(), &program.seqUsedK, "seqused_k"},
        std::tuple{spec.getBlockTable(), &program.blockTable, "block_table"}}) {
    if (!position)
      continue;
    ArrayRef<int64_t> extras = spec.getExtras();
    if (*position < 0 || *position >= static_cast<int64_t>(extras.size()) ||
        extras[*position] < 0 || extras[*position] >= func.getNumArguments())
      return func.emitError() << "fa4.spec's " << name << " names no argument";
    *table = func.getArgument(extras[*position]);
  }
  if (std::optional<int64_t> position = spec.getSplitWorkspace()) {
    ArrayRef<int64_t> extras = spec.getExtras();
    if (*position < 0 || *position >= static_cast<int64_t>(extras.size()) ||
        extras[*position] < 0 || extras[*position] >= func.getNumArguments())
      return func.emitError() << "fa4.spec's split_workspace names no argument";
    program.splitWorkspace = func.getArgument(extras[*position]);
    program.numSplits = spec.getSplits();
  }
  if (spec.isVarlen()) {
    ArrayRef<int64_t> extras = spec.getExtras();
    for (auto [position, table] :
         {std::pair{*spec.getCuSeqlensQ(), &program.cuSeqlensQ},
          std::pair{*spec.getCuSeqlensK(), &program.cuSeqlensK}}) {
      if (position < 0 || position >= static_cast<int64_t>(extras.size()) ||
          extras[position] < 0 || extras[position] >= func.getNumArguments())
        return func.emitError() << "fa4.spec's cu_seqlens names no argument";
      *table = func.getArgument(extras[position]);
    }
  }
  if (program.arguments.size() > kV &&
      failed(verifyTablesAgainstSpec(func, spec, program.arguments[kK],
                                     program.arguments[kV])))
    return failure();
  if (program.lseStore && program.arguments.size() <= kLse)
    return func.emitError()
           << "the tile program stores an LSE that fa4.spec does not name";
  return program;
}

Value IndexBuilder::index(int64_t value) {
  Value &constant = indexConstants[value];
  if (!constant) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&func.getBody().front());
    constant = arith::ConstantIndexOp::create(b, loc, value);
  }
  return constant;
}

TaskHeader mlir::fa4::buildTaskHeader(IndexBuilder &ib,
                                      const TileProgram &program,
                                      const ScheduleStart &start, Value task) {
  Value seqQ = start.seqQ, seqK = start.seqK;
  OpBuilder &b = ib.b;
  Location loc = ib.loc;
  KvBlockRangeOp range = program.range;
  Type indexType = b.getIndexType();
  // Split-KV: the parts of a task are consecutive tasks (they run at once,
  // on neighbouring CTAs), the task's coordinates those of task / parts.
  TaskHeader header;
  if (program.numSplits > 1) {
    header.split = arith::RemUIOp::create(b, loc, task,
                                          ib.index(program.numSplits));
    task = arith::DivUIOp::create(b, loc, task, ib.index(program.numSplits));
  }
  auto coords = TaskCoordsOp::create(
      b, loc, indexType, indexType, indexType, task, start.batchSize, seqQ,
      seqK, TaskOrderAttr::get(b.getContext(), TaskOrder::static_order),
      b.getI64IntegerAttr(start.kvHeads), range.getGqaRatioAttr(),
      range.getRowsAttr(), range.getBlockNAttr(), range.getMaskAttr(),
      range.getWindowLeftAttr(), range.getWindowRightAttr(),
      b.getI64IntegerAttr(start.groupsPerKv), /*l2_keys=*/b.getI64IntegerAttr(0),
      program.cuSeqlensQ);
  // The LPT order weighs tasks by the keys the mask_mod leaves too.
  IRMapping none;
  range.getMaskMod().cloneInto(&coords.getMaskMod(), none);
  header.batch = coords.getBatchIndex();
  header.headGroup = coords.getHeadGroup();
  header.kvHead = start.groupsPerKv == 1
                      ? header.headGroup
                      : arith::DivUIOp::create(b, loc, header.headGroup,
                                               ib.index(start.groupsPerKv))
                            .getResult();
  header.mBlock = coords.getMBlock();
  header.qRow = ib.mul(header.mBlock, range.getRows());
  header.tensorBatch = header.batch;
  if (program.cuSeqlensQ) {
    // Varlen: the sequence's rows of the packed tensors.
    auto queries = SequenceSpanOp::create(b, loc, program.cuSeqlensQ,
                                          header.batch, seqQ);
    auto keys = SequenceSpanOp::create(b, loc, program.cuSeqlensK,
                                       header.batch, seqK);
    header.qOffset = queries.getOffset();
    header.kOffset = keys.getOffset();
    seqQ = queries.getLength();
    seqK = keys.getLength();
    header.tensorBatch = ib.index(0);
  }
  header.seqQ = seqQ;
  header.seqK = seqK;
  if (program.seqUsedK)
    header.seqK = SequenceLengthOp::create(b, loc, program.seqUsedK,
                                           header.batch, seqK);
  IRMapping mapping;
  mapping.map(range.getRowBegin(), header.qRow);
  mapping.map(range.getSeqQ(), seqQ);
  mapping.map(range.getSeqK(), header.seqK);
  if (range.getBlockMask()) {
    mapping.map(range.getBatch(), header.batch);
    mapping.map(range.getKvHead(), header.headGroup);
  }
  auto blocks = cast<KvBlockRangeOp>(b.clone(*range, mapping));
  BlockBounds bounds{blocks.getBegin(), blocks.getFullBegin(),
                     blocks.getFullEnd(), blocks.getEnd()};
  if (header.split)
    bounds = splitBounds(b, loc, bounds, header.split, program.numSplits);
  header.begin = bounds.begin;
  header.fullBegin = bounds.fullBegin;
  header.fullEnd = bounds.fullEnd;
  header.end = bounds.end;
  header.numBlocks = ib.sub(header.end, header.begin);
  return header;
}

Value mlir::fa4::queryTensorRow(IndexBuilder &ib, const TaskHeader &task,
                                Value row, int64_t gqaPacking) {
  if (!task.qOffset)
    return row;
  return ib.add(row, ib.mul(task.qOffset, gqaPacking));
}

Value mlir::fa4::keyTensorRow(IndexBuilder &ib, const TaskHeader &task,
                              Value key) {
  return task.kOffset ? ib.add(key, task.kOffset) : key;
}

SmallVector<Value, 2> mlir::fa4::storeSpan(const TaskHeader &task) {
  if (!task.qOffset)
    return {};
  return {task.qOffset, task.seqQ};
}

BlockBounds mlir::fa4::splitBounds(OpBuilder &b, Location loc,
                                   const BlockBounds &all, Value split,
                                   int64_t splits) {
  auto constant = [&](int64_t value) -> Value {
    return arith::ConstantIndexOp::create(b, loc, value);
  };
  Value blocks = arith::MaxSIOp::create(
      b, loc, arith::SubIOp::create(b, loc, all.end, all.begin), constant(0));
  Value per = arith::CeilDivUIOp::create(b, loc, blocks, constant(splits));
  Value low = arith::MinSIOp::create(
      b, loc,
      arith::AddIOp::create(b, loc, all.begin,
                            arith::MulIOp::create(b, loc, split, per)),
      all.end);
  Value high = arith::MinSIOp::create(
      b, loc, arith::AddIOp::create(b, loc, low, per), all.end);
  auto clip = [&](Value bound) -> Value {
    return arith::MinSIOp::create(
        b, loc, arith::MaxSIOp::create(b, loc, bound, low), high);
  };
  return {low, clip(all.fullBegin), clip(all.fullEnd), high};
}

Value mlir::fa4::clearFromRow(OpBuilder &b, Location loc,
                              const TileProgram &program,
                              const TaskHeader &task, TileArgument tensor,
                              Value key) {
  // The keys past a sequence's count (seqused_k) or its end (varlen: the
  // next sequence's rows) are real memory.
  if (tensor != kV || (!program.seqUsedK && !program.cuSeqlensK))
    return Value();
  return arith::SubIOp::create(b, loc, task.seqK, key);
}

void mlir::fa4::dropImplicitYield(scf::ForOp loop) {
  Block *body = loop.getBody();
  if (!body->empty() && isa<scf::YieldOp>(body->back()))
    body->back().erase();
}

ScheduleStart ScheduleStart::build(IndexBuilder &ib,
                                   const TileProgram &program) {
  OpBuilder &b = ib.b;
  Location loc = ib.loc;
  ScheduleStart start;
  Block &entry = ib.func.getBody().front();
  for (Operation &op : entry.without_terminator())
    start.levelB.push_back(&op);
  auto qType = cast<MemRefType>(program.arguments[kQ].getType());
  auto kType = cast<MemRefType>(program.arguments[kK].getType());
  start.element = qType.getElementType();
  start.kvHeads = kType.getDimSize(2);
  KvBlockRangeOp range = program.range;
  start.gqaRatio = range.getGqaRatio();
  // The tile program's packing leaves qHeads / (kvHeads · packing) head
  // groups on each K/V head.
  int64_t qHeads = qType.getDimSize(2);
  if (!ShapedType::isDynamic(qHeads) && !ShapedType::isDynamic(start.kvHeads) &&
      start.kvHeads > 0 && qHeads % (start.kvHeads * start.gqaRatio) == 0)
    start.groupsPerKv = qHeads / (start.kvHeads * start.gqaRatio);
  b.setInsertionPoint(entry.getTerminator());
  if (!start.levelB.empty())
    b.setInsertionPoint(start.levelB.front());
  start.batchSize = memref::DimOp::create(b, loc, program.arguments[kQ], 0);
  start.seqQ = memref::DimOp::create(b, loc, program.arguments[kQ], 1);
  start.seqK = memref::DimOp::create(b, loc, program.arguments[kK], 1);
  // Varlen: the sequences are the tables' entries less one; the grid has a
  // slot per tile of the packed tensor and one more per sequence.
  if (program.cuSeqlensQ)
    start.batchSize = ib.sub(
        memref::DimOp::create(b, loc, program.cuSeqlensQ, 0), ib.index(1));
  // A paged cache's sequences have max_blocks pages of page_size keys.
  if (program.blockTable)
    start.seqK = arith::MulIOp::create(
        b, loc, memref::DimOp::create(b, loc, program.blockTable, 1),
        start.seqK);
  start.numTasks = TaskCountOp::create(
      b, loc, b.getIndexType(), start.batchSize, start.seqQ,
      b.getI64IntegerAttr(start.kvHeads), b.getI64IntegerAttr(start.gqaRatio),
      range.getRowsAttr(), b.getI64IntegerAttr(start.groupsPerKv),
      program.cuSeqlensQ ? b.getUnitAttr() : UnitAttr());
  // Split-KV: every task's blocks in numSplits parts, each a task.
  if (program.numSplits > 1)
    start.numTasks = ib.mul(start.numTasks, program.numSplits);
  return start;
}

void ScheduleStart::eraseLevelB() {
  for (Operation *op : llvm::reverse(levelB)) {
    op->dropAllUses();
    op->erase();
  }
  levelB.clear();
}

SmallVector<Operation *, 4>
mlir::fa4::fp8FactorUsers(const TileProgram &program) {
  SmallVector<Operation *, 4> users{program.softmax, program.normalize};
  if (program.softcap)
    users.push_back(program.softcap);
  if (program.scoreMod)
    users.push_back(program.scoreMod);
  return users;
}

LogicalResult mlir::fa4::checkFp8Factors(func::FuncOp func,
                                         const TileProgram &program,
                                         StringRef schedule) {
  LoadKvTileOp keyLoad;
  func.walk([&](LoadKvTileOp load) {
    if (!keyLoad && load.getSource() == program.arguments[kK])
      keyLoad = load;
  });
  Value sequence;
  for (Operation *parent = program.range->getParentOp(); parent;
       parent = parent->getParentOp())
    if (auto loop = dyn_cast<scf::ForOp>(parent))
      sequence = loop.getInductionVar();
  if (!program.cuSeqlensQ)
    sequence = Value();
  llvm::DenseSet<Value> seen;
  std::function<LogicalResult(Value, Operation *)> check =
      [&](Value value, Operation *user) -> LogicalResult {
    if (!seen.insert(value).second)
      return success();
    Operation *def = value.getDefiningOp();
    if (!def) {
      if (cast<BlockArgument>(value).getOwner() == &func.getBody().front())
        return success();
      return user->emitOpError()
             << "computes an FP8 factor from a loop's block argument, which "
                "the "
             << schedule
             << " schedule cannot re-make in its roles' tasks (a factor is "
                "made from the descale tables at the task's batch and K/V "
                "head)";
    }
    if (def->getBlock() == &func.getBody().front())
      return success();
    if (auto load = dyn_cast<LoadDescaleOp>(def)) {
      // The task's batch is the K tile's, or in varlen's packed tensors
      // (whose K loads read batch 0) the sequence: the outermost loop's.
      bool taskBatch = keyLoad && (load.getBatch() == keyLoad.getBatch() ||
                                   load.getBatch() == sequence);
      if (!taskBatch || load.getHead() != keyLoad.getHead())
        return load.emitOpError()
               << "reads its table at indices other than the task's batch "
                  "and K/V head (those of the K tile's load, or varlen's "
                  "sequence), which the "
               << schedule << " schedule reads it at";
      return success();
    }
    if (def->getNumRegions() != 0 || def->getNumResults() != 1 ||
        !isMemoryEffectFree(def))
      return def->emitOpError()
             << "computes an FP8 factor in a way the " << schedule
             << " schedule cannot re-make in its roles' tasks (region-free, "
                "side-effect free arithmetic on the descales only)";
    for (Value operand : def->getOperands())
      if (failed(check(operand, def)))
        return failure();
    return success();
  };
  for (Operation *op : fp8FactorUsers(program))
    for (Value operand : op->getOperands())
      if (operand.getType().isF32() && failed(check(operand, op)))
        return failure();
  return success();
}

Value TaskFactors::remakeOne(OpBuilder &b, Location loc, func::FuncOp func,
                             const TaskHeader &task, Value value) {
  if (Value mapped = made.lookupOrNull(value))
    return mapped;
  Operation *def = value.getDefiningOp();
  // Arguments and the function's top-level values (constants, the tables)
  // dominate every role.
  if (!def || def->getBlock() == &func.getBody().front())
    return value;
  Value remade;
  if (auto load = dyn_cast<LoadDescaleOp>(def)) {
    // The task's batch and K/V head: the descale tables are [batch,
    // kv_heads].
    remade = LoadDescaleOp::create(b, loc, load.getTable(), task.batch,
                                   task.kvHead);
  } else {
    for (Value operand : def->getOperands())
      remakeOne(b, loc, func, task, operand);
    remade = b.clone(*def, made)->getResult(
        cast<OpResult>(value).getResultNumber());
  }
  made.map(value, remade);
  return remade;
}

void TaskFactors::remake(OpBuilder &b, Location loc, func::FuncOp func,
                         const TileProgram &program, const TaskHeader &task,
                         ArrayRef<Operation *> users) {
  made.clear();
  SmallVector<Operation *, 4> all = fp8FactorUsers(program);
  for (Operation *op : users.empty() ? ArrayRef<Operation *>(all) : users)
    for (Value operand : op->getOperands())
      if (operand.getType().isF32())
        remakeOne(b, loc, func, task, operand);
}

void TaskFactors::mapOperands(Operation *op, IRMapping &mapping) const {
  for (Value operand : op->getOperands())
    if (!mapping.contains(operand))
      if (Value factor = lookup(operand))
        mapping.map(operand, factor);
}
