//===- TensorCore.cpp - tensor memory and tcgen05.mma ----------------------===//

#include "fa4/Conversion/FA4ToNVVM/Lowering.h"

#include "fa4/Target/Blackwell/Chip.h"
#include "fa4/Support/Descriptors.h"
#include "fa4/Target/Blackwell/ScheduleConfig.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::fa4;
using namespace mlir::fa4::nvvm;

/// Bytes of K per tcgen05.mma: 16 elements of kind::f16, 32 of
/// kind::f8f6f4's 8-bit types.
static constexpr int64_t kMmaKBytes = 32;
/// K elements per tcgen05.mma of `type`'s elements.
static int64_t mmaK(Type type) {
  return kMmaKBytes * 8 / type.getIntOrFloatBitWidth();
}
/// Bytes from one 8-row group of a swizzled tile to the next.
static constexpr uint32_t kSwizzleAtomBytes = 1024;

/// A TMEM row of `words` 32-bit columns as the (first, count) pieces
/// tcgen05.ld / tcgen05.st move: powers of two from 1 to 128, largest first.
static SmallVector<std::pair<int64_t, int64_t>> tmemPieces(int64_t words) {
  SmallVector<std::pair<int64_t, int64_t>> pieces;
  int64_t first = 0;
  for (int64_t count = 128; count >= 1; count /= 2)
    while (words - first >= count) {
      pieces.push_back({first, count});
      first += count;
    }
  return pieces;
}

/// S tiles are read by the fused softmax instead (RowMath.cpp).
static bool isDeferredScores(TmemLoadOp load) {
  auto role = load->getParentOfType<RoleOp>();
  bool softmax = false;
  role.walk([&](OnlineSoftmaxOp) { softmax = true; });
  TmemType type = load.getBuffer().getType();
  // The fused softmax reads the whole buffer from its first column.
  return softmax && type.getElementType().isF32() &&
         cast<ShapedType>(load.getType()).getDimSize(1) == type.getCols() &&
         matchPattern(load.getColumn(), m_Zero());
}

LogicalResult Lowering::lowerTmem(Operation *op) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](TmemLoadOp load) -> LogicalResult {
        if (isDeferredScores(load)) {
          DeferredScores scores;
          scores.scoresColumn = lookup(load.getBuffer());
          deferred[load.getResult()] = scores;
          return success();
        }
        auto tile = cast<ShapedType>(load.getType());
        int64_t bits = tile.getElementTypeBitWidth();
        int64_t words = tile.getDimSize(1) * bits / 32;
        // Piece `first` (in 32-bit columns) from element column `column`.
        auto address = [&](int64_t first) {
          Value column = lookup(load.getColumn());
          if (first)
            column = arith::AddIOp::create(b, loc(), column,
                                           index(first * 32 / bits));
          return tmemAddress(lookup(load.getBuffer()), column, bits);
        };
        // tcgen05.ld moves a power of two of columns: a width like head
        // dim 96's goes as 64 + 32.
        SmallVector<Value> parts;
        for (auto [first, count] : tmemPieces(words)) {
          Type partType =
              count == 1 ? Type(b.getI32Type())
                         : Type(VectorType::get({count}, b.getI32Type()));
          Value at = address(first);
          Value raw = NVVM::Tcgen05LdOp::create(
              b, loc(), partType, false, NVVM::Tcgen05LdStShape::SHAPE_32X32B,
              at, Value());
          raw = waitForTmemLoad(raw);
          if (count == 1)
            parts.push_back(raw);
          else
            for (int64_t i = 0; i < count; ++i)
              parts.push_back(vector::ExtractOp::create(
                  b, loc(), raw, ArrayRef<int64_t>{i}));
        }
        Value raw = vector::FromElementsOp::create(
            b, loc(), VectorType::get({words}, b.getI32Type()), parts);
        mapping.map(load.getResult(),
                    vector::BitCastOp::create(b,
                        loc(), cast<VectorType>(convertType(load.getType())), raw));
        return success();
      })
      .Case([&](TmemStoreOp store) -> LogicalResult {
        if (probsInTmem.contains(store.getTile())) {
          // The fused softmax stored P chunk by chunk; wait for the stores.
          NVVM::Tcgen05WaitOp::create(b, loc(), NVVM::Tcgen05WaitKind::STORE);
          return success();
        }
        auto tile = cast<ShapedType>(store.getTile().getType());
        int64_t bits = tile.getElementTypeBitWidth();
        int64_t words = tile.getDimSize(1) * bits / 32;
        // Piece `first` (in 32-bit columns) from element column `column`.
        auto address = [&](int64_t first) {
          Value column = lookup(store.getColumn());
          if (first)
            column = arith::AddIOp::create(b, loc(), column,
                                           index(first * 32 / bits));
          return tmemAddress(lookup(store.getBuffer()), column, bits);
        };
        Value raw = vector::BitCastOp::create(b,
            loc(), VectorType::get({words}, b.getI32Type()),
            lookup(store.getTile()));
        for (auto [first, count] : tmemPieces(words)) {
          Value part =
              count == 1
                  ? Value(vector::ExtractOp::create(b, loc(), raw,
                                                    ArrayRef<int64_t>{first}))
                  : Value(vector::ExtractStridedSliceOp::create(
                        b, loc(), raw, ArrayRef<int64_t>{first},
                        ArrayRef<int64_t>{count}, ArrayRef<int64_t>{1}));
          Value at = address(first);
          NVVM::Tcgen05StOp::create(b, loc(), false,
                                    NVVM::Tcgen05LdStShape::SHAPE_32X32B, at,
                                    part, Value());
        }
        auto loop = dyn_cast<scf::ForOp>(store->getParentOp());
        if (!loop || !storesWaitAfterLoop(loop))
          NVVM::Tcgen05WaitOp::create(b, loc(), NVVM::Tcgen05WaitKind::STORE);
        return success();
      })
      // The owning warp allocates in the kernel prologue, before the CTA
      // barrier that lets every role read the TMEM base.
      .Case<TmemAllocColumnsOp, TmemRelinquishOp>(
          [](Operation *) { return success(); })
      .Case([&](TmemDeallocOp dealloc) -> LogicalResult {
        Value base = LLVM::IntToPtrOp::create(b,
            loc(), LLVM::LLVMPointerType::get(b.getContext(), 6),
            kernel.tmemBase);
        // In an issuing role only the elected thread waited for the other
        // roles to be done with TMEM: the warp meets before the
        // warp-collective (.aligned) dealloc.
        if (onlyElectedWaits)
          NVVM::SyncWarpOp::create(b, loc(), i32(-1));
        NVVM::Tcgen05DeallocOp::create(b, loc(), base,
                                       i32(dealloc.getColumns()),
                                       kernel.ctaPair
                                           ? NVVM::CTAGroupKind::CTA_2
                                           : NVVM::CTAGroupKind::CTA_1);
        return success();
      })
      .Default([](Operation *) { return failure(); });
}

static tcgen05::Element elementOf(Type type) {
  return type.isBF16() ? tcgen05::Element::BF16 : tcgen05::Element::F16;
}

/// The MMA's kind and instruction descriptor for A and B of `a`'s and
/// `b`'s element types (16-bit: kind::f16; FP8's e4m3: kind::f8f6f4).
static std::pair<NVVM::Tcgen05MMAKind, uint32_t>
mmaKindAndDescriptor(Type a, Type b, tcgen05::Major aMajor,
                     tcgen05::Major bMajor, uint32_t m, uint32_t n) {
  if (a.getIntOrFloatBitWidth() == 8)
    return {NVVM::Tcgen05MMAKind::F8F6F4,
            tcgen05::instructionDescriptorF8F6F4(
                tcgen05::Element8::E4M3, tcgen05::Element8::E4M3, aMajor,
                bMajor, m, n)};
  return {NVVM::Tcgen05MMAKind::F16,
          tcgen05::instructionDescriptorF16(elementOf(a), elementOf(b), aMajor,
                                            bMajor, m, n)};
}

LogicalResult Lowering::lowerMma(Operation *op) {
  auto tmemPointer = [&](Value address) {
    return LLVM::IntToPtrOp::create(b,
        loc(), LLVM::LLVMPointerType::get(b.getContext(), 6), address);
  };
  // The shared address of ring item `count`, as an i64 descriptor field.
  auto stageAddress = [&](Value buffer, Value count) -> Value {
    auto type = cast<SmemType>(buffer.getType());
    Value stage = ringStage(count, type.getStages());
    Value pointer = smemAt(lookup(buffer), arith::MulIOp::create(b,
                                               loc(), stage,
                                               index(ctaStageBytes(buffer))));
    return smemAddress(pointer);
  };
  // template | (address >> 4): the stage's descriptor. Shared memory ends
  // below 256 KB, so the 14-bit address field never carries and a step
  // inside the tile is a plain add of offset >> 4 to the descriptor, which
  // keeps one 64-bit register live per operand in the MMA warp.
  auto baseDescriptor = [&](uint64_t bits, Value address) -> Value {
    Value field = arith::AndIOp::create(b,
        loc(), arith::ShRUIOp::create(b, loc(), address, i32(4)), i32(0x3fff));
    return arith::OrIOp::create(b,
        loc(), arith::ExtUIOp::create(b, loc(), b.getI64Type(), field),
        i64(static_cast<int64_t>(bits)));
  };
  auto descriptor = [&](Value base, int64_t offset) -> Value {
    if (offset == 0)
      return base;
    return arith::AddIOp::create(b, loc(), base, i64(offset >> 4));
  };
  auto kind = NVVM::Tcgen05MMAKind::F16;
  // CTA pairs: the even CTA issues M = 256 over both CTAs' rows, A's rows
  // 128-255 and B's second half of N from the peer's shared memory at the
  // same offsets, D in both CTAs' TMEM (the PTX ISA's cta_group::2 data
  // path; CUTLASS's 2-SM atoms lay the operands out so).
  bool pair = kernel.ctaPair;
  auto group = pair ? NVVM::CTAGroupKind::CTA_2 : NVVM::CTAGroupKind::CTA_1;
  int64_t pairRows = pair ? 2 : 1;
  auto collector = NVVM::Tcgen05MMACollectorOp::DISCARD;

  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](ScoreMmaAsyncOp mma) -> LogicalResult {
        SmemType q = mma.getQuery().getType();
        SmemType k = mma.getKey().getType();
        Value qAddress = stageAddress(mma.getQuery(), mma.getQueryCount());
        Value kAddress = stageAddress(mma.getKey(), mma.getKeyCount());
        Value scores = tmemPointer(arith::AddIOp::create(b,
            loc(), kernel.tmemBase, lookup(mma.getScores())));
        // Q and K are both K-major: 128-byte rows of 64 16-bit or 128 8-bit
        // elements, 8-row atoms 1024 bytes apart; the leading offset is
        // unused (16).
        uint64_t operand = tcgen05::smemDescriptorTemplate(
            16, kSwizzleAtomBytes, tcgen05::Swizzle::Bytes128);
        auto [scoreKind, instruction] = mmaKindAndDescriptor(
            q.getElementType(), k.getElementType(), tcgen05::Major::K,
            tcgen05::Major::K, pairRows * q.getRows(), k.getRows());
        // A pair's CTA holds half of K's keys: its boxes are half as tall.
        int64_t keyBoxBytes =
            isPairHalf(mma.getKey()) ? boxBytes(k) / 2 : boxBytes(k);
        Value idesc = i32(static_cast<int32_t>(instruction));
        int64_t stepK = mmaK(q.getElementType());
        int64_t steps = llvm::divideCeil(q.getCols(), stepK);
        int64_t elementBytes = q.getElementType().getIntOrFloatBitWidth() / 8;
        int64_t lineColumns = boxColumns(q);
        Value qBase = baseDescriptor(operand, qAddress);
        Value kBase = baseDescriptor(operand, kAddress);
        // Q's descriptors are the same for every K/V block of a task (and
        // K's for every block in the same stage), so LLVM hoists each
        // step's out of the loop: past eight steps (head dim 192's twelve,
        // for two Q tiles) they no longer fit the MMA warp's registers and
        // ptxas spills. Re-made per MMA there.
        if (steps > 8) {
          qBase = rematerializeAtRoleEntry(qBase);
          kBase = rematerializeAtRoleEntry(kBase);
        }
        ifElected([&] {
          for (int64_t step = 0; step < steps; ++step) {
            // Step along K: 32 bytes inside a swizzle line, a whole box
            // every line's columns (64 of 16 bits, 128 of 8).
            int64_t column = step * stepK;
            int64_t offset = (column / lineColumns) * boxBytes(q) +
                             (column % lineColumns) * elementBytes;
            int64_t keyOffset = (column / lineColumns) * keyBoxBytes +
                                (column % lineColumns) * elementBytes;
            Value enable = LLVM::ConstantOp::create(b,
                loc(), b.getI1Type(), b.getBoolAttr(step > 0));
            NVVM::Tcgen05MMAOp::create(b,
                loc(), scoreKind, group, collector, false, scores,
                descriptor(qBase, offset), descriptor(kBase, keyOffset), idesc,
                enable, Value(),
                Value());
          }
        });
        return success();
      })
      .Case([&](ValueMmaAsyncOp mma) -> LogicalResult {
        TmemType probs = mma.getProbs().getType();
        SmemType v = mma.getValue().getType();
        TmemType acc = mma.getAcc().getType();
        Value vAddress = stageAddress(mma.getValue(), mma.getValueCount());
        Value output = tmemPointer(
            arith::AddIOp::create(b, loc(), kernel.tmemBase, lookup(mma.getAcc())));
        Value probsColumn =
            arith::AddIOp::create(b, loc(), kernel.tmemBase, lookup(mma.getProbs()));
        // V is the B operand with N (head dim) contiguous: MN-major. Its
        // 64-column boxes are the leading-dimension repeats (16384 bytes
        // apart), 8-key groups the stride (1024).
        uint64_t operand = tcgen05::smemDescriptorTemplate(
            boxBytes(v), kSwizzleAtomBytes, tcgen05::Swizzle::Bytes128);
        // N covers whole swizzle atoms of V (64 16-bit columns, 128 8-bit
        // ones), the only MN-major 128-byte-swizzled B operand NVIDIA's
        // kernels issue: at head dim 96 N = 128, whose last 32 columns
        // multiply the zeros TMA filled past the tensor's edge, into
        // accumulator columns fa4-allocate-tmem reserves and nothing reads
        // (FP8's V of 64 columns the same way). tcgen05 reads an 8-bit B
        // MN-major too, so FP8's V needs no transposed copy here.
        Type vElement = v.getElementType();
        // A pair's CTA holds half of V's columns, one box: the leading
        // offset then steps to nothing the MMA reads.
        auto [valueKind, instruction] = mmaKindAndDescriptor(
            probs.getElementType(), vElement, tcgen05::Major::K,
            tcgen05::Major::MN, pairRows * probs.getLanes(),
            blackwell::accumulatorColumns(acc.getCols(),
                                          vElement.getIntOrFloatBitWidth()));
        Value idesc = i32(static_cast<int32_t>(instruction));
        int64_t stepK = mmaK(vElement);
        int64_t probBits = probs.getElementType().getIntOrFloatBitWidth();
        Value accumulate = lookup(mma.getAccumulate());
        Value vBase = baseDescriptor(operand, vAddress);
        ifElected([&] {
          for (int64_t step = 0; step * stepK < probs.getCols(); ++step) {
            // P from TMEM: a step's K values are 32 bytes, 8 columns (16
            // 16-bit or 32 8-bit values). V: its K keys are K rows of 128
            // bytes.
            Value a = tmemPointer(arith::AddIOp::create(b,
                loc(), probsColumn, i32(step * stepK * probBits / 32)));
            Value enable =
                step == 0 ? accumulate
                          : Value(LLVM::ConstantOp::create(b,
                                loc(), b.getI1Type(), b.getBoolAttr(true)));
            NVVM::Tcgen05MMAOp::create(b,
                loc(), valueKind, group, collector, false, output, a,
                descriptor(vBase, step * stepK * kSwizzleLineBytes), idesc,
                enable, Value(), Value());
          }
        });
        return success();
      })
      .Case([&](TransposedMmaAsyncOp mma) -> LogicalResult {
        // dQ = dS·K: dSᵀ ([keys, packed rows], as the grad warps staged
        // it) is the A operand with M contiguous, K ([keys, head dim]) the
        // B operand with N contiguous — both MN-major and laid out as V is
        // to the value MMA: 64-column boxes the leading-dimension repeats,
        // 8-key groups 1024 bytes apart, 16 keys (16 lines) a K step. As
        // CUTLASS's UMMA descriptors for MN-major SW128 operands.
        SmemType a = mma.getLhs().getType();
        SmemType bType = mma.getRhs().getType();
        TmemType acc = mma.getAcc().getType();
        Value aAddress = stageAddress(mma.getLhs(), mma.getLhsCount());
        Value bAddress = stageAddress(mma.getRhs(), mma.getRhsCount());
        Value output = tmemPointer(
            arith::AddIOp::create(b, loc(), kernel.tmemBase, lookup(mma.getAcc())));
        uint64_t aBits = tcgen05::smemDescriptorTemplate(
            boxBytes(a), kSwizzleAtomBytes, tcgen05::Swizzle::Bytes128);
        uint64_t bBits = tcgen05::smemDescriptorTemplate(
            boxBytes(bType), kSwizzleAtomBytes, tcgen05::Swizzle::Bytes128);
        uint32_t instruction = tcgen05::instructionDescriptorF16(
            elementOf(a.getElementType()), elementOf(bType.getElementType()),
            tcgen05::Major::MN, tcgen05::Major::MN, a.getCols(),
            blackwell::accumulatorColumns(acc.getCols()));
        Value idesc = i32(static_cast<int32_t>(instruction));
        Value aBase = baseDescriptor(aBits, aAddress);
        Value bBase = baseDescriptor(bBits, bAddress);
        ifElected([&] {
          int64_t stepK = mmaK(a.getElementType());
          for (int64_t step = 0; step * stepK < a.getRows(); ++step) {
            int64_t offset = step * stepK * kSwizzleLineBytes;
            Value enable = LLVM::ConstantOp::create(
                b, loc(), b.getI1Type(), b.getBoolAttr(step > 0));
            NVVM::Tcgen05MMAOp::create(b, loc(), kind, group, collector, false,
                                       output, descriptor(aBase, offset),
                                       descriptor(bBase, offset), idesc, enable,
                                       Value(), Value());
          }
        });
        return success();
      })
      .Default([](Operation *) { return failure(); });
}
