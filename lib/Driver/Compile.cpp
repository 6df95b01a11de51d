//===- Compile.cpp - a variant to a kernel, in process ---------------------===//

#include "fa4/Driver/Compile.h"
#include "fa4/Support/AttentionMath.h"

#include "fa4/Dialect/FA4/IR/FA4Dialect.h"
#include "fa4/Dialect/FA4/IR/FA4Ops.h"

#include "fa4/Driver/KernelOutput.h"
#include "fa4/Driver/ToolSession.h"
#include "fa4/Runtime/CompileCache.h"
#include "fa4/Runtime/Runtime.h"
#include "fa4/Support/Error.h"
#include "fa4/Support/IrInput.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <type_traits>
#include <dlfcn.h>

using namespace mlir;
using namespace mlir::fa4;

llvm::Error fa4::checkVariant(const Variant &variant) {
  if (variant.dtype != "fp16" && variant.dtype != "bf16" &&
      variant.dtype != "e4m3")
    return makeError("dtype must be fp16, bf16 or e4m3, got '" + variant.dtype +
                     "'");
  if (variant.dtype == "e4m3" && variant.backward)
    return makeError("backward does not take FP8 (e4m3) inputs");
  if (variant.qHeads <= 0 || variant.kvHeads <= 0)
    return makeError("q-heads and kv-heads must be positive, got " +
                     std::to_string(variant.qHeads) + " and " +
                     std::to_string(variant.kvHeads));
  if (variant.pageSize < 0 || variant.pageSize >= (int64_t(1) << 31))
    return makeError("page-size must be positive (and below 2^31), got " +
                     std::to_string(variant.pageSize));
  if (variant.numSplits < 1 || variant.numSplits > kMaxSplits)
    return makeError("num-splits must be in [1, " + std::to_string(kMaxSplits) +
                     "], got " + std::to_string(variant.numSplits));
  if (variant.deterministic && !variant.backward)
    return makeError("deterministic applies to the backward (--backward)");
  if (variant.backward && (variant.pageSize || variant.numSplits > 1 ||
                           variant.varlen || variant.seqUsedK || variant.lse))
    return makeError("backward takes the forward's LSE always, and does not "
                     "(yet) combine with a paged K/V cache, split-KV, varlen "
                     "or seqused_k");
  if (variant.valueHeadDim < 0)
    return makeError("v-head-dim must be positive (or 0: Q's head dim), got " +
                     std::to_string(variant.valueHeadDim));
  if (variant.backward && variant.vHeadDim() != variant.headDim)
    return makeError("backward needs V's head dim equal to Q's (got " +
                     std::to_string(variant.headDim) + " and " +
                     std::to_string(variant.vHeadDim()) +
                     "): the gradients of a (192, 128) attention are not "
                     "built yet");
  if (variant.varlen && (variant.pageSize || variant.numSplits > 1))
    return makeError("varlen does not combine with a paged K/V cache or "
                     "split-KV (varlen batches pack K and V; a cache's "
                     "sequences take --seqused-k)");
  return llvm::Error::success();
}

OwningOpRef<ModuleOp> fa4::buildVariantModule(MLIRContext &context,
                                              const Variant &variant) {
  OpBuilder b(&context);
  Location loc = b.getUnknownLoc();
  if (llvm::Error refused = checkVariant(variant)) {
    emitError(loc) << llvm::toString(std::move(refused));
    return nullptr;
  }
  // FP8 (e4m3) inputs give a bf16 O, as FlashAttention-3's FP8 forward.
  bool fp8 = variant.dtype == "e4m3";
  Type element = fp8 ? Type(b.getType<Float8E4M3FNType>())
                 : variant.dtype == "bf16" ? Type(b.getBF16Type())
                                           : Type(b.getF16Type());
  Type outElement = fp8 ? Type(b.getBF16Type()) : element;
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  int64_t dyn = ShapedType::kDynamic;
  // Q, K, V and O with any strides TMA expresses (head_dim contiguous): the
  // kernel is the same for every layout, and a launch binds its tensors'
  // strides. (Entry IR written with the identity layout asks for dense
  // tensors, and the launch holds it to that.)
  auto layout = StridedLayoutAttr::get(&context, dyn, {dyn, dyn, dyn, 1});
  // Varlen tensors are packed: the batch-1 case of the dense layout.
  int64_t batch = variant.varlen ? 1 : dyn;
  auto qType = MemRefType::get({batch, dyn, variant.qHeads, variant.headDim},
                               element, layout);
  auto kvType = MemRefType::get(
      {batch, variant.pageSize ? variant.pageSize : dyn, variant.kvHeads,
       variant.headDim},
      element, layout);
  if (variant.backward) {
    // Q, K, V, O, dO, LSE -> dQ, dK, dV, and the workspace.
    auto rowType = MemRefType::get({dyn, variant.qHeads, dyn}, b.getF32Type());
    auto accType = MemRefType::get({dyn, dyn, variant.qHeads, variant.headDim},
                                   b.getF32Type());
    SmallVector<Type> arguments = {qType,  kvType, kvType, qType,
                                   qType,  rowType, qType, kvType,
                                   kvType, rowType, accType};
    b.setInsertionPointToEnd(module->getBody());
    auto func = func::FuncOp::create(b, loc, "attention_backward",
                                     b.getFunctionType(arguments, {}));
    Block *body = func.addEntryBlock();
    b.setInsertionPointToEnd(body);
    ValueRange args = body->getArguments();
    AttentionBackwardOp::create(
        b, loc, args[0], args[1], args[2], args[3], args[4], args[5], args[6],
        args[7], args[8], args[9], args[10], /*extras=*/ValueRange(),
        MaskKindAttr::get(&context, variant.mask),
        b.getI64IntegerAttr(variant.windowLeft),
        b.getI64IntegerAttr(variant.windowRight),
        variant.scale ? b.getF32FloatAttr(*variant.scale) : FloatAttr(),
        b.getF32FloatAttr(variant.softcap),
        variant.deterministic ? b.getUnitAttr() : UnitAttr());
    func::ReturnOp::create(b, loc);
    if (failed(verify(*module)))
      return nullptr;
    return module;
  }
  // V and O: V's head dim (Q's unless set).
  auto vType = MemRefType::get(
      {batch, variant.pageSize ? variant.pageSize : dyn, variant.kvHeads,
       variant.vHeadDim()},
      element, layout);
  auto oType = MemRefType::get(
      {batch, dyn, variant.qHeads, variant.vHeadDim()}, outElement, layout);
  SmallVector<Type> arguments = {qType, kvType, vType, oType};
  if (variant.lse)
    arguments.push_back(
        MemRefType::get({batch, variant.qHeads, dyn}, b.getF32Type()));
  if (variant.seqUsedK)
    arguments.push_back(MemRefType::get({dyn}, b.getI32Type()));
  if (variant.varlen)
    arguments.append(2, MemRefType::get({dyn}, b.getI32Type()));
  if (variant.pageSize)
    arguments.push_back(MemRefType::get({dyn, dyn}, b.getI32Type()));
  int64_t tables = (variant.seqUsedK ? 1 : 0) + (variant.pageSize ? 1 : 0) +
                   (variant.varlen ? 2 : 0);
  int64_t cuSeqlens = variant.seqUsedK ? 1 : 0;
  if (variant.numSplits > 1)
    arguments.push_back(MemRefType::get({dyn}, b.getI32Type()));
  // FP8: Q's, K's and V's descale tables, [batch, kv_heads] f32 (a launch
  // without descales passes ones), after the other tables.
  int64_t descales = tables + (variant.numSplits > 1 ? 1 : 0);
  if (fp8)
    arguments.append(
        3, MemRefType::get({dyn, variant.kvHeads},
                           b.getF32Type()));
  auto descale = [&](int64_t which) {
    return fp8 ? b.getI64IntegerAttr(descales + which) : IntegerAttr();
  };
  b.setInsertionPointToEnd(module->getBody());
  auto func = func::FuncOp::create(b, loc, "attention", b.getFunctionType(arguments, {}));
  Block *body = func.addEntryBlock();
  b.setInsertionPointToEnd(body);
  AttentionOp::create(
      b, loc, body->getArgument(0), body->getArgument(1), body->getArgument(2),
      body->getArgument(3), variant.lse ? body->getArgument(4) : Value(),
      /*extras=*/body->getArguments().drop_front(variant.lse ? 5 : 4),
      MaskKindAttr::get(&context, variant.mask),
      b.getI64IntegerAttr(variant.windowLeft), b.getI64IntegerAttr(variant.windowRight),
      variant.scale ? b.getF32FloatAttr(*variant.scale) : FloatAttr(),
      b.getF32FloatAttr(variant.softcap), /*heads_first=*/UnitAttr(),
      /*block_mask=*/IntegerAttr(),
      /*seqused_k=*/variant.seqUsedK ? b.getI64IntegerAttr(0) : IntegerAttr(),
      /*block_table=*/variant.pageSize
          ? b.getI64IntegerAttr(variant.seqUsedK ? 1 : 0)
          : IntegerAttr(),
      /*num_splits=*/variant.numSplits > 1
          ? b.getI64IntegerAttr(variant.numSplits)
          : IntegerAttr(),
      /*split_workspace=*/variant.numSplits > 1 ? b.getI64IntegerAttr(tables)
                                                : IntegerAttr(),
      /*cu_seqlens_q=*/variant.varlen ? b.getI64IntegerAttr(cuSeqlens)
                                      : IntegerAttr(),
      /*cu_seqlens_k=*/variant.varlen ? b.getI64IntegerAttr(cuSeqlens + 1)
                                      : IntegerAttr(),
      /*q_descale=*/descale(0), /*k_descale=*/descale(1),
      /*v_descale=*/descale(2));
  func::ReturnOp::create(b, loc);
  if (failed(verify(*module)))
    return nullptr; // the verifier has reported
  return module;
}

std::string fa4::buildIdentity() {
  static const std::string identity = [] {
    // The object that holds this function: the tool's executable, or the
    // Python extension's shared object inside a python process (whose main
    // executable says nothing of fa4).
    // (glibc names the main program as it was invoked, argv[0]: a name
    // without a directory is looked up in the process itself.)
    std::string path;
    Dl_info info;
    if (dladdr(reinterpret_cast<void *>(&fa4::buildIdentity), &info) && info.dli_fname &&
        llvm::sys::path::is_absolute(info.dli_fname))
      path = info.dli_fname;
    auto binary = llvm::MemoryBuffer::getFile(path, false, false);
    if (path.empty() || !binary)
      binary = llvm::MemoryBuffer::getFile(
          llvm::sys::fs::getMainExecutable(nullptr, (void *)&fa4::buildIdentity),
          false, false);
    return binary ? runtime::CompileCache::key({(*binary)->getBuffer().str()})
                  : std::string();
  }();
  return identity;
}

/// `module` as MLIR prints it.
static std::string printed(ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os);
  return text;
}

llvm::Expected<std::string> fa4::compileCacheKey(ModuleOp module,
                                                 const PipelineOptions &options,
                                                 const std::string &compiler) {
  if (compiler.empty())
    return makeError("cannot identify the compiler's binary");
  std::string entryIr = printed(module);
  llvm::Expected<std::string> ptxas = ptxasVersion(options.cudaPath);
  if (!ptxas)
    return ptxas.takeError();
  // The share the kernel gets, the target's own resolved: asking for it by
  // name or by default is one compilation, for a kernel that cannot run as
  // CTA pairs or have a small head (below). (FP8 kernels have a default of
  // their own.)
  bool fp8 = false;
  module.walk([&](func::FuncOp func) { fp8 |= holdsFp8Pieces(func); });
  double exp2Fraction = options.exp2EmulationFraction;
  // A forward that may run as CTA pairs (where the chip's pair share
  // differs) keys the pair's share too: which kernels run as pairs is
  // decided at level B, so any 16-bit attention with head dim 128, or an
  // input without fa4.attention (one to raise), counts as one that may.
  // There the default is keyed as both shares, so naming either one is an
  // entry of its own (at worst the same kernel twice, never a wrong one).
  // A head dim of at most 64 (or one not known before the raise) keys the
  // small head's share the same way.
  std::string pairFraction;
  if (const target::ChipInfo *chip = target::lookup(options.target)) {
    bool attention = false, mayPair = false, maySmall = false;
    module.walk([&](AttentionOp op) {
      attention = true;
      auto q = cast<ShapedType>(op.getQ().getType());
      if (!q.hasRank() || q.getRank() == 0)
        return;
      int64_t headDim = q.getShape().back();
      mayPair |= headDim == 128 &&
                 q.getElementType().getIntOrFloatBitWidth() == 16;
      maySmall |= headDim <= 64;
    });
    mayPair = chip->family == target::Family::Blackwell && !fp8 &&
              options.twoCta != Toggle::Off && (mayPair || !attention);
    maySmall |= !attention;
    if (mayPair && chip->exp2EmulationFractionPair != chip->exp2EmulationFraction)
      pairFraction = "pair=" + roundTripDecimal(target::exp2EmulationFraction(
                                   *chip, exp2Fraction, {fp8, /*pair=*/true}));
    if (maySmall &&
        chip->exp2EmulationFractionSmallHead != chip->exp2EmulationFraction)
      pairFraction += "small=" + roundTripDecimal(target::exp2EmulationFraction(
                                     *chip, exp2Fraction, {fp8, false, 64}));
    exp2Fraction = target::exp2EmulationFraction(*chip, exp2Fraction, {fp8});
  }
  // A block size asked for is part of the key; the default adds nothing
  // (the keys of earlier compiles stay valid).
  std::string blockN =
      options.blockN ? "block-n=" + std::to_string(options.blockN) : "";
  if (options.qTilesPerTask)
    blockN += "q-tiles-per-task=" + std::to_string(options.qTilesPerTask);
  if (options.qTileRows)
    blockN += "q-tile-rows=" + std::to_string(options.qTileRows);
  if (options.grid != "auto")
    blockN += "grid=" + options.grid;
  if (options.l2SectionBytes != -1)
    blockN += "l2-section-bytes=" + std::to_string(options.l2SectionBytes);
  if (options.twoCta != Toggle::Auto)
    blockN += "two-cta=" + toggleName(options.twoCta).str();
  return runtime::CompileCache::key(
      {"fa4-cache-2", entryIr + blockN, options.target,
       roundTripDecimal(options.rescaleThreshold),
       std::to_string(options.kvStages), std::to_string(options.smCount),
       roundTripDecimal(exp2Fraction) + pairFraction,
       toggleName(options.hopperOverlap).str(),
       toggleName(options.hopperPingpong).str(), compiler, LLVM_VERSION_STRING,
       *ptxas});
}

namespace {
/// Takes every diagnostic of `context` while it lives, as "LOC: error: ..."
/// lines, so that an in-process compilation (a Python call) reports its
/// failures in its error and prints nothing.
class CollectedDiagnostics {
public:
  explicit CollectedDiagnostics(MLIRContext &context)
      : handler(&context, [this](Diagnostic &diagnostic) {
          llvm::raw_string_ostream os(text);
          if (!isa<UnknownLoc>(diagnostic.getLocation()))
            os << diagnostic.getLocation() << ": ";
          os << (diagnostic.getSeverity() == DiagnosticSeverity::Error ? "error: "
                 : diagnostic.getSeverity() == DiagnosticSeverity::Warning ? "warning: "
                                                                           : "note: ")
             << diagnostic << "\n";
          for (Diagnostic &note : diagnostic.getNotes())
            os << "  note: " << note << "\n";
          return success();
        }) {}

  /// `what`, followed by what the diagnostics said.
  std::string explain(const std::string &what) const {
    return text.empty() ? what : what + ":\n" + StringRef(text).rtrim().str();
  }

private:
  std::string text;
  ScopedDiagnosticHandler handler;
};

/// A variant's entry module in `session`; an error naming the bad field or
/// carrying the verifier's diagnostics.
llvm::Expected<OwningOpRef<ModuleOp>>
variantModule(ToolSession &session, const Variant &variant,
              const CollectedDiagnostics &diagnostics) {
  if (llvm::Error refused = checkVariant(variant))
    return std::move(refused);
  OwningOpRef<ModuleOp> module =
      buildVariantModule(session.getContext(), variant);
  if (!module)
    return makeError(diagnostics.explain("the variant does not verify"));
  return std::move(module);
}
/// Runs the pipeline `options` describe on `module`; a failure's error
/// carries the diagnostics.
llvm::Error runPipeline(ModuleOp module, const PipelineOptions &options,
                        const CollectedDiagnostics &diagnostics) {
  PassManager pm(module.getContext());
  if (llvm::Error refused = buildPipeline(pm, options))
    return refused;
  if (failed(pm.run(module)))
    return makeError(diagnostics.explain("the pipeline failed"));
  return llvm::Error::success();
}

/// The entry IR `ir` parsed in `session`; an error carrying the parser's or
/// the verifier's diagnostics.
llvm::Expected<OwningOpRef<ModuleOp>>
entryModule(ToolSession &session, const std::string &ir,
            const CollectedDiagnostics &diagnostics) {
  OwningOpRef<ModuleOp> module = session.parseText(ir, "entry");
  if (!module)
    return makeError(diagnostics.explain("the entry IR does not parse"));
  if (failed(verify(*module)))
    return makeError(diagnostics.explain("the entry IR does not verify"));
  return std::move(module);
}

/// Whether `module` holds a backward (fa4.attention_backward, or the
/// function fa4-tile made of one).
bool holdsBackward(ModuleOp module) {
  bool backward = false;
  module.walk([&](Operation *op) {
    if (isa<AttentionBackwardOp>(op) ||
        (isa<func::FuncOp>(op) && getBackwardSpec(op)))
      backward = true;
  });
  return backward;
}

/// The kernel (runtime::Kernel, or runtime::BackwardKernel for a backward's
/// three) the compile cache holds under `key`, when it holds one that
/// verifies (CompileCache::lookup) and that K::create accepts; anything
/// else is compiled afresh and replaced.
template <typename K>
std::optional<K> cachedKernel(const runtime::CompileCache &cache,
                              const std::string &key) {
  runtime::CompileCache::Entry entry;
  if (!cache.lookup(key, entry))
    return std::nullopt;
  llvm::Expected<K> kernel =
      K::create(entry.manifest, entry.ptx,
                std::vector<uint8_t>(entry.cubin.begin(), entry.cubin.end()));
  if (!kernel) {
    // Of another kind (a forward's under a backward's key, say): moved
    // away, so that the store after the compile replaces it.
    llvm::consumeError(kernel.takeError());
    cache.discard(key);
    return std::nullopt;
  }
  return std::move(*kernel);
}

/// compileVariant, compileEntry and compileBackward once they hold the
/// entry module: the pipeline to level D, PTX, ptxas, the manifest (the
/// forward's, or the backward's of kind "backward"), through the compile
/// cache, which keys and holds both kinds alike.
template <typename K>
llvm::Expected<K> compileModule(ModuleOp module,
                                const CollectedDiagnostics &diagnostics,
                                const PipelineOptions &given, bool useCache,
                                bool *fromCache) {
  constexpr bool backward = std::is_same_v<K, runtime::BackwardKernel>;
  if (fromCache)
    *fromCache = false;
  if (llvm::Error refused = checkEntryLevel(module))
    return std::move(refused);
  if (llvm::Error refused = checkOneKernel(module, backward))
    return std::move(refused);
  if (backward && !holdsBackward(module))
    return makeError("the IR holds no fa4.attention_backward to compile");
  PipelineOptions options;
  options.copyOptionValuesFrom(given);
  options.stopAfter = "nvvm";
  std::string key;
  std::unique_ptr<runtime::CompileCache> cache;
  std::string directory =
      useCache ? runtime::CompileCache::defaultDirectory() : std::string();
  if (!directory.empty()) {
    llvm::Expected<std::string> cacheKey =
        compileCacheKey(module, options, buildIdentity());
    if (cacheKey) {
      key = std::move(*cacheKey);
      cache = std::make_unique<runtime::CompileCache>(directory);
      if (std::optional<K> cached = cachedKernel<K>(*cache, key)) {
        if (fromCache)
          *fromCache = true;
        return std::move(*cached);
      }
    } else {
      // No key (no ptxas to ask, say): compiled, and not cached.
      llvm::consumeError(cacheKey.takeError());
    }
  }
  if (llvm::Error refused = runPipeline(module, options, diagnostics))
    return std::move(refused);
  llvm::Expected<std::string> ptx = serializeToPtx(module);
  if (!ptx)
    return makeError(diagnostics.explain(llvm::toString(ptx.takeError())));
  llvm::Expected<AssembledCubin> assembled =
      assembleCubin(*ptx, options.cudaPath, options.target);
  if (!assembled)
    return assembled.takeError();
  std::string manifest = launchManifest(module, options.target, "kernel.cubin",
                                        "kernel.ptx", assembled->report);
  llvm::Expected<K> kernel = K::create(
      manifest, *ptx,
      std::vector<uint8_t>(assembled->cubin.begin(), assembled->cubin.end()));
  if (!kernel)
    return kernel.takeError();
  if (cache) {
    runtime::CompileCache::Entry entry;
    entry.cubin = std::move(assembled->cubin);
    entry.ptx = std::move(*ptx);
    entry.manifest = manifest;
    entry.cubinName = "kernel.cubin";
    entry.ptxName = "kernel.ptx";
    // An unwritable cache costs the next compile only.
    llvm::consumeError(cache->store(key, entry));
  }
  return std::move(*kernel);
}

} // namespace

llvm::Expected<runtime::Kernel>
fa4::compileVariant(const Variant &variant, const PipelineOptions &options,
                    bool useCache, bool *fromCache) {
  if (variant.backward)
    return makeError("compileVariant compiles a forward; a backward variant "
                     "goes to compileBackward");
  ToolSession session;
  CollectedDiagnostics diagnostics(session.getContext());
  llvm::Expected<OwningOpRef<ModuleOp>> module =
      variantModule(session, variant, diagnostics);
  if (!module)
    return module.takeError();
  return compileModule<runtime::Kernel>(**module, diagnostics, options,
                                        useCache, fromCache);
}

llvm::Expected<runtime::BackwardKernel>
fa4::compileBackward(const Variant &variant, const PipelineOptions &options,
                     bool useCache, bool *fromCache) {
  if (!variant.backward)
    return makeError("compileBackward compiles a backward variant (its "
                     "`backward` set)");
  ToolSession session;
  CollectedDiagnostics diagnostics(session.getContext());
  llvm::Expected<OwningOpRef<ModuleOp>> module =
      variantModule(session, variant, diagnostics);
  if (!module)
    return module.takeError();
  return compileModule<runtime::BackwardKernel>(**module, diagnostics, options,
                                                useCache, fromCache);
}

namespace {
/// What `body` makes of the entry IR `ir`, parsed and verified in a session
/// of its own, its diagnostics collected. The caller's text is parsed, and
/// everything that walks it runs, on a stack sized to it
/// (fa4/Support/IrInput.h): a Python thread's own stack may be small.
template <typename T>
llvm::Expected<T> onEntryModule(
    const std::string &ir,
    function_ref<llvm::Expected<T>(ModuleOp, const CollectedDiagnostics &)>
        body) {
  std::optional<T> made;
  if (llvm::Error refused = runOnIrStack(ir.size(), [&]() -> llvm::Error {
        ToolSession session;
        CollectedDiagnostics diagnostics(session.getContext());
        llvm::Expected<OwningOpRef<ModuleOp>> module =
            entryModule(session, ir, diagnostics);
        if (!module)
          return module.takeError();
        llvm::Expected<T> value = body(**module, diagnostics);
        if (!value)
          return value.takeError();
        made = std::move(*value);
        return llvm::Error::success();
      }))
    return std::move(refused);
  return std::move(*made);
}
} // namespace

llvm::Expected<runtime::Kernel>
fa4::compileEntry(const std::string &ir, const PipelineOptions &options,
                  bool useCache, bool *fromCache) {
  return onEntryModule<runtime::Kernel>(
      ir, [&](ModuleOp module, const CollectedDiagnostics &diagnostics) {
        return compileModule<runtime::Kernel>(module, diagnostics, options,
                                              useCache, fromCache);
      });
}

llvm::Expected<OwningOpRef<ModuleOp>>
fa4::backwardEntryFor(ModuleOp module, bool deterministic) {
  if (holdsBackward(module)) {
    if (deterministic)
      module.walk([&](AttentionBackwardOp op) { op.setDeterministic(true); });
    return OwningOpRef<ModuleOp>();
  }
  llvm::Expected<OwningOpRef<ModuleOp>> derived =
      backwardEntryOf(module, deterministic);
  if (derived && failed(verify(**derived)))
    return makeError("the derived backward entry does not verify");
  return derived;
}

namespace {
/// backwardEntryFor's module: `module` itself, or the derived one (kept in
/// `derived`).
llvm::Expected<ModuleOp> backwardModuleOf(ModuleOp module, bool deterministic,
                                          OwningOpRef<ModuleOp> &derived) {
  llvm::Expected<OwningOpRef<ModuleOp>> backward =
      backwardEntryFor(module, deterministic);
  if (!backward)
    return backward.takeError();
  derived = std::move(*backward);
  return derived ? *derived : module;
}
} // namespace

llvm::Expected<std::string> fa4::derivedEntryIr(const std::string &ir,
                                                bool deterministic,
                                                bool withLse) {
  return onEntryModule<std::string>(
      ir,
      [&](ModuleOp module,
          const CollectedDiagnostics &diagnostics) -> llvm::Expected<std::string> {
        OwningOpRef<ModuleOp> derived;
        ModuleOp result;
        if (withLse) {
          if (holdsBackward(module))
            return makeError("the IR holds a backward; the LSE is added to "
                             "a forward entry");
          llvm::Expected<OwningOpRef<ModuleOp>> copy = withLseOf(module);
          if (!copy)
            return copy.takeError();
          derived = std::move(*copy);
          if (failed(verify(*derived)))
            return makeError(diagnostics.explain(
                "the forward with an LSE does not verify"));
          result = *derived;
        } else {
          llvm::Expected<ModuleOp> backward =
              backwardModuleOf(module, deterministic, derived);
          if (!backward)
            return makeError(diagnostics.explain(
                llvm::toString(backward.takeError())));
          result = *backward;
        }
        std::string text;
        llvm::raw_string_ostream os(text);
        result.print(os);
        return text;
      });
}

llvm::Expected<runtime::BackwardKernel>
fa4::compileBackwardEntry(const std::string &ir, bool deterministic,
                          const PipelineOptions &options, bool useCache,
                          bool *fromCache) {
  return onEntryModule<runtime::BackwardKernel>(
      ir,
      [&](ModuleOp module, const CollectedDiagnostics &diagnostics)
          -> llvm::Expected<runtime::BackwardKernel> {
        OwningOpRef<ModuleOp> derived;
        llvm::Expected<ModuleOp> backward =
            backwardModuleOf(module, deterministic, derived);
        if (!backward)
          return makeError(
              diagnostics.explain(llvm::toString(backward.takeError())));
        return compileModule<runtime::BackwardKernel>(
            *backward, diagnostics, options, useCache, fromCache);
      });
}

llvm::Error fa4::checkEntryLevel(ModuleOp module) {
  std::string found;
  module.walk([&](Operation *op) {
    if (!found.empty())
      return WalkResult::interrupt();
    if (auto func = dyn_cast<func::FuncOp>(op);
        func && (getKernelSpec(func) || getBackwardSpec(func)))
      found = "@" + func.getName().str() + " is already tiled (it carries " +
              (getKernelSpec(func) ? "fa4.spec" : "fa4.backward_spec") +
              ": level B or C, as --stop-after=tile and the later stages "
              "write it)";
    else if (isa<gpu::GPUModuleOp>(op))
      found = "the module already holds a gpu.module (level D, as "
              "--stop-after=nvvm writes it)";
    return WalkResult::advance();
  });
  if (found.empty())
    return llvm::Error::success();
  return makeError("the pipeline starts from entry IR (level A: a function "
                   "with fa4.attention, as --stop-after=bufferize writes it at "
                   "the latest); " +
                   found + ": run the remaining passes with fa4-opt");
}

llvm::Error fa4::checkOneKernel(ModuleOp module, bool allowBackward) {
  bool backward = holdsBackward(module);
  if (backward && !allowBackward)
    return makeError("the IR holds a backward (fa4.attention_backward): it "
                     "compiles to three kernels and a manifest of kind "
                     "\"backward\" (fa4c --backward, fa4::compileBackward, "
                     "fa4.compile(...).backward), not to one kernel");
  if (backward)
    return llvm::Error::success();
  SmallVector<std::string> kernels;
  module.walk([&](func::FuncOp func) {
    bool attention = static_cast<bool>(getKernelSpec(func));
    func.walk([&](AttentionOp) { attention = true; });
    if (attention)
      kernels.push_back("@" + func.getName().str());
  });
  if (kernels.size() == 1) {
    // The function's name becomes the PTX entry's: a PTX identifier (a
    // letter or _ first, then letters, digits, _ and $), which NVPTX's
    // emitter and ptxas take as it is.
    StringRef name = StringRef(kernels.front()).drop_front();
    bool valid = !name.empty() && name.size() <= 1024 &&
                 (llvm::isAlpha(name[0]) || name[0] == '_');
    for (char c : name)
      valid &= llvm::isAlnum(c) || c == '_' || c == '$';
    if (valid)
      return llvm::Error::success();
    return makeError("the kernel's function is named \"" + name +
                     "\", which is not a PTX identifier (a letter or _, then "
                     "letters, digits, _ or $; at most 1024 characters): "
                     "rename it");
  }
  if (kernels.empty())
    return makeError("the IR holds no attention kernel (a function with an "
                     "fa4.attention)");
  std::string list;
  for (auto [i, name] : llvm::enumerate(kernels))
    list += (i ? ", " : "") + name;
  return makeError("the IR holds " + std::to_string(kernels.size()) +
                   " attention kernels (" + list +
                   "); a cubin and its manifest describe one: compile one "
                   "function per module");
}

std::vector<std::string> fa4::variantIrStages() {
  std::vector<std::string> stages = {"entry"};
  for (StringRef stage : getPipelineStages())
    stages.push_back(stage.str());
  stages.push_back("llvm");
  stages.push_back("ptx");
  return stages;
}

namespace {
/// variantIr and entryIr once they hold the entry module.
llvm::Expected<std::string> moduleIr(ModuleOp module,
                                     const CollectedDiagnostics &diagnostics,
                                     const PipelineOptions &given,
                                     const std::string &stage) {
  if (stage == "entry")
    return printed(module);
  PipelineOptions options;
  options.copyOptionValuesFrom(given);
  bool code = stage == "llvm" || stage == "ptx";
  options.stopAfter = code ? "nvvm" : stage;
  if (llvm::Error refused = runPipeline(module, options, diagnostics))
    return std::move(refused);
  if (stage == "ptx")
    return serializeToPtx(module);
  if (stage != "llvm")
    return printed(module);
  std::string ir;
  llvm::raw_string_ostream os(ir);
  if (llvm::Error refused = writeLlvmIr(module, os))
    return std::move(refused);
  return std::move(ir);
}

llvm::Error knownStage(const std::string &stage) {
  std::vector<std::string> stages = variantIrStages();
  if (std::find(stages.begin(), stages.end(), stage) != stages.end())
    return llvm::Error::success();
  std::string message = "unknown stage '" + stage + "'; the stages are";
  for (const std::string &name : stages)
    message += " " + name;
  return makeError(message);
}

/// The entry module of a session, as variantModule and entryModule make it.
using ModuleMaker = function_ref<llvm::Expected<OwningOpRef<ModuleOp>>(
    ToolSession &, const CollectedDiagnostics &)>;

/// The IR after `stage` of the entry module `make` builds in a session.
llvm::Expected<std::string> stageIr(ModuleMaker make,
                                    const PipelineOptions &options,
                                    const std::string &stage) {
  if (llvm::Error refused = knownStage(stage))
    return std::move(refused);
  ToolSession session;
  CollectedDiagnostics diagnostics(session.getContext());
  llvm::Expected<OwningOpRef<ModuleOp>> module = make(session, diagnostics);
  if (!module)
    return module.takeError();
  return moduleIr(**module, diagnostics, options, stage);
}
} // namespace

llvm::Expected<std::string> fa4::variantIr(const Variant &variant,
                                           const PipelineOptions &options,
                                           const std::string &stage) {
  return stageIr(
      [&](ToolSession &session, const CollectedDiagnostics &diagnostics) {
        return variantModule(session, variant, diagnostics);
      },
      options, stage);
}

llvm::Expected<std::string> fa4::entryIr(const std::string &entry,
                                         const PipelineOptions &options,
                                         const std::string &stage) {
  if (llvm::Error refused = knownStage(stage))
    return std::move(refused);
  return onEntryModule<std::string>(
      entry, [&](ModuleOp module, const CollectedDiagnostics &diagnostics) {
        return moduleIr(module, diagnostics, options, stage);
      });
}

