//===- Passes.h - fa4 passes and pipelines ----------------------*- C++ -*-===//

#ifndef FA4_TRANSFORMS_PASSES_H
#define FA4_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassOptions.h"

#include <string>

namespace mlir {
class OpPassManager;
namespace func {
class FuncOp;
} // namespace func
} // namespace mlir

namespace mlir::fa4 {

#define GEN_PASS_DECL
#include "fa4/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "fa4/Transforms/Passes.h.inc"

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
  PassOptions::Option<int64_t> smCount{
      *this, "sm-count",
      llvm::cl::desc("SMs of the target: the persistent grid's size"),
      llvm::cl::init(148)};
  PassOptions::Option<std::string> testMutation{
      *this, "test-mutation",
      llvm::cl::desc("Test only: break the level-C protocol in a named way "
                     "(see fa4c --help)"),
      llvm::cl::init("")};
};

/// The protocol breakages `test-mutation` knows, for the simulator's tests.
ArrayRef<StringRef> getTestMutations();

/// The stages of the pipeline in order, by the names `--stop-after` takes.
ArrayRef<StringRef> getPipelineStages();

/// Adds the stages up to and including `options.stopAfter` (all when empty).
/// Fails with a message naming the stages when `stopAfter` is unknown.
LogicalResult buildPipeline(OpPassManager &pm, const PipelineOptions &options,
                            std::string &error);

/// Registers `fa4-pipeline` with fa4-opt.
void registerFA4Pipelines();

} // namespace mlir::fa4

#endif // FA4_TRANSFORMS_PASSES_H
