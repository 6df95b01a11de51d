//===- fa4c.cpp - the fa4 compiler driver ---------------------------------===//
//
// Compiles one attention kernel: from an entry-IR file, or from a variant
// described by flags, through the fa4 pipeline up to --stop-after.
//
//===----------------------------------------------------------------------===//

#include "fa4/Support/NumberOption.h"
#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Driver/Compile.h"
#include "fa4/Driver/KernelOutput.h"
#include "fa4/Driver/ToolSession.h"
#include "fa4/Pipeline/Pipeline.h"
#include "fa4/Runtime/CompileCache.h"
#include "fa4/Runtime/Backward.h"
#include "llvm/Support/JSON.h"
#include "fa4/Support/Error.h"
#include "fa4/Support/IrInput.h"
#include "fa4/Support/OutputFile.h"
#include "fa4/Target/Target.h"
#include "fa4/Transforms/Passes.h"
#include "TestPasses.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/TypeUtilities.h"
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
static mlir::fa4::NumberOption exp2EmulationFraction(
    "exp2-emulation-fraction",
    cl::desc(mlir::fa4::target::exp2EmulationOptionHelp()),
    cl::init(mlir::fa4::target::kTargetExp2EmulationFraction),
    cl::cat(compileCategory));
static cl::opt<bool> useCache(
    "cache",
    cl::desc("With a cubin output: take it from the compile cache when it holds "
             "this compilation, else compile and store it there "
             "($FA4_CACHE_DIR, default ~/.cache/fa4)"),
    cl::init(false), cl::cat(compileCategory));
static cl::opt<bool> timing("timing",
                            cl::desc("Print the wall time of every pass to stderr"),
                            cl::init(false), cl::cat(compileCategory));
static mlir::fa4::NumberOption rescaleThreshold(
    "rescale-threshold",
    cl::desc("Online-softmax rescale threshold, in log2 units (default 8; 0 "
             "rescales whenever a row max moves; e4m3 kernels take 0 only, "
             "their probabilities filling e4m3's range)"),
    cl::init(8.0), cl::cat(compileCategory));

static cl::opt<int64_t> kvStages(
    "kv-stages",
    cl::desc("K/V ring stages (default 0: as many as the target's shared "
             "memory per CTA holds)"),
    cl::init(0), cl::cat(compileCategory));
static cl::opt<int64_t> blockN(
    "block-n",
    cl::desc("Keys of a K/V block (default 0: the target's choice at the "
             "head dims, 128, or on sm_90a at head dim 256 80, 64 with a paged "
             "cache or split-KV). sm_100a and "
             "sm_103a take 128 only, sm_90a a multiple of 16 from 16 to 256 "
             "(of 32 for e4m3)"),
    cl::init(0), cl::cat(compileCategory));
static cl::opt<int64_t> qTilesPerTask(
    "q-tiles-per-task",
    cl::desc("128-row Q tiles a task (a CTA's unit of work) computes "
             "(default 0: the target's choice at the head dims). sm_100a and "
             "sm_103a: 2, FA4's two softmax warpgroups, up to head dim 192; "
             "1 past it (S double-buffered over K/V blocks instead), and on "
             "request below it. sm_90a: 1"),
    cl::init(0), cl::cat(compileCategory));
static cl::opt<int64_t> qTileRows(
    "q-tile-rows",
    cl::desc("Rows of a Q tile (default 0: the target's choice, 128). 192 on "
             "sm_90a: three consumer warpgroups of 64 rows instead of two "
             "(FlashAttention-3's hd64 tile), for fp16/bf16 at Q/K head dim "
             "up to 64 with K/V blocks of at most 128 keys, without "
             "--num-splits, --varlen, --paged-kv, --seqused-k or a block "
             "mask; docs/Hopper.md, \"Three consumer warpgroups\""),
    cl::init(0), cl::cat(compileCategory));
static cl::opt<mlir::fa4::Toggle> hopperOverlap(
    "hopper-overlap",
    cl::desc("Hopper: the consumers' intra-warpgroup overlap (the next "
             "block's S and the last P·V on the tensor core during the "
             "softmax): on, off, or auto (the default: on)"),
    cl::init(mlir::fa4::Toggle::Auto), mlir::fa4::toggleValues(),
    cl::cat(compileCategory));
static cl::opt<mlir::fa4::Toggle> hopperPingpong(
    "hopper-pingpong",
    cl::desc("Hopper: the consumer warpgroups take turns issuing their "
             "MMAs (round robin), so that one's softmax runs under another's "
             "(on, off, or auto: on with the overlap)"),
    cl::init(mlir::fa4::Toggle::Auto), mlir::fa4::toggleValues(),
    cl::cat(compileCategory));
static cl::opt<mlir::fa4::Toggle> twoCta(
    "two-cta",
    cl::desc("Blackwell: run the forward as CTA pairs, FA4's 2-CTA kernel "
             "(clusters of two on paired SMs, tcgen05.mma cta_group::2 with "
             "M = 256 over both CTAs' Q tiles, each CTA loading half of every "
             "K/V tile): on, off, or auto (the default: on for dense "
             "fp16/bf16 head dim 128 without a causal mask, a window, a "
             "mask_mod or a block mask, FA4's choice; on refuses other "
             "variants, naming why). A pair takes two SMs: --sm-count 1 keeps "
             "auto off and refuses on, and an odd count leaves one SM out "
             "(docs/TwoCta.md)"),
    cl::init(mlir::fa4::Toggle::Auto), mlir::fa4::toggleValues(),
    cl::cat(compileCategory));
static cl::opt<int64_t> smCount(
    "sm-count",
    cl::desc(mlir::fa4::target::smCountOptionHelp()),
    cl::init(0), cl::cat(compileCategory));
static cl::opt<std::string> gridPolicy(
    "grid",
    cl::desc("The forward's grid: persistent (min(sm-count, tasks) CTAs, "
             "each walking its share of the tasks), per-task (a CTA per "
             "task, in the task order, which the hardware hands to the SMs "
             "as they free up: a dynamic heaviest-first schedule for causal "
             "masks; not with --sm-count) or auto (the default: per-task for "
             "Hopper's dense causal forward at Q/K head dims 96, 128, 192 "
             "and 256 in fp16/bf16, and at 192 and 256 in e4m3, where the "
             "H200 and the "
             "H100 measured it faster, whether or not --sm-count is "
             "given; else persistent). Not with "
             "--backward; docs/Hopper.md, \"A CTA per task\""),
    cl::value_desc("auto|persistent|per-task"), cl::init("auto"),
    cl::cat(compileCategory));
static cl::opt<int64_t> l2SectionBytes(
    "l2-section-bytes",
    cl::desc("L2 bytes of K and V a causal (heaviest-first) order reads at "
             "once: the (batch, head) pairs are taken in sections whose K "
             "and V fit, S at a time, S the largest power of two that fits "
             "(-1, the default: 50 MiB, FA4's budget, with a per-task grid, "
             "none with a persistent one; 0: none, every head's tasks of "
             "one query block together). Causal masks and windows open on "
             "the left, without a mask_mod, and not varlen (its own order); "
             "not with --backward; docs/Hopper.md, \"A CTA per task\""),
    cl::init(-1), cl::cat(compileCategory));
static cl::opt<std::string> testMutation(
    "test-mutation",
    cl::desc("Test only: break the level-C schedule's protocol in a named way "
             "(fa4-test-mutate-protocol), to check that fa4-sim catches it"),
    cl::value_desc("name"), cl::init(""), cl::cat(compileCategory));

static cl::opt<int64_t> headDim(
    "head-dim",
    cl::desc("Q and K's head dim: 32, 64, 96, 128, 192 or 256 (256: on "
             "Blackwell one Q tile a task, --q-tiles-per-task)"),
    cl::init(128), cl::cat(variantCategory));
static cl::opt<int64_t> valueHeadDim(
    "v-head-dim",
    cl::desc("V and O's head dim: 32, 64, 96, 128 or 256, at most --head-dim "
             "(default: --head-dim; --head-dim 192 --v-head-dim 128 is "
             "DeepSeek-V3's prefill)"),
    cl::init(0), cl::cat(variantCategory));
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
static cl::opt<std::string> dtype("dtype", cl::desc("Input dtype: fp16, bf16 or e4m3 (FP8 Q, K and V with "
                               "[batch, kv_heads] f32 descale tables, a bf16 O, "
                               "at Q/K head dims 64, 96, 128, 192 or 256 with "
                               "V's 64, 96, 128 or 256: on sm_100a/sm_103a every "
                               "variant, V as it is; on sm_90a dense K/V, V "
                               "handed over transposed by the launcher; "
                               "docs/FP8.md)"),
                                  cl::init("fp16"), cl::cat(variantCategory));
static mlir::fa4::NumberOption scale("scale",
                             cl::desc("Softmax scale (default 1/sqrt(head-dim))"),
                             cl::init(0.0), cl::cat(variantCategory));
static mlir::fa4::NumberOption softcap("softcap",
                               cl::desc("Softcap (0: off)"), cl::init(0.0),
                               cl::cat(variantCategory));
static cl::opt<bool> lse("lse", cl::desc("Also write the log-sum-exp"),
                         cl::init(false), cl::cat(variantCategory));
static cl::opt<bool> pagedKv(
    "paged-kv",
    cl::desc("K and V are a paged cache [num_blocks, page_size, kv_heads, "
             "head_dim] read through a [batch, max_blocks] i32 block table "
             "(the kernel's last extra; vLLM's and FlashAttention's layout); "
             "with --page-size"),
    cl::init(false), cl::cat(variantCategory));
static cl::opt<int64_t> pageSize(
    "page-size",
    cl::desc("Keys per page of a paged K/V cache (--paged-kv): a power of two "
             "of at least 16"),
    cl::init(0), cl::cat(variantCategory));
static cl::opt<bool> seqUsedK(
    "seqused-k",
    cl::desc("Each sequence attends to its own number of keys, read from a "
             "[batch] i32 table (the kernel's extra 0: FlashAttention's "
             "seqused_k, a KV cache's cache_seqlens); its masks align "
             "bottom-right to that length"),
    cl::init(false), cl::cat(variantCategory));

static cl::opt<bool> decode(
    "decode",
    cl::desc("A decode kernel: K and V are a KV cache whose sequences have "
             "their own lengths (implies --seqused-k: the cache_seqlens "
             "table); seq_q 1 to 16 per sequence runs with a K/V head's "
             "query heads packed in the tile's rows. Combine with --paged-kv "
             "--page-size N for a paged cache and --num-splits S for "
             "split-KV (flash-decoding)"),
    cl::init(false), cl::cat(variantCategory));

static cl::opt<bool> varlen(
    "varlen",
    cl::desc("Variable-length batches (FlashAttention's varlen layout): Q, K, "
             "V and O packed [1, total, heads, head_dim] (the LSE [1, q_heads, "
             "total_q]), sequence b being rows [cu[b], cu[b + 1]) of two "
             "[batch + 1] i32 tables, cu_seqlens_q and cu_seqlens_k (the "
             "kernel's extras after the seqused_k table); each sequence's "
             "masks align bottom-right to its own lengths. The grid comes "
             "from the packed rows and the batch (no longest sequence); not "
             "with --paged-kv or --num-splits"),
    cl::init(false), cl::cat(variantCategory));

static cl::opt<int64_t> numSplits(
    "num-splits",
    cl::desc("Split-KV (flash-decoding): each task's keys cut into this many "
             "parts, each on its own CTA, merged exactly by the last part to "
             "finish (1: off; 2 to 128). The kernel's last extra is then an "
             "i32 workspace whose size the manifest gives "
             "(\"split_workspace_words\"), whose first 4 * tiles * rows words "
             "(the counters) must be zero before a launch; a launch leaves "
             "its own zero"),
    cl::init(1), cl::cat(variantCategory));

static cl::opt<bool> backward(
    "backward",
    cl::desc("The gradients instead of the attention: a function "
             "`attention_backward(Q, K, V, O, dO, LSE, dQ, dK, dV, delta, "
             "dq_accum)` holding fa4.attention_backward of the variant the "
             "other flags describe (the workspace: delta [batch, q_heads, "
             "seq_q] f32 and dq_accum Q's shape in f32); with an input file "
             "holding a forward entry, the backward of its fa4.attention "
             "(its regions and extras too: `<name>_backward(Q, K, V, O, dO, "
             "LSE, dQ, dK, dV, delta, dq_accum, extras...)`; --emit=mlir "
             "--stop-after=bufferize prints it). It compiles to three "
             "kernels on every target (-o b.cubin: the cubin, the PTX and a "
             "manifest of kind \"backward\", which fa4-emu runs): FA4's TMEM "
             "schedule on sm_100a/sm_103a, FA3's wgmma one on sm_90a; "
             "--emit=mlir stops at the schedule (level C, which fa4-sim "
             "runs). Not with --lse (the "
             "backward always reads it), --seqused-k, --varlen, --paged-kv or "
             "--num-splits, nor the forward's schedule options (--kv-stages, "
             "--block-n, --q-tiles-per-task, --hopper-*, --two-cta, "
             "--rescale-threshold, --exp2-emulation-fraction, --grid, "
             "--l2-section-bytes)"),
    cl::init(false), cl::cat(variantCategory));

static cl::opt<bool> deterministic(
    "deterministic",
    cl::desc("With --backward: accumulate dQ in a fixed order, the same bits "
             "on every run (each (batch, K/V head) on one CTA, its K/V "
             "blocks in ascending order: at most batch * kv_heads CTAs)"),
    cl::init(false), cl::cat(variantCategory));

/// The variant the flags describe, as entry IR (fa4/Driver/Compile.h).
static OwningOpRef<ModuleOp> buildVariant(MLIRContext &context) {
  fa4::Variant variant;
  variant.headDim = headDim;
  variant.valueHeadDim = valueHeadDim;
  if (valueHeadDim.getNumOccurrences() && valueHeadDim <= 0) {
    errs() << "fa4c: --v-head-dim must be positive, got " << valueHeadDim
           << "\n";
    return nullptr;
  }
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
  variant.seqUsedK = seqUsedK || decode;
  if (pagedKv != (pageSize.getNumOccurrences() > 0)) {
    errs() << "fa4c: --paged-kv and --page-size go together\n";
    return nullptr;
  }
  if (pagedKv && pageSize <= 0) {
    errs() << "fa4c: --page-size must be positive with --paged-kv, got "
           << pageSize << "\n";
    return nullptr;
  }
  variant.pageSize = pageSize;
  variant.numSplits = numSplits;
  variant.varlen = varlen;
  variant.backward = backward;
  variant.deterministic = deterministic;
  if (llvm::Error refused = fa4::checkVariant(variant)) {
    errs() << "fa4c: --" << toString(std::move(refused)) << "\n";
    return nullptr;
  }
  return fa4::buildVariantModule(context, variant);
}

/// Whether a flag that describes the variant is given (--backward and
/// --deterministic also apply to an input file: its backward).
static bool usesVariantFlags() {
  cl::Option *variantOptions[] = {&headDim,    &valueHeadDim, &qHeads,      &kvHeads,
                                 &mask,       &windowLeft,  &windowRight,
                                 &dtype,      &scale,       &softcap,
                                 &lse, &seqUsedK, &pagedKv, &pageSize,
                                 &numSplits, &varlen, &decode};
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
  // The example names the default chip, from the chip table.
  std::string overview =
      std::string("fa4c: compile one FlashAttention-4 kernel\n\n"
                  "  fa4c attention.mlir -o attention.cubin      (cubin + "
                  "attention.cubin.json)\n"
                  "  fa4c attention.mlir --stop-after=tile       (the tile "
                  "program)\n"
                  "  fa4c --head-dim 128 --q-heads 32 --kv-heads 8 --mask "
                  "causal \\\n"
                  "       --dtype fp16 --lse --target ") +
      mlir::fa4::target::defaultChip().name.str() + " -o attn.cubin --timing\n";
  if (!cl::ParseCommandLineOptions(argc, argv, overview, &llvm::errs()))
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

/// Reports `error` as fa4c's and gives `exitCode`.
static int fail(llvm::Error error, int exitCode) {
  errs() << "fa4c: " << toString(std::move(error)) << "\n";
  return exitCode;
}

/// What --emit asks for; by default what -o's extension names.
static EmitKind emitKind() {
  if (emit != EmitKind::Default)
    return emit;
  StringRef extension = llvm::sys::path::extension(outputFile);
  return extension == ".cubin" ? EmitKind::Cubin
         : extension == ".ptx" ? EmitKind::Ptx
         : extension == ".ll"  ? EmitKind::Llvm
                               : EmitKind::Mlir;
}

/// Whether --stop-after and -o suit `kind`.
static llvm::Error checkOutputFlags(EmitKind kind, StringRef stopAfter) {
  if (kind != EmitKind::Mlir && !stopAfter.empty())
    return fa4::makeError("--stop-after applies to --emit=mlir; llvm, ptx and "
                          "cubin run the whole pipeline");
  if (kind == EmitKind::Cubin && outputFile == "-")
    return fa4::makeError("--emit=cubin needs -o <file>");
  // The manifest names the cubin and the PTX beside it as JSON strings,
  // and the compile cache's index lists them a line each: a name must be
  // UTF-8 without control characters for either to name it faithfully.
  if (kind == EmitKind::Cubin) {
    StringRef name = llvm::sys::path::filename(outputFile);
    if (!llvm::json::isUTF8(name) ||
        llvm::any_of(name, [](char c) {
          return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
        }))
      return fa4::makeError("-o " + outputFile.getValue() +
                            ": a cubin's file name must be UTF-8 without "
                            "control characters (its manifest names it)");
  }
  return llvm::Error::success();
}

/// The pipeline starts from entry IR; a binary and its manifest describe
/// one kernel.
static llvm::Error checkInput(ModuleOp module, EmitKind kind) {
  if (llvm::Error refused = fa4::checkEntryLevel(module))
    return refused;
  // The forward's schedule options do not shape the backward's kernels:
  // refused rather than ignored.
  bool backwardModule = false;
  module.walk([&](fa4::AttentionBackwardOp) { backwardModule = true; });
  cl::Option *forwardOnly[] = {&kvStages, &blockN, &qTilesPerTask, &qTileRows,
                               &hopperOverlap, &hopperPingpong, &twoCta,
                               &rescaleThreshold, &exp2EmulationFraction,
                               &gridPolicy, &l2SectionBytes};
  if (backwardModule)
    for (cl::Option *option : forwardOnly)
      if (option->getNumOccurrences())
        return fa4::makeError("--" + option->ArgStr.str() +
                              " shapes the forward's kernel; the backward's "
                              "schedule takes no such option");
  // FP8's probabilities are shifted to fill e4m3's range, which any
  // threshold would overflow: its tile program rescales at 0 (TileConfig).
  // Refused rather than ignored.
  bool fp8 = false;
  module.walk([&](fa4::AttentionOp op) {
    fp8 |= isa<Float8E4M3FNType>(getElementTypeOrSelf(op.getQ().getType()));
  });
  if (fp8 && rescaleThreshold.getNumOccurrences() && rescaleThreshold != 0.0)
    return fa4::makeError(
        "--rescale-threshold: an FP8 (e4m3) attention rescales whenever a "
        "row max moves (threshold 0): its probabilities are shifted to fill "
        "e4m3's range, which a larger threshold would overflow (docs/FP8.md)");
  if (kind != EmitKind::Mlir)
    return fa4::checkOneKernel(module, /*allowBackward=*/true);
  return llvm::Error::success();
}

/// A backward goes as far as its chip's schedule takes it (the chip table's
/// `backward`): a binary on Hopper, level C on Blackwell (which fa4-sim
/// runs), the tile program elsewhere.
static llvm::Error checkBackwardTarget(ModuleOp module, EmitKind kind,
                                       StringRef chip, StringRef stopAfter) {
  using fa4::target::BackwardLevel;
  bool backwardModule = false;
  module.walk([&](fa4::AttentionBackwardOp) { backwardModule = true; });
  const fa4::target::ChipInfo *info = fa4::target::lookup(chip);
  if (!backwardModule || !info || info->backward == BackwardLevel::Kernels)
    return llvm::Error::success();
  // The stages up to the level the chip reaches.
  static const StringRef tileStages[] = {"bufferize", "tile"};
  static const StringRef scheduleStages[] = {
      "bufferize", "tile", "warp-roles", "pipeline", "barriers", "tmem",
      "correction", "scheduler"};
  ArrayRef<StringRef> reached = info->backward == BackwardLevel::Schedule
                                    ? ArrayRef<StringRef>(scheduleStages)
                                    : ArrayRef<StringRef>(tileStages);
  bool past = kind != EmitKind::Mlir ||
              (!stopAfter.empty() && !llvm::is_contained(reached, stopAfter));
  if (!past)
    return llvm::Error::success();
  std::string kernels;
  for (const fa4::target::ChipInfo &row : fa4::target::chips())
    if (row.backward == BackwardLevel::Kernels)
      kernels += (kernels.empty() ? "" : ", ") + row.name.str();
  std::string where =
      info->backward == BackwardLevel::Schedule
          ? "its schedule stops at level C: --emit=mlir (or --stop-after="
            "scheduler), which fa4-sim runs; its tcgen05 lowering is not "
            "built yet"
          : "its schedule stops at the tile program: --emit=mlir "
            "--stop-after=tile, which fa4-sim runs";
  return fa4::makeError("the backward is not lowered to kernels for " +
                        chip.str() + " (" + where +
                        "); it compiles to kernels for " + kernels +
                        " (--target)");
}

/// The pipeline's options from fa4c's. The chip: --target, else the one the
/// module names (its fa4.target), else the table's default; a module for
/// another chip than --target is refused by the pipeline's first stage.
static void setPipelineOptions(fa4::PipelineOptions &options, ModuleOp module,
                               EmitKind kind, StringRef stopAfter) {
  std::string chip = target;
  if (target.getNumOccurrences() == 0)
    if (const fa4::target::ChipInfo *named = fa4::getModuleTarget(module))
      chip = named->name.str();
  // Without --stop-after, MLIR output is the schedule (level C); the other
  // kinds need the kernel at level D.
  // A backward function goes as far as its chip schedules it: level C on
  // Hopper and Blackwell, level B elsewhere.
  bool hasBackward = false;
  module->walk([&](fa4::AttentionBackwardOp) { hasBackward = true; });
  const fa4::target::ChipInfo *info = fa4::target::lookup(chip);
  bool backwardScheduled =
      info && info->backward != fa4::target::BackwardLevel::Tile;
  options.stopAfter =
      !stopAfter.empty() ? stopAfter.str()
      : kind == EmitKind::Mlir
          ? std::string(hasBackward && !backwardScheduled ? "tile"
                                                          : "scheduler")
          : std::string("nvvm");
  options.rescaleThreshold = rescaleThreshold;
  options.kvStages = kvStages;
  options.blockN = blockN;
  options.qTilesPerTask = qTilesPerTask;
  options.qTileRows = qTileRows;
  options.hopperOverlap = hopperOverlap;
  options.hopperPingpong = hopperPingpong;
  options.twoCta = twoCta;
  options.smCount = smCount;
  options.l2SectionBytes = l2SectionBytes;
  options.grid = gridPolicy;
  options.target = chip;
  options.cudaPath = cudaPath;
  options.exp2EmulationFraction = exp2EmulationFraction;
}

/// The PTX beside a cubin output: -o with its extension replaced.
static std::string ptxPathBeside() {
  SmallString<256> ptxPath(outputFile);
  llvm::sys::path::replace_extension(ptxPath, "ptx");
  if (ptxPath == StringRef(outputFile))
    ptxPath += ".ptx";
  return std::string(ptxPath);
}

namespace {
/// The compile cache as --cache uses it (fa4/Driver/Compile.h,
/// docs/Runtime.md): the cache, this compilation's key, and whether the
/// cache held it (then its files are written already).
struct CacheUse {
  std::unique_ptr<fa4::runtime::CompileCache> cache;
  std::string key;
  bool hit = false;
};
} // namespace

/// --cache: keys the compilation and, when the cache holds it, writes its
/// files as fa4c would have; an error when the cache cannot be used.
static llvm::Expected<CacheUse> lookUpCache(ModuleOp module,
                                            const fa4::PipelineOptions &options,
                                            EmitKind kind, StringRef ptxPath) {
  if (kind != EmitKind::Cubin)
    return fa4::makeError("--cache applies to cubin output (-o <file>.cubin)");
  auto started = std::chrono::steady_clock::now();
  std::string directory = fa4::runtime::CompileCache::defaultDirectory();
  if (directory.empty())
    return fa4::makeError(
        "--cache needs FA4_CACHE_DIR, XDG_CACHE_HOME or HOME");
  llvm::Expected<std::string> key =
      fa4::compileCacheKey(module, options, fa4::buildIdentity());
  if (!key)
    return fa4::prefixError("--cache: ", key.takeError());
  CacheUse use;
  use.key = std::move(*key);
  use.cache = std::make_unique<fa4::runtime::CompileCache>(directory);
  fa4::runtime::CompileCache::Entry entry;
  std::string rejected;
  use.hit = use.cache->lookup(use.key, entry, &rejected);
  if (!rejected.empty())
    errs() << "fa4c: warning: " << rejected << "\n";
  // An entry of the other kind (a forward's kernel where the backward's
  // three were asked for, or the reverse) is no hit: discarded, and
  // replaced by this compile's.
  bool backwardModule = false;
  module.walk([&](fa4::AttentionBackwardOp) { backwardModule = true; });
  if (use.hit &&
      fa4::runtime::isBackwardManifest(entry.manifest) != backwardModule) {
    errs() << "fa4c: warning: the compile cache's entry "
           << use.key.substr(0, 16) << " was discarded: it holds a "
           << (backwardModule ? "forward" : "backward")
           << " kernel where this compilation is a "
           << (backwardModule ? "backward" : "forward") << "\n";
    use.cache->discard(use.key);
    use.hit = false;
  }
  if (!use.hit)
    return std::move(use);
  if (llvm::Error unwritten = fa4::runtime::CompileCache::materialize(
          entry, outputFile, ptxPath.str()))
    return std::move(unwritten);
  std::chrono::duration<double> seconds =
      std::chrono::steady_clock::now() - started;
  if (timing)
    errs() << llvm::format("  %.4f  compile cache hit (%s)\n", seconds.count(),
                           use.key.substr(0, 16).c_str());
  return std::move(use);
}

/// The pipeline `options` describe, and the test mutation when one is asked
/// for.
static llvm::Error buildPasses(PassManager &pm,
                               const fa4::PipelineOptions &options,
                               EmitKind kind) {
  if (llvm::Error refused = fa4::buildPipeline(pm, options))
    return refused;
  if (testMutation.empty())
    return llvm::Error::success();
  // The mutations break a finished schedule: the level-C output only.
  if (kind != EmitKind::Mlir || options.stopAfter.getValue() != "scheduler")
    return fa4::makeError("--test-mutation applies to the level-C schedule "
                          "(--emit=mlir without --stop-after)");
  if (!llvm::is_contained(fa4::test::protocolMutations(),
                          StringRef(testMutation)))
    return fa4::makeError("unknown test mutation '" + testMutation.getValue() +
                          "' (expected one of: " +
                          join(fa4::test::protocolMutations(), ", ") + ")");
  pm.addNestedPass<func::FuncOp>(
      fa4::test::createMutateProtocolPass(testMutation));
  return llvm::Error::success();
}

/// Writes what `print` prints to `path`, whole or not at all
/// (fa4/Support/OutputFile.h).
static llvm::Error
writeOutputFile(StringRef path, llvm::function_ref<void(raw_ostream &)> print) {
  llvm::Expected<std::unique_ptr<fa4::OutputFile>> file =
      fa4::OutputFile::open(path);
  if (!file)
    return file.takeError();
  print((*file)->os());
  return (*file)->commit();
}

/// Runs `step` (serialization runs outside the pass manager) and reports its
/// wall time under --timing.
template <typename Step> static auto timed(StringRef what, Step &&step) {
  auto start = std::chrono::steady_clock::now();
  auto result = step();
  std::chrono::duration<double> seconds =
      std::chrono::steady_clock::now() - start;
  if (timing)
    errs() << llvm::format("  %.4f  %s\n", seconds.count(), what.data());
  return result;
}

/// The kernel as LLVM IR to -o.
static llvm::Error writeLlvm(ModuleOp module) {
  std::string llvmIr;
  raw_string_ostream os(llvmIr);
  if (llvm::Error refused = fa4::writeLlvmIr(module, os))
    return refused;
  return writeOutputFile(outputFile,
                         [&](raw_ostream &file) { file << llvmIr; });
}

/// The kernel as PTX to -o, or assembled by ptxas into a cubin at -o with
/// the PTX and the manifest beside it (stored in the compile cache when
/// --cache uses one).
static llvm::Error writeKernel(ModuleOp module, EmitKind kind, StringRef chip,
                               StringRef ptxPath, const CacheUse &cache) {
  llvm::Expected<std::string> ptx = timed("gpu-module-to-binary (PTX)", [&] {
    return fa4::serializeToPtx(module);
  });
  if (!ptx)
    return ptx.takeError();
  if (kind == EmitKind::Ptx)
    return writeOutputFile(outputFile, [&](raw_ostream &os) { os << *ptx; });
  llvm::Expected<fa4::AssembledCubin> assembled = timed("ptxas (cubin)", [&] {
    return fa4::assembleCubin(*ptx, cudaPath, chip);
  });
  if (!assembled)
    return assembled.takeError();
  // The cubin, the PTX beside it (what fa4-emu runs) and the manifest are
  // one kernel, written as a set (fa4/Support/OutputFile.h): a failed
  // write (a full disk) leaves whatever an earlier run wrote there.
  std::string manifestPath = outputFile + ".json";
  std::string manifestText =
      fa4::launchManifest(module, chip, outputFile, ptxPath, assembled->report);
  if (llvm::Error unwritten =
          fa4::writeFileSet({{ptxPath, *ptx},
                             {manifestPath, manifestText},
                             {outputFile, assembled->cubin}}))
    return unwritten;
  if (!cache.cache)
    return llvm::Error::success();
  fa4::runtime::CompileCache::Entry entry;
  entry.ptx = std::move(*ptx);
  entry.manifest = manifestText;
  entry.cubinName = llvm::sys::path::filename(outputFile).str();
  entry.ptxName = llvm::sys::path::filename(ptxPath).str();
  entry.cubin = std::move(assembled->cubin);
  // A cache that cannot be written costs the next run a compile, not
  // this one its result.
  if (llvm::Error unwritten = cache.cache->store(cache.key, entry))
    errs() << "fa4c: warning: the compile cache was not written: "
           << toString(std::move(unwritten)) << "\n";
  return llvm::Error::success();
}

/// Writes what `kind` asks for of the compiled `module`.
static llvm::Error writeOutput(ModuleOp module, EmitKind kind, StringRef chip,
                               StringRef ptxPath, const CacheUse &cache) {
  switch (kind) {
  case EmitKind::Default:
  case EmitKind::Mlir:
    return writeOutputFile(outputFile, [&](raw_ostream &os) {
      module->print(os);
      os << "\n";
    });
  case EmitKind::Llvm:
    return writeLlvm(module);
  case EmitKind::Ptx:
  case EmitKind::Cubin:
    return writeKernel(module, kind, chip, ptxPath, cache);
  }
  llvm_unreachable("every kind is written above");
}

/// fa4c after its options: compiles `input` (the variant the flags describe
/// when null) and writes what --emit asks for. Refused flags and input exit
/// with 2, a failed compilation or write with 1.
static int compile(std::unique_ptr<MemoryBuffer> input, StringRef stopAfter) {
  fa4::ToolSession session;
  MLIRContext &context = session.getContext();
  bool fromFile = input != nullptr;
  OwningOpRef<ModuleOp> module =
      input ? session.parse(std::move(input)) : buildVariant(context);
  if (!module)
    return 1;
  if (fromFile && (backward || deterministic)) {
    // An input file's backward: the file's own fa4.attention_backward, or
    // the one its forward entry's attention derives (fa4::backwardEntryFor).
    bool holdsBackward = false;
    module->walk([&](fa4::AttentionBackwardOp) { holdsBackward = true; });
    if (!holdsBackward && !backward)
      return fail(fa4::makeError("--deterministic applies to a backward: "
                                 "the file holds a forward (add --backward "
                                 "to compile its backward)"),
                  2);
    llvm::Expected<OwningOpRef<ModuleOp>> derived =
        fa4::backwardEntryFor(*module, deterministic);
    if (!derived)
      return fail(fa4::prefixError("--backward: ", derived.takeError()), 2);
    if (*derived)
      module = std::move(*derived);
  }
  EmitKind kind = emitKind();
  if (llvm::Error refused = checkOutputFlags(kind, stopAfter))
    return fail(std::move(refused), 2);
  if (llvm::Error refused = checkInput(*module, kind))
    return fail(std::move(refused), 2);
  fa4::PipelineOptions options;
  setPipelineOptions(options, *module, kind, stopAfter);
  if (llvm::Error refused =
          checkBackwardTarget(*module, kind, options.target, stopAfter))
    return fail(std::move(refused), 2);
  std::string ptxPath = ptxPathBeside();
  CacheUse cache;
  if (useCache) {
    llvm::Expected<CacheUse> looked =
        lookUpCache(*module, options, kind, ptxPath);
    if (!looked)
      return fail(looked.takeError(), 2);
    if (looked->hit)
      return 0;
    cache = std::move(*looked);
  }
  PassManager pm(&context);
  if (llvm::Error refused = buildPasses(pm, options, kind))
    return fail(std::move(refused), 2);
  if (timing)
    pm.enableTiming();
  if (failed(pm.run(*module)))
    return 1;
  if (llvm::Error unwritten =
          writeOutput(*module, kind, options.target, ptxPath, cache))
    return fail(std::move(unwritten), 1);
  return 0;
}
