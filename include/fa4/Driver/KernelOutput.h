//===- KernelOutput.h - LLVM IR, PTX, cubin and manifest --------*- C++ -*-===//
//
// What fa4c writes once the pipeline has reached level D: the kernel as LLVM
// IR or PTX, or assembled by ptxas into an sm_100a cubin with a JSON manifest
// that says how to launch it.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_DRIVER_KERNELOUTPUT_H
#define FA4_DRIVER_KERNELOUTPUT_H

#include "fa4/Runtime/Backward.h"
#include "fa4/Runtime/Launch.h"
#include "mlir/Support/LLVM.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace mlir {
class ModuleOp;
} // namespace mlir

namespace mlir::fa4 {

/// What `ptxas -v` says of the kernel.
struct PtxasReport {
  int64_t registers = -1;
  int64_t spillStoreBytes = -1;
  int64_t spillLoadBytes = -1;
  int64_t stackBytes = -1;
  int64_t staticSmemBytes = 0;
  std::string log;
};

/// What ptxas made of the PTX: the cubin and what it reported.
struct AssembledCubin {
  std::string cubin;
  PtxasReport report;
};

/// The gpu.module's kernel translated to LLVM IR, written to `os`.
llvm::Error writeLlvmIr(ModuleOp module, llvm::raw_ostream &os);

/// The gpu.module serialized to PTX (gpu-module-to-binary, format=isa).
llvm::Expected<std::string> serializeToPtx(ModuleOp module);

/// What `ptxas --version` of `cudaPath` prints (a compile-cache key part).
llvm::Expected<std::string> ptxasVersion(StringRef cudaPath);

/// Assembles `ptx` for `chip` with the ptxas of `cudaPath` (ptxas writes a
/// temporary file, read back and removed); a failure's error carries what
/// ptxas said.
llvm::Expected<AssembledCubin> assembleCubin(StringRef ptx, StringRef cudaPath,
                                             StringRef chip);

/// The launch manifest of the kernel in `module` (after the nvvm stage), as
/// the runtime's struct: what `fa4.launch` says, the file names (their last
/// component) and ptxas's report.
runtime::Manifest kernelManifest(ModuleOp module, StringRef chip,
                                 StringRef cubinPath, StringRef ptxPath,
                                 const PtxasReport &ptxas);

/// Its JSON text (runtime::writeManifest); "{}" for a module without a
/// launchable kernel. `ptxPath` names the PTX written beside the cubin.
/// The backward's manifest (kind "backward", fa4/Runtime/Backward.h) of a
/// module whose main kernel carries fa4.backward_launch; std::nullopt for
/// any other module.
std::optional<runtime::BackwardManifest>
backwardManifest(ModuleOp module, StringRef chip, StringRef cubinPath,
                 StringRef ptxPath);

/// The manifest's text: the backward's when the module holds one.
std::string launchManifest(ModuleOp module, StringRef chip,
                           StringRef cubinPath, StringRef ptxPath,
                           const PtxasReport &ptxas);

} // namespace mlir::fa4

#endif // FA4_DRIVER_KERNELOUTPUT_H
