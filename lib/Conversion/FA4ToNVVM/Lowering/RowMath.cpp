//===- RowMath.cpp - the softmax and correction roles' arithmetic ----------===//
//
// Thread t of a warpgroup owns row t of every tile, so row max, row sum and
// the correction factor are per-thread scalars: no shuffles.
//
//===----------------------------------------------------------------------===//

#include "fa4/Conversion/FA4ToNVVM/Lowering.h"

#include "fa4/Support/AttentionMath.h"
#include "fa4/Transforms/TileConfig.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::fa4;
using namespace mlir::fa4::nvvm;

/// Columns of S one tcgen05.ld (32x32b.x32) brings to a thread.
static constexpr int64_t kChunk = 32;

/// 2^f on [0, 1) ~ 1 + f·(c1 + f·(c2 + f·c3)): a least-squares fit in
/// relative error (max 8.7e-5, under half an fp16 ulp), so the probabilities
/// that reach the tensor core round as with ex2.approx.
static constexpr float kExp2C1 = 0.695123102f;
static constexpr float kExp2C2 = 0.227644650f;
static constexpr float kExp2C3 = 0.0770588995f;
/// 1.5·2^23: added with rounding toward -inf, it leaves floor(x) in the low
/// mantissa bits of the sum for |x| < 2^22.
static constexpr float kFloorMagic = 12582912.0f;

/// Which units of a row's exponentials run on the FMA units (sm_100a's
/// pairs; sm_90a's single exponentials of a row of the thread's fragment):
/// `emulated` of `units`, spread evenly so that MUFU and FMA work
/// interleave — over the whole row up to one in eight (sm_100a's 16 of
/// every 128), over its second half past that (the CTA pair's 24 of 128,
/// FP8's 40). Both are ptxas's register allocation, measured (CUDA 13.0, bench/sass_budget.py):
/// at 24 of 128 spread over the whole row, ptxas copies some 40 values into
/// the aligned register pairs of the packed FMAs and spills 32 bytes a
/// thread (566 instructions a tile in the pair's softmax), over the second
/// half 524 and no spill; at 16 of 128 the plain softmax counts the same
/// either way, but the ALiBi example's (a score_mod) spills 68 bytes over
/// the second half and none over the whole row. FA4 likewise keeps its
/// emulated exponentials out of a row's first 32-column chunk.
bool Lowering::isEmulatedExp2(int64_t unit, int64_t emulated, int64_t units) {
  if (8 * emulated > units && 2 * emulated <= units) {
    if (unit < units / 2)
      return false;
    unit -= units / 2;
    units -= units / 2;
  }
  return (unit + 1) * emulated / units > unit * emulated / units;
}

/// The per-thread row program of one KV tile (FA4's softmax warpgroup):
///  1. S is read from TMEM once, in 32-column loads with one wait, and stays
///     in registers;
///  2. the softcap, then — only in the tiles level B marks as straddling the
///     band or the sequence end — the mask, built per 32 keys as a bit mask
///     of visible keys (ptxas turns the bit tests into R2P + FSEL, as in
///     FA4's mask), so full tiles carry no mask arithmetic at all;
///  3. the row max as a balanced tree of 3-input max.f32;
///  4. x = s·scale_log2 - m·scale_log2 with packed fma.f32x2, exponentials
///     with ex2.approx, a fraction of them on the FMA pipe;
///  5. P packed two at a time (cvt.rn.{f16,bf16}x2.f32) and stored over S;
///  6. the row sum as a balanced tree of packed add.f32x2.
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
  Type probElement = cast<ShapedType>(op.getProbs().getType()).getElementType();
  int64_t columns = cast<ShapedType>(op.getScores().getType()).getDimSize(1);
  if (columns % kChunk != 0)
    return op.emitOpError() << "fa4-to-nvvm needs S tiles of a multiple of "
                            << kChunk << " columns, got " << columns;
  float scaleLog2 = op.getScaleLog2().convertToFloat();
  float threshold = op.getRescaleThreshold().convertToFloat();

  // 1. S, once.
  SmallVector<Value> s = loadScoreRow(scores.scoresColumn, columns / kChunk);
  // 2. What was applied to S since its load: the softcap, the score_mod,
  // the mask.
  if (SoftcapOp softcap = scores.softcap)
    applySoftcap(softcap, s);
  if (ScoreModOp scoreMod = scores.scoreMod)
    if (failed(applyScoreMod(scoreMod, s)))
      return failure();
  if (MaskOp mask = scores.mask)
    if (failed(applyDeferredMask(mask, scores.maskCondition, s)))
      return failure();
  // 3. The row max, and what moving it asks of the exponents and of O.
  Value rowMax = lookup(op.getRowMax()), rowSum = lookup(op.getRowSum());
  // FP8: the descales' run-time factor on the scale, and the probabilities
  // lifted by 2^prob_shift into e4m3's range (exp2(s·c - m·c + shift): the
  // shift comes off the subtracted max).
  Value factor = op.getFactor() ? lookup(op.getFactor()) : Value();
  float shift = static_cast<float>(op.getProbShift());
  RowMaxUpdate update = updateRowMax(rowMaxTree(s, rowMax), rowMax, scaleLog2,
                                     threshold, factor);
  Value maxScaled = update.maxScaled;
  if (shift != 0.0f)
    maxScaled = arith::SubFOp::create(b, loc(), maxScaled, f32(shift));
  // 4. The exponentials.
  SmallVector<Value> probs =
      rowExponentials(s, maxScaled, scaleLog2, factor);
  // 5. P over S.
  storeProbabilities(probs, probElement, store);
  // 6. The row sum.
  Value blockSum = rowSumTree(probs);

  probsInTmem.insert(op.getProbs());
  mapping.map(op.getNewRowMax(), update.newMax);
  mapping.map(op.getNewRowSum(),
              LLVM::FMAOp::create(b, loc(), rowSum, update.accScale, blockSum));
  mapping.map(op.getAccScale(), update.accScale);
  return success();
}

SmallVector<Value> Lowering::loadScoreRow(Value scoresColumn, int64_t chunks) {
  Type i32Type = b.getI32Type();
  SmallVector<Value> raws;
  for (int64_t chunk = 0; chunk < chunks; ++chunk)
    raws.push_back(NVVM::Tcgen05LdOp::create(b,
        loc(), VectorType::get({kChunk}, i32Type), false,
        NVVM::Tcgen05LdStShape::SHAPE_32X32B,
        tmemAddress(scoresColumn, index(chunk * kChunk), 32), Value()));
  SmallVector<Value> s;
  for (Value word : waitForTmemLoads(raws))
    s.push_back(arith::BitcastOp::create(b, loc(), b.getF32Type(), word));
  return s;
}

Value Lowering::softcapScore(SoftcapOp softcap, Value score) {
  float cap = softcap.getCap().convertToFloat();
  float inner = softcap.getScale().convertToFloat() / cap;
  // FP8's descales multiply the score first (one multiply a score).
  if (Value factor = softcap.getFactor())
    score = arith::MulFOp::create(b, loc(), score, lookup(factor));
  return arith::MulFOp::create(b, loc(), tanh(score, inner), f32(cap));
}

void Lowering::applySoftcap(SoftcapOp softcap, MutableArrayRef<Value> s) {
  for (Value &element : s)
    element = softcapScore(softcap, element);
}

LogicalResult Lowering::lowerElementwiseSoftcap(SoftcapOp softcap) {
  Value s = lookup(softcap.getScores());
  auto type = cast<VectorType>(s.getType());
  SmallVector<Value> elements;
  for (int64_t i = 0; i < type.getNumElements(); ++i)
    elements.push_back(softcapScore(
        softcap, vector::ExtractOp::create(b, loc(), s, ArrayRef<int64_t>{i})));
  mapping.map(softcap.getResult(),
              vector::FromElementsOp::create(b, loc(), type, elements));
  return success();
}

/// The score_mod, inlined per score on the scaled score. Where its loads are
/// indexed by a position, the region sees positions clamped into the
/// sequences, so they stay in bounds; the scores past seq_q or seq_k it
/// changes are masked or never stored.
LogicalResult Lowering::applyScoreMod(ScoreModOp scoreMod,
                                      MutableArrayRef<Value> s) {
  Region &body = scoreMod.getBody();
  Value packed = arith::AddIOp::create(b, loc(), lookup(scoreMod.getRow()),
                                       rowInWarpgroup());
  RowPositions row = emitRowPositions(
      body, /*queryArgument=*/3, packed, lookup(scoreMod.getHead()),
      scoreMod.getGqaRatio(), lookup(scoreMod.getSeqQ()),
      lookup(scoreMod.getSeqK()));
  Value batch = lookup(scoreMod.getBatch());
  Value firstKey = lookup(scoreMod.getCol());
  // The region sees the scaled score, descaled first by FP8's factor (as
  // the softcap's): one multiply a score either way.
  Value scale = f32(scoreMod.getScale().convertToFloat());
  if (Value factor = scoreMod.getFactor())
    scale = arith::MulFOp::create(b, loc(), scale, lookup(factor));
  for (auto [column, element] : llvm::enumerate(s)) {
    Value scaled = arith::MulFOp::create(b, loc(), element, scale,
                                         arith::FastMathFlags::contract);
    FailureOr<Value> modded = emitModRegion(
        scoreMod, body,
        {scaled, batch, row.queryHead, row.query,
         row.key(b, loc(), firstKey, column)},
        scoreMod.getExtras());
    if (failed(modded))
      return failure();
    element = *modded;
  }
  return success();
}

/// The mask, in its own branch taken where `condition` holds: hidden keys
/// become -inf before the max, so they never move it.
LogicalResult Lowering::applyDeferredMask(MaskOp mask, Value condition,
                                          MutableArrayRef<Value> s) {
  SmallVector<Type> types(s.size(), b.getF32Type());
  auto branch = scf::IfOp::create(b, loc(), types, condition, true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(branch.elseBlock());
    scf::YieldOp::create(b, loc(), ValueRange(s));
    b.setInsertionPointToStart(branch.thenBlock());
    FailureOr<SmallVector<Value>> masked = maskScores(mask, s);
    if (failed(masked))
      return failure();
    scf::YieldOp::create(b, loc(), ValueRange(*masked));
  }
  for (auto [element, result] : llvm::zip(s, branch.getResults()))
    element = result;
  return success();
}

FailureOr<SmallVector<Value>> Lowering::maskScores(MaskOp mask,
                                                   ArrayRef<Value> s) {
  Value packed = arith::AddIOp::create(b, loc(), lookup(mask.getRow()),
                                       rowInWarpgroup());
  Value position =
      arith::DivUIOp::create(b, loc(), packed, index(mask.getGqaRatio()));
  Value high;
  MaskModBounds bounds = maskBounds(mask.getMask(), mask.getWindowLeft(),
                                    mask.getWindowRight(), mask.getMaskMod());
  Value low = emitKeyEdges(position, bounds.bounds, lookup(mask.getSeqQ()),
                           lookup(mask.getSeqK()), high);
  bool hasLow = bounds.bounds.lower.has_value();
  // Visible keys relative to the tile's first, at least 0; below 2^31, so
  // the per-chunk offsets below never wrap.
  Value first = lookup(mask.getCol());
  auto relative = [&](Value edge) -> Value {
    Value offset = arith::SubIOp::create(b, loc(), edge, first);
    return toI32(arith::MaxSIOp::create(b, loc(), offset, index(0)));
  };
  Value lowRel = hasLow ? relative(low) : Value();
  Value highRel = relative(high);
  Value minusInfinity = f32(-std::numeric_limits<float>::infinity());
  SmallVector<Value> masked =
      maskScoresToKeys(s, lowRel, highRel, minusInfinity);
  if (bounds.exact)
    return masked;
  // The part of a mask_mod the bounds do not capture, per score, on
  // positions clamped into the sequences (the keys past seq_k are already
  // hidden, the rows past seq_q never stored).
  RowPositions row = emitRowPositions(
      mask.getMaskMod(), /*queryArgument=*/2, packed, lookup(mask.getHead()),
      mask.getGqaRatio(), lookup(mask.getSeqQ()), lookup(mask.getSeqK()));
  for (auto [column, element] : llvm::enumerate(masked)) {
    FailureOr<Value> visible = emitModRegion(
        mask, mask.getMaskMod(),
        {lookup(mask.getBatch()), row.queryHead, row.query,
         row.key(b, loc(), first, column)},
        mask.getExtras());
    if (failed(visible))
      return failure();
    element = arith::SelectOp::create(b, loc(), *visible, element,
                                      minusInfinity);
  }
  return masked;
}

SmallVector<Value> Lowering::maskScoresToKeys(ArrayRef<Value> s, Value lowRel,
                                              Value highRel,
                                              Value minusInfinity) {
  Type i32Type = b.getI32Type();
  // Bits [n, 32) of chunk `base`, n = max(edge - base, 0): ~0 << n with
  // PTX's shl, which gives 0 for shifts of 32 and more (LLVM's shl would be
  // poison there), so no upper clamp is needed.
  auto bitsFrom = [&](Value edge, int64_t base) -> Value {
    Value n = arith::MaxSIOp::create(
        b, loc(), arith::SubIOp::create(b, loc(), edge, i32(base)), i32(0));
    return inlinePtx("shl.b32", i32Type, {i32(-1), n});
  };
  SmallVector<Value> masked;
  int64_t chunks = static_cast<int64_t>(s.size()) / kChunk;
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    // Visible: [low, high) = bits from low, minus bits from high.
    Value visible = arith::XOrIOp::create(
        b, loc(), bitsFrom(highRel, chunk * kChunk), i32(-1));
    if (lowRel)
      visible = arith::AndIOp::create(b, loc(), visible,
                                      bitsFrom(lowRel, chunk * kChunk));
    for (int64_t i = 0; i < kChunk; ++i) {
      Value bit = arith::AndIOp::create(b, loc(), visible,
                                        i32(int64_t(1) << i));
      Value shown = arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::ne,
                                          bit, i32(0));
      masked.push_back(arith::SelectOp::create(
          b, loc(), shown, s[chunk * kChunk + i], minusInfinity));
    }
  }
  return masked;
}

/// A balanced tree of 3-input maxima (max.NaN.f32 a, b, c), the running max
/// one of its leaves. A NaN score makes the max NaN, and with it every
/// exponent of the row, as in SDPA: the row's O and LSE are NaN (max.f32
/// without .NaN would drop it, and a row of NaN scores would pass for a row
/// that sees no key).
Value Lowering::rowMaxTree(ArrayRef<Value> s, Value rowMax) {
  SmallVector<Value> level(s.begin(), s.end());
  level.push_back(rowMax);
  while (level.size() > 1) {
    SmallVector<Value> next;
    for (size_t i = 0; i < level.size(); i += 3) {
      Value m = level[i];
      for (size_t j = i + 1; j < std::min(i + 3, level.size()); ++j)
        m = arith::MaximumFOp::create(b, loc(), m, level[j]);
      next.push_back(m);
    }
    level = std::move(next);
  }
  return level.front();
}

Lowering::RowMaxUpdate Lowering::updateRowMax(Value candidate, Value rowMax,
                                              float scaleLog2, float threshold,
                                              Value factor) {
  float minusInf = -std::numeric_limits<float>::infinity();
  // A row that has seen nothing subtracts 0: exp2(-inf) = 0, not NaN.
  auto subtracted = [&](Value max) -> Value {
    return arith::SelectOp::create(
        b, loc(),
        arith::CmpFOp::create(b, loc(), arith::CmpFPredicate::OEQ, max,
                              f32(minusInf)),
        f32(0.0f), scaledMax(max, scaleLog2, factor));
  };
  // A softmax peeled off as the task's first block starts from the constant
  // -inf: the max is the candidate, and the factor what the rule below
  // gives there (0, or 1 while the candidate is -inf too), in one select
  // instead of an exponential.
  APFloat initial(0.0f);
  if (matchPattern(rowMax, m_ConstantFloat(&initial)) &&
      initial.isNegative() && initial.isInfinity()) {
    Value seen = arith::CmpFOp::create(b, loc(), arith::CmpFPredicate::OGT,
                                       candidate, f32(minusInf));
    Value accScale =
        arith::SelectOp::create(b, loc(), seen, f32(0.0f), f32(1.0f));
    return {candidate, accScale, subtracted(candidate)};
  }
  // The max moves only past the threshold; the first block sets it.
  Value first = arith::CmpFOp::create(b, loc(), arith::CmpFPredicate::OEQ,
                                      rowMax, f32(minusInf));
  // (candidate - max)·scale_log2 > threshold, as candidate - max >
  // threshold / scale_log2: one instruction less per tile. Unordered: a NaN
  // candidate becomes the max (and stays it), so a NaN score in any block
  // poisons the row.
  // (A run-time factor makes the bound threshold / (scale_log2 · factor):
  // 0 for FP8's threshold of 0, else a division LLVM hoists out of the
  // loop.)
  Value bound = f32(threshold / scaleLog2);
  if (factor && threshold != 0.0f)
    bound = arith::DivFOp::create(b, loc(), bound, factor);
  Value grows = arith::CmpFOp::create(
      b, loc(), arith::CmpFPredicate::UGT,
      arith::SubFOp::create(b, loc(), candidate, rowMax), bound);
  Value newMax = arith::SelectOp::create(
      b, loc(), arith::OrIOp::create(b, loc(), first, grows), candidate, rowMax);
  // exp2((m_old - m_new)·scale_log2): exactly 1 when the max stayed, 0 on
  // the first block (the sum it scales is 0); min(NaN, 0) = 0 makes it 1
  // for a row that has seen only hidden keys (-inf - -inf).
  Value accScale = ex2(arith::MinNumFOp::create(
      b, loc(),
      arith::MulFOp::create(b, loc(),
                            arith::SubFOp::create(b, loc(), rowMax, newMax),
                            scaleLog2Value(scaleLog2, factor)),
      f32(0.0f)));
  return {newMax, accScale, subtracted(newMax)};
}

/// Pairs of f32 as vector<2xf32>, the operands of packed f32x2 arithmetic.
static VectorType f32PairType(OpBuilder &b) {
  return VectorType::get({2}, b.getF32Type());
}
static Value splatPair(OpBuilder &b, Location loc, float value) {
  return arith::ConstantOp::create(
      b, loc, DenseElementsAttr::get(f32PairType(b), value));
}
static Value pairOf(OpBuilder &b, Location loc, Value lo, Value hi) {
  return vector::FromElementsOp::create(b, loc, f32PairType(b),
                                        ValueRange{lo, hi});
}
static Value halfOfPair(OpBuilder &b, Location loc, Value pair, int64_t i) {
  return vector::ExtractOp::create(b, loc, pair, ArrayRef<int64_t>{i});
}

/// Exponents two at a time: x = s·scale_log2 - m·scale_log2, then 2^x on
/// MUFU.EX2, or for the emulated pairs on the FMA pipe.
SmallVector<Value> Lowering::rowExponentials(ArrayRef<Value> s,
                                             Value maxScaled, float scaleLog2,
                                             Value factor) {
  auto pairType = f32PairType(b);
  // The scale c: a constant, or times FP8's run-time factor.
  Value scalePair =
      factor ? Value(vector::BroadcastOp::create(
                   b, loc(), pairType, scaleLog2Value(scaleLog2, factor)))
             : splatPair(b, loc(), scaleLog2);
  Value scaleOver256 =
      factor ? Value(arith::MulFOp::create(b, loc(),
                                           scaleLog2Value(scaleLog2, factor),
                                           f32(1.0f / 256.0f)))
             : f32(scaleLog2 / 256.0f);
  Value negMax = vector::BroadcastOp::create(
      b, loc(), pairType, arith::NegFOp::create(b, loc(), maxScaled));
  int64_t pairs = static_cast<int64_t>(s.size()) / 2;
  int64_t emulatedPairs = static_cast<int64_t>(
      std::floor(kernel.exp2EmulationFraction * double(pairs)));
  Value satOffset = exp2SatOffset(maxScaled);
  SmallVector<Value> probs;
  for (int64_t pair = 0; pair < pairs; ++pair) {
    if (isEmulatedExp2(pair, emulatedPairs, pairs)) {
      probs.push_back(softwareExp2(
          pairOf(b, loc(), saturatedExponent(s[2 * pair], satOffset, scaleOver256),
                 saturatedExponent(s[2 * pair + 1], satOffset, scaleOver256))));
      continue;
    }
    Value x = LLVM::FMAOp::create(b, loc(),
                                  pairOf(b, loc(), s[2 * pair], s[2 * pair + 1]),
                                  scalePair, negMax);
    probs.push_back(pairOf(b, loc(), ex2(halfOfPair(b, loc(), x, 0)),
                           ex2(halfOfPair(b, loc(), x, 1))));
  }
  return probs;
}

/// z = sat((x + 127) / 256) of one score, x = s·c - maxScaled, in one
/// saturating FMA: x clamped to [-127, 129] for free (x never exceeds the
/// rescale threshold, < 64, plus FP8's shift). `satOffset` is
/// exp2SatOffset's, `scaleOver256` c / 256.
Value Lowering::saturatedExponent(Value score, Value satOffset,
                                  Value scaleOver256) {
  return inlinePtx("fma.rn.sat.f32", b.getF32Type(),
                   {score, scaleOver256, satOffset});
}

/// (127 - maxScaled) / 256, rounded toward -inf, so that z stays within an
/// ulp of 127/256 for s at the max however large maxScaled is (rounded to
/// nearest, x could reach the clamp's 129, whose exponent overflows the
/// field).
Value Lowering::exp2SatOffset(Value maxScaled) {
  return inlinePtx("fma.rm.f32", b.getF32Type(),
                   {maxScaled, f32(-1.0f / 256.0f), f32(127.0f / 256.0f)});
}

/// Software exp2 on the FMA pipe of z (saturatedExponent's, an f32 or a
/// vector<2xf32> pair — sm_100's packed f32x2 arithmetic, sm_90's scalar):
/// floor(x) from one FMA rounded toward -inf, 2^fraction by the
/// polynomial, 2^floor(x) added to the exponent field. x is clamped to
/// -127, where the result's exponent field reaches 0 (z = 0, a hidden key:
/// exactly 0); an all-hidden row is recognised by its max, never by its
/// sum (NormalizeOp).
Value Lowering::softwareExp2(Value z) {
  Type type = z.getType();
  auto pair = dyn_cast<VectorType>(type);
  Type intType = pair ? Type(VectorType::get({2}, b.getI32Type()))
                      : Type(b.getI32Type());
  auto splat = [&](float value) -> Value {
    return pair ? splatPair(b, loc(), value) : f32(value);
  };
  // t = magic + floor(256·z - 127), rounded toward -inf: packed as one
  // 64-bit operand of fma.rm.ftz.f32x2, scalar as fma.rm.ftz.f32.
  Value shifted;
  if (pair) {
    SmallVector<Value> words;
    for (Value operand : {z, splat(256.0f), splat(kFloorMagic - 127.0f)})
      words.push_back(
          LLVM::BitcastOp::create(b, loc(), b.getI64Type(), operand));
    shifted = LLVM::BitcastOp::create(
        b, loc(), type,
        inlinePtx("fma.rm.ftz.f32x2", b.getI64Type(), words));
  } else {
    shifted = inlinePtx("fma.rm.ftz.f32", type,
                        {z, splat(256.0f), splat(kFloorMagic - 127.0f)});
  }
  Value floorBits = LLVM::BitcastOp::create(b, loc(), intType, shifted);
  // u = floor(x) + 127, f = 256·z - u = x - floor(x).
  Value biased =
      arith::SubFOp::create(b, loc(), shifted, splat(kFloorMagic - 127.0f));
  Value fraction = LLVM::FMAOp::create(b, loc(), z, splat(256.0f),
                                       arith::NegFOp::create(b, loc(), biased));
  Value poly = LLVM::FMAOp::create(b, loc(), splat(kExp2C3), fraction,
                                   splat(kExp2C2));
  poly = LLVM::FMAOp::create(b, loc(), poly, fraction, splat(kExp2C1));
  poly = LLVM::FMAOp::create(b, loc(), poly, fraction, splat(1.0f));
  // floor(x) sits in the low bits of t; shifted by 23 the magic's own bits
  // fall off the top.
  Value exponent = arith::ShLIOp::create(
      b, loc(), floorBits,
      pair ? Value(arith::ConstantOp::create(
                 b, loc(), DenseElementsAttr::get(cast<ShapedType>(intType),
                                                  int32_t(23))))
           : i32(23));
  Value bits = arith::AddIOp::create(
      b, loc(), LLVM::BitcastOp::create(b, loc(), intType, poly), exponent);
  return LLVM::BitcastOp::create(b, loc(), type, bits);
}

/// P: packed, stored over S in 32-word stores. P's column is counted in
/// its elements: two 16-bit ones to a TMEM column (a pair per word,
/// cvt.rn.{f16,bf16}x2.f32), or four of FP8's e4m3 (two pairs per word,
/// cvt.rn.satfinite.e4m3x2.f32 each, its first operand to the upper byte, so
/// that the word holds the elements in order from its low byte, as the MMA
/// reads an 8-bit A from TMEM). FP8's probabilities are at most 2^prob_shift
/// = 256 < 448: satfinite never clips one.
void Lowering::storeProbabilities(ArrayRef<Value> probs, Type probElement,
                                  TmemStoreOp store) {
  Type i32Type = b.getI32Type();
  int64_t bits = probElement.getIntOrFloatBitWidth();
  SmallVector<Value> words;
  if (bits == 8) {
    for (size_t pair = 0; pair + 1 < probs.size(); pair += 2) {
      SmallVector<Value, 4> operands;
      for (size_t i = 0; i < 2; ++i)
        for (int64_t half = 0; half < 2; ++half)
          operands.push_back(halfOfPair(b, loc(), probs[pair + i], half));
      words.push_back(
          LLVM::InlineAsmOp::create(
              b, loc(), i32Type, operands,
              "{\n\t.reg .b16 lo, hi;\n\t"
              "cvt.rn.satfinite.e4m3x2.f32 lo, $2, $1;\n\t"
              "cvt.rn.satfinite.e4m3x2.f32 hi, $4, $3;\n\t"
              "mov.b32 $0, {lo, hi};\n\t}",
              "=r,f,f,f,f", /*has_side_effects=*/false, false,
              LLVM::tailcallkind::TailCallKind::None,
              LLVM::AsmDialectAttr::get(b.getContext(),
                                        LLVM::AsmDialect::AD_ATT),
              ArrayAttr())
              .getResult(0));
    }
  } else {
    auto packedType = VectorType::get({2}, probElement);
    for (Value pair : probs)
      words.push_back(vector::ExtractOp::create(
          b, loc(),
          vector::BitCastOp::create(
              b, loc(), VectorType::get({1}, i32Type),
              arith::TruncFOp::create(b, loc(), packedType, pair)),
          ArrayRef<int64_t>{0}));
  }
  int64_t perWord = 32 / bits;
  Value probsBuffer = lookup(store.getBuffer());
  Value probsFirst = toIndex(lookup(store.getColumn()));
  for (int64_t chunk = 0; chunk * kChunk < int64_t(words.size()); ++chunk) {
    auto begin = words.begin() + chunk * kChunk;
    auto stop = words.begin() + std::min<int64_t>((chunk + 1) * kChunk, words.size());
    Value packed = vector::FromElementsOp::create(
        b, loc(), VectorType::get({int64_t(stop - begin)}, i32Type),
        SmallVector<Value>(begin, stop));
    Value address = tmemAddress(
        probsBuffer,
        arith::AddIOp::create(b, loc(), probsFirst,
                              index(chunk * perWord * kChunk)),
        bits);
    NVVM::Tcgen05StOp::create(b, loc(), false,
                              NVVM::Tcgen05LdStShape::SHAPE_32X32B, address,
                              packed, Value());
  }
}

/// The row sum of the block: a balanced tree of packed adds over the fp32
/// values, then the pair's two halves.
Value Lowering::rowSumTree(ArrayRef<Value> probs) {
  SmallVector<Value> sums(probs.begin(), probs.end());
  while (sums.size() > 1) {
    SmallVector<Value> next;
    for (size_t i = 0; i + 1 < sums.size(); i += 2)
      next.push_back(arith::AddFOp::create(b, loc(), sums[i], sums[i + 1]));
    if (sums.size() % 2)
      next.push_back(sums.back());
    sums = std::move(next);
  }
  return arith::AddFOp::create(b, loc(), halfOfPair(b, loc(), sums.front(), 0),
                               halfOfPair(b, loc(), sums.front(), 1));
}

LogicalResult Lowering::emitLseStore(StoreLseTileOp store, Value row,
                                     Value lse) {
  Value pointer = kernel.globalPointers.lookup(store.getDest());
  auto type = cast<MemRefType>(store.getDest().getType());
  if (!pointer || type.isDynamicDim(1))
    return store.emitOpError()
           << "writes an LSE that is not a kernel parameter with static heads";
  int64_t ratio = store.getGqaRatio();
  Value packed = arith::AddIOp::create(b, loc(), lookup(store.getRow()), row);
  Value position = arith::DivUIOp::create(b, loc(), packed, index(ratio));
  Value head = arith::AddIOp::create(
      b, loc(),
      arith::MulIOp::create(b, loc(), lookup(store.getHead()), index(ratio)),
      arith::RemUIOp::create(b, loc(), packed, index(ratio)));
  Value seqQ = toIndex(kernel.seqQ);
  Value inside = arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::ult,
                                       position, seqQ);
  if (!store.getSpan().empty()) {
    // Varlen: the sequence's positions below its length, from its first
    // row (which the span clamps inside the tensor).
    inside = arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::ult,
                                   position, lookup(store.getSpan()[1]));
    position = arith::AddIOp::create(b, loc(), position,
                                     lookup(store.getSpan()[0]));
  }
  auto branch = scf::IfOp::create(b, loc(), inside, false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(branch.thenBlock());
  storeLseElement(store.getDest(), lookup(store.getBatch()), head, position,
                  lse);
  return success();
}

void Lowering::storeLseElement(Value dest, Value batch, Value head,
                               Value position, Value lse) {
  Value pointer = kernel.globalPointers.lookup(dest);
  auto type = cast<MemRefType>(dest.getType());
  // (batch·q_heads + head)·seq_q + position in 64 bits: indices are 32-bit
  // in the kernel, and this one reaches batch·q_heads·seq_q.
  auto wide = [&](Value value) -> Value {
    return arith::ExtUIOp::create(b, loc(), b.getI64Type(), toI32(value));
  };
  Value element = arith::AddIOp::create(
      b, loc(),
      arith::MulIOp::create(
          b, loc(),
          arith::AddIOp::create(
              b, loc(),
              arith::MulIOp::create(b, loc(), wide(batch),
                                    i64(type.getDimSize(1))),
              wide(head)),
          wide(toIndex(kernel.seqQ))),
      wide(position));
  Value address = LLVM::GEPOp::create(b, loc(), pointer.getType(),
                                      b.getF32Type(), pointer,
                                      ValueRange{element});
  LLVM::StoreOp::create(b, loc(), lse, address, 4);
}

Lowering::RowNormalization Lowering::normalizeRow(Value rowMax, Value rowSum,
                                                  float scaleLog2,
                                                  bool guardPoison,
                                                  Value factor, int64_t shift) {
  float minusInf = -std::numeric_limits<float>::infinity();
  // max·0 is NaN exactly for a NaN or infinite max (a NaN score, or
  // s = +inf, whose exponent is inf - inf): the software exp2's saturation
  // maps NaN to 0, so a row whose poison sat only in its emulated columns
  // would otherwise come out finite (or empty). Here, once per row, it
  // makes O and the LSE NaN; per tile it would cost an instruction and, at
  // ALiBi's register pressure, spills. Without the software exp2, the NaN
  // reaches the sum through ex2.approx and needs no guard.
  Value poison = guardPoison
                     ? Value(arith::MulFOp::create(b, loc(), rowMax, f32(0.0f)))
                     : Value();
  // A row that saw no key (its max never left -inf; its sum may hold the
  // subnormal crumbs of the software exp2): O = 0, LSE = -inf.
  Value sumIsZero = arith::CmpFOp::create(b, loc(), arith::CmpFPredicate::OEQ,
                                          rowSum, f32(0.0f));
  if (poison)
    sumIsZero = arith::AndIOp::create(
        b, loc(), sumIsZero,
        arith::CmpFOp::create(b, loc(), arith::CmpFPredicate::OEQ, poison,
                              f32(0.0f)));
  Value empty = arith::OrIOp::create(
      b, loc(),
      arith::CmpFOp::create(b, loc(), arith::CmpFPredicate::OEQ, rowMax,
                            f32(minusInf)),
      sumIsZero);
  auto withPoison = [&](Value value) -> Value {
    return poison ? Value(arith::AddFOp::create(b, loc(), value, poison))
                  : value;
  };
  Value inverse = arith::SelectOp::create(
      b, loc(), empty, f32(0.0f),
      withPoison(approximate("rcp.approx.ftz.f32", rowSum)));
  // The sum is relative to the softmax's own rounded-up max·scale_log2
  // (less FP8's shift of the probabilities).
  Value logSum = withPoison(lg2(rowSum));
  if (shift)
    logSum = arith::SubFOp::create(b, loc(), logSum, f32(float(shift)));
  Value lse = arith::MulFOp::create(
      b, loc(),
      arith::AddFOp::create(b, loc(), scaledMax(rowMax, scaleLog2, factor),
                            logSum),
      f32(float(M_LN2)));
  return {inverse, arith::SelectOp::create(b, loc(), empty, f32(minusInf), lse)};
}

/// O / sum and the LSE, row by row of the thread's rows; the same for every
/// thread layout (the family says how a thread holds its rows).
LogicalResult Lowering::lowerNormalize(NormalizeOp normalize) {
  const FamilyLowering &family = *kernel.family;
  Value acc = lookup(normalize.getAcc());
  SmallVector<Value, 2> maxima =
      family.rowScalars(*this, lookup(normalize.getRowMax()));
  SmallVector<Value, 2> partials =
      family.rowScalars(*this, lookup(normalize.getRowSum()));
  // Only the software exp2 drops a NaN (normalizeRow).
  bool guardPoison = kernel.exp2EmulationFraction > 0.0;
  SmallVector<Value, 2> inverses, lses;
  // FP8: the descales' factor, the probabilities' shift, and V's descale
  // (out_factor) on O.
  Value factor = normalize.getFactor() ? lookup(normalize.getFactor()) : Value();
  Value outFactor =
      normalize.getOutFactor() ? lookup(normalize.getOutFactor()) : Value();
  for (auto [rowMax, partial] : llvm::zip_equal(maxima, partials)) {
    RowNormalization row = normalizeRow(
        rowMax, family.rowTotal(*this, partial),
        normalize.getScaleLog2().convertToFloat(), guardPoison, factor,
        static_cast<int64_t>(normalize.getProbShift()));
    inverses.push_back(outFactor ? Value(arith::MulFOp::create(
                                       b, loc(), row.inverse, outFactor))
                                 : row.inverse);
    lses.push_back(row.lse);
  }
  auto tile = cast<VectorType>(acc.getType());
  Value scaled = arith::MulFOp::create(
      b, loc(), acc, family.spreadRows(*this, inverses, tile));
  auto outType = cast<VectorType>(convertType(normalize.getOut().getType()));
  // A split-KV part's O stays f32.
  mapping.map(normalize.getOut(),
              outType == scaled.getType()
                  ? scaled
                  : Value(arith::TruncFOp::create(b, loc(), outType, scaled)));
  mapping.map(normalize.getLse(), family.rowVector(*this, lses));
  return success();
}

/// Each of the thread's rows' LSE, written by the thread that writes the
/// row's scalars.
LogicalResult Lowering::lowerLseStore(StoreLseTileOp store) {
  const FamilyLowering &family = *kernel.family;
  std::optional<OpBuilder::InsertionGuard> guard;
  if (Value writer = family.rowWriter(*this)) {
    auto branch = scf::IfOp::create(b, loc(), writer, false);
    guard.emplace(b);
    b.setInsertionPointToStart(branch.thenBlock());
  }
  SmallVector<Value, 2> rows = family.threadRows(*this);
  SmallVector<Value, 2> lses = family.rowScalars(*this, lookup(store.getTile()));
  for (auto [row, lse] : llvm::zip_equal(rows, lses))
    if (failed(emitLseStore(store, row, lse)))
      return failure();
  return success();
}

LogicalResult Lowering::lowerRowMath(Operation *op) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case<SoftcapOp, ScoreModOp>([&](Operation *rewrite) -> LogicalResult {
        // Both rewrite S as it leaves TMEM, inside the fused softmax; the
        // backward's softcap applies to a chunk already in registers.
        auto found = deferred.find(rewrite->getOperand(0));
        if (found == deferred.end()) {
          Value scores = mapping.lookupOrNull(rewrite->getOperand(0));
          if (auto softcap = dyn_cast<SoftcapOp>(rewrite);
              softcap && scores && isa<VectorType>(scores.getType()))
            return lowerElementwiseSoftcap(softcap);
          return rewrite->emitOpError()
                 << "fa4-to-nvvm applies it to S as it leaves TMEM";
        }
        DeferredScores scores = found->second;
        if (auto softcap = dyn_cast<SoftcapOp>(rewrite))
          scores.softcap = softcap;
        else
          scores.scoreMod = cast<ScoreModOp>(rewrite);
        deferred[rewrite->getResult(0)] = scores;
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
      .Case([&](NormalizeOp normalize) { return lowerNormalize(normalize); })
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
      .Case([&](StoreLseTileOp store) { return lowerLseStore(store); })
      .Default([](Operation *) { return failure(); });
}
