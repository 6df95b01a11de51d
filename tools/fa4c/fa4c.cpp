//===- fa4c.cpp - the fa4 compiler driver ---------------------------------===//
//
// Compiles one attention kernel: from an entry-IR file, or from a variant
// described by flags, through the fa4 pipeline up to --stop-after.
//
//===----------------------------------------------------------------------===//

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Runtime/CompileCache.h"
#include "fa4/Driver/Compile.h"
#include "fa4/Support/IrInput.h"
#include "fa4/Driver/KernelOutput.h"
#include "fa4/Support/OutputFile.h"
#include "fa4/Driver/ToolSession.h"
#include "fa4/Pipeline/Pipeline.h"
#include "fa4/Transforms/Passes.h"
#include "TestPasses.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <chrono>

using namespace mlir;
using namespace llvm;

namespace {
enum class EmitKind { Default, Mlir, Llvm, Ptx, Cubin };
} // namespace

static cl::OptionCategory variantCategory(
    "Variant (used when no input file is given)",
    "Describe the attention to compile; fa4c writes the entry IR itself.");
static cl::OptionCategory compileCategory("Compilation");

static cl::opt<std::string> inputFile(
    cl::Positional,
    cl::desc("[entry-IR file: a func.func holding one fa4.attention]"),
    cl::init(""), cl::cat(compileCategory));
static cl::opt<std::string> outputFile("o", cl::desc("Output file ('-' for stdout)"),
                                       cl::value_desc("file"), cl::init("-"),
                                       cl::cat(compileCategory));
static cl::opt<EmitKind> emit(
    "emit",
    cl::desc("What to write (default: cubin when -o ends in .cubin, ptx for "
             ".ptx, llvm for .ll, else mlir)"),
    cl::init(EmitKind::Default),
    cl::values(
        clEnumValN(EmitKind::Mlir, "mlir",
                   "the IR after --stop-after (default: the level-C schedule, "
                   "what fa4-sim runs)"),
        clEnumValN(EmitKind::Llvm, "llvm", "the kernel as LLVM IR"),
        clEnumValN(EmitKind::Ptx, "ptx", "the kernel as PTX"),
        clEnumValN(EmitKind::Cubin, "cubin",
                   "a cubin for --target assembled by ptxas, with a launch "
                   "manifest (<output>.json) beside it")),
    cl::cat(compileCategory));
static cl::opt<std::string> target(
    "target",
    cl::desc(mlir::fa4::target::targetOptionHelp()),
    cl::init(mlir::fa4::target::defaultChip().name.str()), cl::cat(compileCategory));
static cl::opt<std::string> cudaPath(
    "cuda-path", cl::desc("CUDA toolkit root, for ptxas"),
    cl::init(FA4_CUDA_TOOLKIT_PATH), cl::cat(compileCategory));
static cl::opt<double> exp2EmulationFraction(
    "exp2-emulation-fraction",
    cl::desc("Fraction of the softmax exponentials computed with the software "
             "exp2 on the FMA units instead of ex2.approx (0 to 1; default "
             "0.125: 16 of every 128, as FA4)"),
    cl::init(0.125), cl::cat(compileCategory));
static cl::opt<bool> useCache(
    "cache",
    cl::desc("With a cubin output: take it from the compile cache when it holds "
             "this compilation, else compile and store it there "
             "($FA4_CACHE_DIR, default ~/.cache/fa4)"),
    cl::init(false), cl::cat(compileCategory));
static cl::opt<bool> timing("timing",
                            cl::desc("Print the wall time of every pass to stderr"),
                            cl::init(false), cl::cat(compileCategory));
static cl::opt<double> rescaleThreshold(
    "rescale-threshold",
    cl::desc("Online-softmax rescale threshold, in log2 units (default 8; 0 "
             "rescales whenever a row max moves)"),
    cl::init(8.0), cl::cat(compileCategory));

static cl::opt<int64_t> kvStages(
    "kv-stages",
    cl::desc("K/V ring stages (default 0: as many as the 227 KB of shared "
             "memory hold)"),
    cl::init(0), cl::cat(compileCategory));
static cl::opt<mlir::fa4::Toggle> hopperOverlap(
    "hopper-overlap",
    cl::desc("Hopper: the consumers' intra-warpgroup overlap (the next "
             "block's S and the last P·V on the tensor core during the "
             "softmax): on, off, or auto (default: on where it fits in the "
             "registers)"),
    cl::init(mlir::fa4::Toggle::Auto), mlir::fa4::toggleValues(),
    cl::cat(compileCategory));
static cl::opt<mlir::fa4::Toggle> hopperPingpong(
    "hopper-pingpong",
    cl::desc("Hopper: the two consumer warpgroups take turns issuing their "
             "MMAs, so that one's softmax runs under the other's (on, off, or "
             "auto: on with the overlap)"),
    cl::init(mlir::fa4::Toggle::Auto), mlir::fa4::toggleValues(),
    cl::cat(compileCategory));
static cl::opt<int64_t> smCount(
    "sm-count",
    cl::desc(mlir::fa4::target::smCountOptionHelp()),
    cl::init(0), cl::cat(compileCategory));
static cl::opt<std::string> testMutation(
    "test-mutation",
    cl::desc("Test only: break the level-C schedule's protocol in a named way "
             "(fa4-test-mutate-protocol), to check that fa4-sim catches it"),
    cl::value_desc("name"), cl::init(""), cl::cat(compileCategory));

static cl::opt<int64_t> headDim("head-dim", cl::desc("Head dim: 64, 96 or 128"),
                                cl::init(128), cl::cat(variantCategory));
static cl::opt<int64_t> qHeads("q-heads", cl::desc("Query heads"), cl::init(32),
                               cl::cat(variantCategory));
static cl::opt<int64_t> kvHeads(
    "kv-heads", cl::desc("K/V heads (q-heads / kv-heads query heads share one)"),
    cl::init(8), cl::cat(variantCategory));
static cl::opt<fa4::MaskKind> mask(
    "mask", cl::desc("Mask"), cl::init(fa4::MaskKind::none),
    cl::values(clEnumValN(fa4::MaskKind::none, "none", "every key is visible"),
               clEnumValN(fa4::MaskKind::causal, "causal",
                          "bottom-right aligned causal mask"),
               clEnumValN(fa4::MaskKind::window, "window",
                          "sliding window (--window-left, --window-right)")),
    cl::cat(variantCategory));
static cl::opt<int64_t> windowLeft(
    "window-left", cl::desc("Keys visible left of the diagonal (-1: unbounded)"),
    cl::init(-1), cl::cat(variantCategory));
static cl::opt<int64_t> windowRight(
    "window-right",
    cl::desc("Keys visible right of the diagonal (-1: unbounded)"),
    cl::init(-1), cl::cat(variantCategory));
static cl::opt<std::string> dtype("dtype", cl::desc("Input dtype: fp16 or bf16"),
                                  cl::init("fp16"), cl::cat(variantCategory));
static cl::opt<double> scale("scale",
                             cl::desc("Softmax scale (default 1/sqrt(head-dim))"),
                             cl::init(0.0), cl::cat(variantCategory));
static cl::opt<double> softcap("softcap",
                               cl::desc("Softcap (0: off)"), cl::init(0.0),
                               cl::cat(variantCategory));
static cl::opt<bool> lse("lse", cl::desc("Also write the log-sum-exp"),
                         cl::init(false), cl::cat(variantCategory));

/// The variant the flags describe, as entry IR (fa4/Driver/Compile.h).
static OwningOpRef<ModuleOp> buildVariant(MLIRContext &context) {
  fa4::Variant variant;
  variant.headDim = headDim;
  variant.qHeads = qHeads;
  variant.kvHeads = kvHeads;
  variant.mask = mask;
  variant.windowLeft = windowLeft;
  variant.windowRight = windowRight;
  variant.dtype = dtype;
  if (scale.getNumOccurrences())
    variant.scale = scale;
  variant.softcap = softcap;
  variant.lse = lse;
  std::string error;
  OwningOpRef<ModuleOp> module = fa4::buildVariantModule(context, variant, error);
  if (!module && !error.empty())
    errs() << "fa4c: --" << error << "\n";
  return module;
}

static bool usesVariantFlags() {
  cl::Option *variantOptions[] = {&headDim,    &qHeads,      &kvHeads,
                                 &mask,       &windowLeft,  &windowRight,
                                 &dtype,      &scale,       &softcap,
                                 &lse};
  return llvm::any_of(variantOptions, [](cl::Option *option) {
    return option->getNumOccurrences() > 0;
  });
}

static int compile(std::unique_ptr<MemoryBuffer> input, StringRef stopAfter);

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  // libLLVM registers a code-generator `-stop-after` of its own; fa4c's
  // pipeline stages take the name, so that option is unregistered first.
  auto registered = cl::getRegisteredOptions();
  if (auto it = registered.find("stop-after"); it != registered.end())
    it->second->removeArgument();
  static const std::string stages =
      "Last pipeline stage to run, with --emit=mlir (default: scheduler): " +
      join(fa4::getPipelineStages(), ", ");
  static cl::opt<std::string> stopAfter("stop-after", cl::desc(stages),
                                        cl::value_desc("stage"), cl::init(""),
                                        cl::cat(compileCategory));
  cl::HideUnrelatedOptions({&variantCategory, &compileCategory});
  // A bad flag is exit code 2, as --help says (LLVM would exit 1).
  if (!cl::ParseCommandLineOptions(
      argc, argv,
      "fa4c: compile one FlashAttention-4 kernel\n\n"
      "  fa4c attention.mlir -o attention.cubin      (cubin + "
      "attention.cubin.json)\n"
      "  fa4c attention.mlir --stop-after=tile       (the tile program)\n"
      "  fa4c --head-dim 128 --q-heads 32 --kv-heads 8 --mask causal \\\n"
      "       --dtype fp16 --lse --target sm_100a -o attn.cubin --timing\n", &llvm::errs()))
    return 2;

  if (!inputFile.empty() && usesVariantFlags()) {
    errs() << "fa4c: variant flags (--head-dim, --mask, ...) describe the "
              "kernel when no input file is given; drop them or the file\n";
    return 2;
  }
  return fa4::runToolOnInput(
      "fa4c", inputFile, [&](std::unique_ptr<MemoryBuffer> input) {
        return compile(std::move(input), stopAfter);
      });
}

/// fa4c after its options: compiles `input` (the variant the flags describe
/// when null) and writes what --emit asks for.
static int compile(std::unique_ptr<MemoryBuffer> input, StringRef stopAfter) {
  fa4::ToolSession session;
  MLIRContext &context = session.getContext();
  std::string error;
  OwningOpRef<ModuleOp> module =
      input ? session.parse(std::move(input)) : buildVariant(context);
  if (!module)
    return 1;

  EmitKind kind = emit;
  if (kind == EmitKind::Default) {
    StringRef extension = llvm::sys::path::extension(outputFile);
    kind = extension == ".cubin" ? EmitKind::Cubin
           : extension == ".ptx" ? EmitKind::Ptx
           : extension == ".ll"  ? EmitKind::Llvm
                                 : EmitKind::Mlir;
  }
  if (kind != EmitKind::Mlir && !stopAfter.empty()) {
    errs() << "fa4c: --stop-after applies to --emit=mlir; llvm, ptx and cubin "
              "run the whole pipeline\n";
    return 2;
  }
  if (kind == EmitKind::Cubin && outputFile == "-") {
    errs() << "fa4c: --emit=cubin needs -o <file>\n";
    return 2;
  }

  // The pipeline starts from entry IR; a binary and its manifest describe
  // one kernel.
  if (!fa4::checkEntryLevel(*module, error) ||
      (kind != EmitKind::Mlir && !fa4::checkOneKernel(*module, error))) {
    errs() << "fa4c: " << error << "\n";
    return 2;
  }

  // The chip: --target, else the one the module names (its fa4.target),
  // else the table's default. A module for another chip than --target is
  // refused by the pipeline's first stage.
  std::string chip = target;
  if (target.getNumOccurrences() == 0)
    if (const fa4::target::ChipInfo *named = fa4::getModuleTarget(*module))
      chip = named->name.str();

  fa4::PipelineOptions options;
  // Without --stop-after, MLIR output is the schedule (level C); the other
  // kinds need the kernel at level D.
  options.stopAfter = !stopAfter.empty()        ? stopAfter.str()
                      : kind == EmitKind::Mlir ? std::string("scheduler")
                                               : std::string("nvvm");
  options.rescaleThreshold = rescaleThreshold;
  options.kvStages = kvStages;
  options.hopperOverlap = hopperOverlap;
  options.hopperPingpong = hopperPingpong;
  options.smCount = smCount;
  options.target = chip;
  options.cudaPath = cudaPath;
  options.exp2EmulationFraction = exp2EmulationFraction;
  // The compile cache (fa4/Driver/Compile.h, docs/Runtime.md).
  std::string cacheKey;
  std::unique_ptr<fa4::runtime::CompileCache> cache;
  SmallString<256> ptxPath(outputFile);
  llvm::sys::path::replace_extension(ptxPath, "ptx");
  if (ptxPath == StringRef(outputFile))
    ptxPath += ".ptx";
  if (useCache) {
    if (kind != EmitKind::Cubin) {
      errs() << "fa4c: --cache applies to cubin output (-o <file>.cubin)\n";
      return 2;
    }
    auto started = std::chrono::steady_clock::now();
    std::string directory = fa4::runtime::CompileCache::defaultDirectory();
    if (directory.empty()) {
      errs() << "fa4c: --cache needs FA4_CACHE_DIR, XDG_CACHE_HOME or HOME\n";
      return 2;
    }
    if (!fa4::compileCacheKey(*module, options, fa4::buildIdentity(), cacheKey,
                              error)) {
      errs() << "fa4c: --cache: " << error << "\n";
      return 2;
    }
    cache = std::make_unique<fa4::runtime::CompileCache>(directory);
    fa4::runtime::CompileCache::Entry entry;
    std::string rejected;
    bool hit = cache->lookup(cacheKey, entry, &rejected);
    if (!rejected.empty())
      errs() << "fa4c: warning: " << rejected << "\n";
    if (hit) {
      if (!fa4::runtime::CompileCache::materialize(entry, outputFile,
                                                   std::string(ptxPath), error)) {
        errs() << "fa4c: " << error << "\n";
        return 2;
      }
      std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - started;
      if (timing)
        errs() << llvm::format("  %.4f  compile cache hit (%s)\n", seconds.count(),
                               cacheKey.substr(0, 16).c_str());
      return 0;
    }
  }

  PassManager pm(&context);
  if (failed(fa4::buildPipeline(pm, options, error))) {
    errs() << "fa4c: " << error << "\n";
    return 2;
  }
  if (!testMutation.empty()) {
    // The mutations break a finished schedule: the level-C output only.
    if (kind != EmitKind::Mlir || options.stopAfter.getValue() != "scheduler") {
      errs() << "fa4c: --test-mutation applies to the level-C schedule "
                "(--emit=mlir without --stop-after)\n";
      return 2;
    }
    if (!llvm::is_contained(fa4::test::protocolMutations(),
                            StringRef(testMutation))) {
      errs() << "fa4c: unknown test mutation '" << testMutation
             << "' (expected one of: "
             << join(fa4::test::protocolMutations(), ", ") << ")\n";
      return 2;
    }
    pm.addNestedPass<func::FuncOp>(
        fa4::test::createMutateProtocolPass(testMutation));
  }

  if (timing)
    pm.enableTiming();
  if (failed(pm.run(*module)))
    return 1;

  // Every file is written whole or not at all (fa4/Support/OutputFile.h); the
  // cubin is ptxas's to write.
  auto write = [&](StringRef path, llvm::function_ref<void(raw_ostream &)> print) {
    std::unique_ptr<fa4::OutputFile> file = fa4::OutputFile::open(path, error);
    if (!file)
      return false;
    print(file->os());
    return file->commit(error);
  };
  // Serialization runs outside the pass manager; --timing reports it too.
  auto timed = [&](StringRef what, auto &&step) {
    auto start = std::chrono::steady_clock::now();
    LogicalResult result = step();
    std::chrono::duration<double> seconds =
        std::chrono::steady_clock::now() - start;
    if (timing)
      errs() << llvm::format("  %.4f  %s\n", seconds.count(), what.data());
    return result;
  };
  switch (kind) {
  case EmitKind::Default:
  case EmitKind::Mlir:
    if (!write(outputFile, [&](raw_ostream &os) { module->print(os); os << "\n"; })) {
      errs() << "fa4c: " << error << "\n";
      return 1;
    }
    return 0;
  case EmitKind::Llvm: {
    std::string llvmIr;
    raw_string_ostream os(llvmIr);
    if (failed(fa4::writeLlvmIr(*module, os, error))) {
      errs() << "fa4c: " << error << "\n";
      return 1;
    }
    if (!write(outputFile, [&](raw_ostream &file) { file << llvmIr; })) {
      errs() << "fa4c: " << error << "\n";
      return 1;
    }
    return 0;
  }
  case EmitKind::Ptx:
  case EmitKind::Cubin: {
    std::string ptx;
    LogicalResult serialized = timed("gpu-module-to-binary (PTX)", [&] {
      return fa4::serializeToPtx(*module, ptx, error);
    });
    if (failed(serialized)) {
      errs() << "fa4c: " << error << "\n";
      return 1;
    }
    if (kind == EmitKind::Ptx) {
      if (!write(outputFile, [&](raw_ostream &os) { os << ptx; })) {
        errs() << "fa4c: " << error << "\n";
        return 1;
      }
      return 0;
    }
    fa4::PtxasReport report;
    std::string cubin;
    LogicalResult assembled = timed("ptxas (cubin)", [&] {
      return fa4::assembleCubin(ptx, cudaPath, chip, cubin, report, error);
    });
    if (failed(assembled)) {
      errs() << "fa4c: " << error << "\n";
      return 1;
    }
    // The cubin, the PTX beside it (what fa4-emu runs) and the manifest are
    // one kernel, written as a set (fa4/Support/OutputFile.h): a failed
    // write (a full disk) leaves whatever an earlier run wrote there.
    std::string manifestPath = outputFile + ".json";
    std::string manifestText =
        fa4::launchManifest(*module, chip, outputFile, ptxPath, report);
    if (!fa4::writeFileSet({{ptxPath, ptx},
                            {manifestPath, manifestText},
                            {outputFile, cubin}},
                           error)) {
      errs() << "fa4c: " << error << "\n";
      return 1;
    }
    if (cache) {
      fa4::runtime::CompileCache::Entry entry;
      entry.ptx = ptx;
      entry.manifest = manifestText;
      entry.cubinName = llvm::sys::path::filename(outputFile).str();
      entry.ptxName = llvm::sys::path::filename(ptxPath).str();
      entry.cubin = std::move(cubin);
      // A cache that cannot be written costs the next run a compile, not
      // this one its result.
      if (!cache->store(cacheKey, entry, error))
        errs() << "fa4c: warning: the compile cache was not written: " << error
               << "\n";
    }
    return 0;
  }
  }
  llvm_unreachable("every kind is written above");
}
