//===- Split.cpp - split-KV: a part's O to the workspace, and the merge ---===//
//
// A split-KV part writes its normalized O (f32) and its LSE into the
// workspace (AttentionMath.h's SplitWorkspaceLayout), then counts itself in
// with one atomic per thread; the thread that completes the count (the last
// part to write that thread's elements, whichever CTA ran it) reads every
// part back, merges them exactly and writes O and the LSE. Each thread's
// elements are the same in every part (the family's layout), so a thread
// needs no other thread of its CTA: no barrier, no shared memory. The
// counter is released by the atomic (acq_rel at GPU scope, as CUTLASS's
// semaphores release and acquire theirs) and set back to zero by the
// merging thread for the next launch.
//
//===----------------------------------------------------------------------===//

#include "fa4/Conversion/FA4ToNVVM/Lowering.h"
#include "fa4/Support/AttentionMath.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <limits>

namespace mlir::fa4::nvvm {

namespace {
/// The thread's elements of a tile, merged this many at a time (the
/// accumulators an S loop carries).
constexpr int64_t kMergeElements = 16;
} // namespace

Value Lowering::wide(Value index) {
  return arith::ExtUIOp::create(b, loc(), b.getI64Type(), toI32(index));
}
Value Lowering::add64(Value x, Value y) {
  return arith::AddIOp::create(b, loc(), x, y);
}
Value Lowering::mul64(Value x, Value y) {
  return arith::MulIOp::create(b, loc(), x, y);
}

Value Lowering::workspaceWord(Value workspace, Value word) {
  return LLVM::GEPOp::create(b, loc(), workspace.getType(), b.getF32Type(),
                             workspace, ValueRange{word});
}

FailureOr<Lowering::SplitRows>
Lowering::splitRows(Operation *op, Value out, Value workspace, Value batch,
                    Value head, Value row, int64_t ratio) {
  auto extra = kernel.extras.find(workspace);
  if (extra == kernel.extras.end() || extra->second.sizes.size() != 1)
    return op->emitOpError()
           << "writes a split-KV workspace that is not a parameter of the "
              "kernel";
  auto outType = cast<MemRefType>(out.getType());
  int64_t heads = outType.getDimSize(2);
  if (ShapedType::isDynamic(heads) || heads % ratio != 0)
    return op->emitOpError() << "needs O's heads static and a multiple of "
                             << ratio;
  // Indices are 32-bit in the kernel; the workspace's words reach tiles ·
  // rows · parts · head_dim, so its arithmetic is in 64 bits (wide, add64,
  // mul64).
  SplitRows rows;
  rows.workspace = extra->second.pointer;
  Value seqQ = toIndex(kernel.seqQ);
  Value packedRows = arith::MulIOp::create(b, loc(), seqQ, index(ratio));
  Value rowTiles =
      wide(arith::CeilDivUIOp::create(b, loc(), packedRows, index(128)));
  rows.tileRows =
      wide(arith::MinUIOp::create(b, loc(), packedRows, index(128)));
  Value groups = i64(heads / ratio);
  rows.tiles = mul64(mul64(wide(toIndex(kernel.batch)), groups), rowTiles);
  Value tileBase =
      mul64(add64(mul64(wide(lookup(batch)), groups), wide(lookup(head))), rowTiles);
  for (Value threadRow : kernel.family->threadRows(*this)) {
    Value packed = arith::AddIOp::create(b, loc(), lookup(row), threadRow);
    Value position = arith::DivUIOp::create(b, loc(), packed, index(ratio));
    rows.position.push_back(position);
    rows.valid.push_back(arith::CmpIOp::create(
        b, loc(), arith::CmpIPredicate::ult, position, seqQ));
    rows.head.push_back(arith::AddIOp::create(
        b, loc(), arith::MulIOp::create(b, loc(), lookup(head), index(ratio)),
        arith::RemUIOp::create(b, loc(), packed, index(ratio))));
    Value tile = add64(tileBase, wide(arith::DivUIOp::create(b, loc(), packed,
                                                           index(128))));
    rows.slot.push_back(
        add64(mul64(tile, rows.tileRows),
            wide(arith::RemUIOp::create(b, loc(), packed, index(128)))));
  }
  return rows;
}

void Lowering::storeRuns(Value values, unsigned half,
                         function_ref<Value(Value)> address) {
  auto vector = cast<VectorType>(values.getType());
  int64_t bytes = vector.getElementType().getIntOrFloatBitWidth() / 8;
  for (const FamilyLowering::ElementRun &run :
       kernel.family->elementRuns(*this, vector.getNumElements())) {
    if (run.half != half)
      continue;
    Value piece = vector::ExtractStridedSliceOp::create(
        b, loc(), values, ArrayRef<int64_t>{run.first},
        ArrayRef<int64_t>{run.length}, ArrayRef<int64_t>{1});
    LLVM::StoreOp::create(b, loc(), piece, address(wide(run.column)),
                          bytes * run.length);
  }
}

Value Lowering::outElementAddress(Value batch, Value position, Value head,
                                  Value column) {
  Type element =
      cast<MemRefType>(kernel.out.getType()).getElementType();
  Value offset = add64(
      add64(mul64(wide(batch), kernel.outStrides[0]),
            mul64(wide(position), kernel.outStrides[1])),
      add64(mul64(wide(head), kernel.outStrides[2]), column));
  return LLVM::GEPOp::create(b, loc(), kernel.outPointer.getType(), element,
                             kernel.outPointer, ValueRange{offset});
}

LogicalResult Lowering::lowerDirectStore(StoreOTileOp store) {
  if (!kernel.outPointer || store.getDest() != kernel.out)
    return store.emitOpError()
           << "stores O by address, but the kernel has no O pointer (a "
              "varlen or split-KV kernel takes O's pointer and strides)";
  const FamilyLowering &family = *kernel.family;
  int64_t ratio = store.getGqaRatio();
  Value values = lookup(store.getTile());
  if (!isa<VectorType>(values.getType()))
    return store.emitOpError() << "stores a tile that is not the thread's "
                                  "elements of a per-thread tile";
  // Each of the thread's rows: its query position and head; stored where
  // the position lies inside the sequence (varlen: below its length, at
  // its first row's offset).
  SmallVector<Value, 2> threadRows = family.threadRows(*this);
  for (auto [half, threadRow] : llvm::enumerate(threadRows)) {
    Value packed = arith::AddIOp::create(b, loc(), lookup(store.getRow()),
                                         threadRow);
    Value position = arith::DivUIOp::create(b, loc(), packed, index(ratio));
    Value head = arith::AddIOp::create(
        b, loc(),
        arith::MulIOp::create(b, loc(), lookup(store.getHead()), index(ratio)),
        arith::RemUIOp::create(b, loc(), packed, index(ratio)));
    Value limit = store.getSpan().empty() ? toIndex(kernel.seqQ)
                                          : lookup(store.getSpan()[1]);
    Value inside = arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::ult,
                                         position, limit);
    if (!store.getSpan().empty())
      position = arith::AddIOp::create(b, loc(), position,
                                       lookup(store.getSpan()[0]));
    auto branch = scf::IfOp::create(b, loc(), inside, false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(branch.thenBlock());
    storeRuns(values, half, [&](Value run) {
      return outElementAddress(
          lookup(store.getBatch()), position, head,
          add64(run, i64(static_cast<int64_t>(store.getColumn()))));
    });
  }
  return success();
}

LogicalResult Lowering::lowerSplit(Operation *op) {
  const FamilyLowering &family = *kernel.family;
  // Runs `body` where `condition` holds.
  auto when = [&](Value condition, function_ref<void()> body) {
    auto branch = scf::IfOp::create(b, loc(), condition, false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(branch.thenBlock());
    body();
  };

  if (auto store = dyn_cast<StorePartialOOp>(op)) {
    FailureOr<SplitRows> rows =
        splitRows(op, store.getOut(), store.getWorkspace(), store.getBatch(),
                  store.getHead(), store.getRow(), store.getGqaRatio());
    if (failed(rows))
      return failure();
    int64_t headDim = cast<MemRefType>(store.getOut().getType()).getDimSize(3);
    int64_t splits = store.getNumSplits();
    Value values = lookup(store.getTile());
    // The part's O (SplitWorkspaceLayout): word outWord + ((split · tiles ·
    // rows + slot) · head_dim + column).
    Value outWord = mul64(mul64(rows->tiles, rows->tileRows),
                        i64(kSplitSlots * (1 + splits)));
    Value partRows =
        mul64(mul64(wide(lookup(store.getSplit())), rows->tiles), rows->tileRows);
    for (auto [half, valid] : llvm::enumerate(rows->valid))
      when(valid, [&] {
        Value base = add64(outWord,
                         add64(mul64(add64(partRows, rows->slot[half]), i64(headDim)),
                             i64(store.getColumn())));
        storeRuns(values, half, [&](Value run) {
          return workspaceWord(rows->workspace, add64(base, run));
        });
      });
    return success();
  }

  auto merge = cast<MergeSplitsOp>(op);
  FailureOr<SplitRows> rows =
      splitRows(op, merge.getOut(), merge.getWorkspace(), merge.getBatch(),
                merge.getHead(), merge.getRow(), merge.getGqaRatio());
  if (failed(rows))
    return failure();
  if (Value lseOut = merge.getLseOut();
      lseOut && (!kernel.globalPointers.lookup(lseOut) ||
                 cast<MemRefType>(lseOut.getType()).isDynamicDim(1)))
    return merge.emitOpError()
           << "writes an LSE that is not a kernel parameter with static heads";
  if (!kernel.outPointer)
    return merge.emitOpError()
           << "merges into an O the kernel has no address of (a split-KV "
              "kernel takes O's pointer and strides)";
  auto outType = cast<MemRefType>(merge.getOut().getType());
  int64_t headDim = outType.getDimSize(3);
  int64_t splits = merge.getNumSplits();
  Type outElement = outType.getElementType();
  Value share = wide(family.rowShareSlot(*this));
  SmallVector<Value, 2> lses = family.rowScalars(*this, lookup(merge.getLse()));
  Value tileWords = mul64(rows->tiles, rows->tileRows);
  Value lseWord = mul64(tileWords, i64(kSplitSlots));
  Value outWord = mul64(lseWord, i64(1 + splits));
  // Word of part `part`'s LSE of row slot `slot` for this thread.
  auto partLse = [&](Value part, Value slot) -> Value {
    return add64(lseWord, add64(mul64(add64(mul64(part, tileWords), slot),
                                i64(kSplitSlots)),
                            share));
  };
  Value split = wide(lookup(merge.getSplit()));
  Value log2e = f32(float(M_LOG2E));
  Value minusInf = f32(-std::numeric_limits<float>::infinity());
  Type f32Type = b.getF32Type();
  auto asmDialect =
      LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT);

  // A thread's second row lies below its first: where it is inside the
  // sequence, so is the first, and the first row's slot names the thread.
  when(rows->valid.front(), [&] {
    for (auto [half, valid] : llvm::enumerate(rows->valid)) {
      auto store = [&, half = half] {
        LLVM::StoreOp::create(
            b, loc(), lses[half],
            workspaceWord(rows->workspace, partLse(split, rows->slot[half])),
            4);
      };
      if (half == 0)
        store();
      else
        when(valid, store);
    }
    // Count this part in: the atomic releases the stores above and, for
    // the thread that completes the count, acquires every other part's.
    Value counter = LLVM::GEPOp::create(
        b, loc(), rows->workspace.getType(), b.getI32Type(), rows->workspace,
        ValueRange{add64(mul64(rows->slot.front(), i64(kSplitSlots)), share)});
    Value arrived =
        LLVM::InlineAsmOp::create(
            b, loc(), b.getI32Type(), ValueRange{counter},
            "atom.acq_rel.gpu.global.add.u32 $0, [$1], 1;", "=r,l,~{memory}",
            /*has_side_effects=*/true, false,
            LLVM::tailcallkind::TailCallKind::None, asmDialect, ArrayAttr())
            .getResult(0);
    Value last = arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::eq,
                                       arrived, i32(splits - 1));
    when(last, [&] {
      // Zero again for the next launch (the launch boundary orders it).
      LLVM::StoreOp::create(b, loc(), i32(0), counter, 4);
      // The thread's elements of a full-width tile, by runs.
      auto tileVector = cast<VectorType>(family.convertTile(
          RankedTensorType::get({128, headDim}, f32Type)));
      SmallVector<FamilyLowering::ElementRun> runs =
          family.elementRuns(*this, tileVector.getNumElements());
      for (auto [half, valid] : llvm::enumerate(rows->valid)) {
        auto mergeRow = [&, half = half] {
          Value slot = rows->slot[half];
          auto loop = [&](ValueRange init,
                          function_ref<SmallVector<Value>(Value, ValueRange)>
                              body) {
            auto forOp = scf::ForOp::create(b, loc(), index(0), index(splits),
                                            index(1), init);
            OpBuilder::InsertionGuard guard(b);
            b.setInsertionPointToStart(forOp.getBody());
            scf::YieldOp::create(
                b, loc(),
                body(wide(forOp.getInductionVar()), forOp.getRegionIterArgs()));
            return SmallVector<Value>(forOp.getResults());
          };
          auto loadLse = [&](Value part) -> Value {
            return LLVM::LoadOp::create(
                b, loc(), f32Type,
                workspaceWord(rows->workspace, partLse(part, slot)), 4);
          };
          // The largest part LSE (a NaN carries through), then the parts'
          // total weight relative to it; a row no part saw stays -inf.
          Value top = loop({minusInf}, [&](Value part, ValueRange carried) {
            return SmallVector<Value>{arith::MaximumFOp::create(
                b, loc(), carried[0], loadLse(part))};
          })[0];
          Value empty = arith::CmpFOp::create(b, loc(), arith::CmpFPredicate::OEQ,
                                              top, minusInf);
          Value base = arith::SelectOp::create(b, loc(), empty, f32(0.0f), top);
          auto weightOf = [&](Value part) -> Value {
            return ex2(arith::MulFOp::create(
                b, loc(), arith::SubFOp::create(b, loc(), loadLse(part), base),
                log2e));
          };
          Value total = loop({f32(0.0f)}, [&](Value part, ValueRange carried) {
            return SmallVector<Value>{
                arith::AddFOp::create(b, loc(), carried[0], weightOf(part))};
          })[0];
          Value inverse = arith::SelectOp::create(
              b, loc(),
              arith::CmpFOp::create(b, loc(), arith::CmpFPredicate::OGT, total,
                                    f32(0.0f)),
              arith::DivFOp::create(b, loc(), f32(1.0f), total), f32(0.0f));
          if (Value lseOut = merge.getLseOut()) {
            Value merged = arith::AddFOp::create(
                b, loc(), base,
                arith::MulFOp::create(b, loc(), lg2(total), f32(float(M_LN2))));
            auto write = [&] {
              storeLseElement(lseOut, lookup(merge.getBatch()),
                              rows->head[half], rows->position[half], merged);
            };
            if (Value writer = family.rowWriter(*this))
              when(writer, write);
            else
              write();
          }
          // O, kMergeElements of the thread's elements at a time: Σ w_s·O_s.
          SmallVector<FamilyLowering::ElementRun> mine;
          for (const FamilyLowering::ElementRun &run : runs)
            if (run.half == half)
              mine.push_back(run);
          for (size_t first = 0; first < mine.size();) {
            size_t end = first;
            int64_t elements = 0;
            while (end < mine.size() && elements < kMergeElements)
              elements += mine[end++].length;
            ArrayRef<FamilyLowering::ElementRun> group(mine.data() + first,
                                                       end - first);
            SmallVector<Value> init;
            for (const FamilyLowering::ElementRun &run : group)
              init.push_back(vector::BroadcastOp::create(
                  b, loc(), VectorType::get({run.length}, f32Type), f32(0.0f)));
            SmallVector<Value> sums =
                loop(init, [&](Value part, ValueRange carried) {
                  Value weight =
                      arith::MulFOp::create(b, loc(), weightOf(part), inverse);
                  // A part that saw no key wrote no O: weight 0, not read.
                  Value skip = arith::CmpFOp::create(
                      b, loc(), arith::CmpFPredicate::OEQ, weight, f32(0.0f));
                  Value partBase = add64(
                      outWord,
                      mul64(add64(mul64(part, tileWords), slot), i64(headDim)));
                  SmallVector<Value> next;
                  for (auto [run, sum] : llvm::zip_equal(group, carried)) {
                    auto type = VectorType::get({run.length}, f32Type);
                    Value x = LLVM::LoadOp::create(
                        b, loc(), type,
                        workspaceWord(rows->workspace,
                                      add64(partBase, wide(run.column))),
                        4 * run.length);
                    Value fma = vector::FMAOp::create(
                        b, loc(),
                        vector::BroadcastOp::create(b, loc(), type, weight), x,
                        sum);
                    next.push_back(
                        arith::SelectOp::create(b, loc(), skip, sum, fma));
                  }
                  return next;
                });
            for (auto [run, sum] : llvm::zip_equal(group, sums)) {
              auto narrow = VectorType::get({run.length}, outElement);
              LLVM::StoreOp::create(
                  b, loc(), arith::TruncFOp::create(b, loc(), narrow, sum),
                  outElementAddress(lookup(merge.getBatch()),
                                    rows->position[half], rows->head[half],
                                    wide(run.column)),
                  2 * run.length);
            }
            first = end;
          }
        };
        if (half == 0)
          mergeRow();
        else
          when(valid, mergeRow);
      }
    });
  });
  return success();
}

} // namespace mlir::fa4::nvvm
