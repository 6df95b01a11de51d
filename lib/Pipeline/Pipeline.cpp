//===- Pipeline.cpp - the fa4 pipeline, stage by stage --------------------===//

#include "fa4/Pipeline/Pipeline.h"
#include "fa4/Support/Error.h"
#include "fa4/Target/Target.h"
#include "fa4/Target/Wing.h"

#include "fa4/Conversion/Passes.h"
#include "fa4/Dialect/FA4/IR/FA4Dialect.h"
#include "fa4/Transforms/Passes.h"

#include "fa4/Transforms/Bufferization.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/IndexToLLVM/IndexToLLVM.h"
#include "mlir/Conversion/NVVMToLLVM/NVVMToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/VectorToLLVM/ConvertVectorToLLVMPass.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Transforms/Passes.h"

#include "fa4/InitFA4.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::fa4;

/// The chip the options name (buildPipeline refuses an unknown one before
/// any stage reads it).
static const target::ChipInfo &chipOf(const PipelineOptions &options) {
  const target::ChipInfo *chip = target::lookup(options.target);
  return chip ? *chip : target::defaultChip();
}

namespace {
/// The binary stage's guard: MLIR's gpu-module-to-binary assembles for the
/// chip its #nvvm.target names, which for a chip generated as another (its
/// row's codegenChip: sm_103a as sm_100a) is not the chip asked for. Its
/// cubin comes from fa4c -o x.cubin or fa4.compile, which retarget the PTX
/// (serializeToPtx) and run ptxas for the chip itself.
struct RefuseRetargetedBinary
    : PassWrapper<RefuseRetargetedBinary, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(RefuseRetargetedBinary)
  StringRef getArgument() const final { return "fa4-refuse-retargeted-binary"; }
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto named = module->getAttrOfType<TargetAttr>(kTargetAttrName);
    if (!named)
      return;
    const target::ChipInfo &chip = named.getInfo();
    if (chip.codegenChip == chip.name)
      return;
    mlir::emitError(module.getLoc()) << "the binary stage cannot assemble for "
                       << chip.name << ": its code is generated as "
                       << chip.codegenChip
                       << "'s, and gpu-module-to-binary would assemble it "
                          "for that chip; stop after 'nvvm' and take the "
                          "cubin from fa4c -o <name>.cubin (or fa4.compile), "
                          "which retarget the PTX to "
                       << chip.name;
    signalPassFailure();
  }
};
} // namespace

/// The wings: each family's schedule steps (fa4/Target/Wing.h). A new
/// family is a row here and its folder under lib/Target.
namespace {
struct WingRow {
  target::Family family;
  AddScheduleStep addStep;
};
} // namespace
static const WingRow kWings[] = {
    {target::Family::Blackwell, blackwell::addScheduleStep},
    {target::Family::Hopper, hopper::addScheduleStep},
};

/// Adds the options' chip's wing's passes for the schedule step `step`.
static void addScheduleStep(StringRef step, OpPassManager &pm,
                            const PipelineOptions &options) {
  ScheduleOptions schedule;
  schedule.kvStages = options.kvStages;
  schedule.overlap = options.hopperOverlap;
  schedule.pingpong = options.hopperPingpong;
  // One SM holds no pair: auto keeps one CTA a task there (on is refused
  // where the options are checked).
  schedule.twoCta = options.twoCta == Toggle::Auto && options.smCount == 1
                        ? Toggle::Off
                        : options.twoCta;
  target::Family family = chipOf(options).family;
  for (const WingRow &wing : kWings)
    if (wing.family == family)
      return wing.addStep(step, pm, schedule);
}

namespace {
/// One named stage of the pipeline: the unit `--stop-after` counts in.
struct Stage {
  StringRef name;
  void (*add)(OpPassManager &pm, const PipelineOptions &options);
};
} // namespace

void mlir::fa4::addEntryBufferization(OpPassManager &pm) {
  bufferization::OneShotBufferizePassOptions bufferize;
  bufferize.bufferizeFunctionBoundaries = true;
  bufferize.functionBoundaryTypeConversion =
      bufferization::LayoutMapOption::IdentityLayoutMap;
  pm.addPass(bufferization::createOneShotBufferizePass(bufferize));
  // Destinations the function made itself (tensor.empty) become
  // parameters of the kernel.
  pm.addNestedPass<func::FuncOp>(createFA4PromoteDestinations());
}

static const Stage kStages[] = {
    // An entry on tensors becomes the memref form: function arguments dense
    // (the identity layout), O and the LSE written into the destinations
    // the function was given (and returned, as the function's results
    // were), or into new parameters where the function made its
    // destinations. A no-op on an entry that is already on memrefs.
    {"bufferize",
     [](OpPassManager &pm, const PipelineOptions &options) {
       // The module records its chip; every chip-dependent pass reads it
       // there (fa4.target).
       FA4SetTargetOptions targetOptions;
       targetOptions.chip = options.target;
       pm.addPass(createFA4SetTarget(targetOptions));
       addEntryBufferization(pm);
     }},
    {"tile",
     [](OpPassManager &pm, const PipelineOptions &options) {
       FA4TileAttentionOptions tileOptions;
       tileOptions.rescaleThreshold = options.rescaleThreshold;
       tileOptions.blockN = options.blockN;
       tileOptions.qTilesPerTask = options.qTilesPerTask;
       tileOptions.qTileRows = options.qTileRows;
       pm.addNestedPass<func::FuncOp>(createFA4TileAttention(tileOptions));
     }},
    // The schedule (level C): each step is the chip's wing's, and a wing
    // adds nothing for a step it does not have (Hopper's warpgroups size
    // their own ring, keep S and O in registers and rescale O where it is
    // held).
    {step::kRoles,
     [](OpPassManager &pm, const PipelineOptions &options) {
       addScheduleStep(step::kRoles, pm, options);
     }},
    {step::kPipeline,
     [](OpPassManager &pm, const PipelineOptions &options) {
       addScheduleStep(step::kPipeline, pm, options);
     }},
    {"barriers",
     [](OpPassManager &pm, const PipelineOptions &) {
       pm.addNestedPass<func::FuncOp>(createFA4InsertBarriers());
     }},
    {step::kTmem,
     [](OpPassManager &pm, const PipelineOptions &options) {
       addScheduleStep(step::kTmem, pm, options);
     }},
    {step::kCorrection,
     [](OpPassManager &pm, const PipelineOptions &options) {
       addScheduleStep(step::kCorrection, pm, options);
     }},
    {"scheduler",
     [](OpPassManager &pm, const PipelineOptions &options) {
       FA4TileSchedulerOptions schedulerOptions;
       schedulerOptions.smCount = options.smCount; // 0: the chip's
       schedulerOptions.gridPolicy = options.grid;
       schedulerOptions.l2SectionBytes = options.l2SectionBytes;
       pm.addNestedPass<func::FuncOp>(createFA4TileScheduler(schedulerOptions));
     }},
    {"nvvm",
     [](OpPassManager &pm, const PipelineOptions &options) {
       FA4ToNVVMOptions nvvmOptions;
       nvvmOptions.exp2EmulationFraction = options.exp2EmulationFraction;
       pm.addPass(createFA4ToNVVM(nvvmOptions));
       // The kernel body is structured per-thread code; the upstream
       // conversions finish it into the LLVM dialect and NVVM intrinsics.
       // Indices are 32-bit on the GPU: half the registers of 64-bit ones.
       constexpr unsigned kIndexBits = 32;
       OpPassManager &kernels = pm.nest<gpu::GPUModuleOp>();
       kernels.addPass(createSCFToControlFlowPass());
       kernels.addPass(createConvertNVVMToLLVMPass());
       kernels.addPass(createConvertVectorToLLVMPass());
       ArithToLLVMConversionPassOptions arithOptions;
       arithOptions.indexBitwidth = kIndexBits;
       kernels.addPass(createArithToLLVMConversionPass(arithOptions));
       ConvertIndexToLLVMPassOptions indexOptions;
       indexOptions.indexBitwidth = kIndexBits;
       kernels.addPass(createConvertIndexToLLVMPass(indexOptions));
       ConvertControlFlowToLLVMPassOptions cfOptions;
       cfOptions.indexBitwidth = kIndexBits;
       pm.addPass(createConvertControlFlowToLLVMPass(cfOptions));
       pm.addPass(createReconcileUnrealizedCastsPass());
       pm.addPass(createCanonicalizerPass());
       pm.addPass(createCSEPass());
     }},
    {"binary",
     [](OpPassManager &pm, const PipelineOptions &options) {
       GpuModuleToBinaryPassOptions binaryOptions;
       binaryOptions.toolkitPath = options.cudaPath;
       binaryOptions.compilationTarget = "bin";
       pm.addPass(std::make_unique<RefuseRetargetedBinary>());
       pm.addPass(createGpuModuleToBinaryPass(binaryOptions));
     }},
};

ArrayRef<StringRef> mlir::fa4::getPipelineStages() {
  static const SmallVector<StringRef> names = llvm::to_vector(
      llvm::map_range(kStages, [](const Stage &stage) { return stage.name; }));
  return names;
}

llvm::Error mlir::fa4::buildPipeline(OpPassManager &pm,
                                     const PipelineOptions &options) {
  StringRef stopAfter = options.stopAfter;
  if (!stopAfter.empty() && !llvm::is_contained(getPipelineStages(), stopAfter))
    return makeError("unknown stage '" + stopAfter + "' (expected one of: " +
                     llvm::join(getPipelineStages(), ", ") + ")");
  // Options checked where they are given, with the option's name.
  if (!target::lookup(options.target))
    return makeError(target::unknownChipMessage(options.target));
  if (options.twoCta == Toggle::On &&
      target::lookup(options.target)->family != target::Family::Blackwell)
    return makeError("two-cta=on runs CTA pairs (tcgen05.mma cta_group::2), "
                     "Blackwell's; " +
                     options.target.getValue() + " has none");
  if (options.twoCta == Toggle::On && options.smCount == 1)
    return makeError("two-cta=on runs each pair as a cluster on two SMs; "
                     "sm-count is 1");
  if (options.smCount < 0 ||
      options.smCount > std::numeric_limits<int32_t>::max())
    return makeError("sm-count must be 0 (the target's) or in [1, 2^31), got " +
                     std::to_string(options.smCount));
  if (options.grid != "persistent" && options.grid != "per-task" &&
      options.grid != "auto")
    return makeError("grid must be persistent, per-task or auto, got '" +
                     options.grid + "'");
  if (options.grid == "per-task" && options.smCount)
    return makeError("sm-count sizes a persistent grid; grid=per-task has a "
                     "CTA per task (give one or the other)");
  if (options.l2SectionBytes < -1)
    return makeError("l2-section-bytes must be -1 (the grid's default), 0 "
                     "(no sections) or a byte count, got " +
                     std::to_string(options.l2SectionBytes));
  if (options.kvStages < 0)
    return makeError("kv-stages must be 0 (as many as shared memory holds) or "
                     "a stage count, got " +
                     std::to_string(options.kvStages));
  if (options.blockN < 0)
    return makeError("block-n must be 0 (the target's choice) or a key "
                     "count, got " +
                     std::to_string(options.blockN));
  if (options.qTilesPerTask < 0 || options.qTilesPerTask > 2)
    return makeError("q-tiles-per-task must be 0 (the target's choice), 1 "
                     "or 2, got " +
                     std::to_string(options.qTilesPerTask));
  if (options.qTileRows != 0 && options.qTileRows != 128 &&
      options.qTileRows != 192)
    return makeError("q-tile-rows must be 0 (the target's choice), 128 or "
                     "192, got " +
                     std::to_string(options.qTileRows));
  if (!(options.rescaleThreshold >= 0.0) ||
      !std::isfinite(options.rescaleThreshold))
    return makeError("rescale-threshold must be finite and non-negative, got " +
                     roundTripDecimal(options.rescaleThreshold));
  if (!target::isExp2EmulationFraction(options.exp2EmulationFraction))
    return makeError("exp2-emulation-fraction must be in [0, 1], or -1 for "
                     "the target's own, got " +
                     roundTripDecimal(options.exp2EmulationFraction));
  for (const Stage &stage : kStages) {
    stage.add(pm, options);
    if (stage.name == stopAfter)
      break;
  }
  return llvm::Error::success();
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
        if (llvm::Error refused = buildPipeline(pm, options))
          return errorHandler("fa4-pipeline: " +
                              llvm::toString(std::move(refused)));
        return success();
      },
      [](function_ref<void(const mlir::detail::PassOptions &)> optionsHandler) {
        optionsHandler(PipelineOptions());
      });
}

void mlir::fa4::registerPipelineDialects(DialectRegistry &registry) {
  registerTileLevelDialects(registry);
  registerBufferizableOpInterfaceExternalModels(registry);
  registry.insert<bufferization::BufferizationDialect, gpu::GPUDialect, LLVM::LLVMDialect, NVVM::NVVMDialect,
                  vector::VectorDialect, cf::ControlFlowDialect,
                  linalg::LinalgDialect>();
  NVVM::registerNVVMTargetInterfaceExternalModels(registry);
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  registerNVVMDialectTranslation(registry);
  registerGPUDialectTranslation(registry);
}
