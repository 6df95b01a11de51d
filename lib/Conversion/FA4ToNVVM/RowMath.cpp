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
    Value packed = arith::AddIOp::create(b, loc(), lookup(mask.getRow()), row);
    Value position =
        arith::DivUIOp::create(b, loc(), packed, index(mask.getGqaRatio()));
    low = emitBandEdges(position, mask.getMask(), mask.getWindowLeft(),
                        mask.getWindowRight(), lookup(mask.getSeqQ()),
                        lookup(mask.getSeqK()), high);
  }
  SmallVector<int32_t> iota(kChunk);
  for (int64_t i = 0; i < kChunk; ++i)
    iota[i] = i;

  // One chunk of S as the softmax sees it: softcapped, masked.
  auto loadChunk = [&](Value chunk) -> Value {
    Value firstColumn = arith::MulIOp::create(b, loc(), chunk, index(kChunk));
    Value address = tmemAddress(scores.scoresColumn, firstColumn, 32);
    Value raw = NVVM::Tcgen05LdOp::create(b,
        loc(), VectorType::get({kChunk}, b.getI32Type()), false,
        NVVM::Tcgen05LdStShape::SHAPE_32X32B, address, Value());
    raw = waitForTmemLoad(raw);
    Value s = vector::BitCastOp::create(b, loc(), chunkType, raw);
    if (SoftcapOp softcap = scores.softcap) {
      // cap·tanh(s·scale/cap), tanh(y) = 1 - 2 / (2^(2y·log2 e) + 1).
      float cap = softcap.getCap().convertToFloat();
      float inner = softcap.getScale().convertToFloat() / cap;
      Value result = s;
      for (int64_t i = 0; i < kChunk; ++i) {
        Value element = vector::ExtractOp::create(b, loc(), s, ArrayRef<int64_t>{i});
        Value y = arith::MulFOp::create(b, loc(), element,
                                          f32(2.0f * inner * float(M_LOG2E)));
        Value e = arith::AddFOp::create(b, loc(), ex2(y), f32(1.0f));
        Value tanh = arith::SubFOp::create(b,
            loc(), f32(1.0f), arith::DivFOp::create(b, loc(), f32(2.0f), e));
        result = vector::InsertOp::create(b,
            loc(), arith::MulFOp::create(b, loc(), tanh, f32(cap)), result,
            ArrayRef<int64_t>{i});
      }
      s = result;
    }
    if (MaskOp mask = scores.mask) {
      Value first = toI32(arith::AddIOp::create(b, loc(), lookup(mask.getCol()),
                                                  firstColumn));
      auto keyType = VectorType::get({kChunk}, b.getI32Type());
      Value keys = arith::AddIOp::create(b,
          loc(), vector::BroadcastOp::create(b, loc(), keyType, first),
          arith::ConstantOp::create(b, loc(), DenseElementsAttr::get(keyType, ArrayRef(iota))));
      Value lowKeys = vector::BroadcastOp::create(b, loc(), keyType, toI32(low));
      Value highKeys = vector::BroadcastOp::create(b, loc(), keyType, toI32(high));
      Value hidden = arith::OrIOp::create(b,
          loc(), arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::slt, keys, lowKeys),
          arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::sge, keys, highKeys));
      Value masked = arith::SelectOp::create(b,
          loc(), hidden,
          arith::ConstantOp::create(b, loc(), DenseElementsAttr::get(chunkType, minusInf)),
          s);
      // Masked before the exponentials: a hidden key never moves the max.
      s = arith::SelectOp::create(b, loc(), scores.maskCondition, masked, s);
    }
    return s;
  };

  // Pass 1: the block's row max, a chunk at a time (a rolled loop keeps
  // the kernel small for ptxas).
  Value chunks = index(columns / kChunk);
  Value blockMax;
  {
    auto loop = scf::ForOp::create(b, loc(), index(0), chunks, index(1),
                                     ValueRange{f32(minusInf)});
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value chunkMax = vector::ReductionOp::create(b,
        loc(), vector::CombiningKind::MAXNUMF, loadChunk(loop.getInductionVar()));
    scf::YieldOp::create(b,
        loc(), ValueRange{arith::MaxNumFOp::create(b,
                   loc(), loop.getRegionIterArgs()[0], chunkMax)});
    blockMax = loop.getResult(0);
  }

  // The max moves only past the threshold; the first block sets it.
  Value rowMax = lookup(op.getRowMax()), rowSum = lookup(op.getRowSum());
  Value candidate = arith::MaxNumFOp::create(b, loc(), rowMax, blockMax);
  Value first = arith::CmpFOp::create(b, loc(), arith::CmpFPredicate::OEQ, rowMax,
                                        f32(minusInf));
  Value grows = arith::CmpFOp::create(b,
      loc(), arith::CmpFPredicate::OGT,
      arith::MulFOp::create(b, loc(),
                              arith::SubFOp::create(b, loc(), candidate, rowMax),
                              f32(scaleLog2)),
      f32(threshold));
  Value rescale = arith::AndIOp::create(b,
      loc(), arith::XOrIOp::create(b, loc(), first,
                                     arith::ConstantIntOp::create(b, loc(), 1, 1)),
      grows);
  Value newMax = arith::SelectOp::create(b,
      loc(), arith::OrIOp::create(b, loc(), first, rescale), candidate, rowMax);
  Value accScale = arith::SelectOp::create(b,
      loc(), rescale,
      ex2(arith::MulFOp::create(b, loc(),
                                  arith::SubFOp::create(b, loc(), rowMax, newMax),
                                  f32(scaleLog2))),
      f32(1.0f));
  // A row that has seen nothing subtracts 0: exp2(-inf) = 0, not NaN.
  Value maxScaled = arith::SelectOp::create(b,
      loc(),
      arith::CmpFOp::create(b, loc(), arith::CmpFPredicate::OEQ, newMax,
                              f32(minusInf)),
      f32(0.0f), arith::MulFOp::create(b, loc(), newMax, f32(scaleLog2)));

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
    auto loop = scf::ForOp::create(b, loc(), index(0), chunks, index(1),
                                     ValueRange{f32(0.0f)});
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value chunk = loop.getInductionVar();
    Value s = loadChunk(chunk);
    Value x = arith::SubFOp::create(b,
        loc(),
        arith::MulFOp::create(b, loc(), s,
                                vector::BroadcastOp::create(b, loc(), chunkType,
                                                              f32(scaleLog2))),
        vector::BroadcastOp::create(b, loc(), chunkType, maxScaled));
    Value p = x;
    for (int64_t i = 0; i < kChunk; ++i) {
      Value element = vector::ExtractOp::create(b, loc(), x, ArrayRef<int64_t>{i});
      Value value;
      if (i < emulated) {
        // Software exp2 on the FMA units: x = n + f with n = floor(x), 2^f
        // by the polynomial, 2^n added to the exponent field.
        Value clamped = arith::MaximumFOp::create(b, loc(), element, f32(-127.0f));
        Value whole = LLVM::FFloorOp::create(b, loc(), clamped);
        Value fraction = arith::SubFOp::create(b, loc(), clamped, whole);
        Value poly = LLVM::FMAOp::create(b, loc(), f32(kExp2C3), fraction,
                                           f32(kExp2C2));
        poly = LLVM::FMAOp::create(b, loc(), poly, fraction, f32(kExp2C1));
        poly = LLVM::FMAOp::create(b, loc(), poly, fraction, f32(1.0f));
        Value exponent = arith::ShLIOp::create(b,
            loc(), arith::FPToSIOp::create(b, loc(), b.getI32Type(), whole),
            arith::ConstantIntOp::create(b, loc(), 23, 32));
        Value bits = arith::AddIOp::create(b,
            loc(), arith::BitcastOp::create(b, loc(), b.getI32Type(), poly),
            exponent);
        value = arith::SelectOp::create(b,
            loc(),
            arith::CmpFOp::create(b, loc(), arith::CmpFPredicate::OLT, element,
                                    f32(-126.0f)),
            f32(0.0f), arith::BitcastOp::create(b, loc(), f32Type, bits));
      } else {
        value = ex2(element);
      }
      p = vector::InsertOp::create(b, loc(), value, p, ArrayRef<int64_t>{i});
    }
    Value chunkSum =
        vector::ReductionOp::create(b, loc(), vector::CombiningKind::ADD, p);
    Value packed = vector::BitCastOp::create(b,
        loc(), wordsType, arith::TruncFOp::create(b, loc(), probsType, p));
    Value address = tmemAddress(
        probsBuffer,
        arith::AddIOp::create(b,
            loc(), probsFirst,
            arith::MulIOp::create(b, loc(), chunk, index(kChunk))),
        16);
    NVVM::Tcgen05StOp::create(b, loc(), false, NVVM::Tcgen05LdStShape::SHAPE_32X32B,
                                address, packed, Value());
    scf::YieldOp::create(b,
        loc(), ValueRange{arith::AddFOp::create(b,
                   loc(), loop.getRegionIterArgs()[0], chunkSum)});
    sum = loop.getResult(0);
  }
  probsInTmem.insert(op.getProbs());
  mapping.map(op.getNewRowMax(), newMax);
  mapping.map(op.getNewRowSum(),
              arith::AddFOp::create(b,
                  loc(), arith::MulFOp::create(b, loc(), rowSum, accScale), sum));
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
                    arith::MulFOp::create(b,
                        loc(), acc,
                        vector::BroadcastOp::create(b,
                            loc(), acc.getType(),
                            lookup(correction.getAccScale()))));
        return success();
      })
      .Case([&](NormalizeOp normalize) -> LogicalResult {
        Value acc = lookup(normalize.getAcc());
        Value rowMax = lookup(normalize.getRowMax());
        Value rowSum = lookup(normalize.getRowSum());
        float scaleLog2 = normalize.getScaleLog2().convertToFloat();
        Value empty = arith::CmpFOp::create(b, loc(), arith::CmpFPredicate::OEQ,
                                              rowSum, f32(0.0f));
        // A row that saw no key: O = 0, LSE = -inf.
        Value inverse = arith::SelectOp::create(b,
            loc(), empty, f32(0.0f),
            arith::DivFOp::create(b, loc(), f32(1.0f), rowSum));
        auto outType = cast<VectorType>(convertType(normalize.getOut().getType()));
        Value scaled = arith::MulFOp::create(b,
            loc(), acc,
            vector::BroadcastOp::create(b, loc(), acc.getType(), inverse));
        mapping.map(normalize.getOut(),
                    arith::TruncFOp::create(b, loc(), outType, scaled));
        Value lse = arith::MulFOp::create(b,
            loc(),
            arith::AddFOp::create(b,
                loc(), arith::MulFOp::create(b, loc(), rowMax, f32(scaleLog2)),
                lg2(rowSum)),
            f32(float(M_LN2)));
        mapping.map(normalize.getLse(),
                    arith::SelectOp::create(b, loc(), empty, f32(minusInf), lse));
        return success();
      })
      .Case([&](NeedsRescaleOp vote) -> LogicalResult {
        // A warp rescales its 32 rows when any of them needs it.
        Value moved = arith::CmpFOp::create(b, loc(), arith::CmpFPredicate::ONE,
                                              lookup(vote.getAccScale()),
                                              f32(1.0f));
        mapping.map(vote.getResult(),
                    NVVM::VoteSyncOp::create(b, loc(), b.getI1Type(), i32(-1),
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
            arith::AddIOp::create(b, loc(), lookup(store.getRow()), rowInWarpgroup());
        Value position = arith::DivUIOp::create(b, loc(), packed, index(ratio));
        Value head = arith::AddIOp::create(b,
            loc(),
            arith::MulIOp::create(b, loc(), lookup(store.getHead()), index(ratio)),
            arith::RemUIOp::create(b, loc(), packed, index(ratio)));
        Value seqQ = toIndex(kernel.seqQ);
        Value inside = arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::ult,
                                               position, seqQ);
        auto branch = scf::IfOp::create(b, loc(), inside, false);
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(branch.thenBlock());
        // (batch·q_heads + head)·seq_q + position in 64 bits: indices are
        // 32-bit in the kernel, and this one reaches batch·q_heads·seq_q.
        auto wide = [&](Value value) -> Value {
          return arith::ExtUIOp::create(b, loc(), b.getI64Type(), toI32(value));
        };
        Value element = arith::AddIOp::create(b,
            loc(),
            arith::MulIOp::create(b,
                loc(),
                arith::AddIOp::create(b,
                    loc(),
                    arith::MulIOp::create(b, loc(), wide(lookup(store.getBatch())),
                                            i64(type.getDimSize(1))),
                    wide(head)),
                wide(seqQ)),
            wide(position));
        Value address = LLVM::GEPOp::create(b, loc(), pointer.getType(),
                                              b.getF32Type(), pointer,
                                              ValueRange{element});
        LLVM::StoreOp::create(b, loc(), lookup(store.getTile()), address, 4);
        return success();
      })
      .Default([](Operation *) { return failure(); });
}
