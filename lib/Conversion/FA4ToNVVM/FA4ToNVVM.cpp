//===- FA4ToNVVM.cpp - the fa4-to-nvvm pass -------------------------------===//
//
// Level C -> level D: the pass. It finds the kernels, resolves the chip,
// picks the schedule's family's lowering (the wings' FamilyLowering
// implementations, lib/Target/<family>/Lowering), lays out shared memory,
// builds each kernel's signature and runs the shared lowering (Kernel.cpp
// and its neighbours) over its body, then records the launch.
//
//===----------------------------------------------------------------------===//

#include "fa4/Conversion/FA4ToNVVM/Lowering.h"

#include "fa4/Conversion/Passes.h"
#include "fa4/Support/AttentionMath.h"
#include "fa4/Target/Blackwell/Chip.h"
#include "fa4/Target/Blackwell/ScheduleConfig.h"
#include "fa4/Transforms/TileConfig.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "llvm/ADT/ScopeExit.h"
#include "mlir/Transforms/RegionUtils.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::fa4 {
#define GEN_PASS_DEF_FA4TONVVM
#include "fa4/Conversion/Passes.h.inc"
} // namespace mlir::fa4

using namespace mlir;
using namespace mlir::fa4;
using namespace mlir::fa4::nvvm;

const FamilyLowering &mlir::fa4::nvvm::familyLowering(target::Family family) {
  switch (family) {
  case target::Family::Blackwell:
    return blackwellLowering();
  case target::Family::Hopper:
    return hopperLowering();
  }
  llvm_unreachable("every family has a lowering");
}


//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

namespace {

/// Decides where every buffer and barrier lives in shared memory.
void layOutSharedMemory(func::FuncOp func, KernelState &kernel) {
  int64_t offset = 0;
  // Swizzled tiles need 1024-byte alignment (the 8-row swizzle atom).
  func.walk([&](SmemAllocOp alloc) {
    offset = llvm::alignTo(offset, 1024);
    kernel.smemOffset[alloc] = offset;
    offset += alloc.getCtaStageBytes() * alloc.getBuffer().getType().getStages();
  });
  func.walk([&](MBarrierAllocOp alloc) {
    offset = llvm::alignTo(offset, 8);
    kernel.smemOffset[alloc] = offset;
    offset += 8 * alloc.getBarrier().getType().getStages();
  });
  // The loader's own barrier for V copies whose tail rows it clears.
  bool clears = false;
  func.walk([&](TmaLoadOp load) { clears |= static_cast<bool>(load.getClearFrom()); });
  if (clears) {
    offset = llvm::alignTo(offset, 8);
    kernel.clearBarrierOffset = offset;
    offset += 8;
  }
  offset = llvm::alignTo(offset, 16);
  kernel.tmemSlotOffset = offset;
  kernel.smemBytes = offset + 16;
  func.walk([&](TmemAllocColumnsOp alloc) {
    kernel.tmemColumns = alloc.getColumns();
  });
}

struct FA4ToNVVMPass : public fa4::impl::FA4ToNVVMBase<FA4ToNVVMPass> {
  using Base::Base;
  void runOnOperation() override;
  LogicalResult convert(func::FuncOp func, gpu::GPUModuleOp gpuModule);
  /// The backward's schedule (fa4.backward_spec): three kernels.
  LogicalResult convertBackward(func::FuncOp func, gpu::GPUModuleOp gpuModule);
  /// The chip compiled for, resolved by runOnOperation.
  const target::ChipInfo *chipInfo = nullptr;
};

} // namespace

/// The spec against the ops: each TMA load reads the tensor the MMAs read
/// its buffer as (Q for the query operand, K and V for the key and value
/// operands), the TMA stores write its O, the LSE is stored to its LSE and
/// exactly when it names one, and the KV block range masks as it says.
static LogicalResult checkSpecAgainstSchedule(func::FuncOp func,
                                              KernelSpecAttr spec,
                                              ArrayRef<Value> tensors) {
  const char *names[] = {"Q", "K", "V", "O", "LSE"};
  auto roleOf = [&](Value memref) -> std::string {
    for (auto [role, tensor] : llvm::enumerate(tensors))
      if (tensor == memref)
        return names[role];
    if (auto argument = dyn_cast<BlockArgument>(memref))
      return "argument #" + std::to_string(argument.getArgNumber());
    return "a value that is no argument";
  };
  // Which tensor each shared-memory buffer holds, from the MMAs that read
  // it: the query operand is Q's, the key operand K's, the value operand
  // V's (Blackwell's K and V share one ring: either).
  llvm::DenseMap<Value, unsigned> readsAs; // bit r: tensor r
  func.walk([&](Operation *op) {
    if (auto mma = dyn_cast<ScoreMmaAsyncOp>(op)) {
      readsAs[mma.getQuery()] |= 1u << 0;
      readsAs[mma.getKey()] |= 1u << 1;
    } else if (auto mma = dyn_cast<WarpgroupScoreMmaOp>(op)) {
      readsAs[mma.getQuery()] |= 1u << 0;
      readsAs[mma.getKey()] |= 1u << 1;
    } else if (auto mma = dyn_cast<ValueMmaAsyncOp>(op)) {
      readsAs[mma.getValue()] |= 1u << 2;
    } else if (auto mma = dyn_cast<WarpgroupValueMmaOp>(op)) {
      readsAs[mma.getValue()] |= 1u << 2;
    }
  });
  bool lseStored = false;
  WalkResult walk = func.walk([&](Operation *op) -> WalkResult {
    if (auto load = dyn_cast<TmaLoadOp>(op)) {
      Value source = load.getSource();
      unsigned roles = readsAs.lookup(load.getBuffer());
      if (!roles)
        roles = 0b111;
      bool named = false;
      for (unsigned role = 0; role < 3; ++role)
        named |= (roles >> role & 1) && source == tensors[role];
      if (!named) {
        InFlightDiagnostic diag = load.emitOpError();
        diag << "loads " << roleOf(source) << " into a buffer the MMAs read as ";
        llvm::interleave(
            llvm::make_filter_range(llvm::seq(0u, 3u),
                                    [&](unsigned role) { return roles >> role & 1; }),
            [&](unsigned role) { diag << names[role]; },
            [&] { diag << " or "; });
        diag << ", which fa4.spec's arguments place elsewhere";
        return diag;
      }
    } else if (auto store = dyn_cast<TmaStoreOp>(op)) {
      if (store.getDest() != tensors[3])
        return store.emitOpError()
               << "stores to " << roleOf(store.getDest())
               << ", but fa4.spec's arguments name argument #"
               << spec.getArguments()[3] << " as O";
    } else if (auto merge = dyn_cast<MergeSplitsOp>(op)) {
      if (merge.getOut() != tensors[3])
        return merge.emitOpError()
               << "merges into " << roleOf(merge.getOut())
               << ", but fa4.spec's arguments name argument #"
               << spec.getArguments()[3] << " as O";
      if (Value lse = merge.getLseOut()) {
        lseStored = true;
        if (tensors.size() < 5 || lse != tensors[4])
          return merge.emitOpError()
                 << "merges the LSE into " << roleOf(lse)
                 << ", which fa4.spec's arguments do not name as the LSE";
      }
    } else if (auto store = dyn_cast<StoreLseTileOp>(op)) {
      lseStored = true;
      if (tensors.size() < 5 || store.getDest() != tensors[4])
        return store.emitOpError()
               << "stores the LSE to " << roleOf(store.getDest())
               << ", which fa4.spec's arguments do not name as the LSE";
    } else if (auto range = dyn_cast<KvBlockRangeOp>(op)) {
      auto left = static_cast<int64_t>(range.getWindowLeft());
      auto right = static_cast<int64_t>(range.getWindowRight());
      if (range.getMask() != spec.getMask() || left != spec.getWindowLeft() ||
          right != spec.getWindowRight())
        return range.emitOpError()
               << "masks as " << stringifyMaskKind(range.getMask()) << " ("
               << left << ", " << right
               << "), but fa4.spec says "
               << stringifyMaskKind(spec.getMask()) << " ("
               << spec.getWindowLeft() << ", " << spec.getWindowRight() << ")";
    }
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  if (lseStored != spec.getLse())
    return func.emitError() << "fa4.spec says lse = "
                            << (spec.getLse() ? "true" : "false")
                            << ", but the schedule "
                            << (lseStored ? "stores" : "stores no") << " LSE";
  return success();
}

/// A shape or strides for fa4.launch: dynamic sizes as -1.
static SmallVector<int64_t> dynamicAsMinusOne(ArrayRef<int64_t> sizes) {
  SmallVector<int64_t> out;
  for (int64_t size : sizes)
    out.push_back(ShapedType::isDynamic(size) ? -1 : size);
  return out;
}

/// The schedule's family, from its ops' traits (fa4/Dialect/FA4/IR/
/// FA4Traits.h; fa4.warp_specialize's verifier refuses a mix); a schedule
/// with no op of either family's is the chip's. A schedule for the other
/// family is refused here rather than by ptxas.
static FailureOr<target::Family> scheduleFamily(func::FuncOp func,
                                                const target::ChipInfo &chip) {
  bool blackwellOps = false, hopperOps = false;
  func.walk([&](Operation *op) {
    std::optional<target::Family> family = familyOnly(op);
    hopperOps |= family == target::Family::Hopper;
    blackwellOps |= family == target::Family::Blackwell;
  });
  if (hopperOps && blackwellOps)
    return func.emitError() << "the level-C schedule mixes Hopper's warpgroup "
                               "MMAs with Blackwell's TMEM and tcgen05";
  target::Family family = hopperOps      ? target::Family::Hopper
                          : blackwellOps ? target::Family::Blackwell
                                         : chip.family;
  if (family != chip.family)
    return func.emitError()
           << "the level-C schedule is "
           << (family == target::Family::Hopper ? "Hopper's (wgmma)"
                                                : "Blackwell's (tcgen05, TMEM)")
           << " but the chip is " << chip.name
           << "; compile it with --target " << target::chipsOf(family);
  return family;
}

/// The memrefs the mod regions read (fa4.spec's extras): row-major memrefs
/// of integers or floats.
static FailureOr<SmallVector<Value>> modExtras(func::FuncOp func,
                                               ArrayRef<int64_t> positions) {
  SmallVector<Value> extras;
  for (int64_t position : positions) {
    Value extra = func.getArgument(position);
    auto type = cast<MemRefType>(extra.getType());
    if (!isa<IntegerType, FloatType>(type.getElementType()) ||
        !type.getLayout().isIdentity())
      return func.emitError() << "extra argument #" << position << " is "
                              << type
                              << "; the kernel reads row-major memrefs of "
                                 "integers or floats";
    extras.push_back(extra);
  }
  return extras;
}

/// A warp-specialized kernel's llvm.func at `b`: `params`, the first
/// `maps` of them tensor maps passed by value (grid constants), a CTA of
/// `threads`.
static LLVM::LLVMFuncOp createWarpSpecializedKernel(OpBuilder &b, Location loc,
                                                    StringRef name,
                                                    ArrayRef<Type> params,
                                                    int64_t threads,
                                                    unsigned maps = 4) {
  MLIRContext *context = b.getContext();
  auto kernelFunc = LLVM::LLVMFuncOp::create(b,
      loc, name,
      LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(context), params));
  kernelFunc->setAttr("nvvm.kernel", b.getUnitAttr());
  kernelFunc->setAttr("nvvm.reqntid",
                      b.getDenseI32ArrayAttr({static_cast<int32_t>(threads)}));
  // One CTA per SM with the register file split evenly at entry (128 per
  // thread for Blackwell's 512, 168 for Hopper's 384): what setmaxnreg
  // needs to know to move each role to its budget.
  kernelFunc->setAttr("nvvm.minctasm", b.getI32IntegerAttr(1));
  kernelFunc->setAttr("nvvm.maxnreg",
                      b.getI32IntegerAttr(
                          blackwell::registersAtLaunch(threads)));
  auto map = LLVM::LLVMArrayType::get(b.getI8Type(), 128);
  for (unsigned i = 0; i < maps; ++i) {
    kernelFunc.setArgAttr(i, "llvm.byval", TypeAttr::get(map));
    kernelFunc.setArgAttr(i, "nvvm.grid_constant", b.getUnitAttr());
    // TMA reads the descriptor where the parameter lies: it must be 64-byte
    // aligned (CUTLASS declares its tensor maps alignas(64)).
    kernelFunc.setArgAttr(i, "llvm.align", b.getI64IntegerAttr(64));
  }
  return kernelFunc;
}

/// Whether the kernel writes O by address (not through O's tensor map):
/// split-KV and varlen kernels, and a schedule that stores O tiles from
/// registers (Hopper's without O staging, head dims (192, 128)).
static bool writesOByAddress(func::FuncOp func, KernelSpecAttr spec) {
  if (spec.getSplitWorkspace() || spec.isVarlen())
    return true;
  bool direct = false;
  func.walk([&](StoreOTileOp store) {
    direct |= static_cast<bool>(store->getParentOfType<RoleOp>());
  });
  return direct;
}

/// The kernel's llvm.func at `b`, for a CTA of `threads`: Q, K, V and O
/// tensor maps, the LSE pointer, the runtime sizes, then per extra its
/// pointer and its dynamic sizes.
static LLVM::LLVMFuncOp createKernelFunction(OpBuilder &b, func::FuncOp func,
                                             bool hasLse,
                                             ArrayRef<Value> extras,
                                             int64_t threads,
                                             bool oByAddress) {
  MLIRContext *context = b.getContext();
  auto ptr = LLVM::LLVMPointerType::get(context);
  auto globalPtr = LLVM::LLVMPointerType::get(context, 1);
  SmallVector<Type> params(4, ptr);
  if (hasLse)
    params.push_back(globalPtr);
  params.append(3, b.getI32Type());
  for (Value extra : extras) {
    params.push_back(globalPtr);
    params.append(cast<MemRefType>(extra.getType()).getNumDynamicDims(),
                  b.getI32Type());
  }
  // A kernel that writes O row by row (split-KV, varlen, a Hopper schedule
  // without O staging): its address and its batch, sequence and head
  // strides in elements.
  if (oByAddress) {
    params.push_back(globalPtr);
    params.append(3, b.getI64Type());
  }
  return createWarpSpecializedKernel(b, func.getLoc(), func.getName(), params,
                                     threads);
}


/// Binds the kernel parameters of `extras` from `next` on (each its
/// pointer, then its dynamic sizes: the forward's and the backward's
/// convention) in `kernel`; their manifest entries.
static SmallVector<ExtraInfoAttr> bindExtras(OpBuilder &b, Location loc,
                                             Block *entry, unsigned &next,
                                             ArrayRef<Value> extras,
                                             KernelState &kernel) {
  SmallVector<ExtraInfoAttr> entries;
  for (Value extra : extras) {
    auto type = cast<MemRefType>(extra.getType());
    KernelState::Extra &state = kernel.extras[extra];
    state.pointer = entry->getArgument(next++);
    for (int64_t dim : type.getShape())
      state.sizes.push_back(
          ShapedType::isDynamic(dim)
              ? arith::IndexCastOp::create(b, loc, b.getIndexType(),
                                           entry->getArgument(next++))
                    .getResult()
              : arith::ConstantIndexOp::create(b, loc, dim).getResult());
    std::string dtype;
    llvm::raw_string_ostream(dtype) << type.getElementType();
    entries.push_back(ExtraInfoAttr::get(b.getContext(), dtype,
                                         dynamicAsMinusOne(type.getShape())));
  }
  return entries;
}

/// The kernel's parameters as what `kernel` maps the level-C function's
/// tensors and extras to (the extras' static sizes as constants, at `b`,
/// the entry's start); the extras as the manifest lists them.
static SmallVector<ExtraInfoAttr>
bindKernelParameters(OpBuilder &b, Location loc, Block *entry,
                     ArrayRef<Value> tensors, ArrayRef<Value> extras,
                     KernelState &kernel) {
  bool hasLse = tensors.size() > 4;
  kernel.q = tensors[0];
  kernel.k = tensors[1];
  kernel.v = tensors[2];
  kernel.out = tensors[3];
  if (hasLse)
    kernel.lse = tensors[4];
  for (unsigned i = 0; i < 4; ++i)
    kernel.tensorMaps[tensors[i]] = entry->getArgument(i);
  unsigned sizes = hasLse ? 5 : 4;
  if (hasLse)
    kernel.globalPointers[tensors[4]] = entry->getArgument(4);
  kernel.batch = entry->getArgument(sizes);
  kernel.seqQ = entry->getArgument(sizes + 1);
  kernel.seqK = entry->getArgument(sizes + 2);
  unsigned next = sizes + 3;
  SmallVector<ExtraInfoAttr> extraEntries =
      bindExtras(b, loc, entry, next, extras, kernel);
  if (next + 4 <= entry->getNumArguments()) {
    kernel.outPointer = entry->getArgument(next++);
    for (Value &stride : kernel.outStrides)
      stride = entry->getArgument(next++);
  }
  return extraEntries;
}

/// Each tensor map: [head_dim, heads, seq, batch], boxes of 64 columns by
/// the rows of the shared-memory tiles it moves (GQA-packed for Q and O:
/// the copy's gqa_ratio heads by rows / gqa_ratio positions): 128 rows, but
/// Hopper's O is stored in 64-row halves.
static SmallVector<TensorMapInfoAttr> tensorMapInfos(func::FuncOp func,
                                                     const KernelState &kernel) {
  llvm::DenseMap<Value, int64_t> boxRows, boxHeadsOf;
  llvm::DenseSet<Value> pagedSources, transposedSources;
  func.walk([&](Operation *op) {
    if (auto load = dyn_cast<TmaLoadOp>(op)) {
      if (load.getTransposed())
        transposedSources.insert(load.getSource());
      int64_t rows = load.getBuffer().getType().getRows();
      // A paged cache's box is a page (or 128 rows of a larger one).
      if (load.getBlockTable())
        pagedSources.insert(load.getSource());
      if (load.getBlockTable())
        rows = std::min<int64_t>(
            rows, cast<MemRefType>(load.getSource().getType()).getDimSize(1));
      // A CTA pair's CTA copies half of K's keys (V's head-dim columns:
      // the box stays a 128-byte line wide).
      if (isPairHalf(load.getBuffer()) && load.getSource() == kernel.k)
        rows /= 2;
      boxRows[load.getSource()] = rows;
      boxHeadsOf[load.getSource()] = load.getGqaRatio();
    }
    if (auto store = dyn_cast<TmaStoreOp>(op)) {
      boxRows[store.getDest()] = store.getBuffer().getType().getRows();
      boxHeadsOf[store.getDest()] = store.getGqaRatio();
    }
  });
  SmallVector<TensorMapInfoAttr> maps;
  for (auto [name, value] : {std::pair<StringRef, Value>{"q", kernel.q},
                             {"k", kernel.k}, {"v", kernel.v}, {"o", kernel.out}}) {
    auto type = cast<MemRefType>(value.getType());
    int64_t boxHeads = boxHeadsOf.lookup_or(value, 1);
    // The entry's layout, for the manifest: strides in elements, [batch,
    // seq, heads, head_dim], dynamic ones as -1. The kernel does not depend
    // on them (the tensor maps carry the strides).
    SmallVector<int64_t> strides;
    int64_t offset;
    if (failed(type.getStridesAndOffset(strides, offset)))
      strides.assign(4, ShapedType::kDynamic);
    // The entry's static batch and sequence sizes (a paged cache's blocks),
    // which a launch must match; none where both are dynamic.
    SmallVector<int64_t> sizes;
    bool paged = pagedSources.contains(value);
    int64_t batch = type.getDimSize(0), seq = type.getDimSize(1);
    // Q's and O's sizes the LSE ([batch, q_heads, seq_q]) alone fixed are
    // the kernel's too.
    if ((name == "q" || name == "o") && kernel.lse) {
      auto lse = cast<MemRefType>(kernel.lse.getType());
      if (ShapedType::isDynamic(batch))
        batch = lse.getDimSize(0);
      if (ShapedType::isDynamic(seq))
        seq = lse.getDimSize(2);
    }
    if (!ShapedType::isDynamic(batch) ||
        (!paged && !ShapedType::isDynamic(seq)))
      sizes = {batch, paged ? ShapedType::kDynamic : seq};
    Type element = type.getElementType();
    bool fp8 = isa<Float8E4M3FNType>(element);
    StringRef dtype = fp8 ? "e4m3" : element.isBF16() ? "bf16" : "fp16";
    // One 128-byte swizzle line of columns: 64 of 16 bits, 128 of 8.
    int64_t columns = fp8 ? 128 : 64;
    SmallVector<int64_t, 4> box{columns, boxHeads,
                                boxRows.lookup_or(value, 128) / boxHeads, 1};
    // sm_90a's FP8 V, transposed by the runtime: 128 keys by V's head dim.
    StringRef layout = transposedSources.contains(value) ? "vt" : "";
    if (!layout.empty())
      box = {TileConfig::kBlockN, 1, type.getDimSize(3), 1};
    maps.push_back(TensorMapInfoAttr::get(
        func.getContext(), name, dtype, type.getDimSize(2), type.getDimSize(3),
        box, dynamicAsMinusOne(strides), paged ? type.getDimSize(1) : 0,
        dynamicAsMinusOne(sizes), layout));
  }
  return maps;
}

/// What a launcher needs, for fa4c's manifest: the CTA, its memory, the
/// tasks, which warps do what (for tools that report per role, fa4-emu),
/// the tensor maps, the mods and their extras.
static LaunchAttr launchInfo(func::FuncOp func, WarpSpecializeOp specialize,
                             const KernelState &kernel, KernelSpecAttr spec,
                             bool hasLse, ArrayRef<ExtraInfoAttr> extraEntries) {
  MLIRContext *context = func.getContext();
  int64_t rowsPerTask = 0;
  func.walk([&](TaskCountOp op) { rowsPerTask = op.getRows(); });
  SmallVector<RoleInfoAttr> roles;
  for (RoleOp role : specialize.getRoles().front().getOps<RoleOp>())
    roles.push_back(RoleInfoAttr::get(context, role.getName(),
                                      role.getFirstWarp(), role.getNumWarps(),
                                      role.getRegisters()));
  SmallVector<TensorMapInfoAttr> maps = tensorMapInfos(func, kernel);
  bool scoreMod = false, maskMod = false;
  func.walk([&](Operation *op) {
    scoreMod |= isa<ScoreModOp>(op);
    if (auto range = dyn_cast<KvBlockRangeOp>(op))
      maskMod |= !range.getMaskMod().empty();
  });
  return LaunchAttr::get(context, specialize.getNumThreads(), kernel.smemBytes,
                         kernel.tmemColumns, rowsPerTask,
                         specialize->getAttrOfType<GridAttr>(kGridAttrName),
                         spec, roles, maps, hasLse, scoreMod, maskMod,
                         extraEntries, spec.getBlockMask(),
                         spec.getSequsedK(), spec.getBlockTable(),
                         writesOByAddress(func, spec), kernel.ctaPair ? 2 : 1);
}

/// CTA pairs: the barriers the pair shares — those the MMA warp waits on in
/// its task loop (Q and K/V landed, P written, O released), whose even
/// CTA's copy both CTAs' producers arrive on. A split ring outside a pair
/// schedule, or a pair schedule without an MMA warp, is refused.
static LogicalResult findPairBarriers(func::FuncOp func,
                                      WarpSpecializeOp specialize,
                                      KernelState &kernel) {
  kernel.ctaPair = specialize.getCtaPair();
  WalkResult split = func.walk([&](SmemAllocOp alloc) {
    if (alloc.getPairHalf() && !kernel.ctaPair) {
      alloc.emitOpError() << "is a CTA pair's split ring (pair_half) in a "
                             "schedule that does not run as pairs (its "
                             "fa4.warp_specialize has no cta_pair)";
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  if (split.wasInterrupted())
    return failure();
  if (!kernel.ctaPair)
    return success();
  RoleOp mma;
  for (RoleOp role : specialize.getRoles().front().getOps<RoleOp>())
    if (role.getName() == "mma")
      mma = role;
  if (!mma || mma.getNumWarps() != 1)
    return specialize.emitOpError()
           << "runs as CTA pairs but has no single-warp 'mma' role, whose "
              "even CTA's warp would issue the pair's MMAs";
  mma.walk([&](MBarrierWaitOp wait) {
    auto loop = wait->getParentOfType<scf::ForOp>();
    while (loop && !loop->hasAttr("fa4.task_loop"))
      loop = loop->getParentOfType<scf::ForOp>();
    Operation *alloc = wait.getBarrier().getDefiningOp();
    if (!alloc)
      return;
    // In the task loop: the pair's (the even CTA's MMA warp alone waits);
    // after it: the TMEM release both CTAs' MMA warps wait on before the
    // pair frees TMEM, which must count both CTAs' warps.
    if (loop)
      kernel.pairBarriers.insert(alloc);
    else
      kernel.mirroredBarriers.insert(alloc);
  });
  for (Operation *alloc : kernel.mirroredBarriers)
    if (kernel.pairBarriers.contains(alloc))
      return alloc->emitOpError()
             << "is waited on by a CTA pair's MMA warp both in its task loop "
                "(a barrier of the even CTA's) and after it (one both CTAs "
                "count): a pair schedule gives each its own barrier";
  return success();
}

LogicalResult FA4ToNVVMPass::convert(func::FuncOp func,
                                     gpu::GPUModuleOp gpuModule) {
  MLIRContext *context = &getContext();
  // fa4.spec's verifier has checked that its positions are memref
  // arguments of the function.
  KernelSpecAttr spec = getKernelSpec(func);
  if (!spec)
    return func.emitError() << "@" << func.getName() << " has no fa4.spec";
  SmallVector<Value> tensors;
  for (int64_t position : spec.getArguments())
    tensors.push_back(func.getArgument(position));
  bool hasLse = tensors.size() > 4;
  // The spec must describe the schedule it sits on: the launch data and the
  // kernel's parameter order are taken from it.
  if (failed(checkSpecAgainstSchedule(func, spec, tensors)) ||
      failed(verifyTablesAgainstSpec(func, spec, tensors[1], tensors[2])))
    return failure();
  KernelState kernel;
  WarpSpecializeOp specialize;
  func.walk([&](WarpSpecializeOp op) { specialize = op; });
  FailureOr<target::Family> family = scheduleFamily(func, *chipInfo);
  if (failed(family))
    return failure();
  // FP8 is lowered on both families: wgmma e4m3 on Hopper, tcgen05
  // kind::f8f6f4 on Blackwell.
  if (holdsFp8Pieces(func)) {
    if (failed(verifyFp8Program(func)))
      return failure();
    // The launch contract passes all three tables (the runtime, Python and
    // fa4-emu fill a left-out one with ones); the level-A op and fa4-sim
    // take a table left out as 1.
    if (!spec.getQDescale() || !spec.getKDescale() || !spec.getVDescale()) {
      SmallVector<StringRef, 3> missing;
      for (auto [name, position] :
           {std::pair{"q_descale", spec.getQDescale()},
            std::pair{"k_descale", spec.getKDescale()},
            std::pair{"v_descale", spec.getVDescale()}})
        if (!position)
          missing.push_back(name);
      InFlightDiagnostic diag = func.emitError();
      diag << "@" << func.getName() << " is an FP8 attention without "
           << missing.front();
      for (size_t i = 1; i < missing.size(); ++i)
        diag << (i + 1 == missing.size() ? " or " : ", ") << missing[i];
      diag << ": an FP8 kernel takes all three descale tables as extras "
              "(a [batch, kv_heads] f32 table of ones is the factor 1); "
              "fa4-sim runs its tile program and schedule as they are";
      return failure();
    }
  }
  kernel.family = &familyLowering(*family);
  if (failed(findPairBarriers(func, specialize, kernel)))
    return failure();
  // Both families' softmax takes the share (Blackwell's software exp2 on
  // packed pairs, Hopper's scalar; sm_90a's default share is 0 but at head
  // dims up to 64). Q's last dimension is its head dim.
  auto qType = cast<MemRefType>(tensors[0].getType());
  kernel.exp2EmulationFraction = target::exp2EmulationFraction(
      *chipInfo, exp2EmulationFraction,
      {holdsFp8Pieces(func), runsAsDensePairs(func) && !holdsScoreMod(func),
       qType.getRank() ? qType.getShape().back() : 0});
  layOutSharedMemory(func, kernel);
  if (kernel.smemBytes > chipInfo->smemBytesPerCta)
    return func.emitError() << "the kernel needs " << kernel.smemBytes
                            << " bytes of shared memory, more than the "
                            << chipInfo->smemBytesPerCta << " a CTA of "
                            << chipInfo->name << " may use";

  OpBuilder b(gpuModule.getBodyRegion());
  b.setInsertionPointToEnd(&gpuModule.getBodyRegion().front());
  Location loc = func.getLoc();
  if (!gpuModule.lookupSymbol("fa4_smem"))
    LLVM::GlobalOp::create(b, loc, LLVM::LLVMArrayType::get(b.getI8Type(), 0),
                             false, LLVM::Linkage::External, "fa4_smem",
                             Attribute(), 1024, 3);
  FailureOr<SmallVector<Value>> extras = modExtras(func, spec.getExtras());
  if (failed(extras))
    return failure();
  auto kernelFunc = createKernelFunction(b, func, hasLse, *extras,
                                         specialize.getNumThreads(),
                                         writesOByAddress(func, spec));
  // CTA pairs: `.reqnctapercluster 2, 1, 1`, so a launch is in clusters of
  // two.
  if (kernel.ctaPair)
    kernelFunc->setAttr("nvvm.cluster_dim", b.getDenseI32ArrayAttr({2, 1, 1}));
  Block *entry = kernelFunc.addEntryBlock(b);
  b.setInsertionPointToStart(entry);
  SmallVector<ExtraInfoAttr> extraEntries =
      bindKernelParameters(b, loc, entry, tensors, *extras, kernel);
  kernel.smem = LLVM::AddressOfOp::create(
      b, loc, LLVM::LLVMPointerType::get(context, 3), "fa4_smem");
  kernel.threadId = NVVM::ThreadIdXOp::create(b, loc, b.getI32Type());

  Lowering lowering(b, kernel);
  if (failed(lowering.lowerBlock(func.getBody().front())))
    return failure();
  kernelFunc->setAttr(kLaunchAttrName,
                      launchInfo(func, specialize, kernel, spec, hasLse,
                                 extraEntries));
  return success();
}

//===----------------------------------------------------------------------===//
// The backward: three kernels
//===----------------------------------------------------------------------===//

namespace {
/// Builds the kernels around the backward's main one: plain loops, a warp
/// per (batch, position, head) row (its lanes take head_dim / 32 adjacent
/// elements each, so that a warp's accesses are one contiguous row), no
/// shared memory.
struct RowKernelBuilder {
  OpBuilder &b;
  Location loc;

  Value i32(int64_t v) {
    return LLVM::ConstantOp::create(b, loc, b.getI32Type(),
                                    b.getI32IntegerAttr(v));
  }
  Value i64(int64_t v) {
    return LLVM::ConstantOp::create(b, loc, b.getI64Type(),
                                    b.getI64IntegerAttr(v));
  }
  Value wide(Value v) {
    return v.getType().isInteger(64)
               ? v
               : arith::ExtUIOp::create(b, loc, b.getI64Type(), v).getResult();
  }
  Value add(Value x, Value y) { return arith::AddIOp::create(b, loc, x, y); }
  Value mul(Value x, Value y) { return arith::MulIOp::create(b, loc, x, y); }
  Value gep(Value pointer, Type element, Value offset) {
    return LLVM::GEPOp::create(b, loc, pointer.getType(), element, pointer,
                               ValueRange{offset});
  }
  /// A kernel of `params` named `name`, 128 threads a CTA; its entry block.
  Block *kernel(gpu::GPUModuleOp module, StringRef name,
                ArrayRef<Type> params) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToEnd(&module.getBodyRegion().front());
    auto func = LLVM::LLVMFuncOp::create(
        b, loc, name,
        LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(b.getContext()),
                                    params));
    func->setAttr("nvvm.kernel", b.getUnitAttr());
    func->setAttr("nvvm.reqntid", b.getDenseI32ArrayAttr({kRowThreads}));
    return func.addEntryBlock(b);
  }
  /// `body(row, lane)` for every row index (i64) in [0, rows), a warp per
  /// row, grid-stride; `lane` (i64) is the thread's in its warp.
  void forEachRow(Value rows, function_ref<void(Value, Value)> body) {
    Value thread = wide(NVVM::ThreadIdXOp::create(b, loc, b.getI32Type()));
    Value block = wide(NVVM::BlockIdXOp::create(b, loc, b.getI32Type()));
    Value grid = wide(NVVM::GridDimXOp::create(b, loc, b.getI32Type()));
    Value lane = arith::RemUIOp::create(b, loc, thread, i64(32));
    Value warp = arith::DivUIOp::create(b, loc, thread, i64(32));
    Value first = add(mul(block, i64(kRowThreads / 32)), warp);
    Value step = mul(grid, i64(kRowThreads / 32));
    auto loop = scf::ForOp::create(b, loc, first, rows, step);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(loop.getBody()->getTerminator());
    body(loop.getInductionVar(), lane);
  }
  static constexpr int32_t kRowThreads = 128;
};
} // namespace

LogicalResult FA4ToNVVMPass::convertBackward(func::FuncOp func,
                                             gpu::GPUModuleOp gpuModule) {
  MLIRContext *context = &getContext();
  BackwardSpecAttr spec = getBackwardSpec(func);
  auto argument = [&](BackwardArgument role) {
    return func.getArgument(spec.getArguments()[role]);
  };
  FailureOr<target::Family> family = scheduleFamily(func, *chipInfo);
  if (failed(family))
    return failure();
  FailureOr<SmallVector<Value>> extras = modExtras(func, spec.getExtras());
  if (failed(extras))
    return failure();
  WarpSpecializeOp specialize;
  func.walk([&](WarpSpecializeOp op) { specialize = op; });
  KernelState kernel;
  kernel.family = &familyLowering(*family);
  layOutSharedMemory(func, kernel);
  if (kernel.smemBytes > chipInfo->smemBytesPerCta)
    return func.emitError() << "the kernel needs " << kernel.smemBytes
                            << " bytes of shared memory, more than the "
                            << chipInfo->smemBytesPerCta << " a CTA of "
                            << chipInfo->name << " may use";
  OpBuilder b(gpuModule.getBodyRegion());
  b.setInsertionPointToEnd(&gpuModule.getBodyRegion().front());
  Location loc = func.getLoc();
  if (!gpuModule.lookupSymbol("fa4_smem"))
    LLVM::GlobalOp::create(b, loc, LLVM::LLVMArrayType::get(b.getI8Type(), 0),
                           false, LLVM::Linkage::External, "fa4_smem",
                           Attribute(), 1024, 3);
  auto ptr = LLVM::LLVMPointerType::get(context);
  auto globalPtr = LLVM::LLVMPointerType::get(context, 1);
  Type i32 = b.getI32Type(), i64 = b.getI64Type();

  // The main kernel: tensor maps of Q, K, V, dO and the dQ accumulator
  // (f32, for TMA reductions); the LSE, delta and the dQ accumulator
  // (dense); dK and dV with their strides in elements (batch, sequence,
  // head); batch, seq_q, seq_k; then per extra its pointer and its dynamic
  // sizes (the forward's convention).
  SmallVector<Type> params(5, ptr);
  params.append(3, globalPtr);
  for (int i = 0; i < 2; ++i) {
    params.push_back(globalPtr);
    params.append(3, i64);
  }
  params.append(3, i32);
  for (Value extra : *extras) {
    params.push_back(globalPtr);
    params.append(cast<MemRefType>(extra.getType()).getNumDynamicDims(), i32);
  }
  auto mainFunc = createWarpSpecializedKernel(
      b, loc, func.getName(), params, specialize.getNumThreads(), /*maps=*/5);
  // The extras as the manifest lists them (bindExtras).
  SmallVector<Attribute> extraEntries;
  {
    Block *entry = mainFunc.addEntryBlock(b);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(entry);
    kernel.q = argument(kBwdQ);
    kernel.k = argument(kBwdK);
    kernel.v = argument(kBwdV);
    BackwardArgument maps[] = {kBwdQ, kBwdK, kBwdV, kBwdDout, kBwdDqAccum};
    for (unsigned i = 0; i < 5; ++i)
      kernel.tensorMaps[argument(maps[i])] = entry->getArgument(i);
    unsigned next = 5;
    for (BackwardArgument role : {kBwdLse, kBwdDelta, kBwdDqAccum})
      kernel.globalPointers[argument(role)] = entry->getArgument(next++);
    for (BackwardArgument role : {kBwdDk, kBwdDv}) {
      kernel.globalPointers[argument(role)] = entry->getArgument(next++);
      std::array<Value, 3> &strides = kernel.strides[argument(role)];
      for (Value &stride : strides)
        stride = entry->getArgument(next++);
    }
    kernel.batch = entry->getArgument(next++);
    kernel.seqQ = entry->getArgument(next++);
    kernel.seqK = entry->getArgument(next++);
    for (ExtraInfoAttr extra : bindExtras(b, loc, entry, next, *extras, kernel))
      extraEntries.push_back(extra);
    kernel.smem = LLVM::AddressOfOp::create(
        b, loc, LLVM::LLVMPointerType::get(context, 3), "fa4_smem");
    kernel.threadId = NVVM::ThreadIdXOp::create(b, loc, b.getI32Type());
    Lowering lowering(b, kernel);
    if (failed(lowering.lowerBlock(func.getBody().front())))
      return failure();
  }
  // What the backward's manifest says (fa4/Runtime/Backward.h): the
  // variant, the grid, and the main kernel's CTA, shared memory and roles.
  {
    auto qType = cast<MemRefType>(argument(kBwdQ).getType());
    auto kType = cast<MemRefType>(argument(kBwdK).getType());
    int64_t qHeads = qType.getDimSize(2), kvHeads = kType.getDimSize(2);
    GridAttr grid = specialize->getAttrOfType<GridAttr>(kGridAttrName);
    // The rows of a step: those of the Q ring's tiles.
    int64_t stepRows = 0;
    func.walk([&](SmemAllocOp alloc) {
      if (alloc.getName() == "q")
        stepRows = alloc.getBuffer().getType().getRows();
    });
    SmallVector<Attribute> roles;
    for (RoleOp role : specialize.getRoles().front().getOps<RoleOp>())
      roles.push_back(RoleInfoAttr::get(context, role.getName(),
                                        role.getFirstWarp(),
                                        role.getNumWarps(),
                                        role.getRegisters()));
    NamedAttribute fields[] = {
        b.getNamedAttr("spec", spec),
        b.getNamedAttr("head_dim", b.getI64IntegerAttr(qType.getDimSize(3))),
        b.getNamedAttr("q_heads", b.getI64IntegerAttr(qHeads)),
        b.getNamedAttr("kv_heads", b.getI64IntegerAttr(kvHeads)),
        b.getNamedAttr("dtype",
                       b.getStringAttr(qType.getElementType().isBF16()
                                           ? "bf16"
                                           : "fp16")),
        b.getNamedAttr("gqa_packing",
                       b.getI64IntegerAttr(gqaPacking(qHeads / kvHeads))),
        b.getNamedAttr("step_rows", b.getI64IntegerAttr(stepRows)),
        b.getNamedAttr("sm_count",
                       b.getI64IntegerAttr(grid ? grid.getSmCount() : 1)),
        b.getNamedAttr("block",
                       b.getI64IntegerAttr(specialize.getNumThreads())),
        b.getNamedAttr("row_block",
                       b.getI64IntegerAttr(RowKernelBuilder::kRowThreads)),
        b.getNamedAttr("dynamic_smem_bytes",
                       b.getI64IntegerAttr(kernel.smemBytes)),
        b.getNamedAttr("roles", b.getArrayAttr(roles))};
    SmallVector<NamedAttribute> all(std::begin(fields), std::end(fields));
    // The regions the main kernel inlines (the manifest says so, and
    // fa4-emu then asks for the entry IR).
    bool scoreMod = false, maskMod = false;
    func.walk([&](Operation *op) {
      scoreMod |= isa<ScoreModOp, ScoreModGradOp>(op);
      if (auto mask = dyn_cast<MaskOp>(op))
        maskMod |= !mask.getMaskMod().empty();
      if (auto range = dyn_cast<QBlockRangeOp>(op))
        maskMod |= !range.getMaskMod().empty();
    });
    if (!extraEntries.empty())
      all.push_back(b.getNamedAttr("extras", b.getArrayAttr(extraEntries)));
    // Sizes the entry IR fixed, in any tensor that has them (the verifier
    // holds them to agree): a launch of other sizes is refused (the
    // kernels' strides and bounds may assume them).
    auto fixed =
        [&](std::initializer_list<std::pair<BackwardArgument, unsigned>> dims)
        -> int64_t {
      for (auto [operand, dim] : dims) {
        auto type = cast<MemRefType>(argument(operand).getType());
        if (!type.isDynamicDim(dim))
          return type.getDimSize(dim);
      }
      return ShapedType::kDynamic;
    };
    for (auto [name, size] :
         {std::pair<StringRef, int64_t>{
              "static_batch",
              fixed({{kBwdQ, 0}, {kBwdK, 0}, {kBwdV, 0}, {kBwdOut, 0},
                     {kBwdDout, 0}, {kBwdLse, 0}, {kBwdDq, 0}, {kBwdDk, 0},
                     {kBwdDv, 0}})},
          {"static_seq_q", fixed({{kBwdQ, 1}, {kBwdOut, 1}, {kBwdDout, 1},
                                  {kBwdLse, 2}, {kBwdDq, 1}})},
          {"static_seq_k", fixed({{kBwdK, 1}, {kBwdV, 1}, {kBwdDk, 1},
                                  {kBwdDv, 1}})}})
      if (!ShapedType::isDynamic(size))
        all.push_back(b.getNamedAttr(name, b.getI64IntegerAttr(size)));
    if (scoreMod)
      all.push_back(b.getNamedAttr("score_mod", b.getUnitAttr()));
    if (maskMod)
      all.push_back(b.getNamedAttr("mask_mod", b.getUnitAttr()));
    mainFunc->setAttr(kBackwardLaunchAttrName, b.getDictionaryAttr(all));
  }

  auto dims = [&](BackwardArgument role) {
    auto type = cast<MemRefType>(argument(role).getType());
    return std::pair{type.getDimSize(2), type.getDimSize(3)};
  };
  auto [heads, dim] = dims(kBwdQ);
  Type element = cast<MemRefType>(argument(kBwdQ).getType()).getElementType();
  Type f32 = b.getF32Type();
  RowKernelBuilder rows{b, loc};
  // The strided row [batch, position, head] of a tensor given by its
  // address and strides.
  auto rowAddress = [&](Value base, ArrayRef<Value> strides, Type type,
                        Value batch, Value position, Value head) {
    Value offset = rows.add(rows.add(rows.mul(batch, strides[0]),
                                     rows.mul(position, strides[1])),
                            rows.mul(head, strides[2]));
    return rows.gep(base, type, offset);
  };
  // Row r of [batch, seq_q, heads]: its batch, position and head (i64).
  auto unpack = [&](Value r, Value seqQ) {
    Value head = arith::RemUIOp::create(b, loc, r, rows.i64(heads));
    Value rest = arith::DivUIOp::create(b, loc, r, rows.i64(heads));
    Value position = arith::RemUIOp::create(b, loc, rest, seqQ);
    Value batch = arith::DivUIOp::create(b, loc, rest, seqQ);
    return std::tuple{batch, position, head};
  };

  // Each lane's elements of a row: head_dim / 32 adjacent ones.
  int64_t perLane = dim / 32;
  auto laneColumn = [&](Value lane, int64_t e) {
    return rows.add(rows.mul(lane, rows.i64(perLane)), rows.i64(e));
  };
  // fa4.prepare_backward: (O, its strides, dO, its strides, delta,
  // dq_accum, batch, seq_q); delta = Σ O·dO in f32 (each lane's products,
  // then the warp's sum), the accumulator's row zeroed.
  {
    SmallVector<Type> prepareParams{globalPtr, i64, i64, i64,
                                    globalPtr, i64, i64, i64,
                                    globalPtr, globalPtr, i32, i32};
    Block *entry = rows.kernel(gpuModule, (func.getName() + "_prepare").str(),
                               prepareParams);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(entry);
    Value seqQ = rows.wide(entry->getArgument(11));
    Value total = rows.mul(rows.mul(rows.wide(entry->getArgument(10)), seqQ),
                           rows.i64(heads));
    rows.forEachRow(total, [&](Value r, Value lane) {
      auto [batch, position, head] = unpack(r, seqQ);
      SmallVector<Value> oStrides{entry->getArgument(1), entry->getArgument(2),
                                  entry->getArgument(3)};
      SmallVector<Value> doStrides{entry->getArgument(5), entry->getArgument(6),
                                   entry->getArgument(7)};
      Value o = rowAddress(entry->getArgument(0), oStrides, element, batch,
                           position, head);
      Value dout = rowAddress(entry->getArgument(4), doStrides, element, batch,
                              position, head);
      Value sum = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0.0f));
      for (int64_t e = 0; e < perLane; ++e) {
        Value column = laneColumn(lane, e);
        Value x = arith::ExtFOp::create(
            b, loc, f32,
            LLVM::LoadOp::create(b, loc, element, rows.gep(o, element, column),
                                 2)
                .getResult());
        Value y = arith::ExtFOp::create(
            b, loc, f32,
            LLVM::LoadOp::create(b, loc, element,
                                 rows.gep(dout, element, column), 2)
                .getResult());
        sum = LLVM::FMAOp::create(b, loc, x, y, sum);
      }
      for (int32_t offset : {16, 8, 4, 2, 1}) {
        Value other = NVVM::ShflOp::create(
            b, loc, f32, rows.i32(-1), sum, rows.i32(offset), rows.i32(0x1f),
            NVVM::ShflKind::bfly, UnitAttr());
        sum = arith::AddFOp::create(b, loc, sum, other);
      }
      // delta [batch, heads, seq_q], dense: lane 0 writes the row's.
      Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                          lane, rows.i64(0));
      auto write = scf::IfOp::create(b, loc, first, false);
      {
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPointToStart(write.thenBlock());
        Value at = rows.add(
            rows.mul(rows.add(rows.mul(batch, rows.i64(heads)), head), seqQ),
            position);
        LLVM::StoreOp::create(b, loc, sum,
                              rows.gep(entry->getArgument(8), f32, at));
      }
      // The accumulator's row [batch, seq_q, heads, dim], dense: r · dim.
      Value accum = rows.gep(entry->getArgument(9), f32,
                             rows.mul(r, rows.i64(dim)));
      Value zero = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0.0f));
      for (int64_t e = 0; e < perLane; ++e)
        LLVM::StoreOp::create(b, loc, zero,
                              rows.gep(accum, f32, laneColumn(lane, e)), 4);
    });
    LLVM::ReturnOp::create(b, loc, ValueRange());
  }
  // fa4.finish_dq: (dq_accum, dQ, its strides, batch, seq_q); dQ =
  // accumulator · scale, rounded.
  {
    float scale = 1.0f;
    func.walk([&](FinishDqOp finish) {
      scale = finish.getScale().convertToFloat();
    });
    SmallVector<Type> finishParams{globalPtr, globalPtr, i64, i64, i64, i32,
                                   i32};
    Block *entry = rows.kernel(gpuModule, (func.getName() + "_finish").str(),
                               finishParams);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(entry);
    Value seqQ = rows.wide(entry->getArgument(6));
    Value total = rows.mul(rows.mul(rows.wide(entry->getArgument(5)), seqQ),
                           rows.i64(heads));
    rows.forEachRow(total, [&](Value r, Value lane) {
      auto [batch, position, head] = unpack(r, seqQ);
      SmallVector<Value> strides{entry->getArgument(2), entry->getArgument(3),
                                 entry->getArgument(4)};
      Value dq = rowAddress(entry->getArgument(1), strides, element, batch,
                            position, head);
      Value accum = rows.gep(entry->getArgument(0), f32,
                             rows.mul(r, rows.i64(dim)));
      for (int64_t e = 0; e < perLane; ++e) {
        Value column = laneColumn(lane, e);
        Value x = LLVM::LoadOp::create(b, loc, f32,
                                       rows.gep(accum, f32, column), 4);
        x = arith::MulFOp::create(
            b, loc, x,
            arith::ConstantOp::create(b, loc, b.getF32FloatAttr(scale)));
        Value rounded = arith::TruncFOp::create(b, loc, element, x);
        LLVM::StoreOp::create(b, loc, rounded,
                              rows.gep(dq, element, column), 2);
      }
    });
    LLVM::ReturnOp::create(b, loc, ValueRange());
  }
  return success();
}

void FA4ToNVVMPass::runOnOperation() {
  ModuleOp module = getOperation();
  MLIRContext *context = &getContext();
  if (!target::isExp2EmulationFraction(exp2EmulationFraction)) {
    module.emitError() << "exp2-emulation-fraction must be in [0, 1], or -1 "
                          "for the target's own, got "
                       << exp2EmulationFraction;
    return signalPassFailure();
  }
  SmallVector<func::FuncOp> kernels;
  bool noSpec = false;
  module.walk([&](func::FuncOp func) {
    bool scheduled = false;
    func.walk([&](WarpSpecializeOp) { scheduled = true; });
    bool known = getKernelSpec(func) || getBackwardSpec(func);
    if (known && scheduled)
      kernels.push_back(func);
    else if (scheduled)
      func.emitError() << "@" << func.getName()
                       << " holds a level-C schedule but no fa4.spec (the "
                          "variant fa4-tile records): fa4-to-nvvm cannot "
                          "lower it";
    noSpec |= scheduled && !known;
  });
  if (noSpec)
    return signalPassFailure();
  // The chip: the `fa4.target` of the kernels' modules (the pipeline's
  // first stage wrote it on the top-level one; the verifier keeps nested
  // ones consistent), or the option's; both, when they differ, is an error.
  const target::ChipInfo *named = getModuleTarget(module);
  for (func::FuncOp func : kernels) {
    const target::ChipInfo *own = getModuleTarget(func);
    if (own && named && own != named) {
      func.emitError() << "fa4-to-nvvm: @" << func.getName()
                       << " is in a module for " << own->name
                       << ", another kernel's is for " << named->name
                       << "; one gpu.module is for one chip";
      return signalPassFailure();
    }
    named = own ? own : named;
  }
  if (!chip.empty()) {
    const target::ChipInfo *asked = target::lookup(chip);
    if (!asked) {
      module.emitError() << "fa4-to-nvvm: " << target::unknownChipMessage(chip);
      return signalPassFailure();
    }
    if (named && named != asked) {
      module.emitError() << "fa4-to-nvvm: chip=" << asked->name
                         << " but the module is compiled for " << named->name
                         << " (its '" << kTargetAttrName << "')";
      return signalPassFailure();
    }
    named = asked;
  }
  chipInfo = named ? named : &target::defaultChip();
  if (kernels.empty())
    return;
  OpBuilder b(context);
  b.setInsertionPointToEnd(module.getBody());
  module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(), b.getUnitAttr());
  auto gpuModule = gpu::GPUModuleOp::create(b,
      module.getLoc(), "fa4_kernels",
      b.getArrayAttr({NVVM::NVVMTargetAttr::get(context, /*optLevel=*/3,
                                                "nvptx64-nvidia-cuda",
                                                chipInfo->codegenChip,
                                                "+ptx88")}));
  for (func::FuncOp func : kernels) {
    if (failed(getBackwardSpec(func) ? convertBackward(func, gpuModule)
                                     : convert(func, gpuModule)))
      return signalPassFailure();
    func.erase();
  }
}
