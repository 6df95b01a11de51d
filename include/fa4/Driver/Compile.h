//===- Compile.h - a variant to a kernel, in process ------------*- C++ -*-===//
//
// What fa4c does, as a library: build the entry IR of a variant, key a
// compilation for the compile cache, and compile a variant all the way to a
// runtime::Kernel (cubin, PTX, manifest) without files of the caller's —
// from the cache when it holds the compilation.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_DRIVER_COMPILE_H
#define FA4_DRIVER_COMPILE_H

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Pipeline/Pipeline.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <optional>
#include <string>
#include <vector>

namespace mlir::fa4 {

namespace runtime {
struct Kernel;
} // namespace runtime

/// One attention variant, as fa4c's flags describe it.
struct Variant {
  int64_t headDim = 128, qHeads = 32, kvHeads = 8;
  MaskKind mask = MaskKind::none;
  int64_t windowLeft = -1, windowRight = -1;
  std::string dtype = "fp16";
  /// Default 1/sqrt(head_dim).
  std::optional<double> scale;
  double softcap = 0.0;
  bool lse = false;
};

/// The variant's entry IR: one function `attention` whose arguments are Q,
/// K, V, O (any strides TMA expresses: `strided<[?, ?, ?, 1], offset: ?>`)
/// and the LSE (dense), holding one fa4.attention; null with `error` naming
/// the bad field, or with the verifier's diagnostic reported.
OwningOpRef<ModuleOp> buildVariantModule(MLIRContext &context,
                                         const Variant &variant,
                                         std::string &error);

/// The compile-cache key of compiling `module` (entry IR) with `options` to
/// a cubin: the entry IR as printed, the target and code-changing options,
/// `compiler` (the SHA-256 of the compiler's binary, or another identity of
/// the fa4 build), LLVM's version and ptxas's.
bool compileCacheKey(ModuleOp module, const PipelineOptions &options,
                     const std::string &compiler, std::string &key,
                     std::string &error);

/// The identity of the running fa4 build for compileCacheKey: the SHA-256
/// of the binary holding this function (the tool's executable, or the
/// shared object of the Python extension).
std::string buildIdentity();

/// Compiles `variant` to a kernel in process (with the compile cache when
/// `useCache`): the pipeline, PTX, ptxas, the manifest. Diagnostics are not
/// printed: a failure's `error` carries them. `fromCache` (when given) says
/// whether the compile cache held the compilation.
bool compileVariant(const Variant &variant, const PipelineOptions &options,
                    bool useCache, runtime::Kernel &kernel, std::string &error,
                    bool *fromCache = nullptr);

/// Whether `module` is entry IR, where the pipeline starts: no function
/// already tiled (fa4.spec) and no gpu.module. Otherwise `error` names what
/// was found and says how to continue it (fa4-opt).
bool checkEntryLevel(ModuleOp module, std::string &error);

/// Whether `module` holds exactly one kernel to compile to a binary: one
/// function with an fa4.attention (or lowered from one, fa4.spec), as a
/// cubin and its manifest describe one kernel. Otherwise `error` says how
/// many there are and where.
bool checkOneKernel(ModuleOp module, std::string &error);

/// compileVariant for entry IR given as text: one function holding one
/// fa4.attention, as fa4c reads (regions, extras, tensors, any layout);
/// parse and verifier errors come back in `error`.
bool compileEntry(const std::string &ir, const PipelineOptions &options,
                  bool useCache, runtime::Kernel &kernel, std::string &error,
                  bool *fromCache = nullptr);

/// The stages variantIr prints: "entry" (the entry IR), the pipeline's
/// stages (getPipelineStages), "llvm" and "ptx".
std::vector<std::string> variantIrStages();

/// `variant` compiled up to `stage` and printed (see variantIrStages).
bool variantIr(const Variant &variant, const PipelineOptions &options,
               const std::string &stage, std::string &ir, std::string &error);
/// The same for entry IR given as text (see compileEntry).
bool entryIr(const std::string &entry, const PipelineOptions &options,
             const std::string &stage, std::string &ir, std::string &error);

} // namespace mlir::fa4

#endif // FA4_DRIVER_COMPILE_H
