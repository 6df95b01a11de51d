//===- Warpgroup.cpp - Hopper's register tiles and wgmma -------------------===//
//
// On sm_90a a consumer warpgroup holds its 64-row tiles in registers, in the
// layout of a wgmma accumulator (PTX ISA, "Matrix fragments for
// wgmma.mma_async .m64nNk16"): thread t of the warpgroup (warp w = t / 32,
// lane l = t % 32) holds element i of its vector<N/2> at
//
//   row    16·w + l/4 + 8·((i/2) mod 2)
//   column 8·(i/4) + 2·(l mod 4) + (i mod 2)
//
// so each thread has two rows (its "halves" j = 0, 1), and the four threads
// of a quad share them. A row vector (tensor<64>) is the thread's two rows'
// values, vector<2>. Row maxima and sums are reduced across the quad with two
// shuffles; the row sum is kept per thread, partial, and reduced once, in
// fa4.normalize (it is only ever scaled and added to, so the partial sums
// carry the same information). The arithmetic on a row's scalars (the max's
// update, the normalization, the LSE store) is the shared lowering's
// (RowMath.cpp); this file holds what follows the layout. The scores' layout is also the layout of the
// A operand of the next wgmma for k-steps of 16 keys, so P feeds O += P·V
// from registers with no data movement, as in FlashAttention-3.
//
// FP8 (e4m3): a wgmma takes 32 bytes of K, k32, and both operands K-major —
// V's stage is V transposed, [head_dim, keys] (the runtime hands V over so,
// docs/FP8.md). The 8-bit A fragment of a k32 step holds, in byte b of the
// thread's word j, row 16·w + l/4 + 8·(j mod 2) and key 16·(j/2) + 4·(l mod
// 4) + b; the scores' layout gives the thread keys 8·g + 2·(l mod 4) + e
// instead. Packing the thread's own probabilities (g, e) into byte
// 2·(g mod 2) + e of word 2·(g/2) + half makes the MMA read key
// c = 8h + 2t + e of each 16 as k-index 4t + 2h + e (t = l mod 4): V's keys
// carry the same permutation within each 16, which the runtime applies
// when it transposes V, and P·V needs no shuffle.
//
//===----------------------------------------------------------------------===//

#include "fa4/Conversion/FA4ToNVVM/Lowering.h"

#include "fa4/Support/Descriptors.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::fa4;
using namespace mlir::fa4::nvvm;

static constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

static StringRef ptxType(Type type) {
  if (isa<Float8E4M3FNType>(type))
    return "e4m3";
  return type.isBF16() ? "bf16" : "f16";
}

/// Bytes of K each wgmma reads from a row: k16 of 16-bit inputs, k32 of
/// 8-bit ones.
static constexpr int64_t kWgmmaKBytes = 32;

/// Elements of K per wgmma of `type`'s inputs.
static int64_t wgmmaK(Type type) {
  return kWgmmaKBytes * 8 / type.getIntOrFloatBitWidth();
}

/// Byte offset of a K-major tile's K-step `step`: 32 bytes along a 128-byte
/// swizzle line, a whole box every four steps.
static int64_t kStepOffset(SmemType type, int64_t step) {
  int64_t byte = step * kWgmmaKBytes;
  return (byte / kSwizzleLineBytes) * boxBytes(type) + byte % kSwizzleLineBytes;
}

Value Lowering::fragmentLane() {
  return arith::RemUIOp::create(b, loc(), roleThread, index(32));
}

Value Lowering::fragmentRow(int64_t half) {
  Value warp = arith::DivUIOp::create(b, loc(), rowInWarpgroup(), index(32));
  Value row = arith::AddIOp::create(
      b, loc(), arith::MulIOp::create(b, loc(), warp, index(16)),
      arith::DivUIOp::create(b, loc(), fragmentLane(), index(4)));
  return half ? Value(arith::AddIOp::create(b, loc(), row, index(8))) : row;
}

Value Lowering::fragmentColumn() {
  return arith::MulIOp::create(
      b, loc(), arith::RemUIOp::create(b, loc(), fragmentLane(), index(4)),
      index(2));
}

/// Element i of a fragment belongs to the thread's row (i / 2) mod 2.
static int64_t halfOf(int64_t i) { return (i / 2) % 2; }
/// Its column, less the thread's 2·(lane mod 4).
static int64_t columnOf(int64_t i) { return 8 * (i / 4) + i % 2; }

/// `value` reduced over the four threads of the quad with `combine`.
Value Lowering::quadReduce(Value value,
                           function_ref<Value(Value, Value)> combine) {
  for (int64_t offset : {1, 2}) {
    Value other = NVVM::ShflOp::create(b, loc(), value.getType(), i32(-1),
                                       value, i32(offset), i32(0x1f),
                                       NVVM::ShflKind::bfly, UnitAttr());
    value = combine(value, other);
  }
  return value;
}

/// The per-element vector [v0, v0, v1, v1, v0, v0, ...] of a row vector.
Value Lowering::spreadRows(Value rows, int64_t elements) {
  SmallVector<int64_t> pattern;
  for (int64_t i = 0; i < elements; ++i)
    pattern.push_back(halfOf(i));
  return vector::ShuffleOp::create(b, loc(), rows, rows, pattern);
}

/// One inline-assembly wgmma group: fence, the MMAs of `body`, commit, and
/// unless `async` the wait for its completion; `body` may use the
/// predicates `zero` (false: the first MMA of an accumulator overwrites it)
/// and `one`. Outputs are the accumulator's floats; with `tied` the first
/// inputs are their old values. An async group's outputs are still being
/// written: only fa4.wgmma_wait's lowering reads them (ptxas tracks the
/// registers of an unfinished wgmma, as it does for CUTLASS's).
static Value warpgroupMma(OpBuilder &b, Location loc, int64_t accumulators,
                          SmallVector<Value> inputs, StringRef constraintsIn,
                          const std::string &body, bool tied, bool async) {
  std::string constraints;
  for (int64_t i = 0; i < accumulators; ++i)
    constraints += (i ? ",=f" : "=f");
  if (tied)
    for (int64_t i = 0; i < accumulators; ++i)
      constraints += "," + std::to_string(i);
  if (!constraintsIn.empty())
    constraints += ("," + constraintsIn).str();
  // The predicates come from a register holding 0 (setp takes a register
  // first operand).
  std::string zero = "$" + std::to_string(accumulators + inputs.size());
  inputs.push_back(LLVM::ConstantOp::create(b, loc, b.getI32Type(),
                                            b.getI32IntegerAttr(0)));
  constraints += ",r";
  SmallVector<Type> types(accumulators, b.getF32Type());
  std::string text = "{\n\t.reg .pred zero, one;\n\tsetp.ne.b32 zero, " + zero +
                     ", 0;\n\tsetp.eq.b32 one, " + zero +
                     ", 0;\n\twgmma.fence.sync.aligned;\n\t" + body +
                     "wgmma.commit_group.sync.aligned;\n\t" +
                     (async ? "" : "wgmma.wait_group.sync.aligned 0;\n\t") +
                     "}";
  return LLVM::InlineAsmOp::create(
             b, loc, LLVM::LLVMStructType::getLiteral(b.getContext(), types),
             inputs, text, constraints, /*has_side_effects=*/true, false,
             LLVM::tailcallkind::TailCallKind::None,
             LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
             ArrayAttr())
      .getResult(0);
}

/// The accumulator list "{$0, $1, ...}" of a wgmma.
std::string Lowering::wgmmaAccumulators(int64_t count) {
  std::string list = "{";
  for (int64_t i = 0; i < count; ++i)
    list += (i ? ", $" : "$") + std::to_string(i);
  return list + "}";
}

Value Lowering::emitWarpgroupMma(int64_t accumulators,
                                 SmallVector<Value> inputs,
                                 StringRef constraintsIn,
                                 const std::string &body, bool tied,
                                 bool async) {
  return warpgroupMma(b, loc(), accumulators, std::move(inputs), constraintsIn,
                      body, tied, async);
}

void Lowering::materializeTruncation(Value value, Value previous) {
  auto found = lazyTruncations.find(value);
  if (found == lazyTruncations.end())
    return;
  LazyTruncation lazy = found->second;
  lazyTruncations.erase(found);
  OpBuilder::InsertionGuard guard(b);
  // At the use when it is in the block of the f32 values; else right after
  // them, where it dominates every use.
  Block *home = lazy.wide.getParentBlock();
  if (b.getInsertionBlock() != home)
    b.setInsertionPointAfterValue(lazy.wide);
  // Pairs packed by cvt.rn.{f16,bf16}x2.f32 as inline assembly that LLVM
  // may not move: it would otherwise carry the f32 values around the loop
  // and convert them at its top (twice P's registers, live beside the new
  // S).
  if (lazy.type.getElementType().isInteger(32))
    return materializeFp8Truncation(value, lazy, previous);
  int64_t count = lazy.type.getNumElements();
  std::string instruction =
      lazy.type.getElementType().isBF16() ? "cvt.rn.bf16x2.f32"
                                          : "cvt.rn.f16x2.f32";
  // Over the P the loop carried in, each word takes the register of the
  // word it replaces (a tied operand): the previous P then stays live in
  // the PTX until here, after the wait for the value MMA that reads it.
  // Without the tie its registers end at that MMA's issue, ptxas hands them
  // to the softmax's temporaries and must wait for the MMA before the first
  // of them — at the top of the softmax, which then no longer overlaps
  // P·V (H200, Nsight Compute: that wait held 13 % of the consumers'
  // samples).
  // (Only where the previous P is visible: the conversion may have moved
  // out to the block of the f32 values, above a loop nested in between.)
  Value previousWords;
  if (previous && previous.getType() == lazy.type &&
      previous.getParentRegion()->isAncestor(b.getInsertionBlock()->getParent()))
    previousWords = vector::BitCastOp::create(
        b, loc(), VectorType::get({count / 2}, b.getI32Type()), previous);
  SmallVector<Value> words;
  for (int64_t i = 0; i < count; i += 2) {
    Value low = vector::ExtractOp::create(b, loc(), lazy.wide,
                                          ArrayRef<int64_t>{i});
    Value high = vector::ExtractOp::create(b, loc(), lazy.wide,
                                           ArrayRef<int64_t>{i + 1});
    SmallVector<Value, 3> operands{high, low};
    std::string constraints = "=r,f,f";
    if (previousWords) {
      operands.push_back(vector::ExtractOp::create(b, loc(), previousWords,
                                                   ArrayRef<int64_t>{i / 2}));
      constraints += ",0";
    }
    words.push_back(
        LLVM::InlineAsmOp::create(
            b, loc(), b.getI32Type(), operands,
            instruction + " $0, $1, $2;", constraints,
            /*has_side_effects=*/true, false,
            LLVM::tailcallkind::TailCallKind::None,
            LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
            ArrayAttr())
            .getResult(0));
  }
  Value packed = vector::FromElementsOp::create(
      b, loc(), VectorType::get({count / 2}, b.getI32Type()), words);
  mapping.map(value, vector::BitCastOp::create(b, loc(), lazy.type, packed));
}

/// FP8 probabilities packed into wgmma's 8-bit A fragment (the module
/// comment): word j of K-step s holds the thread's elements of column
/// groups 4s + 2·(j/2) and 4s + 2·(j/2) + 1 of its row half j mod 2, two
/// each, converted by cvt.rn.satfinite.e4m3x2.f32 (its first operand to the
/// upper byte). The probabilities are at most 2^prob_shift = 256 < 448:
/// satfinite never clips one. Tied to the previous P's words as the 16-bit
/// packing is (materializeTruncation says why).
void Lowering::materializeFp8Truncation(Value value, LazyTruncation lazy,
                                        Value previous) {
  int64_t words = lazy.type.getNumElements();
  Value previousWords;
  if (previous && previous.getType() == lazy.type &&
      previous.getParentRegion()->isAncestor(b.getInsertionBlock()->getParent()))
    previousWords = previous;
  SmallVector<Value> packed;
  for (int64_t word = 0; word < words; ++word) {
    int64_t step = word / 4, j = word % 4;
    SmallVector<Value, 5> operands;
    for (int64_t byte = 0; byte < 4; ++byte) {
      int64_t group = 4 * step + 2 * (j / 2) + byte / 2;
      int64_t element = 4 * group + 2 * (j % 2) + byte % 2;
      operands.push_back(vector::ExtractOp::create(
          b, loc(), lazy.wide, ArrayRef<int64_t>{element}));
    }
    std::string constraints = "=r,f,f,f,f";
    if (previousWords) {
      operands.push_back(vector::ExtractOp::create(b, loc(), previousWords,
                                                   ArrayRef<int64_t>{word}));
      constraints += ",0";
    }
    packed.push_back(
        LLVM::InlineAsmOp::create(
            b, loc(), b.getI32Type(), operands,
            "{\n\t.reg .b16 lo, hi;\n\t"
            "cvt.rn.satfinite.e4m3x2.f32 lo, $2, $1;\n\t"
            "cvt.rn.satfinite.e4m3x2.f32 hi, $4, $3;\n\t"
            "mov.b32 $0, {lo, hi};\n\t}",
            constraints, /*has_side_effects=*/true, false,
            LLVM::tailcallkind::TailCallKind::None,
            LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
            ArrayAttr())
            .getResult(0));
  }
  mapping.map(value, vector::FromElementsOp::create(b, loc(), lazy.type, packed));
}

Value Lowering::wgmmaStageDescriptor(Value buffer, Value count, int64_t offset,
                                     uint64_t bits) {
  auto type = cast<SmemType>(buffer.getType());
  Value stage = ringStage(count, type.getStages());
  Value pointer = smemAt(
      lookup(buffer),
      arith::AddIOp::create(
          b, loc(),
          arith::MulIOp::create(b, loc(), stage, index(type.getStageBytes())),
          index(offset)));
  Value field = arith::AndIOp::create(
      b, loc(),
      arith::ShRUIOp::create(b, loc(), smemAddress(pointer), i32(4)),
      i32(0x3fff));
  return arith::OrIOp::create(
      b, loc(), arith::ExtUIOp::create(b, loc(), b.getI64Type(), field),
      i64(static_cast<int64_t>(bits)));
}

Value Lowering::unpackAccumulators(Value structValue, int64_t count) {
  SmallVector<Value> elements;
  for (int64_t i = 0; i < count; ++i)
    elements.push_back(LLVM::ExtractValueOp::create(
        b, loc(), structValue, ArrayRef<int64_t>{i}));
  return vector::FromElementsOp::create(
      b, loc(), VectorType::get({count}, b.getF32Type()), elements);
}

Value Lowering::rowOfFragment(Value rowVector, int64_t half) {
  // Folded: the first block's row max is then the constant updateRowMax
  // recognizes.
  return b.createOrFold<vector::ExtractOp>(loc(), rowVector,
                                           ArrayRef<int64_t>{half});
}

Value Lowering::fragmentRowVector(Value first, Value second) {
  return vector::FromElementsOp::create(
      b, loc(), VectorType::get({2}, first.getType()),
      ValueRange{first, second});
}

LogicalResult Lowering::lowerWarpgroup(Operation *op) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](WarpgroupScoreMmaOp mma) { return lowerWarpgroupScoreMma(mma); })
      .Case([&](WarpgroupValueMmaOp mma) { return lowerWarpgroupValueMma(mma); })
      .Case([&](WarpgroupWaitOp wait) { return lowerWarpgroupWait(wait); })
      .Case([&](SoftcapOp softcap) { return lowerElementwiseSoftcap(softcap); })
      .Case([&](ScoreModOp scoreMod) -> LogicalResult {
        if (scoreMod.getTransposed())
          return lowerTransposedScoreMod(scoreMod);
        return lowerFragmentScoreMod(scoreMod);
      })
      .Case([&](MaskOp mask) {
        return mask.getTransposed() ? lowerTransposedMask(mask)
                                    : lowerFragmentMask(mask);
      })
      .Case([&](OnlineSoftmaxOp softmax) { return lowerFragmentSoftmax(softmax); })
      .Case([&](CorrectionOp correction) {
        return lowerFragmentCorrection(correction);
      })
      // A single-warp role's row (the backward loader's statistics) is
      // spread over its lanes, as on every family.
      .Case([&](SmemStoreOp store) {
        return store.getRow() && onlyElectedWaits
                   ? lowerSmem(store)
                   : lowerFragmentSmemStore(store);
      })
      .Default([](Operation *) { return failure(); });
}

LogicalResult Lowering::lowerWarpgroupScoreMma(WarpgroupScoreMmaOp mma) {
  SmemType q = mma.getQuery().getType();
  SmemType k = mma.getKey().getType();
  int64_t n = k.getRows();
  int64_t accumulators = n / 2;
  // wgmma's N: a multiple of 8 from 8 to 256 (16 for the P·V steps after).
  if (n < 16 || n > 256 || n % 16 != 0)
    return mma.emitOpError() << "scores " << n
                             << " keys; wgmma takes K tiles of a multiple of "
                                "16 keys from 16 to 256";
  // Q and K are both K-major: 128-byte rows of 64 elements, 8-row atoms 1024
  // bytes apart (the leading offset is unused: 16). The warpgroup's rows
  // start row_offset lines into each box of Q.
  uint64_t bits = wgmma::smemDescriptorTemplate(16, kSwizzleAtomBytes,
                                                wgmma::Swizzle::Bytes128);
  Value qBase = wgmmaStageDescriptor(mma.getQuery(), mma.getQueryCount(),
                                     mma.getRowOffset() * kSwizzleLineBytes,
                                     bits);
  Value kBase = wgmmaStageDescriptor(mma.getKey(), mma.getKeyCount(), 0, bits);
  SmallVector<Value> inputs;
  std::string body;
  int64_t kPerStep = wgmmaK(q.getElementType());
  std::string instruction = "wgmma.mma_async.sync.aligned.m64n" +
                            std::to_string(n) + "k" +
                            std::to_string(kPerStep) + ".f32." +
                            ptxType(q.getElementType()).str() + "." +
                            ptxType(k.getElementType()).str() + " ";
  std::string constraintsIn;
  int64_t steps = llvm::divideCeil(q.getCols(), kPerStep);
  // Past eight steps (head dim 192's twelve) the asm takes the two bases
  // and steps them itself: twelve pairs of descriptor operands, all live
  // at the asm, no longer fit the consumers' registers.
  bool stepsInAsm = steps > 8;
  if (stepsInAsm) {
    inputs = {qBase, kBase};
    constraintsIn = "l,l";
    body += ".reg .b64 qd, kd;\n\t";
  }
  for (int64_t step = 0; step < steps; ++step) {
    int64_t qOffset = kStepOffset(q, step);
    int64_t kOffset = kStepOffset(k, step);
    std::string a, bDesc;
    if (stepsInAsm) {
      std::string qArg = "$" + std::to_string(accumulators);
      std::string kArg = "$" + std::to_string(accumulators + 1);
      body += "add.s64 qd, " + qArg + ", " + std::to_string(qOffset >> 4) +
              ";\n\tadd.s64 kd, " + kArg + ", " +
              std::to_string(kOffset >> 4) + ";\n\t";
      a = "qd";
      bDesc = "kd";
    } else {
      inputs.push_back(arith::AddIOp::create(b, loc(), qBase,
                                             i64(qOffset >> 4)));
      inputs.push_back(arith::AddIOp::create(b, loc(), kBase,
                                             i64(kOffset >> 4)));
      a = "$" + std::to_string(accumulators + 2 * step);
      bDesc = "$" + std::to_string(accumulators + 2 * step + 1);
      constraintsIn += (step ? ",l,l" : "l,l");
    }
    // The first step overwrites the accumulator (scale-d false); 16-bit
    // inputs then take both operands untransposed (8-bit ones have no
    // transpose operands: K-major is their only form).
    body += instruction + wgmmaAccumulators(accumulators) + ", " + a + ", " +
            bDesc + (step ? ", one" : ", zero") +
            (kPerStep == 32 ? ", 1, 1;\n\t" : ", 1, 1, 0, 0;\n\t");
  }
  Value result = warpgroupMma(b, loc(), accumulators, inputs, constraintsIn,
                              body, /*tied=*/false, mma.getAsync());
  mapping.map(mma.getScores(), unpackAccumulators(result, accumulators));
  return success();
}

LogicalResult Lowering::lowerWarpgroupValueMma(WarpgroupValueMmaOp mma) {
  SmemType v = mma.getValue().getType();
  auto probsType = cast<RankedTensorType>(mma.getProbs().getType());
  // A 16-bit V is the B operand with N (head dim) contiguous: MN-major,
  // its 64-column boxes the leading-dimension repeats, 8-key groups the
  // stride. An 8-bit V stage is V transposed, [head_dim, keys]: K-major
  // like K's in Q·Kᵀ (the same descriptors, N = head_dim rows), the only
  // form 8-bit wgmma has.
  bool fp8 = v.getElementType().getIntOrFloatBitWidth() == 8;
  int64_t n = fp8 ? v.getRows() : v.getCols();
  int64_t accumulators = n / 2;
  int64_t keys = probsType.getDimSize(1);
  if (n < 8 || n > 256 || n % 8 != 0 || keys % wgmmaK(v.getElementType()) != 0)
    return mma.emitOpError()
           << "multiplies P of " << keys << " keys by V " << n
           << " wide; wgmma takes N a multiple of 8 up to 256 and whole "
           << wgmmaK(v.getElementType()) << "-key steps";
  uint64_t bits = wgmma::smemDescriptorTemplate(
      fp8 ? 16 : boxBytes(v), kSwizzleAtomBytes, wgmma::Swizzle::Bytes128);
  Value vBase =
      wgmmaStageDescriptor(mma.getValue(), mma.getValueCount(), 0, bits);
  // P's fragment is the A operand's, 4 words per k-step: 16 keys of 16
  // bits, or 32 of 8 packed in the fragment's order (materializeTruncation).
  Value packed = lookup(mma.getProbs());
  if (!fp8)
    packed = vector::BitCastOp::create(
        b, loc(),
        VectorType::get({probsType.getDimSize(1) / 4}, b.getI32Type()),
        packed);
  SmallVector<Value> inputs;
  Value acc = lookup(mma.getAcc());
  for (int64_t i = 0; i < accumulators; ++i)
    inputs.push_back(
        vector::ExtractOp::create(b, loc(), acc, ArrayRef<int64_t>{i}));
  int64_t kPerStep = wgmmaK(v.getElementType());
  std::string instruction = "wgmma.mma_async.sync.aligned.m64n" +
                            std::to_string(n) + "k" +
                            std::to_string(kPerStep) + ".f32." +
                            ptxType(probsType.getElementType()).str() + "." +
                            ptxType(v.getElementType()).str() + " ";
  std::string body;
  std::string constraintsIn;
  int64_t steps = probsType.getDimSize(1) / kPerStep;
  int64_t next = 2 * accumulators;
  for (int64_t step = 0; step < steps; ++step) {
    std::string a = "{";
    for (int64_t w = 0; w < 4; ++w) {
      inputs.push_back(vector::ExtractOp::create(
          b, loc(), packed, ArrayRef<int64_t>{4 * step + w}));
      a += (w ? ", $" : "$") + std::to_string(next++);
      constraintsIn += (constraintsIn.empty() ? "r" : ",r");
    }
    a += "}";
    // Along K: 16 keys' lines of an MN-major V, 32 bytes of a K-major one.
    int64_t offset = fp8 ? kStepOffset(v, step)
                         : step * kWgmmaK * kSwizzleLineBytes;
    inputs.push_back(arith::AddIOp::create(b, loc(), vBase, i64(offset >> 4)));
    constraintsIn += ",l";
    std::string bDesc = "$" + std::to_string(next++);
    // scale-d 1 (accumulate), scales 1; a 16-bit B transposed (MN-major),
    // 8-bit forms having no transpose operands.
    body += instruction + wgmmaAccumulators(accumulators) + ", " + a + ", " +
            bDesc + (fp8 ? ", one, 1, 1;\n\t" : ", one, 1, 1, 1;\n\t");
  }
  Value result = warpgroupMma(b, loc(), accumulators, inputs, constraintsIn,
                              body, /*tied=*/true, mma.getAsync());
  mapping.map(mma.getResult(), unpackAccumulators(result, accumulators));
  return success();
}

/// wgmma.wait_group with the registers it waits for passed through, so that
/// no use of them is scheduled above it.
LogicalResult Lowering::lowerWarpgroupWait(WarpgroupWaitOp wait) {
  Value pending = lookup(wait.getPendingValue());
  auto type = cast<VectorType>(pending.getType());
  int64_t count = type.getNumElements();
  SmallVector<Value> inputs;
  std::string constraints;
  for (int64_t i = 0; i < count; ++i) {
    inputs.push_back(
        vector::ExtractOp::create(b, loc(), pending, ArrayRef<int64_t>{i}));
    constraints += (i ? ",=f" : "=f");
  }
  for (int64_t i = 0; i < count; ++i)
    constraints += "," + std::to_string(i);
  SmallVector<Type> types(count, b.getF32Type());
  Value waited =
      LLVM::InlineAsmOp::create(
          b, loc(), LLVM::LLVMStructType::getLiteral(b.getContext(), types),
          inputs,
          "wgmma.wait_group.sync.aligned " + std::to_string(wait.getPending()) +
              ";",
          constraints, /*has_side_effects=*/true, false,
          LLVM::tailcallkind::TailCallKind::None,
          LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
          ArrayAttr())
          .getResult(0);
  mapping.map(wait.getResult(), unpackAccumulators(waited, count));
  return success();
}

LogicalResult Lowering::lowerFragmentMask(MaskOp mask) {
  MaskModBounds bounds = maskBounds(mask.getMask(), mask.getWindowLeft(),
                                    mask.getWindowRight(), mask.getMaskMod());
  Value s = lookup(mask.getScores());
  auto type = cast<VectorType>(s.getType());
  Value first = lookup(mask.getCol());
  bool hasLow = bounds.bounds.lower.has_value();
  // Each of the thread's rows sees keys [low, high): relative to the
  // thread's first column of the tile, a column c is visible when
  // c - low < high - low, unsigned (one compare per score).
  Value lowRel[2], width[2];
  Value column = fragmentColumn();
  for (int64_t half = 0; half < 2; ++half) {
    Value packed = arith::AddIOp::create(b, loc(), lookup(mask.getRow()),
                                         fragmentRow(half));
    Value position =
        arith::DivUIOp::create(b, loc(), packed, index(mask.getGqaRatio()));
    Value high;
    Value low = emitKeyEdges(position, bounds.bounds, lookup(mask.getSeqQ()),
                             lookup(mask.getSeqK()), high);
    // Edges relative to the thread's columns, clamped into [0, N]: 32-bit
    // and never wrapping.
    int64_t limit = 2 * type.getNumElements();
    auto relative = [&](Value edge) -> Value {
      Value offset = arith::SubIOp::create(
          b, loc(), arith::SubIOp::create(b, loc(), edge, first), column);
      offset = arith::MaxSIOp::create(b, loc(), offset, index(0));
      return toI32(arith::MinSIOp::create(b, loc(), offset, index(limit)));
    };
    Value highRel = relative(high);
    lowRel[half] = hasLow ? relative(low) : i32(0);
    width[half] = arith::MaxSIOp::create(
        b, loc(), arith::SubIOp::create(b, loc(), highRel, lowRel[half]),
        i32(0));
  }
  SmallVector<Value> elements;
  for (int64_t i = 0; i < type.getNumElements(); ++i) {
    int64_t half = halfOf(i);
    Value c = i32(columnOf(i));
    if (hasLow)
      c = arith::SubIOp::create(b, loc(), c, lowRel[half]);
    Value visible = arith::CmpIOp::create(b, loc(), arith::CmpIPredicate::ult,
                                          c, width[half]);
    Value element = vector::ExtractOp::create(b, loc(), s, ArrayRef<int64_t>{i});
    elements.push_back(
        arith::SelectOp::create(b, loc(), visible, element, f32(kMinusInf)));
  }
  // The part of a mask_mod the key bounds do not capture, per score, as
  // Blackwell's softmax runs it (maskScores): on positions clamped into the
  // sequences (keys past seq_k are hidden above, rows past seq_q never
  // stored).
  if (!bounds.exact) {
    Region &region = mask.getMaskMod();
    Value firstKey = arith::AddIOp::create(b, loc(), first, column);
    Value batch = lookup(mask.getBatch());
    RowPositions rows[2];
    for (int64_t half = 0; half < 2; ++half)
      rows[half] = emitRowPositions(
          region, /*queryArgument=*/2,
          arith::AddIOp::create(b, loc(), lookup(mask.getRow()),
                                fragmentRow(half)),
          lookup(mask.getHead()), mask.getGqaRatio(), lookup(mask.getSeqQ()),
          lookup(mask.getSeqK()));
    for (auto [i, element] : llvm::enumerate(elements)) {
      const RowPositions &row = rows[halfOf(i)];
      FailureOr<Value> visible = emitModRegion(
          mask, region,
          {batch, row.queryHead, row.query,
           row.key(b, loc(), firstKey, columnOf(i))},
          mask.getExtras());
      if (failed(visible))
        return failure();
      element = arith::SelectOp::create(b, loc(), *visible, element,
                                        f32(kMinusInf));
    }
  }
  mapping.map(mask.getResult(),
              vector::FromElementsOp::create(b, loc(), type, elements));
  return success();
}

/// The score_mod on a fragment, per score on the scaled score as Blackwell's
/// softmax runs it (applyScoreMod): element i sits in the thread's row
/// halfOf(i) and column fragmentColumn() + columnOf(i) of the tile.
LogicalResult Lowering::lowerFragmentScoreMod(ScoreModOp scoreMod) {
  Value s = lookup(scoreMod.getScores());
  auto type = cast<VectorType>(s.getType());
  Region &body = scoreMod.getBody();
  RowPositions rows[2];
  for (int64_t half = 0; half < 2; ++half)
    rows[half] = emitRowPositions(
        body, /*queryArgument=*/3,
        arith::AddIOp::create(b, loc(), lookup(scoreMod.getRow()),
                              fragmentRow(half)),
        lookup(scoreMod.getHead()), scoreMod.getGqaRatio(),
        lookup(scoreMod.getSeqQ()), lookup(scoreMod.getSeqK()));
  Value batch = lookup(scoreMod.getBatch());
  Value firstKey =
      arith::AddIOp::create(b, loc(), lookup(scoreMod.getCol()), fragmentColumn());
  // FP8's descale factor on the scale, as the softcap's.
  Value scale = f32(scoreMod.getScale().convertToFloat());
  if (Value factor = scoreMod.getFactor())
    scale = arith::MulFOp::create(b, loc(), scale, lookup(factor));
  SmallVector<Value> elements;
  for (int64_t i = 0; i < type.getNumElements(); ++i) {
    const RowPositions &row = rows[halfOf(i)];
    Value scaled = arith::MulFOp::create(
        b, loc(), vector::ExtractOp::create(b, loc(), s, ArrayRef<int64_t>{i}),
        scale, arith::FastMathFlags::contract);
    FailureOr<Value> modded = emitModRegion(
        scoreMod, body,
        {scaled, batch, row.queryHead, row.query,
         row.key(b, loc(), firstKey, columnOf(i))},
        scoreMod.getExtras());
    if (failed(modded))
      return failure();
    elements.push_back(*modded);
  }
  mapping.map(scoreMod.getResult(),
              vector::FromElementsOp::create(b, loc(), type, elements));
  return success();
}

Lowering::RowMaxUpdate
Lowering::updateFragmentRowMax(ArrayRef<Value> elements, int64_t half,
                               Value previous, float scaleLog2,
                               float threshold, Value factor) {
  Value candidate = previous;
  for (int64_t i = 0; i < int64_t(elements.size()); ++i)
    if (halfOf(i) == half)
      candidate = arith::MaximumFOp::create(b, loc(), candidate, elements[i]);
  candidate = quadReduce(candidate, [&](Value x, Value y) -> Value {
    return arith::MaximumFOp::create(b, loc(), x, y);
  });
  return updateRowMax(candidate, previous, scaleLog2, threshold, factor);
}

LogicalResult Lowering::lowerFragmentSoftmax(OnlineSoftmaxOp softmax) {
  Value s = lookup(softmax.getScores());
  auto type = cast<VectorType>(s.getType());
  int64_t count = type.getNumElements();
  float scaleLog2 = softmax.getScaleLog2().convertToFloat();
  float threshold = softmax.getRescaleThreshold().convertToFloat();
  Value oldMax = lookup(softmax.getRowMax());
  Value oldSum = lookup(softmax.getRowSum());
  SmallVector<Value> elements;
  for (int64_t i = 0; i < count; ++i)
    elements.push_back(
        vector::ExtractOp::create(b, loc(), s, ArrayRef<int64_t>{i}));
  // FP8: the descales' run-time factor on the scale, and the
  // probabilities lifted by 2^prob_shift into e4m3's range.
  Value factor =
      softmax.getFactor() ? lookup(softmax.getFactor()) : Value();
  float shift = static_cast<float>(softmax.getProbShift());
  RowMaxUpdate rows[2];
  for (int64_t half = 0; half < 2; ++half)
    rows[half] = updateFragmentRowMax(elements, half, rowOfFragment(oldMax, half),
                                      scaleLog2, threshold, factor);
  Value scale = scaleLog2Value(scaleLog2, factor);
  // -max·c (+ the shift), made where a row's first exponent needs it.
  Value offsets[2];
  auto offsetOf = [&](int64_t half) {
    if (!offsets[half])
      offsets[half] =
          shift != 0.0f
              ? Value(arith::SubFOp::create(b, loc(), f32(shift),
                                            rows[half].maxScaled))
              : Value(arith::NegFOp::create(b, loc(), rows[half].maxScaled));
    return offsets[half];
  };
  // The software exp2 (exp2-emulation-fraction; by default on sm_90a 1/8
  // at 16-bit head dims up to 64, none elsewhere)
  // for a share of each row's exponentials, spread over the row as on
  // sm_100a: its offset (127 - maxScaled + shift) / 256 per row, made where
  // the row's first emulated exponential needs it.
  int64_t perRow = count / 2;
  int64_t emulated = static_cast<int64_t>(
      std::floor(kernel.exp2EmulationFraction * double(perRow)));
  Value scaleOver256, satOffsets[2];
  auto satOffsetOf = [&](int64_t half) {
    if (!satOffsets[half])
      satOffsets[half] = exp2SatOffset(
          shift != 0.0f ? Value(arith::SubFOp::create(
                              b, loc(), rows[half].maxScaled, f32(shift)))
                        : rows[half].maxScaled);
    return satOffsets[half];
  };
  Value sums[2] = {f32(0.0f), f32(0.0f)};
  int64_t seen[2] = {0, 0};
  SmallVector<Value> probs;
  for (int64_t i = 0; i < count; ++i) {
    int64_t half = halfOf(i);
    Value p;
    if (isEmulatedExp2(seen[half]++, emulated, perRow)) {
      if (!scaleOver256)
        scaleOver256 = arith::MulFOp::create(b, loc(), scale,
                                             f32(1.0f / 256.0f));
      p = softwareExp2(
          saturatedExponent(elements[i], satOffsetOf(half), scaleOver256));
    } else {
      p = ex2(LLVM::FMAOp::create(b, loc(), elements[i], scale,
                                  offsetOf(half)));
    }
    sums[half] = arith::AddFOp::create(b, loc(), sums[half], p);
    probs.push_back(p);
  }
  auto probsType = cast<VectorType>(convertType(softmax.getProbs().getType()));
  Value p32 = vector::FromElementsOp::create(
      b, loc(), VectorType::get({count}, b.getF32Type()), probs);
  lazyTruncations[softmax.getProbs()] = {p32, probsType};
  mapping.map(softmax.getNewRowMax(),
              fragmentRowVector(rows[0].newMax, rows[1].newMax));
  // The thread's partial sums (module comment).
  Value newSum[2];
  for (int64_t half = 0; half < 2; ++half)
    newSum[half] = LLVM::FMAOp::create(b, loc(), rowOfFragment(oldSum, half),
                                       rows[half].accScale, sums[half]);
  mapping.map(softmax.getNewRowSum(), fragmentRowVector(newSum[0], newSum[1]));
  mapping.map(softmax.getAccScale(),
              fragmentRowVector(rows[0].accScale, rows[1].accScale));
  return success();
}

LogicalResult Lowering::lowerFragmentCorrection(CorrectionOp correction) {
  Value acc = lookup(correction.getAcc());
  Value scale = lookup(correction.getAccScale());
  auto type = cast<VectorType>(acc.getType());
  // Conditional rescaling: a warp whose rows all kept their max skips the
  // multiplies (most blocks, with the threshold).
  Value moved = arith::OrIOp::create(
      b, loc(),
      arith::CmpFOp::create(b, loc(), arith::CmpFPredicate::ONE,
                            rowOfFragment(scale, 0), f32(1.0f)),
      arith::CmpFOp::create(b, loc(), arith::CmpFPredicate::ONE,
                            rowOfFragment(scale, 1), f32(1.0f)));
  Value any = NVVM::VoteSyncOp::create(b, loc(), b.getI1Type(), i32(-1), moved,
                                       NVVM::VoteSyncKind::any);
  auto branch = scf::IfOp::create(b, loc(), TypeRange{type}, any, true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(branch.thenBlock());
    scf::YieldOp::create(
        b, loc(),
        ValueRange{arith::MulFOp::create(
            b, loc(), acc, spreadRows(scale, type.getNumElements()))});
    b.setInsertionPointToStart(branch.elseBlock());
    scf::YieldOp::create(b, loc(), ValueRange{acc});
  }
  mapping.map(correction.getResult(), branch.getResult(0));
  return success();
}

/// An f32 register tile (the backward's dQ part, for a TMA reduction) in
/// the layout the TMA reads: boxes of 32 columns, one 128-byte line a row,
/// its 16-byte chunks swizzled with the row's phase. The fragment's pairs of
/// adjacent columns are 8 bytes of one chunk: a warp's store covers 8 rows
/// of 4 pairs, whose swizzled chunks fall in distinct banks.
LogicalResult Lowering::lowerFragmentSmemStoreF32(SmemStoreOp store) {
  SmemType type = store.getBuffer().getType();
  Value values = lookup(store.getTile());
  int64_t elements = cast<VectorType>(values.getType()).getNumElements();
  Value stageBase = smemStage(store.getBuffer(), store.getCount());
  int64_t columns = boxColumns(type);
  SmallVector<Value, 2> rows = kernel.family->threadRows(*this);
  for (const FamilyLowering::ElementRun &run :
       kernel.family->elementRuns(*this, elements)) {
    if (run.length != 2)
      return store.emitOpError()
             << "fa4-to-nvvm stages f32 fragments as pairs of columns on "
                "sm_90a";
    Value row = rows[run.half];
    Value box = arith::DivUIOp::create(b, loc(), run.column, index(columns));
    Value inBox = arith::RemUIOp::create(b, loc(), run.column, index(columns));
    Value chunk = arith::XOrIOp::create(
        b, loc(), arith::DivUIOp::create(b, loc(), inBox, index(4)),
        arith::RemUIOp::create(b, loc(), row, index(8)));
    Value offset = arith::AddIOp::create(
        b, loc(),
        arith::AddIOp::create(
            b, loc(),
            arith::MulIOp::create(b, loc(), box, index(boxBytes(type))),
            arith::MulIOp::create(b, loc(), row, index(kSwizzleLineBytes))),
        arith::AddIOp::create(
            b, loc(), arith::MulIOp::create(b, loc(), chunk, index(16)),
            arith::MulIOp::create(
                b, loc(), arith::RemUIOp::create(b, loc(), inBox, index(4)),
                index(4))));
    Value pair = vector::ExtractStridedSliceOp::create(
        b, loc(), values, ArrayRef<int64_t>{run.first}, ArrayRef<int64_t>{2},
        ArrayRef<int64_t>{1});
    LLVM::StoreOp::create(b, loc(), pair, smemAt(stageBase, offset), 8);
  }
  // Generic-proxy writes a TMA (async proxy) reads: fenced before the
  // barrier that hands them over.
  stagedForAsyncProxy = true;
  return success();
}

/// A register tile (the staged half of O, the backward's dSᵀ) in the
/// 128-byte-swizzled layout TMA and wgmma read, with stmatrix (as CUTLASS's
/// and FlashAttention-3's epilogues): a warp's 16 rows of the fragment are
/// 8 × 8 matrices — (column group g, row half h) in the thread's word
/// 2g + h, the accumulator's layout — stored four at a time. Lane L gives
/// the row address of matrix L / 8 of the four, its row L mod 8, whose
/// 16-byte chunk g is swizzled with that row's phase: one address per
/// instruction (the forward's pairs of stores needed one per word).
LogicalResult Lowering::lowerFragmentSmemStore(SmemStoreOp store) {
  SmemType type = store.getBuffer().getType();
  if (store.getRow() || store.getColumn())
    return store.emitOpError()
           << "fa4-to-nvvm stages whole register tiles only on sm_90a";
  Value values = lookup(store.getTile());
  auto vector = cast<VectorType>(values.getType());
  if (vector.getElementTypeBitWidth() == 32)
    return lowerFragmentSmemStoreF32(store);
  if (vector.getElementTypeBitWidth() != 16 || vector.getNumElements() % 8)
    return store.emitOpError()
           << "fa4-to-nvvm stages tiles of 16-bit elements, whole 8-column "
              "groups, on sm_90a; got "
           << vector;
  Value stageBase = smemStage(store.getBuffer(), store.getCount());
  int64_t words = vector.getNumElements() / 2;
  Value packed = vector::BitCastOp::create(
      b, loc(), VectorType::get({words}, b.getI32Type()), values);
  Value lane = toI32(fragmentLane());
  Value matrix = arith::DivUIOp::create(b, loc(), lane, i32(8));
  Value phase = arith::RemUIOp::create(b, loc(), lane, i32(8));
  // The lane's row: the warp's 16, then half (matrix mod 2), then L mod 8.
  Value warp = toI32(
      arith::DivUIOp::create(b, loc(), rowInWarpgroup(), index(32)));
  Value row = arith::AddIOp::create(
      b, loc(),
      arith::AddIOp::create(
          b, loc(), arith::MulIOp::create(b, loc(), warp, i32(16)),
          arith::MulIOp::create(
              b, loc(), arith::RemUIOp::create(b, loc(), matrix, i32(2)),
              i32(8))),
      phase);
  Value rowBytes = arith::MulIOp::create(b, loc(), row, i32(kSwizzleLineBytes));
  Value groupOfMatrix = arith::DivUIOp::create(b, loc(), matrix, i32(2));
  for (int64_t first = 0; first < words; first += 4) {
    // Column group of the lane's matrix: 2 per instruction.
    Value group = arith::AddIOp::create(b, loc(), groupOfMatrix,
                                        i32(first / 2));
    Value box = arith::DivUIOp::create(b, loc(), group, i32(8));
    Value chunk = arith::XOrIOp::create(
        b, loc(), arith::RemUIOp::create(b, loc(), group, i32(8)), phase);
    Value offset = arith::AddIOp::create(
        b, loc(),
        arith::AddIOp::create(
            b, loc(), arith::MulIOp::create(b, loc(), box, i32(boxBytes(type))),
            rowBytes),
        arith::ShLIOp::create(b, loc(), chunk, i32(4)));
    SmallVector<Value> operands{smemAddress(smemAt(stageBase, offset))};
    int64_t count = std::min<int64_t>(4, words - first);
    std::string registers;
    for (int64_t w = 0; w < count; ++w) {
      operands.push_back(vector::ExtractOp::create(
          b, loc(), packed, ArrayRef<int64_t>{first + w}));
      registers += (w ? ", $" : "$") + std::to_string(w + 1);
    }
    std::string constraints = "r";
    for (int64_t w = 0; w < count; ++w)
      constraints += ",r";
    LLVM::InlineAsmOp::create(
        b, loc(), TypeRange(), operands,
        "stmatrix.sync.aligned.m8n8.x" + std::to_string(count) +
            ".shared.b16 [$0], {" + registers + "};",
        constraints, /*has_side_effects=*/true, false,
        LLVM::tailcallkind::TailCallKind::None,
        LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
        ArrayAttr());
  }
  stagedForAsyncProxy = true;
  return success();
}
LogicalResult
Lowering::lowerWarpgroupTransposedMma(WarpgroupTransposedMmaOp mma) {
  SmemType a = mma.getLhs().getType(), bType = mma.getRhs().getType();
  int64_t n = cast<RankedTensorType>(mma.getResult().getType()).getDimSize(1);
  int64_t firstBox = mma.getColumnOffset() / kBoxColumns;
  int64_t accumulators = n / 2;
  // Both operands MN-major, as the forward's V: rows of the K dimension
  // (keys), 128-byte swizzled lines of M (A: 64 queries, one box) or N (B:
  // the head dim, 64-column boxes the leading-dimension repeats); 8-row
  // groups 1024 bytes apart. B starts row_offset lines into each box.
  uint64_t bBits = wgmma::smemDescriptorTemplate(
      boxBytes(bType), kSwizzleAtomBytes, wgmma::Swizzle::Bytes128);
  Value bBase = wgmmaStageDescriptor(
      mma.getRhs(), mma.getRhsCount(),
      firstBox * boxBytes(bType) + mma.getRowOffset() * kSwizzleLineBytes,
      bBits);
  // The A operand's stages along K: the lhs, then `then`'s; each its own
  // descriptor, 16 rows (keys) a step.
  SmallVector<std::pair<Value, int64_t>, 2> parts;
  for (auto [buffer, count] : {std::pair{mma.getLhs(), mma.getLhsCount()},
                               {mma.getLhsNext(), mma.getLhsNextCount()}}) {
    if (!buffer)
      continue;
    auto type = cast<SmemType>(buffer.getType());
    uint64_t aBits = wgmma::smemDescriptorTemplate(
        boxBytes(type), kSwizzleAtomBytes, wgmma::Swizzle::Bytes128);
    parts.push_back(
        {wgmmaStageDescriptor(buffer, count, 0, aBits), type.getRows()});
  }
  std::string instruction = "wgmma.mma_async.sync.aligned.m64n" +
                            std::to_string(n) + "k16.f32." +
                            ptxType(a.getElementType()).str() + "." +
                            ptxType(bType.getElementType()).str() + " ";
  SmallVector<Value> inputs;
  std::string body, constraintsIn;
  int64_t step = 0;
  for (auto [aBase, rows] : parts)
    for (int64_t k = 0; k < rows / kWgmmaK; ++k, ++step) {
      inputs.push_back(arith::AddIOp::create(
          b, loc(), aBase, i64((k * kWgmmaK * kSwizzleLineBytes) >> 4)));
      inputs.push_back(arith::AddIOp::create(
          b, loc(), bBase, i64((step * kWgmmaK * kSwizzleLineBytes) >> 4)));
      constraintsIn += (step ? ",l,l" : "l,l");
      std::string aDesc = "$" + std::to_string(accumulators + 2 * step);
      std::string bDesc = "$" + std::to_string(accumulators + 2 * step + 1);
      // The first step overwrites the accumulator; both operands
      // transposed (MN-major).
      body += instruction + wgmmaAccumulators(accumulators) + ", " + aDesc +
              ", " + bDesc + (step ? ", one" : ", zero") + ", 1, 1, 1, 1;\n\t";
    }
  Value result = emitWarpgroupMma(accumulators, inputs, constraintsIn, body,
                                  /*tied=*/false, mma.getAsync());
  mapping.map(mma.getResult(), unpackAccumulators(result, accumulators));
  return success();
}

