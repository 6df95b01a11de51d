//===- Compile.cpp - a variant to a kernel, in process ---------------------===//

#include "fa4/Driver/Compile.h"

#include "fa4/Dialect/FA4/IR/FA4Dialect.h"

#include "fa4/Runtime/CompileCache.h"
#include "fa4/Runtime/Runtime.h"
#include "fa4/Support/IrInput.h"
#include "fa4/Driver/KernelOutput.h"
#include "fa4/Driver/ToolSession.h"

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
#include <dlfcn.h>

using namespace mlir;
using namespace mlir::fa4;

OwningOpRef<ModuleOp> fa4::buildVariantModule(MLIRContext &context,
                                              const Variant &variant,
                                              std::string &error) {
  OpBuilder b(&context);
  Location loc = b.getUnknownLoc();
  Type element;
  if (variant.dtype == "fp16") {
    element = b.getF16Type();
  } else if (variant.dtype == "bf16") {
    element = b.getBF16Type();
  } else {
    error = "dtype must be fp16 or bf16, got '" + variant.dtype + "'";
    return nullptr;
  }
  if (variant.qHeads <= 0 || variant.kvHeads <= 0) {
    error = "q_heads and kv_heads must be positive";
    return nullptr;
  }
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  int64_t dyn = ShapedType::kDynamic;
  // Q, K, V and O with any strides TMA expresses (head_dim contiguous): the
  // kernel is the same for every layout, and a launch binds its tensors'
  // strides. (Entry IR written with the identity layout asks for dense
  // tensors, and the launch holds it to that.)
  auto layout = StridedLayoutAttr::get(&context, dyn, {dyn, dyn, dyn, 1});
  auto qType =
      MemRefType::get({dyn, dyn, variant.qHeads, variant.headDim}, element, layout);
  auto kvType =
      MemRefType::get({dyn, dyn, variant.kvHeads, variant.headDim}, element, layout);
  SmallVector<Type> arguments = {qType, kvType, kvType, qType};
  if (variant.lse)
    arguments.push_back(MemRefType::get({dyn, variant.qHeads, dyn}, b.getF32Type()));
  b.setInsertionPointToEnd(module->getBody());
  auto func = func::FuncOp::create(b, loc, "attention", b.getFunctionType(arguments, {}));
  Block *body = func.addEntryBlock();
  b.setInsertionPointToEnd(body);
  AttentionOp::create(
      b, loc, body->getArgument(0), body->getArgument(1), body->getArgument(2),
      body->getArgument(3), variant.lse ? body->getArgument(4) : Value(),
      /*extras=*/ValueRange(), MaskKindAttr::get(&context, variant.mask),
      b.getI64IntegerAttr(variant.windowLeft), b.getI64IntegerAttr(variant.windowRight),
      variant.scale ? b.getF32FloatAttr(*variant.scale) : FloatAttr(),
      b.getF32FloatAttr(variant.softcap), /*heads_first=*/UnitAttr(),
      /*block_mask=*/IntegerAttr());
  func::ReturnOp::create(b, loc);
  if (failed(verify(*module))) {
    error.clear(); // the verifier has reported
    return nullptr;
  }
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

bool fa4::compileCacheKey(ModuleOp module, const PipelineOptions &options,
                          const std::string &compiler, std::string &key,
                          std::string &error) {
  if (compiler.empty()) {
    error = "cannot identify the compiler's binary";
    return false;
  }
  std::string entryIr, ptxas;
  {
    llvm::raw_string_ostream os(entryIr);
    module->print(os);
  }
  if (failed(ptxasVersion(options.cudaPath, ptxas, error)))
    return false;
  key = runtime::CompileCache::key(
      {"fa4-cache-1", entryIr, options.target, std::to_string(options.rescaleThreshold),
       std::to_string(options.kvStages), std::to_string(options.smCount),
       std::to_string(options.exp2EmulationFraction),
       toggleName(options.hopperOverlap).str(), toggleName(options.hopperPingpong).str(),
       compiler, LLVM_VERSION_STRING, ptxas});
  return true;
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

/// A variant's entry module in `session`, or null with `error` set.
OwningOpRef<ModuleOp> variantModule(ToolSession &session, const Variant &variant,
                                    const CollectedDiagnostics &diagnostics,
                                    std::string &error) {
  OwningOpRef<ModuleOp> module =
      buildVariantModule(session.getContext(), variant, error);
  if (!module && error.empty())
    error = diagnostics.explain("the variant does not verify");
  return module;
}
/// Runs the pipeline `options` describe on `module`; a failure's `error`
/// carries the diagnostics.
bool runPipeline(ModuleOp module, const PipelineOptions &options,
                 const CollectedDiagnostics &diagnostics, std::string &error) {
  PassManager pm(module.getContext());
  if (failed(buildPipeline(pm, options, error)))
    return false;
  if (failed(pm.run(module))) {
    error = diagnostics.explain("the pipeline failed");
    return false;
  }
  return true;
}

/// The entry IR `ir` parsed in `session`, or null with `error` set.
OwningOpRef<ModuleOp> entryModule(ToolSession &session, const std::string &ir,
                                  const CollectedDiagnostics &diagnostics,
                                  std::string &error) {
  OwningOpRef<ModuleOp> module = session.parseText(ir, "entry");
  if (!module) {
    error = diagnostics.explain("the entry IR does not parse");
    return nullptr;
  }
  if (failed(verify(*module))) {
    error = diagnostics.explain("the entry IR does not verify");
    return nullptr;
  }
  return module;
}

/// compileVariant and compileEntry once they hold the entry module.
bool compileModule(ModuleOp module, const CollectedDiagnostics &diagnostics,
                   const PipelineOptions &given, bool useCache,
                   runtime::Kernel &kernel, std::string &error,
                   bool *fromCache) {
  if (fromCache)
    *fromCache = false;
  if (!checkEntryLevel(module, error) || !checkOneKernel(module, error))
    return false;
  PipelineOptions options;
  options.copyOptionValuesFrom(given);
  options.stopAfter = "nvvm";
  std::string key;
  std::unique_ptr<runtime::CompileCache> cache;
  runtime::CompileCache::Entry entry;
  if (useCache) {
    std::string directory = runtime::CompileCache::defaultDirectory();
    if (!directory.empty() &&
        compileCacheKey(module, options, buildIdentity(), key, error)) {
      cache = std::make_unique<runtime::CompileCache>(directory);
      // An entry that verifies (CompileCache::lookup) and describes a
      // kernel fa4 launches; anything else is compiled afresh and replaced.
      if (cache->lookup(key, entry) &&
          runtime::parseManifest(entry.manifest, kernel.manifest, error)) {
        kernel.ptx = entry.ptx;
        kernel.cubin.assign(entry.cubin.begin(), entry.cubin.end());
        kernel.manifestJson = entry.manifest;
        if (kernel.check(error)) {
          if (fromCache)
            *fromCache = true;
          return true;
        }
      }
    }
    error.clear();
  }
  if (!runPipeline(module, options, diagnostics, error))
    return false;
  if (failed(serializeToPtx(module, kernel.ptx, error))) {
    error = diagnostics.explain(error);
    return false;
  }
  PtxasReport report;
  std::string cubin;
  if (failed(assembleCubin(kernel.ptx, options.cudaPath, options.target, cubin,
                           report, error)))
    return false;
  kernel.cubin.assign(cubin.begin(), cubin.end());
  std::string manifest = launchManifest(module, options.target, "kernel.cubin",
                                        "kernel.ptx", report);
  if (!runtime::parseManifest(manifest, kernel.manifest, error))
    return false;
  kernel.manifestJson = manifest;
  if (!kernel.check(error))
    return false;
  if (cache) {
    entry.cubin = std::move(cubin);
    entry.ptx = kernel.ptx;
    entry.manifest = manifest;
    entry.cubinName = "kernel.cubin";
    entry.ptxName = "kernel.ptx";
    std::string ignored; // an unwritable cache costs the next compile only
    cache->store(key, entry, ignored);
  }
  return true;
}

} // namespace

bool fa4::compileVariant(const Variant &variant, const PipelineOptions &options,
                         bool useCache, runtime::Kernel &kernel,
                         std::string &error, bool *fromCache) {
  ToolSession session;
  CollectedDiagnostics diagnostics(session.getContext());
  OwningOpRef<ModuleOp> module = variantModule(session, variant, diagnostics, error);
  return module && compileModule(*module, diagnostics, options, useCache,
                                 kernel, error, fromCache);
}

bool fa4::compileEntry(const std::string &ir, const PipelineOptions &options,
                       bool useCache, runtime::Kernel &kernel,
                       std::string &error, bool *fromCache) {
  // The caller's text is parsed, and everything that walks it runs, on a
  // stack sized to it (fa4/Support/IrInput.h): a Python thread's own stack
  // may be small.
  bool compiled = false;
  if (!runOnIrStack(
          ir.size(),
          [&] {
            ToolSession session;
            CollectedDiagnostics diagnostics(session.getContext());
            OwningOpRef<ModuleOp> module =
                entryModule(session, ir, diagnostics, error);
            compiled = module && compileModule(*module, diagnostics, options,
                                               useCache, kernel, error,
                                               fromCache);
          },
          error))
    return false;
  return compiled;
}

bool fa4::checkEntryLevel(ModuleOp module, std::string &error) {
  std::string found;
  module.walk([&](Operation *op) {
    if (!found.empty())
      return WalkResult::interrupt();
    if (auto func = dyn_cast<func::FuncOp>(op); func && getKernelSpec(func))
      found = "@" + func.getName().str() +
              " is already tiled (it carries fa4.spec: level B or C, as "
              "--stop-after=tile and the later stages write it)";
    else if (isa<gpu::GPUModuleOp>(op))
      found = "the module already holds a gpu.module (level D, as "
              "--stop-after=nvvm writes it)";
    return WalkResult::advance();
  });
  if (found.empty())
    return true;
  error = "the pipeline starts from entry IR (level A: a function with "
          "fa4.attention, as --stop-after=bufferize writes it at the latest); " +
          found + ": run the remaining passes with fa4-opt";
  return false;
}

bool fa4::checkOneKernel(ModuleOp module, std::string &error) {
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
      return true;
    error = "the kernel's function is named \"" + name.str() +
            "\", which is not a PTX identifier (a letter or _, then letters, "
            "digits, _ or $; at most 1024 characters): rename it";
    return false;
  }
  if (kernels.empty()) {
    error = "the IR holds no attention kernel (a function with an "
            "fa4.attention)";
    return false;
  }
  error = "the IR holds " + std::to_string(kernels.size()) +
          " attention kernels (";
  for (auto [i, name] : llvm::enumerate(kernels))
    error += (i ? ", " : "") + name;
  error += "); a cubin and its manifest describe one: compile one function "
           "per module";
  return false;
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
bool moduleIr(ModuleOp module, const CollectedDiagnostics &diagnostics,
              const PipelineOptions &given, const std::string &stage,
              std::string &ir, std::string &error) {
  ir.clear();
  llvm::raw_string_ostream os(ir);
  if (stage == "entry") {
    module->print(os);
    return true;
  }
  PipelineOptions options;
  options.copyOptionValuesFrom(given);
  bool code = stage == "llvm" || stage == "ptx";
  options.stopAfter = code ? "nvvm" : stage;
  if (!runPipeline(module, options, diagnostics, error))
    return false;
  if (stage == "llvm")
    return succeeded(writeLlvmIr(module, os, error));
  if (stage == "ptx")
    return succeeded(serializeToPtx(module, ir, error));
  module->print(os);
  return true;
}

bool knownStage(const std::string &stage, std::string &error) {
  std::vector<std::string> stages = variantIrStages();
  if (std::find(stages.begin(), stages.end(), stage) != stages.end())
    return true;
  error = "unknown stage '" + stage + "'; the stages are";
  for (const std::string &name : stages)
    error += " " + name;
  return false;
}

/// The IR after `stage` of the entry module `make` builds in a session.
bool stageIr(function_ref<OwningOpRef<ModuleOp>(ToolSession &,
                                                const CollectedDiagnostics &,
                                                std::string &)>
                 make,
             const PipelineOptions &options, const std::string &stage,
             std::string &ir, std::string &error) {
  if (!knownStage(stage, error))
    return false;
  ToolSession session;
  CollectedDiagnostics diagnostics(session.getContext());
  OwningOpRef<ModuleOp> module = make(session, diagnostics, error);
  return module && moduleIr(*module, diagnostics, options, stage, ir, error);
}
} // namespace

bool fa4::variantIr(const Variant &variant, const PipelineOptions &options,
                    const std::string &stage, std::string &ir,
                    std::string &error) {
  return stageIr(
      [&](ToolSession &session, const CollectedDiagnostics &diagnostics,
          std::string &error) {
        return variantModule(session, variant, diagnostics, error);
      },
      options, stage, ir, error);
}

bool fa4::entryIr(const std::string &entry, const PipelineOptions &options,
                  const std::string &stage, std::string &ir,
                  std::string &error) {
  // On a stack sized to the text, as compileEntry.
  bool staged = false;
  if (!runOnIrStack(
          entry.size(),
          [&] {
            staged = stageIr(
                [&](ToolSession &session,
                    const CollectedDiagnostics &diagnostics,
                    std::string &error) {
                  return entryModule(session, entry, diagnostics, error);
                },
                options, stage, ir, error);
          },
          error))
    return false;
  return staged;
}
