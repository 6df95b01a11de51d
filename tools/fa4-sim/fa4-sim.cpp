//===- fa4-sim.cpp - run fa4 IR on the CPU and check it -------------------===//
//
// Reads level-A, -B or -C IR, runs it on seeded random inputs of the given
// sizes (or, at level A, on inputs read from files), judges it against a
// float64 reference (with a low-precision one as the yardstick) and, when
// given, an expected O read from a file, prints one JSON object. Exit
// status: 0 within tolerance (and at level C a clean protocol), 1 otherwise,
// 2 when the run cannot be made: bad flags, or IR it cannot run or does not
// trust.
//
//===----------------------------------------------------------------------===//

#include "fa4/Support/NumberOption.h"
#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Sim/Simulator.h"
#include "fa4/Support/IrInput.h"
#include "fa4/Support/OutputFile.h"
#include "fa4/Driver/ToolSession.h"
#include "fa4/Pipeline/Pipeline.h"
#include "fa4/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"

using namespace mlir;
using namespace llvm;

static cl::OptionCategory simCategory("fa4-sim");
static cl::opt<std::string> inputFile(cl::Positional,
                                      cl::desc("[IR file, '-' for stdin]"),
                                      cl::init("-"), cl::cat(simCategory));
static cl::opt<int64_t> batch("batch", cl::desc("Batch size (varlen: the number of sequences, their lengths drawn from the seed)"), cl::init(1),
                              cl::cat(simCategory));
static cl::opt<int64_t> seqQ("seq-q", cl::desc("Query sequence length (varlen: the longest a sequence may draw)"),
                             cl::init(128), cl::cat(simCategory));
static cl::opt<int64_t> seqK("seq-k", cl::desc("Key/value sequence length (varlen: the longest a sequence may draw)"),
                             cl::init(128), cl::cat(simCategory));
static cl::opt<uint64_t> seed("seed", cl::desc("Seed of the random inputs"),
                              cl::init(0), cl::cat(simCategory));
static cl::opt<fa4::sim::InputDistribution> distribution(
    "dist", cl::desc("Input distribution"),
    cl::init(fa4::sim::InputDistribution::Normal),
    cl::values(
        clEnumValN(fa4::sim::InputDistribution::Normal, "normal",
                   "standard normal Q, K, V"),
        clEnumValN(fa4::sim::InputDistribution::Growing, "growing",
                   "scores that grow block by block, forcing rescales"),
        clEnumValN(fa4::sim::InputDistribution::Outliers, "outliers",
                   "rare large-magnitude entries"),
        clEnumValN(fa4::sim::InputDistribution::Spikes, "spikes",
                   "N(0, 1) plus rare N(0, 100) outliers (the FlashAttention-3 "
                   "paper's FP8 accuracy inputs)"),
               clEnumValN(fa4::sim::InputDistribution::NonFinite, "nonfinite",
                          "NaN and +inf entries in a few rows of Q and K")),
    cl::cat(simCategory));
static cl::opt<bool> fp8Rotation(
    "fp8-rotation",
    cl::desc("FP8 (e4m3) inputs: rotate the drawn Q and K by a random "
             "Hadamard transform before rounding them to e4m3 (incoherent "
             "processing, as the FlashAttention-3 paper's; head dims 64 and "
             "128)"),
    cl::init(false), cl::cat(simCategory));
static mlir::fa4::NumberOption absTolerance("atol", cl::desc("Absolute tolerance"),
                            cl::init(1e-2), cl::cat(simCategory));
static mlir::fa4::NumberOption relTolerance("rtol", cl::desc("Relative tolerance of the per-element test, used only where the low-precision reference overflows"),
                            cl::init(1e-2), cl::cat(simCategory));
static cl::opt<int64_t> interleavings(
    "interleavings",
    cl::desc("Level C: run this many schedules of the roles and asynchronous "
             "ops, each from its own seed; every second one completes "
             "asynchronous work only when no role can run"),
    cl::init(1), cl::cat(simCategory));
static cl::opt<std::string> inputsDir(
    "inputs",
    cl::desc("Level A: read Q, K, V and the extras from DIR/argN.bin, N the "
             "entry function's argument each one is (instead of drawing them "
             "from --seed). Each file: float32, little-endian, row-major in "
             "the argument's declared shape, dynamic dimensions taking "
             "--batch, --seq-q, --seq-k (an extra's the largest of those and "
             "q_heads); values are rounded to the element type"),
    cl::value_desc("DIR"), cl::cat(simCategory));
static cl::opt<std::string> expectFile(
    "expect",
    cl::desc("Level A: compare O with FILE (float32, little-endian, "
             "row-major in O's declared shape, heads_first included) and "
             "report expect_max_abs_err; ok only within --expect-atol"),
    cl::value_desc("FILE"), cl::cat(simCategory));
static mlir::fa4::NumberOption expectTolerance(
    "expect-atol", cl::desc("Absolute tolerance of --expect"), cl::init(2e-2),
    cl::cat(simCategory));
static mlir::fa4::NumberOption rescaleThreshold(
    "rescale-threshold",
    cl::desc("Rescale threshold used when lowering level-A input"),
    cl::init(8.0), cl::cat(simCategory));

static int fail(const Twine &message) {
  errs() << "fa4-sim: " << message << "\n";
  return 2;
}

static int simulateInput(std::unique_ptr<MemoryBuffer> input);

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(simCategory);
  // A bad flag is exit code 2, as --help says (LLVM would exit 1).
  if (!cl::ParseCommandLineOptions(
      argc, argv,
      "fa4-sim: run fa4 IR (level A, B or C) on the CPU against a float64 "
      "reference\n\n"
      "  fa4c --mask causal --stop-after=tile | fa4-sim --seq-q 1024 --seq-k "
      "1024\n"
      "  fa4c --mask causal --stop-after=scheduler | fa4-sim --seq-q 512 "
      "--seq-k 512 --interleavings 100\n"
      "  fa4c --backward --mask causal --stop-after=tile | fa4-sim --seq-q 300 "
      "--seq-k 200\n\n"
      "At level C each warp role runs as its own thread of control and TMA and "
      "tensor-core ops complete at random later points; the report adds "
      "deadlocks, hazards (SMEM/TMEM accesses no chain of barriers orders) and "
      "barrier misuse.\n"
      "With --inputs and --expect, level-A IR runs on inputs computed "
      "elsewhere and is judged against an O computed elsewhere as well (the "
      "entry IR run by another executor), beside the float64 reference.\n"
      "The backward (fa4.attention_backward, its tile program, or its "
      "Blackwell or Hopper schedule at level C with --interleavings) runs on drawn Q, K, V and "
      "dO, with O and the LSE from the float64 forward; dQ, dK and dV are "
      "judged against float64 gradients (FlashAttention's rule: at most twice "
      "the low-precision reference's error plus --atol). At level C each "
      "warpgroup runs as one thread of control: races between the warps of "
      "one role show in fa4-emu, not here.\n"
      "Prints one JSON object; exits 0 within tolerance and with a clean "
      "protocol, 1 otherwise, 2 on bad flags or IR it cannot run.\n", &llvm::errs()))
    return 2;
  if (batch <= 0 || seqQ <= 0 || seqK <= 0)
    return fail("--batch, --seq-q and --seq-k must be positive");
  if (interleavings <= 0)
    return fail("--interleavings must be positive");
  if (!(absTolerance >= 0) || !(relTolerance >= 0))
    return fail("--atol and --rtol must be non-negative");
  if (!(expectTolerance >= 0))
    return fail("--expect-atol must be non-negative");

  return fa4::runToolOnInput("fa4-sim", inputFile, simulateInput);
}

/// fa4-sim after its options: runs `input` and prints the report.
static int simulateInput(std::unique_ptr<MemoryBuffer> input) {
  fa4::ToolSession session;
  MLIRContext &context = session.getContext();
  OwningOpRef<ModuleOp> module = session.parse(std::move(input));
  if (!module)
    return fail("cannot parse the input");

  // Level A runs through the same lowering fa4c uses, then as level B.
  bool hasEntryOp = false;
  module->walk([&](Operation *op) {
    if (isa<fa4::AttentionOp, fa4::AttentionBackwardOp>(op))
      hasEntryOp = true;
  });
  // The entry as written: the reference runs its regions, not the lowered
  // copies.
  OwningOpRef<ModuleOp> entryModule;
  func::FuncOp entry;
  if (hasEntryOp) {
    entryModule = module->clone();
    entryModule->walk([&](Operation *op) {
      if (!entry && isa<fa4::AttentionOp, fa4::AttentionBackwardOp>(op))
        entry = op->getParentOfType<func::FuncOp>();
    });
  }
  if (hasEntryOp) {
    fa4::PipelineOptions options;
    options.stopAfter = "tile";
    options.rescaleThreshold = rescaleThreshold;
    PassManager pm(&context);
    if (llvm::Error refused = fa4::buildPipeline(pm, options))
      return fail("cannot lower the level-A input to the tile program: --" +
                  llvm::toString(std::move(refused)));
    if (failed(pm.run(*module)))
      return fail("cannot lower the level-A input to the tile program");
  }

  SmallVector<func::FuncOp> kernels;
  module->walk([&](func::FuncOp func) {
    if (fa4::getKernelSpec(func) || fa4::getBackwardSpec(func))
      kernels.push_back(func);
  });
  if (kernels.size() != 1)
    return fail("expected one function with an fa4.attention, an "
                "fa4.attention_backward, an fa4.spec or an fa4.backward_spec, "
                "found " +
                Twine(kernels.size()));

  fa4::sim::RunOptions options;
  options.batch = batch;
  options.seqQ = seqQ;
  options.seqK = seqK;
  options.seed = seed;
  options.distribution = distribution;
  options.fp8Rotation = fp8Rotation;
  options.atol = absTolerance;
  options.rtol = relTolerance;
  options.interleavings = interleavings;
  options.entry = entry;
  options.inputs = inputsDir;
  options.expect = expectFile;
  options.expectAtol = expectTolerance;
  llvm::Expected<fa4::sim::RunReport> report =
      fa4::sim::simulate(kernels.front(), options);
  if (!report)
    return fail(llvm::toString(report.takeError()));
  outs() << report->toJson() << "\n";
  if (llvm::Error unwritten = fa4::flushStdout())
    return fail(llvm::toString(std::move(unwritten)));
  return report->ok ? 0 : 1;
}
