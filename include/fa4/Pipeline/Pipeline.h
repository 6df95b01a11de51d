//===- Pipeline.h - the fa4 pipeline, stage by stage ------------*- C++ -*-===//

#ifndef FA4_PIPELINE_PIPELINE_H
#define FA4_PIPELINE_PIPELINE_H

#include "fa4/Config.h"
#include "fa4/Support/Toggle.h"
#include "fa4/Target/Target.h"

#include "mlir/Pass/PassOptions.h"
#include "mlir/Support/LLVM.h"
#include "llvm/Support/Error.h"

#include <string>

namespace mlir {
class DialectRegistry;
class OpPassManager;
} // namespace mlir


namespace mlir::fa4 {

/// Options of the whole fa4 pipeline, as `fa4-opt --fa4-pipeline=...` and
/// `fa4c` take them.
struct PipelineOptions : public PassPipelineOptions<PipelineOptions> {
  PassOptions::Option<std::string> stopAfter{
      *this, "stop-after",
      llvm::cl::desc("Last stage to run (see fa4c --help for the stages)"),
      llvm::cl::init("")};
  PassOptions::Option<double> rescaleThreshold{
      *this, "rescale-threshold",
      llvm::cl::desc("Online-softmax rescale threshold in log2 units"),
      llvm::cl::init(8.0)};
  PassOptions::Option<int64_t> kvStages{
      *this, "kv-stages",
      llvm::cl::desc("K/V ring stages (0: as many as shared memory holds)"),
      llvm::cl::init(0)};
  PassOptions::Option<int64_t> blockN{
      *this, "block-n",
      llvm::cl::desc("Keys of a K/V block (0: the target's choice at the "
                     "head dims: 128; on Hopper at head dim 256 80, or 64 "
                     "with a paged cache or split-KV)"),
      llvm::cl::init(0)};
  PassOptions::Option<int64_t> qTilesPerTask{
      *this, "q-tiles-per-task",
      llvm::cl::desc("128-row Q tiles a task computes (0: the target's "
                     "choice at the head dims: 2 on Blackwell up to head "
                     "dim 192, else 1)"),
      llvm::cl::init(0)};
  PassOptions::Option<int64_t> qTileRows{
      *this, "q-tile-rows",
      llvm::cl::desc("Rows of a Q tile (0: the target's choice, 128; 192 "
                     "on Hopper: three consumer warpgroups, fp16/bf16 at "
                     "head dim up to 64)"),
      llvm::cl::init(0)};
  PassOptions::Option<int64_t> smCount{
      *this, "sm-count",
      llvm::cl::desc(target::smCountOptionHelp()),
      llvm::cl::init(0)};
  PassOptions::Option<std::string> grid{
      *this, "grid",
      llvm::cl::desc("The forward's grid: persistent (min(sm-count, tasks) "
                     "CTAs, each walking its share of the tasks), per-task "
                     "(a CTA per task, heaviest first, handed to the SMs by "
                     "the hardware as they free up) or auto (per-task for "
                     "Hopper's dense causal forward at Q/K head dims 96 to "
                     "256 in fp16/bf16, 192 and 256 in e4m3, whether or not "
                     "sm-count is given)"),
      llvm::cl::init("auto")};
  PassOptions::Option<int64_t> l2SectionBytes{
      *this, "l2-section-bytes",
      llvm::cl::desc("L2 bytes of K and V a causal (heaviest-first) order "
                     "reads at once: its heads are taken in sections that "
                     "fit (-1, the default: 50 MiB, FA4's budget, with a "
                     "per-task grid and none with a persistent one; 0: "
                     "none)"),
      llvm::cl::init(-1)};
  PassOptions::Option<std::string> target{
      *this, "target",
      llvm::cl::desc(target::targetOptionHelp()),
      llvm::cl::init(target::defaultChip().name.str())};
  PassOptions::Option<double> exp2EmulationFraction{
      *this, "exp2-emulation-fraction",
      llvm::cl::desc(target::exp2EmulationOptionHelp()),
      llvm::cl::init(target::kTargetExp2EmulationFraction)};
  PassOptions::Option<Toggle> hopperOverlap{
      *this, "hopper-overlap",
      llvm::cl::desc("Hopper: the consumers' intra-warpgroup overlap of the "
                     "next S and the last P·V with the softmax (on, off, or "
                     "auto: on)"),
      llvm::cl::init(Toggle::Auto), toggleValues()};
  PassOptions::Option<Toggle> hopperPingpong{
      *this, "hopper-pingpong",
      llvm::cl::desc("Hopper: the consumer warpgroups take turns issuing "
                     "their MMAs (on, off, or auto: on with the overlap)"),
      llvm::cl::init(Toggle::Auto), toggleValues()};
  PassOptions::Option<Toggle> twoCta{
      *this, "two-cta",
      llvm::cl::desc("Blackwell: run the forward as CTA pairs (clusters of "
                     "two, tcgen05.mma cta_group::2 with M = 256, each CTA "
                     "holding half of every K/V tile): on, off, or auto (on "
                     "for dense fp16/bf16 head dim 128 without a causal "
                     "mask, a window, a mask_mod or a block mask, FA4's "
                     "choice; off with sm-count 1)"),
      llvm::cl::init(Toggle::Auto), toggleValues()};
  PassOptions::Option<std::string> cudaPath{
      *this, "cuda-path",
      llvm::cl::desc("CUDA toolkit root, for ptxas (binary stage)"),
      llvm::cl::init(FA4_CUDA_TOOLKIT_PATH)};
};

/// The stages of the pipeline in order, by the names `--stop-after` takes.
ArrayRef<StringRef> getPipelineStages();

/// The bufferize stage's passes without its chip: an entry on tensors to
/// the memref form (dense arguments; destinations the function made become
/// parameters), a no-op on memrefs.
void addEntryBufferization(OpPassManager &pm);

/// Adds the stages up to and including `options.stopAfter` (all when empty).
/// An error naming the stages when `stopAfter` is unknown, or naming the
/// option whose value is out of its range; then nothing was added.
llvm::Error buildPipeline(OpPassManager &pm, const PipelineOptions &options);

/// Registers `fa4-pipeline` with fa4-opt.
void registerFA4Pipelines();

/// Every dialect the pipeline passes through, with the translations and the
/// NVVM target that the binary stage serializes with.
void registerPipelineDialects(DialectRegistry &registry);

} // namespace mlir::fa4

#endif // FA4_PIPELINE_PIPELINE_H
