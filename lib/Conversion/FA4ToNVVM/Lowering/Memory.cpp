//===- Memory.cpp - mbarriers, TMA and shared memory -----------------------===//

#include "fa4/Conversion/FA4ToNVVM/Lowering.h"

#include "fa4/Support/Descriptors.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::fa4;
using namespace mlir::fa4::nvvm;

/// L2 cache policies of cp.async.bulk.tensor's .L2::cache_hint operand.
static constexpr int64_t kL2EvictFirst = 0x12F0000000000000;
static constexpr int64_t kL2EvictLast = 0x14F0000000000000;

/// Whether level-C index `value` is a multiple of `k` on every path:
/// constants, sums and products of such, and a loop's induction variable or
/// carried value whose start and steps are (`assumed`: the carried values
/// taken to be, while their yields are checked).
static bool isMultipleOf(Value value, int64_t k,
                         llvm::SmallPtrSetImpl<Value> &assumed) {
  if (std::optional<int64_t> constant = getConstantIntValue(value))
    return *constant % k == 0;
  if (auto argument = dyn_cast<BlockArgument>(value)) {
    auto loop = dyn_cast<scf::ForOp>(argument.getOwner()->getParentOp());
    if (!loop)
      return false;
    if (argument == loop.getInductionVar())
      return isMultipleOf(loop.getLowerBound(), k, assumed) &&
             isMultipleOf(loop.getStep(), k, assumed);
    if (assumed.contains(value))
      return true;
    // What was taken on this assumption goes with it when it fails.
    llvm::SmallPtrSet<Value, 4> before(assumed.begin(), assumed.end());
    assumed.insert(value);
    OpOperand *init = loop.getTiedLoopInit(argument);
    Value yielded = loop.getTiedLoopYieldedValue(argument)->get();
    bool multiple = init && isMultipleOf(init->get(), k, assumed) &&
                    isMultipleOf(yielded, k, assumed);
    if (!multiple) {
      assumed.clear();
      assumed.insert(before.begin(), before.end());
    }
    return multiple;
  }
  Operation *def = value.getDefiningOp();
  if (isa_and_nonnull<arith::AddIOp, arith::SubIOp>(def))
    return isMultipleOf(def->getOperand(0), k, assumed) &&
           isMultipleOf(def->getOperand(1), k, assumed);
  if (isa_and_nonnull<arith::MulIOp>(def))
    return isMultipleOf(def->getOperand(0), k, assumed) ||
           isMultipleOf(def->getOperand(1), k, assumed);
  return false;
}

/// `count` as x + c, x a multiple of a k that divides `stages` and
/// 0 <= c < k: then count mod stages = x mod stages + c and count / stages
/// = x / stages. (count, 0) when it has no such form.
static std::pair<Value, int64_t> splitRingCount(Value count, int64_t stages) {
  auto sum = count.getDefiningOp<arith::AddIOp>();
  if (!sum)
    return {count, 0};
  for (int flip = 0; flip < 2; ++flip) {
    Value x = sum.getOperand(flip), offset = sum.getOperand(1 - flip);
    std::optional<int64_t> c = getConstantIntValue(offset);
    if (!c || *c < 0)
      continue;
    for (int64_t k = stages; k > *c; --k) {
      llvm::SmallPtrSet<Value, 4> assumed;
      if (stages % k == 0 && isMultipleOf(x, k, assumed))
        return {x, *c};
    }
  }
  return {count, 0};
}

Value Lowering::ringStage(Value count, int64_t stages) {
  auto [x, c] = splitRingCount(count, stages);
  Value stage = arith::RemUIOp::create(b, loc(), lookup(x), index(stages));
  return c ? arith::AddIOp::create(b, loc(), stage, index(c)) : stage;
}

Value Lowering::ringRound(Value count, int64_t stages) {
  return arith::DivUIOp::create(
      b, loc(), lookup(splitRingCount(count, stages).first), index(stages));
}

/// A tcgen05 fence at a thread synchronization of a role that touches
/// tensor memory, marked for placeTensorFences to move where the role's
/// paths need it (none in a role without tensor memory).
void Lowering::movableTensorFence(bool afterWait) {
  if (roleUsesTensorMemory)
    NVVM::Tcgen05FenceOp::create(b, loc(),
                                 afterWait
                                     ? NVVM::Tcgen05FenceKind::AFTER_THREAD_SYNC
                                     : NVVM::Tcgen05FenceKind::BEFORE_THREAD_SYNC)
        ->setAttr(kMovableFence, b.getUnitAttr());
}

/// Barrier `count % stages` of an mbarrier array, 8 bytes each.
Value Lowering::barrierSlot(Value barrier, Value count) {
  int64_t stages = cast<MBarrierType>(barrier.getType()).getStages();
  Value stage = ringStage(count, stages);
  return smemAt(lookup(barrier), arith::MulIOp::create(b, loc(), stage, index(8)));
}

/// Issues one TMA copy per 64-column box of a tile from the elected thread.
/// Box coordinates, innermost first: column, head, position, batch; a
/// GQA-packed tile starts at head `head · ratio` and position `row / ratio`.
void Lowering::forEachBox(SmemType type, Value head, Value row, Value batch,
                          int64_t ratio,
                          function_ref<void(int64_t, ValueRange)> copy,
                          function_ref<void()> then, int64_t firstColumn) {
  Value headCoord =
      toI32(arith::MulIOp::create(b, loc(), lookup(head), index(ratio)));
  Value position =
      toI32(arith::DivUIOp::create(b, loc(), lookup(row), index(ratio)));
  Value batchCoord = toI32(lookup(batch));
  int64_t columns = boxColumns(type);
  int64_t boxes = llvm::divideCeil(type.getCols(), columns);
  ifElected([&] {
    for (int64_t box = 0; box < boxes; ++box)
      copy(box * boxBytes(type),
           ValueRange{i32(firstColumn + box * columns), headCoord, position,
                      batchCoord});
    if (then)
      then();
  });
}

LogicalResult Lowering::lowerBarrier(Operation *op) {
  auto slot = [&](Value barrier, Value count) {
    return barrierSlot(barrier, count);
  };
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](MBarrierWaitOp wait) -> LogicalResult {
        int64_t stages = wait.getBarrier().getType().getStages();
        Value round = ringRound(wait.getCount(), stages);
        Value parity = toI32(arith::AndIOp::create(b, loc(), round, index(1)));
        // The round before the first is complete on a fresh barrier: waiting
        // for it is waiting on the other parity.
        if (wait.getPrior())
          parity = arith::XOrIOp::create(b, loc(), parity, i32(1));
        Value address =
            smemAddress(slot(wait.getBarrier(), wait.getCount()));
        // The wait loop, written out: upstream's lowering of
        // mbarrier.try_wait.parity branches back with `bra.uni` on a per-lane
        // predicate; a plain `bra` is right whether or not the warp's lanes
        // agree. In an issuing role only the elected thread waits
        // (ifElected says why); the others skip the loop inside the same
        // assembly, on the election's own predicate register, which costs
        // the role no register (the MMA warp has 72; a branch around the
        // wait, or a 32-bit copy of the predicate, spilled it).
        SmallVector<Value> operands{address, parity};
        std::string text = "{\n\t.reg .pred done;\n\t";
        if (onlyElectedWaits) {
          operands.push_back(roleElected);
          text += "@!$2 bra skip;\n\t";
        }
        // A pair's barrier is waited on like any other (the default
        // .acquire.cta): Lowering::remoteArrive says why, and what
        // .acquire.cluster would cost.
        text += "wait:\n\tmbarrier.try_wait.parity.shared::cta.b64 done, ";
        text += "[$0], $1, 10000000;\n\t@!done bra wait;\n\t";
        if (onlyElectedWaits)
          text += "skip:\n\t";
        text += "}";
        LLVM::InlineAsmOp::create(b,
            loc(), Type(), operands, text, onlyElectedWaits ? "r,r,b" : "r,r",
            /*has_side_effects=*/true, false,
            LLVM::tailcallkind::TailCallKind::None,
            LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
            ArrayAttr());
        // Tensor-core results the barrier announced are read only after it.
        movableTensorFence(/*afterWait=*/true);
        return success();
      })
      .Case<NamedBarrierSyncOp, NamedBarrierArriveOp>(
          [&](Operation *named) -> LogicalResult {
            // Tiles staged for a TMA store are fenced into the async proxy
            // before the barrier that hands them to the issuing thread.
            if (stagedForAsyncProxy) {
              NVVM::FenceProxyOp::create(
                  b, loc(), NVVM::ProxyKind::async_shared,
                  NVVM::SharedSpaceAttr::get(b.getContext(),
                                             NVVM::SharedSpace::shared_cta));
              stagedForAsyncProxy = false;
            }
            bool sync = isa<NamedBarrierSyncOp>(named);
            int64_t id = named->getAttrOfType<IntegerAttr>("id").getInt();
            int64_t count = named->getAttrOfType<IntegerAttr>("count").getInt();
            // Tensor-memory work is ordered across a named barrier as across
            // an mbarrier.
            movableTensorFence(/*afterWait=*/false);
            LLVM::InlineAsmOp::create(
                b, loc(), TypeRange(), ValueRange(),
                (Twine(sync ? "bar.sync " : "bar.arrive ") + Twine(id) + ", " +
                 Twine(count) + ";")
                    .str(),
                "", /*has_side_effects=*/true, false,
                LLVM::tailcallkind::TailCallKind::None,
                LLVM::AsmDialectAttr::get(b.getContext(),
                                          LLVM::AsmDialect::AD_ATT),
                ArrayAttr());
            if (sync)
              movableTensorFence(/*afterWait=*/true);
            return success();
          })
      .Case([&](MBarrierArriveOp arrive) -> LogicalResult {
        if (stagedForAsyncProxy) {
          NVVM::FenceProxyOp::create(b,
              loc(), NVVM::ProxyKind::async_shared,
              NVVM::SharedSpaceAttr::get(b.getContext(),
                                         NVVM::SharedSpace::shared_cta));
          stagedForAsyncProxy = false;
        }
        movableTensorFence(/*afterWait=*/false);
        // Where the arrival goes: this CTA's barrier; for a CTA pair's
        // barrier the even CTA's copy, for a mirrored one both CTAs' copies
        // (this CTA's and its peer's, rank ^ 1): Lowering::remoteArrive.
        bool pair = isPairBarrier(arrive.getBarrier());
        bool remote = pair || isMirroredBarrier(arrive.getBarrier());
        SmallVector<Value, 2> targets;
        if (pair) {
          targets.push_back(
              leaderBarrierSlot(arrive.getBarrier(), arrive.getCount()));
        } else if (remote) {
          Value rank = toI32(ctaRank());
          Value peer = arith::XOrIOp::create(b, loc(), rank, i32(1));
          for (Value cta : {rank, peer})
            targets.push_back(clusterBarrierSlot(arrive.getBarrier(),
                                                 arrive.getCount(), cta));
        } else {
          targets.push_back(slot(arrive.getBarrier(), arrive.getCount()));
        }
        // `threads` arrivals on each (null: one, the thread's own).
        auto arriveOnAll = [&](Value threads) {
          for (Value target : targets) {
            if (!remote) {
              NVVM::MBarrierArriveOp::create(b, loc(), Type(), target, threads);
              continue;
            }
            int64_t count = 1;
            if (threads)
              count = role.getNumThreads();
            remoteArrive(target, count);
          }
        };
        if (!onlyElectedWaits) {
          arriveOnAll(Value());
          return success();
        }
        // In an issuing role the elected thread arrives for all of the
        // role's threads, whose arrivals the barrier counts: the others
        // neither wait nor arrive (ifElected says why).
        if (laneStoresPending) {
          NVVM::SyncWarpOp::create(b, loc(), i32(-1));
          laneStoresPending = false;
        }
        Value threads = i32(role.getNumThreads());
        ifElected([&] { arriveOnAll(threads); });
        return success();
      })
      .Case([&](MBarrierExpectTxOp expect) -> LogicalResult {
        // A pair's barrier: each CTA's loader announces its own copies'
        // bytes (half a split ring's item) on the even CTA's copy.
        if (isPairBarrier(expect.getBarrier())) {
          int64_t bytes = expect.getBytes();
          bool half = false;
          expect->getParentOfType<RoleOp>().walk([&](TmaLoadOp load) {
            half |= load.getBarrier() == expect.getBarrier() &&
                    isPairHalf(load.getBuffer());
          });
          if (half)
            bytes /= 2;
          Value remote =
              leaderBarrierSlot(expect.getBarrier(), expect.getCount());
          ifElected([&] {
            LLVM::InlineAsmOp::create(
                b, loc(), TypeRange(), ValueRange{remote},
                (Twine("mbarrier.arrive.expect_tx") + kRemoteArriveSem +
                 ".shared::cluster.b64 _, [$0], ")
                        .str() +
                    std::to_string(bytes) + ";",
                "r", /*has_side_effects=*/true, false,
                LLVM::tailcallkind::TailCallKind::None,
                LLVM::AsmDialectAttr::get(b.getContext(),
                                          LLVM::AsmDialect::AD_ATT),
                ArrayAttr());
          });
          return success();
        }
        Value barrier = slot(expect.getBarrier(), expect.getCount());
        // A copy that clears rows arrives on the barrier itself once they
        // are zero (clearLoadedRows); its expect_tx is issued only when it
        // clears none.
        Value plain;
        if (auto load = dyn_cast_or_null<TmaLoadOp>(expect->getNextNode());
            load && load.getClearFrom() &&
            load.getBarrier() == expect.getBarrier() &&
            load.getBarrierCount() == expect.getCount())
          plain = arith::XOrIOp::create(b, loc(), clearsRows(load),
                                        arith::ConstantIntOp::create(
                                            b, loc(), b.getI1Type(), 1));
        ifElected([&] {
          std::optional<OpBuilder::InsertionGuard> guard;
          if (plain) {
            auto branch = scf::IfOp::create(b, loc(), plain, false);
            guard.emplace(b);
            b.setInsertionPointToStart(branch.thenBlock());
          }
          NVVM::MBarrierArriveExpectTxOp::create(b,
              loc(), Type(), barrier, i32(expect.getBytes()),
              NVVM::MemScopeKind::CTA, false, Value());
        });
        return success();
      })
      .Case([&](MmaCommitOp commit) -> LogicalResult {
        Value barrier = slot(commit.getBarrier(), commit.getCount());
        // CTA pairs: the commit of the pair's MMAs arrives on the barrier
        // at the same offset in both CTAs (the MMAs wrote both CTAs' TMEM
        // and read both CTAs' shared memory).
        ifElected([&] {
          if (kernel.ctaPair)
            NVVM::Tcgen05CommitOp::create(
                b, loc(), barrier,
                arith::ConstantIntOp::create(b, loc(), b.getI16Type(), 0b11),
                NVVM::CTAGroupKind::CTA_2);
          else
            NVVM::Tcgen05CommitOp::create(b, loc(), barrier, Value());
        });
        return success();
      })
      .Default([](Operation *) { return failure(); });
}

LogicalResult
Lowering::lowerPagedLoad(TmaLoadOp load, Value blockTable, SmemType type,
                         function_ref<void(int64_t, ValueRange)> copy,
                         function_ref<void()> then) {
  auto extra = kernel.extras.find(blockTable);
  if (extra == kernel.extras.end() || extra->second.sizes.size() != 2)
    return load.emitOpError()
           << "reads a block table that is not a parameter of the kernel";
  const KernelState::Extra &table = extra->second;
  // A tile of 128 keys is pages of the cache (its map's box is a page, or
  // 128 rows of a larger page): a page of at least 8 rows of 128 bytes
  // starts where the tile's 128-byte swizzle pattern starts again, so each
  // page lands as the whole tile's copy would have put it.
  int64_t page = cast<MemRefType>(load.getSource().getType()).getDimSize(1);
  int64_t rowsPerCopy = std::min(page, type.getRows());
  int64_t copies = type.getRows() / rowsPerCopy;
  // Boxes of one 128-byte line of columns (64 of 16 bits, 128 of FP8's 8).
  int64_t columns = boxColumns(type);
  int64_t boxes = llvm::divideCeil(type.getCols(), columns);
  Value row = lookup(load.getRow()), batch = lookup(load.getBatch());
  Value head = toI32(lookup(load.getHead()));
  Value maxBlocks = table.sizes[1];
  Type i32Type = b.getI32Type();
  ifElected([&] {
    for (int64_t j = 0; j < copies; ++j) {
      Value position =
          arith::AddIOp::create(b, loc(), row, index(j * rowsPerCopy));
      Value block = arith::DivUIOp::create(b, loc(), position, index(page));
      Value inPage = toI32(arith::RemUIOp::create(b, loc(), position, index(page)));
      // Pages past the table read block -1: the tensor map zero-fills it,
      // as it does an entry outside [0, num_blocks).
      Value inTable = arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::ult,
                                            block, maxBlocks);
      Value clamped = arith::MinUIOp::create(
          b, loc(), block, arith::SubIOp::create(b, loc(), maxBlocks, index(1)));
      Value entryIndex = arith::AddIOp::create(
          b, loc(), arith::MulIOp::create(b, loc(), batch, maxBlocks), clamped);
      Value address = LLVM::GEPOp::create(b, loc(), table.pointer.getType(),
                                          i32Type, table.pointer,
                                          ValueRange{toI32(entryIndex)});
      Value entry = LLVM::LoadOp::create(b, loc(), i32Type, address);
      entry = arith::SelectOp::create(b, loc(), inTable, entry, i32(-1));
      for (int64_t box = 0; box < boxes; ++box)
        copy(box * boxBytes(type) + j * rowsPerCopy * kSwizzleLineBytes,
             ValueRange{i32(box * columns), head, inPage, entry});
    }
    if (then)
      then();
  });
  return success();
}

Value Lowering::clearsRows(TmaLoadOp load) {
  return arith::CmpIOp::create(
      b, loc(), arith::CmpIPredicate::slt, lookup(load.getClearFrom()),
      index(load.getBuffer().getType().getRows()));
}

void Lowering::clearLoadedRows(TmaLoadOp load, Value stage, Value state) {
  SmemType type = load.getTileType();
  auto asmDialect =
      LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT);
  Value own = smemAt(kernel.smem, i32(kernel.clearBarrierOffset));
  // The copy has landed once the loader's own barrier's phase is past the
  // one its arrival began.
  LLVM::InlineAsmOp::create(
      b, loc(), Type(), ValueRange{smemAddress(own), state},
      "{\n\t.reg .pred done;\n\twait:\n\tmbarrier.try_wait.shared::cta.b64 "
      "done, [$0], $1, 10000000;\n\t@!done bra wait;\n\t}",
      "r,l", /*has_side_effects=*/true, false,
      LLVM::tailcallkind::TailCallKind::None, asmDialect, ArrayAttr());
  // Rows [clear_from, rows) of every 64-column box: each row's 128 bytes
  // are its own whatever the swizzle (it permutes 16-byte chunks within
  // the row), written 16 bytes at a time.
  Value from = arith::MaxSIOp::create(b, loc(), lookup(load.getClearFrom()),
                                      index(0));
  // Boxes of one 128-byte line of columns (64 of 16 bits, 128 of FP8's 8).
  int64_t columns = boxColumns(type);
  int64_t boxes = llvm::divideCeil(type.getCols(), columns);
  auto rows = scf::ForOp::create(b, loc(), from, index(type.getRows()),
                                 index(1));
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(rows.getBody());
    Value line = arith::MulIOp::create(b, loc(), rows.getInductionVar(),
                                       index(kSwizzleLineBytes));
    Value zeros = vector::BroadcastOp::create(
        b, loc(), VectorType::get({4}, b.getI32Type()), i32(0));
    for (int64_t box = 0; box < boxes; ++box)
      for (int64_t chunk = 0; chunk < kSwizzleLineBytes / 16; ++chunk)
        LLVM::StoreOp::create(
            b, loc(), zeros,
            smemAt(stage, arith::AddIOp::create(
                              b, loc(), line,
                              index(box * boxBytes(type) + chunk * 16))),
            16);
  }
  // The zeros are generic-proxy writes the MMAs read through the async
  // proxy; then the tile is handed over as a copy would have.
  NVVM::FenceProxyOp::create(
      b, loc(), NVVM::ProxyKind::async_shared,
      NVVM::SharedSpaceAttr::get(b.getContext(), NVVM::SharedSpace::shared_cta));
  LLVM::InlineAsmOp::create(
      b, loc(), Type(),
      ValueRange{smemAddress(barrierSlot(load.getBarrier(),
                                         load.getBarrierCount()))},
      "{\n\t.reg .b64 state;\n\tmbarrier.arrive.shared::cta.b64 state, [$0];\n\t}",
      "r",
      /*has_side_effects=*/true, false, LLVM::tailcallkind::TailCallKind::None,
      asmDialect, ArrayAttr());
}

LogicalResult Lowering::lowerTma(Operation *op) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](TmaLoadOp load) -> LogicalResult {
        if (!load.getBarrier())
          return load.emitOpError() << "signals no barrier (run "
                                       "fa4-insert-barriers first)";
        // The ring's stage, and the tile the copy fills in it (its first
        // columns when the tensor is narrower than the ring: V in a K/V
        // ring sized for a wider K).
        Value destination =
            smemStage(load.getBuffer(), load.getCount());
        SmemType type = load.getTileType();
        Value barrier = barrierSlot(load.getBarrier(), load.getBarrierCount());
        Value map = kernel.tensorMaps.lookup(load.getSource());
        if (!map)
          return load.emitOpError() << "loads from a tensor that is not a "
                                       "kernel parameter";
        // L2 policy: K and V tiles are read again by the other query blocks
        // of their head, which other CTAs run at the same time (evict last);
        // a Q tile is read once (evict first). The 64-bit policies are the
        // ones CUTLASS's TMA copies pass (CacheHintSm90).
        bool keys = load.getSource() == kernel.k || load.getSource() == kernel.v;
        Value policy = i64(keys ? kL2EvictLast : kL2EvictFirst);
        // CTA pairs: the copy lands in this CTA's shared memory and
        // completes on the even CTA's barrier (.cta_group::2 lets the
        // mbarrier be the peer's).
        bool pair = isPairBarrier(load.getBarrier());
        if (pair) {
          if (load.getBlockTable() || load.getTransposed() ||
              load.getClearFrom())
            return load.emitOpError()
                   << "completes on a CTA pair's barrier but is a paged, "
                      "transposed or row-clearing copy, which CTA pairs do "
                      "not run";
          barrier = LLVM::IntToPtrOp::create(
              b, loc(), LLVM::LLVMPointerType::get(b.getContext(), 3),
              leaderBarrierSlot(load.getBarrier(), load.getBarrierCount()));
        }
        auto group = pair ? NVVM::CTAGroupKindAttr::get(
                                b.getContext(), NVVM::CTAGroupKind::CTA_2)
                          : NVVM::CTAGroupKindAttr();
        auto copy = [&](int64_t offset, ValueRange box) {
          // A pair's copy names its destination as a shared::cluster
          // address (this CTA's own, which its shared::cta address is).
          Value to = smemAt(destination, i32(offset));
          if (pair)
            to = LLVM::IntToPtrOp::create(
                b, loc(), LLVM::LLVMPointerType::get(b.getContext(), 7),
                smemAddress(to));
          NVVM::CpAsyncBulkTensorGlobalToSharedClusterOp::create(b,
              loc(), to, map, box, barrier,
              ValueRange(), Value(), policy,
              NVVM::TMALoadModeAttr::get(b.getContext(),
                                         NVVM::TMALoadMode::TILE),
              b.getBoolAttr(!pair), group, Value());
        };
        if (isPairHalf(load.getBuffer())) {
          if (!pair || !keys || load.getGqaRatio() != 1)
            return load.emitOpError()
                   << "fills a CTA pair's split ring (pair_half) but is not a "
                      "K or V copy completing on the pair's barrier";
          // This CTA's half: K's keys from rank · rows/2 on, in boxes of
          // rows/2 lines; V's head-dim columns from rank · cols/2 on, one
          // box of whole 128-byte lines (the tensor maps' boxes,
          // tensorMapInfos).
          int64_t columns = boxColumns(type);
          bool isKey = load.getSource() == kernel.k;
          if (!isKey && type.getCols() != 2 * columns)
            return load.emitOpError()
                   << "splits V of " << type.getCols()
                   << " columns between a CTA pair: its halves must be one "
                      "128-byte line each";
          Value rank = ctaRank();
          Value head = toI32(lookup(load.getHead()));
          Value batch = toI32(lookup(load.getBatch()));
          Value row = lookup(load.getRow());
          int64_t halfRows = type.getRows() / 2;
          ifElected([&] {
            if (isKey) {
              Value first = toI32(arith::AddIOp::create(
                  b, loc(), row,
                  arith::MulIOp::create(b, loc(), rank, index(halfRows))));
              for (int64_t box = 0; box * columns < type.getCols(); ++box)
                copy(box * halfRows * kSwizzleLineBytes,
                     ValueRange{i32(box * columns), head, first, batch});
            } else {
              Value column = toI32(
                  arith::MulIOp::create(b, loc(), rank, index(columns)));
              copy(0, ValueRange{column, head, toI32(row), batch});
            }
          });
          return success();
        }
        auto copyTile = [&](function_ref<void()> then) {
          if (Value blockTable = load.getBlockTable())
            return lowerPagedLoad(load, blockTable, type, copy, then);
          if (load.getTransposed()) {
            // V transposed ([batch, heads, head_dim, keys], keys innermost):
            // boxes of 128 keys (a 128-byte line) by the head dim's rows, at
            // (key, head, 0, batch), one after another in the stage; a
            // block of keys that is no multiple of 128 reads the next
            // block's first keys into its last box, which no MMA reads.
            int64_t boxes = llvm::divideCeil(type.getCols(), kSwizzleLineBytes);
            ifElected([&] {
              Value row = lookup(load.getRow());
              for (int64_t box = 0; box < boxes; ++box)
                copy(box * boxBytes(type),
                     ValueRange{toI32(arith::AddIOp::create(
                                    b, loc(), row,
                                    index(box * kSwizzleLineBytes))),
                                toI32(lookup(load.getHead())), i32(0),
                                toI32(lookup(load.getBatch()))});
              if (then)
                then();
            });
            return success();
          }
          forEachBox(type, load.getHead(), load.getRow(), load.getBatch(),
                     load.getGqaRatio(), copy, then);
          return success();
        };
        if (!load.getClearFrom())
          return copyTile(nullptr);
        // A tile with rows to clear completes on the loader's own barrier,
        // which the elected loader waits for before it clears the rows and
        // arrives on the load's barrier (whose expect_tx it skipped).
        if (kernel.clearBarrierOffset < 0 ||
            !isa_and_nonnull<MBarrierExpectTxOp>(op->getPrevNode()))
          return load.emitOpError()
                 << "clears rows but follows no expect_tx of its barrier, or "
                    "the kernel has no barrier to clear them through";
        auto branch =
            scf::IfOp::create(b, loc(), clearsRows(load), /*withElse=*/true);
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(branch.thenBlock());
        Value fullBarrier = barrier;
        barrier = smemAt(kernel.smem, i32(kernel.clearBarrierOffset));
        // After its copies, the elected loader arrives on its own barrier
        // with the tile's bytes (a transaction count may complete before
        // the arrival that expects it: the phase waits for both).
        LogicalResult cleared = copyTile([&] {
          Value state =
              LLVM::InlineAsmOp::create(
                  b, loc(), b.getI64Type(),
                  ValueRange{smemAddress(barrier)},
                  "mbarrier.arrive.expect_tx.shared::cta.b64 $0, [$1], " +
                      std::to_string(type.getStageBytes()) + ";",
                  "=l,r", /*has_side_effects=*/true, false,
                  LLVM::tailcallkind::TailCallKind::None,
                  LLVM::AsmDialectAttr::get(b.getContext(),
                                            LLVM::AsmDialect::AD_ATT),
                  ArrayAttr())
                  .getResult(0);
          clearLoadedRows(load, destination, state);
        });
        b.setInsertionPointToStart(branch.elseBlock());
        barrier = fullBarrier;
        if (failed(cleared) || failed(copyTile(nullptr)))
          return failure();
        return success();
      })
      .Case([&](TmaStoreOp store) -> LogicalResult {
        SmemType type = store.getBuffer().getType();
        Value source =
            smemStage(store.getBuffer(), store.getCount());
        Value map = kernel.tensorMaps.lookup(store.getDest());
        if (!map)
          return store.emitOpError() << "stores to a tensor that is not a "
                                        "kernel parameter";
        // A reduction adds its f32 boxes into the tensor (the backward's
        // dQ parts, as FA3 adds them), from its first column on.
        bool reduce = store.getReduce();
        forEachBox(
            type, store.getHead(), store.getRow(), store.getBatch(),
            store.getGqaRatio(),
            [&](int64_t offset, ValueRange box) {
              Value from = smemAt(source, i32(offset));
              if (reduce)
                NVVM::CpAsyncBulkTensorReduceOp::create(
                    b, loc(), map, from,
                    NVVM::TMAReduxKindAttr::get(b.getContext(),
                                                NVVM::TMAReduxKind::ADD),
                    NVVM::TMAStoreModeAttr::get(b.getContext(),
                                                NVVM::TMAStoreMode::TILE),
                    box, Value());
              else
                NVVM::CpAsyncBulkTensorSharedCTAToGlobalOp::create(
                    b, loc(), map, from, box, Value(),
                    NVVM::TMAStoreMode::TILE, Value());
            },
            [&] { NVVM::CpAsyncBulkCommitGroupOp::create(b, loc()); },
            static_cast<int64_t>(store.getColumn()));
        return success();
      })
      .Case([&](TmaStoreWaitOp) {
        ifElected([&] {
          NVVM::CpAsyncBulkWaitGroupOp::create(b, loc(), 0, b.getUnitAttr());
        });
        return success();
      })
      .Default([](Operation *) { return failure(); });
}

Value Lowering::smemStage(Value buffer, Value count) {
  Value stage =
      ringStage(count, cast<SmemType>(buffer.getType()).getStages());
  return smemAt(lookup(buffer), arith::MulIOp::create(
                                    b, loc(), stage,
                                    index(ctaStageBytes(buffer))));
}

LogicalResult Lowering::lowerSmem(Operation *op) {
  Value row = rowInWarpgroup();
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](SmemLoadOp load) -> LogicalResult {
        SmemType type = load.getBuffer().getType();
        std::optional<int64_t> tileRow = load.getRow();
        if (!tileRow || type.getRows() != 2 || !type.getElementType().isF32())
          return load.emitOpError()
                 << "fa4-to-nvvm reads rows of [2, N] f32 statistics buffers "
                    "only (one row of a ring item: `row`), got "
                 << (tileRow ? "a row of " : "a whole item of ") << type;
        Value stage = smemStage(load.getBuffer(), load.getCount());
        if (load.getTransposed()) {
          if (onlyElectedWaits)
            return load.emitOpError()
                   << "reads a row along a transposed tile's columns in a "
                      "single-warp role, which holds no such tile";
          // Along a transposed tile's columns: the thread's columns, each
          // read by the threads that hold it (a broadcast).
          int64_t columns =
              cast<RankedTensorType>(load.getResult().getType()).getDimSize(0);
          int64_t first = *tileRow * type.getCols() + load.getColumn().value_or(0);
          SmallVector<Value> positions =
              kernel.family->threadColumns(*this, columns);
          // A thread holding every column of the chunk (Blackwell's TMEM
          // rows) reads them 16 bytes at a time (a stage is 1024-byte
          // aligned; the verifier keeps `first + column` within the row).
          SmallVector<int64_t> known;
          for (Value column : positions)
            if (std::optional<int64_t> c = getConstantIntValue(column))
              known.push_back(*c);
          bool vectors = known.size() == positions.size() && columns % 4 == 0 &&
                         first % 4 == 0;
          for (int64_t i = 0; vectors && i < columns; ++i)
            vectors = known[i] == i;
          SmallVector<Value> values;
          if (vectors) {
            auto quad = VectorType::get({4}, b.getF32Type());
            for (int64_t c = 0; c < columns; c += 4) {
              Value part = LLVM::LoadOp::create(
                  b, loc(), quad, smemAt(stage, index((first + c) * 4)), 16);
              for (int64_t e = 0; e < 4; ++e)
                values.push_back(vector::ExtractOp::create(
                    b, loc(), part, ArrayRef<int64_t>{e}));
            }
          } else {
            for (Value column : positions) {
              Value offset = arith::AddIOp::create(
                  b, loc(), index(first * 4),
                  arith::MulIOp::create(b, loc(), column, index(4)));
              values.push_back(LLVM::LoadOp::create(
                  b, loc(), b.getF32Type(), smemAt(stage, offset), 4));
            }
          }
          mapping.map(load.getResult(), vectorOf(b, loc(), values));
          return success();
        }
        if (load.getColumn())
          return load.emitOpError()
                 << "reads part of a row (column) along a transposed tile's "
                    "columns only";
        // Element `row` of statistics row `tileRow`: thread t reads its own
        // (a layout of one row a thread, as Blackwell's TMEM rows).
        if (onlyElectedWaits || kernel.family->threadRows(*this).size() != 1)
          return load.emitOpError()
                 << "reads one row statistic a thread, but the role's "
                    "threads hold "
                 << (onlyElectedWaits ? "a single warp's lanes"
                                      : "fragments of several rows")
                 << "; read it along a transposed tile's columns "
                    "(transposed) or in a role of one row a thread";
        Value offset = arith::AddIOp::create(b,
            loc(), index(*tileRow * type.getCols() * 4),
            arith::MulIOp::create(b, loc(), row, index(4)));
        mapping.map(load.getResult(),
                    LLVM::LoadOp::create(b, loc(), b.getF32Type(),
                                           smemAt(stage, offset), 4));
        return success();
      })
      .Case([&](SmemStoreOp store) -> LogicalResult {
        SmemType type = store.getBuffer().getType();
        Value stage = smemStage(store.getBuffer(), store.getCount());
        if (store.getRow() &&
            (type.getRows() != 2 || !type.getElementType().isF32()))
          return store.emitOpError()
                 << "fa4-to-nvvm writes rows of [2, N] f32 statistics buffers "
                    "only, got a row of "
                 << type;
        if (std::optional<int64_t> tileRow = store.getRow();
            tileRow && onlyElectedWaits) {
          // A single-warp role's row vector, spread over its lanes
          // (laneStrided): each lane writes its elements, and the warp
          // meets before the elected thread's arrival hands them over.
          // Only the elected thread waited for the stage to be free: the
          // warp meets it first (its wait's acquire then orders the
          // others' writes after the consumers' reads).
          if (!laneStoresPending)
            NVVM::SyncWarpOp::create(b, loc(), i32(-1));
          Value values = lookup(store.getTile());
          auto vector = dyn_cast<VectorType>(values.getType());
          if (!vector || vector.getNumElements() * 32 != type.getCols())
            return store.emitOpError()
                   << "stores a row of " << type.getCols()
                   << " elements from a single-warp role, whose lanes hold "
                      "such a row spread over them ("
                   << type.getCols() / 32
                   << " a lane); the stored value is not held that way";
          SmallVector<Value> positions = laneStrided(type.getCols());
          for (int64_t slot = 0; slot < vector.getNumElements(); ++slot) {
            Value offset = arith::AddIOp::create(
                b, loc(), index(*tileRow * type.getCols() * 4),
                arith::MulIOp::create(b, loc(), positions[slot], index(4)));
            LLVM::StoreOp::create(
                b, loc(),
                vector::ExtractOp::create(b, loc(), values,
                                          ArrayRef<int64_t>{slot}),
                smemAt(stage, offset), 4);
          }
          laneStoresPending = true;
          return success();
        }
        if (std::optional<int64_t> tileRow = store.getRow()) {
          Value offset = arith::AddIOp::create(b,
              loc(), index(*tileRow * type.getCols() * 4),
              arith::MulIOp::create(b, loc(), row, index(4)));
          LLVM::StoreOp::create(b, loc(), lookup(store.getTile()),
                                  smemAt(stage, offset), 4);
          return success();
        }
        // A staged O tile: thread t writes row t in the 128-byte-swizzled
        // layout the TMA store reads, 8 elements (16 bytes) at a time.
        Value values = lookup(store.getTile());
        auto vector = cast<VectorType>(values.getType());
        int64_t elementBytes = vector.getElementTypeBitWidth() / 8;
        int64_t perChunk = 16 / elementBytes;
        Value first = store.getColumn() ? lookup(store.getColumn()) : index(0);
        Value rowBytes =
            arith::MulIOp::create(b, loc(), row, index(kSwizzleLineBytes));
        Value rowPhase = arith::RemUIOp::create(b, loc(), row, index(8));
        for (int64_t chunk = 0; chunk * perChunk < vector.getNumElements();
             ++chunk) {
          Value column = arith::AddIOp::create(b, loc(), first,
                                                 index(chunk * perChunk));
          Value box = arith::DivUIOp::create(b, loc(), column, index(kBoxColumns));
          Value line = arith::DivUIOp::create(b,
              loc(), arith::RemUIOp::create(b, loc(), column, index(kBoxColumns)),
              index(perChunk));
          Value swizzled = arith::XOrIOp::create(b, loc(), line, rowPhase);
          Value offset = arith::AddIOp::create(b,
              loc(),
              arith::AddIOp::create(b,
                  loc(), arith::MulIOp::create(b, loc(), box, index(boxBytes(type))),
                  rowBytes),
              arith::MulIOp::create(b, loc(), swizzled, index(16)));
          Value piece = vector::ExtractStridedSliceOp::create(b,
              loc(), values, ArrayRef<int64_t>{chunk * perChunk},
              ArrayRef<int64_t>{perChunk}, ArrayRef<int64_t>{1});
          LLVM::StoreOp::create(b, loc(), piece, smemAt(stage, offset), 16);
        }
        // Generic-proxy writes that a TMA store (async proxy) will read: one
        // fence before the arrival that hands the staged tile over, not one
        // per chunk.
        stagedForAsyncProxy = true;
        return success();
      })
      .Default([](Operation *) { return failure(); });
}
