//===- KernelOutput.cpp - LLVM IR, PTX, cubin and manifest ----------------===//

#include "fa4/Tools/KernelOutput.h"

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Runtime/Contract.h"
#include "fa4/Runtime/Launch.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::fa4;

static gpu::GPUModuleOp kernelModule(ModuleOp module) {
  gpu::GPUModuleOp found;
  module.walk([&](gpu::GPUModuleOp op) { found = op; });
  return found;
}

LogicalResult mlir::fa4::writeLlvmIr(ModuleOp module, llvm::raw_ostream &os,
                                     std::string &error) {
  gpu::GPUModuleOp gpuModule = kernelModule(module);
  if (!gpuModule) {
    error = "no gpu.module to translate (run the nvvm stage)";
    return failure();
  }
  llvm::LLVMContext context;
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(gpuModule, context, gpuModule.getName());
  if (!llvmModule) {
    error = "the kernel does not translate to LLVM IR";
    return failure();
  }
  llvmModule->print(os, nullptr);
  return success();
}

/// Adds the kernel's contract (fa4/Runtime/Contract.h) to the gpu.module:
/// `fa4_contract`, an external constant in global memory, so that the NVPTX
/// backend writes it as a `.visible .global` array and ptxas keeps it, with
/// its symbol, in the cubin. Its text is computed from the manifest that
/// launchManifest() writes for this module — parsed as the runtime parses
/// it — so the runtime's kernelContract() of an unedited manifest is the
/// same text. A module without a launchable kernel gets none.
static LogicalResult embedContract(ModuleOp module, std::string &error) {
  gpu::GPUModuleOp gpuModule = kernelModule(module);
  bool launchable = false;
  module.walk([&](LLVM::LLVMFuncOp func) {
    launchable = launchable || func->hasAttr("fa4.launch");
  });
  if (!gpuModule || !launchable)
    return success();
  StringRef chip;
  if (ArrayAttr targets = gpuModule.getTargetsAttr())
    for (Attribute target : targets)
      if (auto nvvm = dyn_cast<NVVM::NVVMTargetAttr>(target))
        chip = nvvm.getChip();
  // The file names and ptxas's report are not part of the contract.
  runtime::Manifest manifest;
  if (!runtime::parseManifest(launchManifest(module, chip, "", "", PtxasReport()),
                              manifest, error)) {
    error = "the kernel's own manifest does not parse: " + error;
    return failure();
  }
  std::string contract = runtime::kernelContract(manifest);
  OpBuilder builder = OpBuilder::atBlockBegin(gpuModule.getBody());
  auto type = LLVM::LLVMArrayType::get(builder.getI8Type(), contract.size());
  LLVM::GlobalOp::create(builder, gpuModule.getLoc(), type, /*isConstant=*/true,
                         LLVM::Linkage::External, runtime::kContractSymbol,
                         builder.getStringAttr(contract), /*alignment=*/1,
                         /*addrSpace=*/1);
  return success();
}

LogicalResult mlir::fa4::serializeToPtx(ModuleOp module, std::string &ptx,
                                        std::string &error) {
  OwningOpRef<ModuleOp> copy = module.clone();
  if (failed(embedContract(*copy, error)))
    return failure();
  PassManager pm(module.getContext());
  GpuModuleToBinaryPassOptions options;
  options.compilationTarget = "isa";
  pm.addPass(createGpuModuleToBinaryPass(options));
  if (failed(pm.run(*copy))) {
    error = "cannot serialize the kernel to PTX";
    return failure();
  }
  copy->walk([&](gpu::BinaryOp binary) {
    for (Attribute object : binary.getObjects())
      ptx = cast<gpu::ObjectAttr>(object).getObject().getValue().str();
  });
  if (ptx.empty()) {
    error = "gpu-module-to-binary produced no PTX";
    return failure();
  }
  return success();
}

/// The first integer `pattern` captures in `text`, or -1.
static int64_t capture(StringRef text, StringRef pattern) {
  SmallVector<StringRef> groups;
  if (!llvm::Regex(pattern).match(text, &groups) || groups.size() < 2)
    return -1;
  int64_t value = -1;
  groups[1].getAsInteger(10, value);
  return value;
}

LogicalResult mlir::fa4::ptxasVersion(StringRef cudaPath, std::string &version,
                                      std::string &error) {
  SmallString<256> binDir(cudaPath);
  llvm::sys::path::append(binDir, "bin");
  llvm::ErrorOr<std::string> ptxas =
      llvm::sys::findProgramByName("ptxas", {binDir});
  if (!ptxas) {
    error = ("ptxas not found in " + binDir).str();
    return failure();
  }
  SmallString<128> logFile;
  if (llvm::sys::fs::createTemporaryFile("fa4", "log", logFile)) {
    error = "cannot create a temporary file for ptxas --version";
    return failure();
  }
  StringRef args[] = {*ptxas, "--version"};
  std::optional<StringRef> redirects[] = {std::nullopt, StringRef(logFile),
                                          StringRef(logFile)};
  int status = llvm::sys::ExecuteAndWait(*ptxas, args, std::nullopt, redirects);
  if (auto log = llvm::MemoryBuffer::getFile(logFile))
    version = (*log)->getBuffer().str();
  llvm::sys::fs::remove(logFile);
  if (status != 0 || version.empty()) {
    error = "ptxas --version failed";
    return failure();
  }
  return success();
}

LogicalResult mlir::fa4::assembleCubin(StringRef ptx, StringRef cudaPath,
                                       StringRef chip, std::string &cubin,
                                       PtxasReport &report, std::string &error) {
  SmallString<256> binDir(cudaPath);
  llvm::sys::path::append(binDir, "bin");
  llvm::ErrorOr<std::string> ptxas =
      llvm::sys::findProgramByName("ptxas", {binDir});
  if (!ptxas) {
    error = ("ptxas not found in " + binDir +
             " (set --cuda-path, or CUDA_TOOLKIT_PATH when configuring)")
                .str();
    return failure();
  }
  // The temporary files go whatever happens; a write that fails (a full
  // TMPDIR) is an error, never the stream's fatal report at destruction.
  SmallString<128> ptxFile, logFile, cubinFile;
  llvm::scope_exit removeTemporaries([&] {
    for (SmallString<128> *file : {&ptxFile, &logFile, &cubinFile})
      if (!file->empty())
        llvm::sys::fs::remove(*file);
  });
  int ptxFd = -1;
  if (std::error_code ec = llvm::sys::fs::createTemporaryFile("fa4", "ptx", ptxFd, ptxFile)) {
    ptxFile.clear();
    error = "cannot create a temporary file for ptxas: " + ec.message();
    return failure();
  }
  {
    llvm::raw_fd_ostream os(ptxFd, /*shouldClose=*/true);
    os << ptx;
    os.close();
    if (os.has_error()) {
      error = ("cannot write the PTX for ptxas to " + ptxFile + ": " +
               os.error().message())
                  .str();
      os.clear_error();
      return failure();
    }
  }
  if (std::error_code ec = llvm::sys::fs::createTemporaryFile("fa4", "log", logFile)) {
    logFile.clear();
    error = "cannot create a temporary file for ptxas: " + ec.message();
    return failure();
  }
  if (std::error_code ec = llvm::sys::fs::createTemporaryFile("fa4", "cubin", cubinFile)) {
    cubinFile.clear();
    error = "cannot create a temporary file for ptxas: " + ec.message();
    return failure();
  }
  std::string arch = ("-arch=" + chip).str();
  StringRef args[] = {*ptxas, arch, "-v", "-o", cubinFile, ptxFile};
  std::optional<StringRef> redirects[] = {std::nullopt, StringRef(logFile),
                                          StringRef(logFile)};
  std::string message;
  int status = llvm::sys::ExecuteAndWait(*ptxas, args, std::nullopt, redirects,
                                         0, 0, &message);
  if (auto log = llvm::MemoryBuffer::getFile(logFile))
    report.log = (*log)->getBuffer().str();
  if (status != 0) {
    error = "ptxas failed: " + (message.empty() ? report.log : message);
    return failure();
  }
  auto written = llvm::MemoryBuffer::getFile(cubinFile, /*IsText=*/false,
                                             /*RequiresNullTerminator=*/false);
  if (!written || (*written)->getBufferSize() == 0) {
    error = ("cannot read back the cubin ptxas wrote to " + cubinFile + ": " +
             (written ? "the file is empty" : written.getError().message()))
                .str();
    return failure();
  }
  cubin = (*written)->getBuffer().str();
  report.registers = capture(report.log, "Used ([0-9]+) registers");
  report.stackBytes = capture(report.log, "([0-9]+) bytes stack frame");
  report.spillStoreBytes = capture(report.log, "([0-9]+) bytes spill stores");
  report.spillLoadBytes = capture(report.log, "([0-9]+) bytes spill loads");
  int64_t smem = capture(report.log, "([0-9]+) bytes smem");
  report.staticSmemBytes = smem < 0 ? 0 : smem;
  return success();
}

std::string mlir::fa4::launchManifest(ModuleOp module, StringRef chip,
                                      StringRef cubinPath, StringRef ptxPath,
                                      const PtxasReport &ptxas) {
  std::string text;
  llvm::raw_string_ostream os(text);
  LLVM::LLVMFuncOp kernel;
  module.walk([&](LLVM::LLVMFuncOp func) {
    if (func->hasAttr("fa4.launch"))
      kernel = func;
  });
  if (!kernel)
    return "{}";
  auto launch = kernel->getAttrOfType<DictionaryAttr>("fa4.launch");
  auto integer = [&](StringRef name) {
    auto value = launch.getAs<IntegerAttr>(name);
    return value ? value.getInt() : 0;
  };
  auto grid = launch.getAs<DictionaryAttr>("grid");
  auto spec = launch.getAs<DictionaryAttr>("spec");
  bool hasLse = launch.getAs<BoolAttr>("lse").getValue();
  auto flag = [&](StringRef name) {
    auto value = launch.getAs<BoolAttr>(name);
    return value && value.getValue();
  };
  int64_t smCount = grid ? grid.getAs<IntegerAttr>("sm_count").getInt() : 1;
  StringRef order = grid ? grid.getAs<StringAttr>("order").getValue() : "static";
  auto maps = launch.getAs<ArrayAttr>("tensor_maps");
  int64_t kvHeads = 1, qHeads = 1;
  for (Attribute attr : maps) {
    auto map = cast<DictionaryAttr>(attr);
    StringRef name = map.getAs<StringAttr>("name").getValue();
    if (name == "q")
      qHeads = map.getAs<IntegerAttr>("heads").getInt();
    if (name == "k")
      kvHeads = map.getAs<IntegerAttr>("heads").getInt();
  }

  // Names a caller chose (the entry's, the output files') are JSON strings,
  // escaped: a quote or a backslash in them must not end the field.
  auto quoted = [](StringRef text) {
    std::string out;
    llvm::raw_string_ostream(out) << llvm::json::Value(llvm::json::fixUTF8(text));
    return out;
  };
  os << "{\n";
  os << "  \"kernel\": " << quoted(kernel.getName()) << ",\n";
  os << "  \"cubin\": " << quoted(llvm::sys::path::filename(cubinPath)) << ",\n";
  os << "  \"ptx\": " << quoted(llvm::sys::path::filename(ptxPath)) << ",\n";
  os << "  \"target\": \"" << chip << "\",\n";
  os << "  \"block\": [" << integer("block") << ", 1, 1],\n";
  os << "  \"grid\": {\"policy\": \"persistent\", \"size\": \"min(sm_count, "
        "tasks)\", \"sm_count\": "
     << smCount << ", \"tasks\": \"batch * " << kvHeads << " * ceil(seq_q * "
     << qHeads / kvHeads << " / " << integer("rows_per_task")
     << ")\", \"order\": \"" << order << "\"},\n";
  os << "  \"dynamic_smem_bytes\": " << integer("smem_bytes") << ",\n";
  os << "  \"tmem_columns\": " << integer("tmem_columns") << ",\n";
  if (spec) {
    // The variant, in full: what a launcher validates shapes against and
    // what a reference needs (fa4-emu).
    auto maskAttr = spec.getAs<MaskKindAttr>("mask");
    auto number = [&](StringRef name) {
      auto value = spec.getAs<FloatAttr>(name);
      return value ? value.getValueAsDouble() : 0.0;
    };
    auto whole = [&](StringRef name) {
      auto value = spec.getAs<IntegerAttr>(name);
      return value ? value.getInt() : int64_t(-1);
    };
    StringRef dtype = "fp16";
    int64_t headDim = 0;
    for (Attribute attr : maps) {
      auto map = cast<DictionaryAttr>(attr);
      dtype = map.getAs<StringAttr>("dtype").getValue();
      headDim = map.getAs<IntegerAttr>("head_dim").getInt();
    }
    os << "  \"attention\": {\"mask\": \""
       << (maskAttr ? stringifyMaskKind(maskAttr.getValue()) : "none")
       << "\", \"window_left\": " << whole("window_left")
       << ", \"window_right\": " << whole("window_right")
       << ", \"scale\": " << llvm::formatv("{0:e9}", number("scale"))
       << ", \"softcap\": " << llvm::formatv("{0:e9}", number("softcap"))
       << ", \"head_dim\": " << headDim << ", \"q_heads\": " << qHeads
       << ", \"kv_heads\": " << kvHeads << ", \"dtype\": \"" << dtype
       << "\", \"lse\": " << (hasLse ? "true" : "false")
       << ", \"rows_per_task\": " << integer("rows_per_task")
       << ", \"score_mod\": " << (flag("score_mod") ? "true" : "false")
       << ", \"mask_mod\": " << (flag("mask_mod") ? "true" : "false");
    // Which extra is the block mask, when there is one.
    if (launch.get("block_mask"))
      os << ", \"block_mask\": " << integer("block_mask");
    os << "},\n";
  }
  // The memrefs the score_mod and mask_mod read: element type and shape, -1
  // where the launch gives the size.
  auto extras = launch.getAs<ArrayAttr>("extras");
  if (extras) {
    os << "  \"extras\": [";
    for (auto [i, attr] : llvm::enumerate(extras)) {
      auto extra = cast<DictionaryAttr>(attr);
      os << (i ? ", " : "") << "{\"name\": \"extra" << i << "\", \"dtype\": \""
         << extra.getAs<StringAttr>("dtype").getValue() << "\", \"shape\": [";
      for (auto [d, dim] :
           llvm::enumerate(extra.getAs<DenseI64ArrayAttr>("shape").asArrayRef()))
        os << (d ? ", " : "") << (ShapedType::isDynamic(dim) ? int64_t(-1) : dim);
      os << "], \"layout\": \"row-major\"}";
    }
    os << "],\n";
  }
  if (auto roles = launch.getAs<ArrayAttr>("roles")) {
    os << "  \"roles\": [";
    for (auto [i, attr] : llvm::enumerate(roles)) {
      auto role = cast<DictionaryAttr>(attr);
      os << (i ? ", " : "") << "{\"name\": \""
         << role.getAs<StringAttr>("name").getValue() << "\", \"first_warp\": "
         << role.getAs<IntegerAttr>("first_warp").getInt()
         << ", \"num_warps\": " << role.getAs<IntegerAttr>("num_warps").getInt()
         << ", \"registers\": " << role.getAs<IntegerAttr>("registers").getInt()
         << "}";
    }
    os << "],\n";
  }
  os << "  \"tensor_maps\": [\n";
  bool firstMap = true;
  for (Attribute attr : maps) {
    auto map = cast<DictionaryAttr>(attr);
    int64_t heads = map.getAs<IntegerAttr>("heads").getInt();
    int64_t dim = map.getAs<IntegerAttr>("head_dim").getInt();
    StringRef name = map.getAs<StringAttr>("name").getValue();
    StringRef seq = name == "k" || name == "v" ? "seq_k" : "seq_q";
    ArrayRef<int64_t> box = map.getAs<DenseI64ArrayAttr>("box").asArrayRef();
    // [batch, seq, heads, head_dim] of 2-byte elements, innermost first:
    // `strides_bytes` are the dense (row-major) ones, which a launch replaces
    // with its tensors' own through `axes` (each map dimension's tensor axis);
    // `layout_strides` are the entry IR's (elements, [batch, seq, heads,
    // head_dim], null where dynamic or free), which a launch's tensors must
    // match.
    os << (firstMap ? "" : ",\n") << "    {\"tensor\": \"" << name
       << "\", \"dtype\": \"" << map.getAs<StringAttr>("dtype").getValue()
       << "\", \"rank\": 4, \"dims\": [" << dim << ", " << heads << ", \""
       << seq << "\", \"batch\"], \"strides_bytes\": [" << dim * 2 << ", "
       << dim * 2 * heads << ", \"" << dim * 2 * heads << " * " << seq
       << "\"], \"box\": [" << box[0] << ", " << box[1] << ", " << box[2]
       << ", " << box[3]
       << "], \"axes\": [3, 2, 1, 0], \"layout_strides\": [";
    ArrayRef<int64_t> declared;
    if (auto strides = map.getAs<DenseI64ArrayAttr>("strides"))
      declared = strides.asArrayRef();
    for (size_t i = 0; i < 4; ++i) {
      os << (i ? ", " : "");
      if (i < declared.size() && !ShapedType::isDynamic(declared[i]) && declared[i] > 0)
        os << declared[i];
      else
        os << "null";
    }
    os << "], \"element_strides\": [1, 1, 1, 1], "
          "\"swizzle\": \"128B\", "
          "\"interleave\": \"none\", \"oob_fill\": \"zero\"}";
    firstMap = false;
  }
  os << "\n  ],\n";
  os << "  \"parameters\": [\n";
  os << "    {\"name\": \"q_map\", \"type\": \"CUtensorMap\", \"passing\": "
        "\"by value, __grid_constant__\"},\n";
  os << "    {\"name\": \"k_map\", \"type\": \"CUtensorMap\", \"passing\": "
        "\"by value, __grid_constant__\"},\n";
  os << "    {\"name\": \"v_map\", \"type\": \"CUtensorMap\", \"passing\": "
        "\"by value, __grid_constant__\"},\n";
  os << "    {\"name\": \"o_map\", \"type\": \"CUtensorMap\", \"passing\": "
        "\"by value, __grid_constant__\"},\n";
  if (hasLse)
    os << "    {\"name\": \"lse\", \"type\": \"float*\", \"layout\": "
          "\"[batch, q_heads, seq_q] row-major, f32\"},\n";
  os << "    {\"name\": \"batch\", \"type\": \"int32\"},\n";
  os << "    {\"name\": \"seq_q\", \"type\": \"int32\"},\n";
  os << "    {\"name\": \"seq_k\", \"type\": \"int32\"}";
  if (extras) {
    for (auto [i, attr] : llvm::enumerate(extras)) {
      auto extra = cast<DictionaryAttr>(attr);
      os << ",\n    {\"name\": \"extra" << i << "\", \"type\": \"void*\"}";
      for (auto [d, dim] :
           llvm::enumerate(extra.getAs<DenseI64ArrayAttr>("shape").asArrayRef()))
        if (ShapedType::isDynamic(dim))
          os << ",\n    {\"name\": \"extra" << i << "_dim" << d
             << "\", \"type\": \"int32\"}";
    }
  }
  os << "\n  ],\n";
  os << "  \"ptxas\": {\"registers\": " << ptxas.registers
     << ", \"spill_store_bytes\": " << ptxas.spillStoreBytes
     << ", \"spill_load_bytes\": " << ptxas.spillLoadBytes
     << ", \"stack_bytes\": " << ptxas.stackBytes
     << ", \"static_smem_bytes\": " << ptxas.staticSmemBytes << "}\n";
  os << "}\n";
  return text;
}
