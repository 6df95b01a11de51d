//===- RowMath.cpp - the softmax and correction roles' arithmetic ----------===//
//
// Thread t of a warpgroup owns row t of every tile, so row max, row sum and
// the correction factor are per-thread scalars: no shuffles.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

#include "fa4/Support/AttentionMath.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::fa4;
using namespace mlir::fa4::nvvm;

/// Columns of S a softmax thread holds at a time.
static constexpr int64_t kChunk = 32;

/// 2^f on [0, 1) ~ 1 + f·(c1 + f·(c2 + f·c3)): a least-squares fit in
/// relative error (max 8.7e-5, under half an fp16 ulp), so the probabilities
/// that reach the tensor core round as with ex2.approx.
static constexpr float kExp2C1 = 0.695123102f;
static constexpr float kExp2C2 = 0.227644650f;
static constexpr float kExp2C3 = 0.0770588995f;

LogicalResult Lowering::lowerOnlineSoftmax(OnlineSoftmaxOp op) {
  auto found = deferred.find(op.getScores());
  if (found == deferred.end())
    return op.emitOpError() << "fa4-to-nvvm fuses the softmax with the TMEM "
                               "load of S; S must come straight from TMEM";
  DeferredScores scores = found->second;
  TmemStoreOp store;
  for (Operation *user : op.getProbs().getUsers())
    store = dyn_cast<TmemStoreOp>(user);
  if (!store || !op.getProbs().hasOneUse())
    return op.emitOpError() << "fa4-to-nvvm expects the probabilities to go "
                               "straight to TMEM";
  MLIRContext *context = b.getContext();
  Type f32Type = b.getF32Type();
  auto chunkType = VectorType::get({kChunk}, f32Type);
  Type probElement = cast<ShapedType>(op.getProbs().getType()).getElementType();
  int64_t columns = cast<ShapedType>(op.getScores().getType()).getDimSize(1);
  float scaleLog2 = op.getScaleLog2().convertToFloat();
  float threshold = op.getRescaleThreshold().convertToFloat();
  float minusInf = -std::numeric_limits<float>::infinity();
  Value row = rowInWarpgroup();

  // The visible keys of this thread's row, when the block straddles the band.
  Value low, high;
  if (MaskOp mask = scores.mask) {
    Value packed = b.create<arith::AddIOp>(loc(), lookup(mask.getRow()), row);
    Value position =
        b.create<arith::DivUIOp>(loc(), packed, index(mask.getGqaRatio()));
    low = emitBandEdges(position, mask.getMask(), mask.getWindowLeft(),
                        mask.getWindowRight(), lookup(mask.getSeqQ()),
                        lookup(mask.getSeqK()), high);
  }
  SmallVector<int32_t> iota(kChunk);
  for (int64_t i = 0; i < kChunk; ++i)
    iota[i] = i;

  // One chunk of S as the softmax sees it: softcapped, masked.
  auto loadChunk = [&](Value chunk) -> Value {
    Value firstColumn = b.create<arith::MulIOp>(loc(), chunk, index(kChunk));
    Value address = tmemAddress(scores.scoresColumn, firstColumn, 32);
    Value raw = b.create<NVVM::Tcgen05LdOp>(
        loc(), VectorType::get({kChunk}, b.getI32Type()), false,
        NVVM::Tcgen05LdStShape::SHAPE_32X32B, address, Value());
    raw = waitForTmemLoad(raw);
    Value s = b.create<vector::BitCastOp>(loc(), chunkType, raw);
    if (SoftcapOp softcap = scores.softcap) {
      // cap·tanh(s·scale/cap), tanh(y) = 1 - 2 / (2^(2y·log2 e) + 1).
      float cap = softcap.getCap().convertToFloat();
      float inner = softcap.getScale().convertToFloat() / cap;
      Value result = s;
      for (int64_t i = 0; i < kChunk; ++i) {
        Value element = b.create<vector::ExtractOp>(loc(), s, ArrayRef<int64_t>{i});
        Value y = b.create<arith::MulFOp>(loc(), element,
                                          f32(2.0f * inner * float(M_LOG2E)));
        Value e = b.create<arith::AddFOp>(loc(), ex2(y), f32(1.0f));
        Value tanh = b.create<arith::SubFOp>(
            loc(), f32(1.0f), b.create<arith::DivFOp>(loc(), f32(2.0f), e));
        result = b.create<vector::InsertOp>(
            loc(), b.create<arith::MulFOp>(loc(), tanh, f32(cap)), result,
            ArrayRef<int64_t>{i});
      }
      s = result;
    }
    if (MaskOp mask = scores.mask) {
      Value first = toI32(b.create<arith::AddIOp>(loc(), lookup(mask.getCol()),
                                                  firstColumn));
      auto keyType = VectorType::get({kChunk}, b.getI32Type());
      Value keys = b.create<arith::AddIOp>(
          loc(), b.create<vector::BroadcastOp>(loc(), keyType, first),
          b.create<arith::ConstantOp>(loc(), DenseElementsAttr::get(keyType, ArrayRef(iota))));
      Value lowKeys = b.create<vector::BroadcastOp>(loc(), keyType, toI32(low));
      Value highKeys = b.create<vector::BroadcastOp>(loc(), keyType, toI32(high));
      Value hidden = b.create<arith::OrIOp>(
          loc(), b.create<arith::CmpIOp>(loc(), arith::CmpIPredicate::slt, keys, lowKeys),
          b.create<arith::CmpIOp>(loc(), arith::CmpIPredicate::sge, keys, highKeys));
      Value masked = b.create<arith::SelectOp>(
          loc(), hidden,
          b.create<arith::ConstantOp>(loc(), DenseElementsAttr::get(chunkType, minusInf)),
          s);
      // Masked before the exponentials: a hidden key never moves the max.
      s = b.create<arith::SelectOp>(loc(), scores.maskCondition, masked, s);
    }
    return s;
  };

  // Pass 1: the block's row max, a chunk at a time (a rolled loop keeps
  // the kernel small for ptxas).
  Value chunks = index(columns / kChunk);
  Value blockMax;
  {
    auto loop = b.create<scf::ForOp>(loc(), index(0), chunks, index(1),
                                     ValueRange{f32(minusInf)});
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value chunkMax = b.create<vector::ReductionOp>(
        loc(), vector::CombiningKind::MAXNUMF, loadChunk(loop.getInductionVar()));
    b.create<scf::YieldOp>(
        loc(), ValueRange{b.create<arith::MaxNumFOp>(
                   loc(), loop.getRegionIterArgs()[0], chunkMax)});
    blockMax = loop.getResult(0);
  }

  // The max moves only past the threshold; the first block sets it.
  Value rowMax = lookup(op.getRowMax()), rowSum = lookup(op.getRowSum());
  Value candidate = b.create<arith::MaxNumFOp>(loc(), rowMax, blockMax);
  Value first = b.create<arith::CmpFOp>(loc(), arith::CmpFPredicate::OEQ, rowMax,
                                        f32(minusInf));
  Value grows = b.create<arith::CmpFOp>(
      loc(), arith::CmpFPredicate::OGT,
      b.create<arith::MulFOp>(loc(),
                              b.create<arith::SubFOp>(loc(), candidate, rowMax),
                              f32(scaleLog2)),
      f32(threshold));
  Value rescale = b.create<arith::AndIOp>(
      loc(), b.create<arith::XOrIOp>(loc(), first,
                                     b.create<arith::ConstantIntOp>(loc(), 1, 1)),
      grows);
  Value newMax = b.create<arith::SelectOp>(
      loc(), b.create<arith::OrIOp>(loc(), first, rescale), candidate, rowMax);
  Value accScale = b.create<arith::SelectOp>(
      loc(), rescale,
      ex2(b.create<arith::MulFOp>(loc(),
                                  b.create<arith::SubFOp>(loc(), rowMax, newMax),
                                  f32(scaleLog2))),
      f32(1.0f));
  // A row that has seen nothing subtracts 0: exp2(-inf) = 0, not NaN.
  Value maxScaled = b.create<arith::SelectOp>(
      loc(),
      b.create<arith::CmpFOp>(loc(), arith::CmpFPredicate::OEQ, newMax,
                              f32(minusInf)),
      f32(0.0f), b.create<arith::MulFOp>(loc(), newMax, f32(scaleLog2)));

  // Pass 2: exponentials, the row sum, and P over S. P chunk c lands in the
  // columns of S chunk c / 2, which pass 2 has already read.
  int64_t emulated = static_cast<int64_t>(
      std::floor(kernel.exp2EmulationFraction * kChunk));
  auto wordsType = VectorType::get({kChunk / 2}, b.getI32Type());
  auto probsType = VectorType::get({kChunk}, probElement);
  // P's column is counted in its 16-bit elements, two to a TMEM column.
  Value probsBuffer = lookup(store.getBuffer());
  Value probsFirst = toIndex(lookup(store.getColumn()));
  Value sum;
  {
    auto loop = b.create<scf::ForOp>(loc(), index(0), chunks, index(1),
                                     ValueRange{f32(0.0f)});
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value chunk = loop.getInductionVar();
    Value s = loadChunk(chunk);
    Value x = b.create<arith::SubFOp>(
        loc(),
        b.create<arith::MulFOp>(loc(), s,
                                b.create<vector::BroadcastOp>(loc(), chunkType,
                                                              f32(scaleLog2))),
        b.create<vector::BroadcastOp>(loc(), chunkType, maxScaled));
    Value p = x;
    for (int64_t i = 0; i < kChunk; ++i) {
      Value element = b.create<vector::ExtractOp>(loc(), x, ArrayRef<int64_t>{i});
      Value value;
      if (i < emulated) {
        // Software exp2 on the FMA units: x = n + f with n = floor(x), 2^f
        // by the polynomial, 2^n added to the exponent field.
        Value clamped = b.create<arith::MaximumFOp>(loc(), element, f32(-127.0f));
        Value whole = b.create<LLVM::FFloorOp>(loc(), clamped);
        Value fraction = b.create<arith::SubFOp>(loc(), clamped, whole);
        Value poly = b.create<LLVM::FMAOp>(loc(), f32(kExp2C3), fraction,
                                           f32(kExp2C2));
        poly = b.create<LLVM::FMAOp>(loc(), poly, fraction, f32(kExp2C1));
        poly = b.create<LLVM::FMAOp>(loc(), poly, fraction, f32(1.0f));
        Value exponent = b.create<arith::ShLIOp>(
            loc(), b.create<arith::FPToSIOp>(loc(), b.getI32Type(), whole),
            b.create<arith::ConstantIntOp>(loc(), 23, 32));
        Value bits = b.create<arith::AddIOp>(
            loc(), b.create<arith::BitcastOp>(loc(), b.getI32Type(), poly),
            exponent);
        value = b.create<arith::SelectOp>(
            loc(),
            b.create<arith::CmpFOp>(loc(), arith::CmpFPredicate::OLT, element,
                                    f32(-126.0f)),
            f32(0.0f), b.create<arith::BitcastOp>(loc(), f32Type, bits));
      } else {
        value = ex2(element);
      }
      p = b.create<vector::InsertOp>(loc(), value, p, ArrayRef<int64_t>{i});
    }
    Value chunkSum =
        b.create<vector::ReductionOp>(loc(), vector::CombiningKind::ADD, p);
    Value packed = b.create<vector::BitCastOp>(
        loc(), wordsType, b.create<arith::TruncFOp>(loc(), probsType, p));
    Value address = tmemAddress(
        probsBuffer,
        b.create<arith::AddIOp>(
            loc(), probsFirst,
            b.create<arith::MulIOp>(loc(), chunk, index(kChunk))),
        16);
    b.create<NVVM::Tcgen05StOp>(loc(), false, NVVM::Tcgen05LdStShape::SHAPE_32X32B,
                                address, packed, Value());
    b.create<scf::YieldOp>(
        loc(), ValueRange{b.create<arith::AddFOp>(
                   loc(), loop.getRegionIterArgs()[0], chunkSum)});
    sum = loop.getResult(0);
  }
  probsInTmem.insert(op.getProbs());
  mapping.map(op.getNewRowMax(), newMax);
  mapping.map(op.getNewRowSum(),
              b.create<arith::AddFOp>(
                  loc(), b.create<arith::MulFOp>(loc(), rowSum, accScale), sum));
  mapping.map(op.getAccScale(), accScale);
  (void)context;
  return success();
}

LogicalResult Lowering::lowerRowMath(Operation *op) {
  float minusInf = -std::numeric_limits<float>::infinity();
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](SoftcapOp softcap) -> LogicalResult {
        auto found = deferred.find(softcap.getScores());
        if (found == deferred.end())
          return softcap.emitOpError()
                 << "fa4-to-nvvm applies the softcap to S as it leaves TMEM";
        DeferredScores scores = found->second;
        scores.softcap = softcap;
        deferred[softcap.getResult()] = scores;
        return success();
      })
      .Case([&](MaskOp mask) -> LogicalResult {
        return mask.emitOpError()
               << "fa4-to-nvvm masks S only inside the straddling-block branch "
                  "of the softmax";
      })
      .Case([&](OnlineSoftmaxOp softmax) -> LogicalResult { return lowerOnlineSoftmax(softmax); })
      .Case([&](CorrectionOp correction) -> LogicalResult {
        Value acc = lookup(correction.getAcc());
        mapping.map(correction.getResult(),
                    b.create<arith::MulFOp>(
                        loc(), acc,
                        b.create<vector::BroadcastOp>(
                            loc(), acc.getType(),
                            lookup(correction.getAccScale()))));
        return success();
      })
      .Case([&](NormalizeOp normalize) -> LogicalResult {
        Value acc = lookup(normalize.getAcc());
        Value rowMax = lookup(normalize.getRowMax());
        Value rowSum = lookup(normalize.getRowSum());
        float scaleLog2 = normalize.getScaleLog2().convertToFloat();
        Value empty = b.create<arith::CmpFOp>(loc(), arith::CmpFPredicate::OEQ,
                                              rowSum, f32(0.0f));
        // A row that saw no key: O = 0, LSE = -inf.
        Value inverse = b.create<arith::SelectOp>(
            loc(), empty, f32(0.0f),
            b.create<arith::DivFOp>(loc(), f32(1.0f), rowSum));
        auto outType = cast<VectorType>(convertType(normalize.getOut().getType()));
        Value scaled = b.create<arith::MulFOp>(
            loc(), acc,
            b.create<vector::BroadcastOp>(loc(), acc.getType(), inverse));
        mapping.map(normalize.getOut(),
                    b.create<arith::TruncFOp>(loc(), outType, scaled));
        Value lse = b.create<arith::MulFOp>(
            loc(),
            b.create<arith::AddFOp>(
                loc(), b.create<arith::MulFOp>(loc(), rowMax, f32(scaleLog2)),
                lg2(rowSum)),
            f32(float(M_LN2)));
        mapping.map(normalize.getLse(),
                    b.create<arith::SelectOp>(loc(), empty, f32(minusInf), lse));
        return success();
      })
      .Case([&](NeedsRescaleOp vote) -> LogicalResult {
        // A warp rescales its 32 rows when any of them needs it.
        Value moved = b.create<arith::CmpFOp>(loc(), arith::CmpFPredicate::ONE,
                                              lookup(vote.getAccScale()),
                                              f32(1.0f));
        mapping.map(vote.getResult(),
                    b.create<NVVM::VoteSyncOp>(loc(), b.getI1Type(), i32(-1),
                                               moved, NVVM::VoteSyncKind::any));
        return success();
      })
      .Case([&](StoreLseTileOp store) -> LogicalResult {
        Value pointer = kernel.globalPointers.lookup(store.getDest());
        auto type = cast<MemRefType>(store.getDest().getType());
        if (!pointer || type.isDynamicDim(1))
          return store.emitOpError()
                 << "writes an LSE that is not a kernel parameter with static "
                    "heads";
        int64_t ratio = store.getGqaRatio();
        Value packed =
            b.create<arith::AddIOp>(loc(), lookup(store.getRow()), rowInWarpgroup());
        Value position = b.create<arith::DivUIOp>(loc(), packed, index(ratio));
        Value head = b.create<arith::AddIOp>(
            loc(),
            b.create<arith::MulIOp>(loc(), lookup(store.getHead()), index(ratio)),
            b.create<arith::RemUIOp>(loc(), packed, index(ratio)));
        Value seqQ = toIndex(kernel.seqQ);
        Value inside = b.create<arith::CmpIOp>(loc(), arith::CmpIPredicate::ult,
                                               position, seqQ);
        auto branch = b.create<scf::IfOp>(loc(), inside, false);
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(branch.thenBlock());
        // (batch·q_heads + head)·seq_q + position in 64 bits: indices are
        // 32-bit in the kernel, and this one reaches batch·q_heads·seq_q.
        auto wide = [&](Value value) -> Value {
          return b.create<arith::ExtUIOp>(loc(), b.getI64Type(), toI32(value));
        };
        Value element = b.create<arith::AddIOp>(
            loc(),
            b.create<arith::MulIOp>(
                loc(),
                b.create<arith::AddIOp>(
                    loc(),
                    b.create<arith::MulIOp>(loc(), wide(lookup(store.getBatch())),
                                            i64(type.getDimSize(1))),
                    wide(head)),
                wide(seqQ)),
            wide(position));
        Value address = b.create<LLVM::GEPOp>(loc(), pointer.getType(),
                                              b.getF32Type(), pointer,
                                              ValueRange{element});
        b.create<LLVM::StoreOp>(loc(), lookup(store.getTile()), address, 4);
        return success();
      })
      .Default([](Operation *) { return failure(); });
}
