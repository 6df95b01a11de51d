//===- fa4c.cpp - the fa4 compiler driver ---------------------------------===//
//
// Compiles one attention kernel: from an entry-IR file, or from a variant
// described by flags, through the fa4 pipeline up to --stop-after.
//
//===----------------------------------------------------------------------===//

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Tools/ToolSession.h"
#include "fa4/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace mlir;
using namespace llvm;

namespace {
enum class EmitKind { Mlir };
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
    "emit", cl::desc("What to write"), cl::init(EmitKind::Mlir),
    cl::values(clEnumValN(EmitKind::Mlir, "mlir", "the IR after the last stage")),
    cl::cat(compileCategory));
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
static cl::opt<int64_t> smCount(
    "sm-count",
    cl::desc("SMs of the target, the persistent grid's size (default 148, "
             "B200)"),
    cl::init(148), cl::cat(compileCategory));
static cl::opt<std::string> testMutation(
    "test-mutation",
    cl::desc("Test only: break the level-C protocol in a named way, to check "
             "that fa4-sim catches it"),
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

/// The variant's entry IR: one function whose arguments are Q, K, V, O (and
/// the LSE), holding one fa4.attention.
static OwningOpRef<ModuleOp> buildVariant(MLIRContext &context) {
  OpBuilder b(&context);
  Location loc = b.getUnknownLoc();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  Type element;
  if (dtype == "fp16") {
    element = b.getF16Type();
  } else if (dtype == "bf16") {
    element = b.getBF16Type();
  } else {
    errs() << "fa4c: --dtype must be fp16 or bf16, got '" << dtype << "'\n";
    return nullptr;
  }
  if (qHeads <= 0 || kvHeads <= 0) {
    errs() << "fa4c: --q-heads and --kv-heads must be positive\n";
    return nullptr;
  }
  int64_t dyn = ShapedType::kDynamic;
  auto qType = MemRefType::get({dyn, dyn, qHeads, headDim}, element);
  auto kvType = MemRefType::get({dyn, dyn, kvHeads, headDim}, element);
  SmallVector<Type> arguments = {qType, kvType, kvType, qType};
  if (lse)
    arguments.push_back(MemRefType::get({dyn, qHeads, dyn}, b.getF32Type()));
  b.setInsertionPointToEnd(module->getBody());
  auto func = b.create<func::FuncOp>(loc, "attention",
                                     b.getFunctionType(arguments, {}));
  Block *body = func.addEntryBlock();
  b.setInsertionPointToEnd(body);
  b.create<fa4::AttentionOp>(
      loc, body->getArgument(0), body->getArgument(1), body->getArgument(2),
      body->getArgument(3), lse ? body->getArgument(4) : Value(),
      fa4::MaskKindAttr::get(&context, mask), b.getI64IntegerAttr(windowLeft),
      b.getI64IntegerAttr(windowRight),
      scale.getNumOccurrences() ? b.getF32FloatAttr(scale) : FloatAttr(),
      b.getF32FloatAttr(softcap));
  b.create<func::ReturnOp>(loc);
  if (failed(verify(*module)))
    return nullptr;
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

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  // libLLVM registers a code-generator `-stop-after` of its own; fa4c's
  // pipeline stages take the name, so that option is unregistered first.
  auto registered = cl::getRegisteredOptions();
  if (auto it = registered.find("stop-after"); it != registered.end())
    it->second->removeArgument();
  static const std::string stages =
      "Last pipeline stage to run (default: all): " +
      join(fa4::getPipelineStages(), ", ");
  static cl::opt<std::string> stopAfter("stop-after", cl::desc(stages),
                                        cl::value_desc("stage"), cl::init(""),
                                        cl::cat(compileCategory));
  cl::HideUnrelatedOptions({&variantCategory, &compileCategory});
  cl::ParseCommandLineOptions(
      argc, argv,
      "fa4c: compile one FlashAttention-4 kernel\n\n"
      "  fa4c attention.mlir --stop-after=tile --emit=mlir\n"
      "  fa4c --head-dim 128 --q-heads 32 --kv-heads 8 --mask causal \\\n"
      "       --dtype fp16 --lse --emit=mlir\n");

  fa4::ToolSession session;
  MLIRContext &context = session.getContext();
  std::string error;
  OwningOpRef<ModuleOp> module;
  if (!inputFile.empty()) {
    if (usesVariantFlags()) {
      errs() << "fa4c: variant flags (--head-dim, --mask, ...) describe the "
                "kernel when no input file is given; drop them or the file\n";
      return 2;
    }
    module = session.parseFile(inputFile, error);
    if (!module && !error.empty()) {
      errs() << "fa4c: " << error << "\n";
      return 2;
    }
  } else {
    module = buildVariant(context);
  }
  if (!module)
    return 1;

  fa4::PipelineOptions options;
  options.stopAfter = stopAfter;
  options.rescaleThreshold = rescaleThreshold;
  options.kvStages = kvStages;
  options.smCount = smCount;
  options.testMutation = testMutation;
  PassManager pm(&context);
  if (failed(fa4::buildPipeline(pm, options, error))) {
    errs() << "fa4c: " << error << "\n";
    return 2;
  }
  if (timing)
    pm.enableTiming();
  if (failed(pm.run(*module)))
    return 1;

  auto output = openOutputFile(outputFile, &error);
  if (!output) {
    errs() << "fa4c: " << error << "\n";
    return 2;
  }
  module->print(output->os());
  output->os() << "\n";
  output->keep();
  return 0;
}
