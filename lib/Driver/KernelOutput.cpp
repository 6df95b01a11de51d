//===- KernelOutput.cpp - LLVM IR, PTX, cubin and manifest ----------------===//

#include "fa4/Driver/KernelOutput.h"

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Runtime/Contract.h"
#include "fa4/Runtime/Launch.h"
#include "fa4/Support/Error.h"

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

/// The chip the module is compiled for: its fa4.target, else the chip its
/// kernels' NVVM target names.
static StringRef moduleChip(ModuleOp module) {
  if (auto named = module->getAttrOfType<TargetAttr>(kTargetAttrName))
    return named.getInfo().name;
  if (gpu::GPUModuleOp gpuModule = kernelModule(module))
    if (ArrayAttr targets = gpuModule.getTargetsAttr())
      for (Attribute target : targets)
        if (auto nvvm = dyn_cast<NVVM::NVVMTargetAttr>(target))
          return nvvm.getChip();
  return "";
}


llvm::Error mlir::fa4::writeLlvmIr(ModuleOp module, llvm::raw_ostream &os) {
  gpu::GPUModuleOp gpuModule = kernelModule(module);
  if (!gpuModule)
    return makeError("no gpu.module to translate (run the nvvm stage)");
  llvm::LLVMContext context;
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(gpuModule, context, gpuModule.getName());
  if (!llvmModule)
    return makeError("the kernel does not translate to LLVM IR");
  llvmModule->print(os, nullptr);
  return llvm::Error::success();
}

/// Adds the kernel's contract (fa4/Runtime/Contract.h) to the gpu.module:
/// `fa4_contract`, an external constant in global memory, so that the NVPTX
/// backend writes it as a `.visible .global` array and ptxas keeps it, with
/// its symbol, in the cubin. Its text is computed from the manifest that
/// launchManifest() writes for this module — parsed as the runtime parses
/// it — so the runtime's kernelContract() of an unedited manifest is the
/// same text. A module without a launchable kernel gets none.
static llvm::Error embedContract(ModuleOp module) {
  gpu::GPUModuleOp gpuModule = kernelModule(module);
  bool launchable = false, backward = false;
  module.walk([&](LLVM::LLVMFuncOp func) {
    launchable = launchable || func->hasAttr(kLaunchAttrName);
    backward = backward || func->hasAttr(kBackwardLaunchAttrName);
  });
  if (!gpuModule || !(launchable || backward))
    return llvm::Error::success();
  StringRef chip = moduleChip(module);
  // The file names and ptxas's report are not part of the contract; the
  // manifest is read back as the runtime reads it.
  std::string contract;
  if (backward) {
    llvm::Expected<runtime::BackwardManifest> manifest =
        runtime::parseBackwardManifest(launchManifest(module, chip, "", "",
                                                      PtxasReport()));
    if (!manifest)
      return prefixError("the backward's own manifest does not parse: ",
                         manifest.takeError());
    contract = runtime::backwardContract(*manifest);
  } else {
    llvm::Expected<runtime::Manifest> manifest = runtime::parseManifest(
        launchManifest(module, chip, "", "", PtxasReport()));
    if (!manifest)
      return prefixError("the kernel's own manifest does not parse: ",
                         manifest.takeError());
    contract = runtime::kernelContract(*manifest);
  }
  OpBuilder builder = OpBuilder::atBlockBegin(gpuModule.getBody());
  auto type = LLVM::LLVMArrayType::get(builder.getI8Type(), contract.size());
  LLVM::GlobalOp::create(builder, gpuModule.getLoc(), type, /*isConstant=*/true,
                         LLVM::Linkage::External, runtime::kContractSymbol,
                         builder.getStringAttr(contract), /*alignment=*/1,
                         /*addrSpace=*/1);
  return llvm::Error::success();
}

/// The PTX of a chip whose code is generated for another (its row's
/// codegenChip): the `.target` directive names the chip itself.
static llvm::Expected<std::string> retarget(std::string ptx, StringRef chip,
                                            StringRef codegenChip) {
  std::string from = (".target " + codegenChip).str();
  size_t at = ptx.find(from);
  while (at != std::string::npos && at != 0 && ptx[at - 1] != '\n')
    at = ptx.find(from, at + 1);
  size_t end = at == std::string::npos ? at : at + from.size();
  if (at == std::string::npos ||
      (end < ptx.size() && ptx[end] != '\n' && ptx[end] != ','))
    return makeError("the PTX generated for " + codegenChip.str() +
                     " has no '.target " + codegenChip.str() +
                     "' directive to retarget to " + chip.str());
  ptx.replace(at, from.size(), (".target " + chip).str());
  return std::move(ptx);
}

llvm::Expected<std::string> mlir::fa4::serializeToPtx(ModuleOp module) {
  OwningOpRef<ModuleOp> copy = module.clone();
  if (llvm::Error refused = embedContract(*copy))
    return std::move(refused);
  PassManager pm(module.getContext());
  GpuModuleToBinaryPassOptions options;
  options.compilationTarget = "isa";
  pm.addPass(createGpuModuleToBinaryPass(options));
  if (failed(pm.run(*copy)))
    return makeError("cannot serialize the kernel to PTX");
  std::string ptx;
  copy->walk([&](gpu::BinaryOp binary) {
    for (Attribute object : binary.getObjects())
      ptx = cast<gpu::ObjectAttr>(object).getObject().getValue().str();
  });
  if (ptx.empty())
    return makeError("gpu-module-to-binary produced no PTX");
  if (const target::ChipInfo *chip = target::lookup(moduleChip(module)))
    if (chip->codegenChip != chip->name)
      return retarget(std::move(ptx), chip->name, chip->codegenChip);
  return std::move(ptx);
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

llvm::Expected<std::string> mlir::fa4::ptxasVersion(StringRef cudaPath) {
  SmallString<256> binDir(cudaPath);
  llvm::sys::path::append(binDir, "bin");
  llvm::ErrorOr<std::string> ptxas =
      llvm::sys::findProgramByName("ptxas", {binDir});
  if (!ptxas)
    return makeError("ptxas not found in " + binDir);
  SmallString<128> logFile;
  if (llvm::sys::fs::createTemporaryFile("fa4", "log", logFile))
    return makeError("cannot create a temporary file for ptxas --version");
  StringRef args[] = {*ptxas, "--version"};
  std::optional<StringRef> redirects[] = {std::nullopt, StringRef(logFile),
                                          StringRef(logFile)};
  int status = llvm::sys::ExecuteAndWait(*ptxas, args, std::nullopt, redirects);
  std::string version;
  if (auto log = llvm::MemoryBuffer::getFile(logFile))
    version = (*log)->getBuffer().str();
  llvm::sys::fs::remove(logFile);
  if (status != 0 || version.empty())
    return makeError("ptxas --version failed");
  return std::move(version);
}

llvm::Expected<AssembledCubin>
mlir::fa4::assembleCubin(StringRef ptx, StringRef cudaPath, StringRef chip) {
  SmallString<256> binDir(cudaPath);
  llvm::sys::path::append(binDir, "bin");
  llvm::ErrorOr<std::string> ptxas =
      llvm::sys::findProgramByName("ptxas", {binDir});
  if (!ptxas)
    return makeError(
        "ptxas not found in " + binDir +
        " (set --cuda-path, or CUDA_TOOLKIT_PATH when configuring)");
  // The temporary files go whatever happens; a write that fails (a full
  // TMPDIR) is an error, never the stream's fatal report at destruction.
  SmallString<128> ptxFile, logFile, cubinFile;
  llvm::scope_exit removeTemporaries([&] {
    for (SmallString<128> *file : {&ptxFile, &logFile, &cubinFile})
      if (!file->empty())
        llvm::sys::fs::remove(*file);
  });
  int ptxFd = -1;
  if (std::error_code ec =
          llvm::sys::fs::createTemporaryFile("fa4", "ptx", ptxFd, ptxFile)) {
    ptxFile.clear();
    return makeError("cannot create a temporary file for ptxas: " +
                     ec.message());
  }
  {
    llvm::raw_fd_ostream os(ptxFd, /*shouldClose=*/true);
    os << ptx;
    os.close();
    if (os.has_error()) {
      llvm::Error unwritten = makeError("cannot write the PTX for ptxas to " +
                                        ptxFile + ": " + os.error().message());
      os.clear_error();
      return std::move(unwritten);
    }
  }
  if (std::error_code ec =
          llvm::sys::fs::createTemporaryFile("fa4", "log", logFile)) {
    logFile.clear();
    return makeError("cannot create a temporary file for ptxas: " +
                     ec.message());
  }
  if (std::error_code ec =
          llvm::sys::fs::createTemporaryFile("fa4", "cubin", cubinFile)) {
    cubinFile.clear();
    return makeError("cannot create a temporary file for ptxas: " +
                     ec.message());
  }
  std::string arch = ("-arch=" + chip).str();
  StringRef args[] = {*ptxas, arch, "-v", "-o", cubinFile, ptxFile};
  std::optional<StringRef> redirects[] = {std::nullopt, StringRef(logFile),
                                          StringRef(logFile)};
  std::string message;
  int status = llvm::sys::ExecuteAndWait(*ptxas, args, std::nullopt, redirects,
                                         0, 0, &message);
  AssembledCubin assembled;
  PtxasReport &report = assembled.report;
  if (auto log = llvm::MemoryBuffer::getFile(logFile))
    report.log = (*log)->getBuffer().str();
  if (status != 0)
    return makeError("ptxas failed: " +
                     (message.empty() ? report.log : message));
  auto written = llvm::MemoryBuffer::getFile(cubinFile, /*IsText=*/false,
                                             /*RequiresNullTerminator=*/false);
  if (!written || (*written)->getBufferSize() == 0)
    return makeError(
        "cannot read back the cubin ptxas wrote to " + cubinFile + ": " +
        (written ? "the file is empty" : written.getError().message()));
  assembled.cubin = (*written)->getBuffer().str();
  report.registers = capture(report.log, "Used ([0-9]+) registers");
  report.stackBytes = capture(report.log, "([0-9]+) bytes stack frame");
  report.spillStoreBytes = capture(report.log, "([0-9]+) bytes spill stores");
  report.spillLoadBytes = capture(report.log, "([0-9]+) bytes spill loads");
  int64_t smem = capture(report.log, "([0-9]+) bytes smem");
  report.staticSmemBytes = smem < 0 ? 0 : smem;
  return std::move(assembled);
}

/// FP8's V for sm_90a, as the runtime prepares it (fa4/Runtime/Fp8Value.h):
/// the tensor [batch, kv_heads, v_head_dim, seq_k_padded] of bytes, keys
/// contiguous, walked keys first; the map's box [keys, 1, v_head_dim, 1].
static runtime::Manifest::TensorMap
transposedValueMap(TensorMapInfoAttr map, runtime::Manifest::TensorMap entry) {
  std::string heads = std::to_string(map.getHeads());
  std::string dim = std::to_string(map.getHeadDim());
  entry.rank = 4;
  entry.dims = {"seq_k_padded", heads, dim, "batch"};
  entry.strides = {dim + " * seq_k_padded", "seq_k_padded",
                   std::to_string(map.getHeads() * map.getHeadDim()) +
                       " * seq_k_padded"};
  ArrayRef<int64_t> box = map.getBox();
  for (size_t d = 0; d < 4 && d < box.size(); ++d)
    entry.box[d] = static_cast<uint32_t>(box[d]);
  entry.axes = {3, 1, 2, 0};
  // A layout the runtime makes: nothing of the entry's to hold a launch to.
  entry.swizzle = runtime::TensorMapSwizzle::Bytes128;
  entry.oobFill = runtime::TensorMapOobFill::Zero;
  return entry;
}

runtime::Manifest mlir::fa4::kernelManifest(ModuleOp module, StringRef chip,
                                            StringRef cubinPath,
                                            StringRef ptxPath,
                                            const PtxasReport &ptxas) {
  runtime::Manifest m;
  LLVM::LLVMFuncOp kernel;
  module.walk([&](LLVM::LLVMFuncOp func) {
    if (func->getAttrOfType<LaunchAttr>(kLaunchAttrName))
      kernel = func;
  });
  if (!kernel)
    return m;
  auto launch = kernel->getAttrOfType<LaunchAttr>(kLaunchAttrName);
  m.kernel = kernel.getName().str();
  m.cubin = llvm::sys::path::filename(cubinPath).str();
  m.ptx = llvm::sys::path::filename(ptxPath).str();
  m.target = chip.str();
  m.block[0] = static_cast<uint32_t>(launch.getBlock());
  GridAttr grid = launch.getGrid();
  m.smCount = grid ? grid.getSmCount() : 1;
  m.cluster = launch.getCluster();
  m.order = stringifyTaskOrder(grid ? grid.getOrder() : TaskOrder::static_order).str();
  m.dynamicSmemBytes = static_cast<uint32_t>(launch.getSmemBytes());
  m.tmemColumns = static_cast<uint32_t>(launch.getTmemColumns());

  // The variant, in full.
  m.qHeads = m.kvHeads = 1;
  for (TensorMapInfoAttr map : launch.getTensorMaps()) {
    if (map.getName() == "q")
      m.qHeads = map.getHeads();
    if (map.getName() == "k") {
      m.kvHeads = map.getHeads();
      m.pageSize = map.getPageSize();
    }
    // The inputs' type is Q's; O's may differ (FP8 writes bf16 or fp16).
    if (map.getName() == "q") {
      m.dtype = map.getDtype().str();
      m.headDim = map.getHeadDim();
    }
    if (map.getName() == "o")
      m.outDtype = map.getDtype().str();
    if (map.getName() == "v")
      m.valueHeadDim = map.getHeadDim();
  }
  KernelSpecAttr spec = launch.getSpec();
  m.mask = stringifyMaskKind(spec.getMask()).str();
  m.windowLeft = spec.getWindowLeft();
  m.windowRight = spec.getWindowRight();
  m.scale = spec.getScaleValue();
  m.softcap = spec.getSoftcapValue();
  m.lse = launch.getLse();
  m.rowsPerTask = launch.getRowsPerTask();
  m.scoreMod = launch.getScoreMod();
  m.maskMod = launch.getMaskMod();
  m.blockMask = launch.getBlockMask().value_or(-1);
  m.seqUsedK = launch.getSequsedK().value_or(-1);
  m.blockTable = launch.getBlockTable().value_or(-1);
  m.numSplits = launch.getSpec().getSplits();
  m.splitWorkspace = launch.getSpec().getSplitWorkspace().value_or(-1);
  m.cuSeqlensQ = launch.getSpec().getCuSeqlensQ().value_or(-1);
  m.cuSeqlensK = launch.getSpec().getCuSeqlensK().value_or(-1);
  m.qDescale = spec.getQDescale().value_or(-1);
  m.kDescale = spec.getKDescale().value_or(-1);
  m.vDescale = spec.getVDescale().value_or(-1);
  // (Split-KV and varlen kernels say so by being what they are.)
  m.oByAddress = launch.getOByAddress() && m.splitWorkspace < 0 && m.cuSeqlensQ < 0;

  // The memrefs the score_mod and mask_mod read (dynamic sizes as -1).
  for (ExtraInfoAttr extra : launch.getExtras())
    m.extras.push_back({extra.getDtype().str(),
                        std::vector<int64_t>(extra.getShape().begin(),
                                             extra.getShape().end())});
  for (RoleInfoAttr role : launch.getRoles())
    m.roles.push_back({role.getName().str(), role.getFirstWarp(),
                       role.getNumWarps(), role.getRegisters()});

  // [batch, seq, heads, head_dim], innermost first: the dense strides, each
  // map dimension's tensor axis, and the entry IR's strides (elements, -1
  // where dynamic or free).
  for (TensorMapInfoAttr map : launch.getTensorMaps()) {
    runtime::Manifest::TensorMap entry;
    int64_t heads = map.getHeads();
    int64_t dim = map.getHeadDim();
    entry.tensor = map.getName().str();
    entry.dtype = map.getDtype().str();
    entry.layout = map.getLayout().str();
    int64_t bytes =
        static_cast<int64_t>(runtime::tensorElementBytes(entry.dtype));
    if (entry.layout == "vt") {
      m.tensorMaps.push_back(transposedValueMap(map, std::move(entry)));
      continue;
    }
    std::string seq = entry.tensor == "k" || entry.tensor == "v" ? "seq_k" : "seq_q";
    std::string batch = "batch";
    // Sizes the entry fixed are written as numbers: a launch must match
    // them (planLaunch holds each tensor to its map's dims).
    ArrayRef<int64_t> fixed = map.getSizes();
    if (fixed.size() == 2) {
      if (fixed[0] > 0)
        batch = std::to_string(fixed[0]);
      if (fixed[1] > 0)
        seq = std::to_string(fixed[1]);
    }
    entry.rank = 4;
    entry.dims = {std::to_string(dim), std::to_string(heads), seq, batch};
    entry.strides = {std::to_string(dim * bytes),
                     std::to_string(dim * bytes * heads),
                     std::to_string(dim * bytes * heads) + " * " + seq};
    if (int64_t page = map.getPageSize()) {
      // A paged cache: [num_blocks, page_size, heads, head_dim].
      entry.dims = {std::to_string(dim), std::to_string(heads),
                    std::to_string(page),
                    batch == "batch" ? std::string("num_blocks") : batch};
      entry.strides[2] = std::to_string(dim * bytes * heads * page);
    }
    ArrayRef<int64_t> box = map.getBox();
    for (size_t d = 0; d < 4 && d < box.size(); ++d)
      entry.box[d] = static_cast<uint32_t>(box[d]);
    entry.axes = {3, 2, 1, 0};
    ArrayRef<int64_t> declared = map.getStrides();
    for (size_t i = 0; i < 4; ++i)
      entry.layoutStrides.push_back(
          i < declared.size() && declared[i] > 0 ? declared[i] : -1);
    entry.swizzle = runtime::TensorMapSwizzle::Bytes128;
    entry.oobFill = runtime::TensorMapOobFill::Zero;
    m.tensorMaps.push_back(std::move(entry));
  }

  // The kernel's parameters, in order (runtime::checkInterface's).
  const char *byValue = "by value, __grid_constant__";
  for (const char *name : {"q_map", "k_map", "v_map", "o_map"})
    m.parameters.push_back({name, "CUtensorMap", byValue, ""});
  if (m.lse)
    m.parameters.push_back(
        {"lse", "float*", "", "[batch, q_heads, seq_q] row-major, f32"});
  for (const char *name : {"batch", "seq_q", "seq_k"})
    m.parameters.push_back({name, "int32", "", ""});
  for (size_t i = 0; i < m.extras.size(); ++i) {
    std::string extra = "extra" + std::to_string(i);
    m.parameters.push_back({extra, "void*", "", ""});
    for (size_t d = 0; d < m.extras[i].shape.size(); ++d)
      if (m.extras[i].shape[d] < 0)
        m.parameters.push_back(
            {extra + "_dim" + std::to_string(d), "int32", "", ""});
  }
  if (m.writesOByAddress()) {
    // The merge of split-KV, a varlen tile, or a schedule without O
    // staging writes O row by row (O's tensor map is not used).
    m.parameters.push_back(
        {"o", "void*", "",
         m.cuSeqlensQ >= 0       ? "O's address (varlen tiles write their rows)"
         : m.splitWorkspace >= 0 ? "O's address (the merge of split-KV writes it)"
                                 : "O's address (O's tiles are written from "
                                   "registers, row by row)"});
    for (const char *axis : {"batch", "seq", "head"})
      m.parameters.push_back({std::string("o_stride_") + axis, "int64", "",
                              "in elements"});
  }

  m.ptxas = {ptxas.registers, ptxas.spillStoreBytes, ptxas.spillLoadBytes,
             ptxas.stackBytes, ptxas.staticSmemBytes};
  return m;
}

std::optional<runtime::BackwardManifest>
mlir::fa4::backwardManifest(ModuleOp module, StringRef chip,
                            StringRef cubinPath, StringRef ptxPath) {
  LLVM::LLVMFuncOp kernel;
  module.walk([&](LLVM::LLVMFuncOp func) {
    if (func->hasAttr(kBackwardLaunchAttrName))
      kernel = func;
  });
  if (!kernel)
    return std::nullopt;
  auto launch = kernel->getAttrOfType<DictionaryAttr>(kBackwardLaunchAttrName);
  auto integer = [&](StringRef name) -> int64_t {
    auto value = launch.getAs<IntegerAttr>(name);
    return value ? value.getInt() : 0;
  };
  runtime::BackwardManifest m;
  m.cubin = llvm::sys::path::filename(cubinPath).str();
  m.ptx = llvm::sys::path::filename(ptxPath).str();
  m.target = chip.str();
  if (auto spec = launch.getAs<BackwardSpecAttr>("spec")) {
    m.mask = stringifyMaskKind(spec.getMask()).str();
    m.windowLeft = spec.getWindowLeft();
    m.windowRight = spec.getWindowRight();
    m.scale = spec.getScaleValue();
    m.softcap = spec.getSoftcapValue();
    m.deterministic = spec.getDeterministic();
  }
  m.headDim = integer("head_dim");
  m.qHeads = integer("q_heads");
  m.kvHeads = integer("kv_heads");
  if (auto dtype = launch.getAs<StringAttr>("dtype"))
    m.dtype = dtype.str();
  m.gqaPacking = integer("gqa_packing");
  m.stepRows = integer("step_rows");
  for (auto [name, size] :
       {std::pair<StringRef, int64_t *>{"static_batch", &m.staticBatch},
        {"static_seq_q", &m.staticSeqQ},
        {"static_seq_k", &m.staticSeqK}})
    if (launch.get(name))
      *size = integer(name);
  m.scoreMod = launch.get("score_mod") != nullptr;
  m.maskMod = launch.get("mask_mod") != nullptr;
  if (auto extras = launch.getAs<ArrayAttr>("extras"))
    for (auto extra : extras.getAsRange<ExtraInfoAttr>())
      m.extras.push_back({extra.getDtype().str(),
                          std::vector<int64_t>(extra.getShape().begin(),
                                               extra.getShape().end())});
  m.smCount = integer("sm_count");
  std::string name = kernel.getName().str();
  m.kernels[0].name = name + "_prepare";
  m.kernels[1].name = name;
  m.kernels[2].name = name + "_finish";
  m.kernels[0].block = m.kernels[2].block =
      static_cast<uint32_t>(integer("row_block"));
  m.kernels[1].block = static_cast<uint32_t>(integer("block"));
  m.kernels[1].dynamicSmemBytes =
      static_cast<uint32_t>(integer("dynamic_smem_bytes"));
  if (auto roles = launch.getAs<ArrayAttr>("roles"))
    for (auto role : roles.getAsRange<RoleInfoAttr>())
      m.kernels[1].roles.push_back({role.getName().str(), role.getFirstWarp(),
                                    role.getNumWarps(), role.getRegisters()});
  return m;
}

std::string mlir::fa4::launchManifest(ModuleOp module, StringRef chip,
                                      StringRef cubinPath, StringRef ptxPath,
                                      const PtxasReport &ptxas) {
  if (std::optional<runtime::BackwardManifest> backward =
          backwardManifest(module, chip, cubinPath, ptxPath))
    return runtime::writeBackwardManifest(*backward);
  bool launchable = false;
  module.walk([&](LLVM::LLVMFuncOp func) {
    launchable = launchable || func->hasAttr(kLaunchAttrName);
  });
  if (!launchable)
    return "{}";
  return runtime::writeManifest(
      kernelManifest(module, chip, cubinPath, ptxPath, ptxas));
}
