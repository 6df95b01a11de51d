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

static const Stage kStages[] = {
    {"tile",
     [](OpPassManager &pm, const PipelineOptions &options) {
       FA4TileAttentionOptions tileOptions;
       tileOptions.rescaleThreshold = options.rescaleThreshold;
       pm.addNestedPass<func::FuncOp>(createFA4TileAttention(tileOptions));
     }},
};

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
