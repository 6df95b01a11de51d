//===- Pipeline.cpp - the fa4 pipeline, stage by stage --------------------===//

#include "fa4/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

using namespace mlir;
using namespace mlir::fa4;

namespace {
/// One named stage of the pipeline: the unit `--stop-after` counts in.
struct Stage {
  StringRef name;
  void (*add)(OpPassManager &pm, const PipelineOptions &options);
};
} // namespace

/// Each test mutation belongs to the pass that can make it.
static const StringRef kBarrierMutations[] = {
    "drop-o-rescaled-gate", "release-kv-early", "wrong-phase",
    "tma-barrier-as-threads"};
static const StringRef kTmemMutations[] = {"p-aliases-next-s"};
static const StringRef kCorrectionMutations[] = {"release-o-before-rescale"};

static std::string mutationFor(const PipelineOptions &options,
                               ArrayRef<StringRef> known) {
  StringRef mutation = options.testMutation;
  return llvm::is_contained(known, mutation) ? mutation.str() : std::string();
}

static const Stage kStages[] = {
    {"tile",
     [](OpPassManager &pm, const PipelineOptions &options) {
       FA4TileAttentionOptions tileOptions;
       tileOptions.rescaleThreshold = options.rescaleThreshold;
       pm.addNestedPass<func::FuncOp>(createFA4TileAttention(tileOptions));
     }},
    {"warp-roles",
     [](OpPassManager &pm, const PipelineOptions &) {
       pm.addNestedPass<func::FuncOp>(createFA4AssignWarpRoles());
     }},
    {"pipeline",
     [](OpPassManager &pm, const PipelineOptions &options) {
       FA4PipelineStagesOptions stageOptions;
       stageOptions.kvStages = options.kvStages;
       pm.addNestedPass<func::FuncOp>(createFA4PipelineStages(stageOptions));
     }},
    {"barriers",
     [](OpPassManager &pm, const PipelineOptions &options) {
       FA4InsertBarriersOptions barrierOptions;
       barrierOptions.testMutation = mutationFor(options, kBarrierMutations);
       pm.addNestedPass<func::FuncOp>(createFA4InsertBarriers(barrierOptions));
     }},
    {"tmem",
     [](OpPassManager &pm, const PipelineOptions &options) {
       FA4AllocateTmemOptions tmemOptions;
       tmemOptions.testMutation = mutationFor(options, kTmemMutations);
       pm.addNestedPass<func::FuncOp>(createFA4AllocateTmem(tmemOptions));
     }},
    {"correction",
     [](OpPassManager &pm, const PipelineOptions &options) {
       FA4ExpandCorrectionOptions correctionOptions;
       correctionOptions.testMutation =
           mutationFor(options, kCorrectionMutations);
       pm.addNestedPass<func::FuncOp>(
           createFA4ExpandCorrection(correctionOptions));
     }},
    {"scheduler",
     [](OpPassManager &pm, const PipelineOptions &options) {
       FA4TileSchedulerOptions schedulerOptions;
       schedulerOptions.smCount = options.smCount;
       pm.addNestedPass<func::FuncOp>(createFA4TileScheduler(schedulerOptions));
     }},
};

ArrayRef<StringRef> mlir::fa4::getTestMutations() {
  static const SmallVector<StringRef> names = [] {
    SmallVector<StringRef> all;
    for (ArrayRef<StringRef> group :
         {ArrayRef<StringRef>(kBarrierMutations), ArrayRef<StringRef>(kTmemMutations),
          ArrayRef<StringRef>(kCorrectionMutations)})
      all.append(group.begin(), group.end());
    return all;
  }();
  return names;
}

ArrayRef<StringRef> mlir::fa4::getPipelineStages() {
  static const SmallVector<StringRef> names = llvm::to_vector(
      llvm::map_range(kStages, [](const Stage &stage) { return stage.name; }));
  return names;
}

LogicalResult mlir::fa4::buildPipeline(OpPassManager &pm,
                                       const PipelineOptions &options,
                                       std::string &error) {
  StringRef stopAfter = options.stopAfter;
  if (!stopAfter.empty() && !llvm::is_contained(getPipelineStages(), stopAfter)) {
    error = ("unknown stage '" + stopAfter + "' (expected one of: " +
             llvm::join(getPipelineStages(), ", ") + ")")
                .str();
    return failure();
  }
  StringRef mutation = options.testMutation;
  if (!mutation.empty() && !llvm::is_contained(getTestMutations(), mutation)) {
    error = ("unknown test mutation '" + mutation + "' (expected one of: " +
             llvm::join(getTestMutations(), ", ") + ")")
                .str();
    return failure();
  }
  for (const Stage &stage : kStages) {
    stage.add(pm, options);
    if (stage.name == stopAfter)
      break;
  }
  return success();
}

void mlir::fa4::registerFA4Pipelines() {
  // Registered by hand rather than through PassPipelineRegistration so that an
  // unknown stage name is reported as an error, not a crash.
  registerPassPipeline(
      "fa4-pipeline",
      "Lower fa4.attention through every fa4 stage (stop-after=<stage> ends "
      "early)",
      [](OpPassManager &pm, StringRef optionsText,
         function_ref<LogicalResult(const Twine &)> errorHandler) {
        PipelineOptions options;
        if (failed(options.parseFromString(optionsText)))
          return failure();
        std::string error;
        if (failed(buildPipeline(pm, options, error)))
          return errorHandler("fa4-pipeline: " + error);
        return success();
      },
      [](function_ref<void(const detail::PassOptions &)> optionsHandler) {
        optionsHandler(PipelineOptions());
      });
}
