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
#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace mlir::fa4 {

namespace runtime {
struct Kernel;
struct BackwardKernel;
} // namespace runtime

/// One attention variant, as fa4c's flags describe it.
struct Variant {
  int64_t headDim = 128, qHeads = 32, kvHeads = 8;
  /// V and O's head dim; 0: Q's.
  int64_t valueHeadDim = 0;
  int64_t vHeadDim() const { return valueHeadDim > 0 ? valueHeadDim : headDim; }
  MaskKind mask = MaskKind::none;
  int64_t windowLeft = -1, windowRight = -1;
  std::string dtype = "fp16";
  /// Default 1/sqrt(head_dim).
  std::optional<double> scale;
  double softcap = 0.0;
  bool lse = false;
  /// A seqused_k table (the function's last argument, memref<?xi32>): each
  /// sequence's number of keys, as a KV cache's cache_seqlens.
  bool seqUsedK = false;
  /// A paged K/V cache of this many keys per page (0: dense K and V): K and
  /// V are [num_blocks, page_size, kv_heads, head_dim], and a [batch,
  /// max_blocks] i32 block table follows the seqused_k table.
  int64_t pageSize = 0;
  /// Split-KV into this many parts per task (1: none, 2 to 128): an i32
  /// workspace `[words]` is the function's last argument.
  int64_t numSplits = 1;
  /// Variable-length batches: Q, K, V and O packed [1, total, heads,
  /// head_dim] (the LSE [1, q_heads, total_q]) and two [batch + 1] i32
  /// tables, cu_seqlens_q and cu_seqlens_k, after the seqused_k table.
  bool varlen = false;
  /// The gradients instead: one function `attention_backward` holding an
  /// fa4.attention_backward of this variant (Q, K, V, O, dO, the LSE; dQ,
  /// dK, dV; the delta and dQ-accumulator workspace), built to level B.
  bool backward = false;
  /// With `backward`: dQ accumulated in a fixed order.
  bool deterministic = false;
};

/// Whether `variant`'s fields can be built into entry IR at all (its dtype,
/// its head counts): an error naming the bad field otherwise. What the
/// fa4.attention verifier checks is its to say (buildVariantModule).
llvm::Error checkVariant(const Variant &variant);

/// The variant's entry IR: one function `attention` whose arguments are Q,
/// K, V, O (any strides TMA expresses: `strided<[?, ?, ?, 1], offset: ?>`)
/// and the LSE (dense), holding one fa4.attention. Null when it does not
/// verify, the diagnostic reported to `context` (a variant checkVariant
/// refuses is reported there too).
OwningOpRef<ModuleOp> buildVariantModule(MLIRContext &context,
                                         const Variant &variant);

/// The compile-cache key of compiling `module` (entry IR) with `options` to
/// a cubin: the entry IR as printed, the target and code-changing options,
/// `compiler` (the SHA-256 of the compiler's binary, or another identity of
/// the fa4 build), LLVM's version and ptxas's.
llvm::Expected<std::string> compileCacheKey(ModuleOp module,
                                            const PipelineOptions &options,
                                            const std::string &compiler);

/// The identity of the running fa4 build for compileCacheKey: the SHA-256
/// of the binary holding this function (the tool's executable, or the
/// shared object of the Python extension).
std::string buildIdentity();

/// Compiles `variant` to a kernel in process (with the compile cache when
/// `useCache`): the pipeline, PTX, ptxas, the manifest. Diagnostics are not
/// printed: a failure's error carries them. `fromCache` (when given; an
/// output beside the kernel, not part of it) says whether the compile cache
/// held the compilation.
llvm::Expected<runtime::Kernel> compileVariant(const Variant &variant,
                                               const PipelineOptions &options,
                                               bool useCache,
                                               bool *fromCache = nullptr);

/// The backward of `variant` (its `backward` set) compiled in process, as
/// compileVariant compiles a forward: its three kernels in one cubin and
/// PTX and their manifest (kind "backward"), through the compile cache
/// (the forward's and the backward's of a variant are two entries of it).
/// A chip without a backward schedule is refused by the pipeline.
llvm::Expected<runtime::BackwardKernel> compileBackward(
    const Variant &variant, const PipelineOptions &options, bool useCache,
    bool *fromCache = nullptr);

/// Whether `module` is entry IR, where the pipeline starts: no function
/// already tiled (fa4.spec) and no gpu.module. Otherwise an error names what
/// was found and says how to continue it (fa4-opt).
llvm::Error checkEntryLevel(ModuleOp module);

/// Whether `module` holds exactly one kernel to compile to a binary: one
/// function with an fa4.attention (or lowered from one, fa4.spec), as a
/// cubin and its manifest describe one kernel. Otherwise an error says how
/// many there are and where. A backward (fa4.attention_backward, or its
/// lowered function: three kernels, one manifest of kind "backward") is
/// accepted where `allowBackward` (fa4c, compileBackward).
llvm::Error checkOneKernel(ModuleOp module, bool allowBackward = false);

/// compileVariant for entry IR given as text: one function holding one
/// fa4.attention, as fa4c reads (regions, extras, tensors, any layout);
/// parse and verifier errors come back in the error.
llvm::Expected<runtime::Kernel> compileEntry(const std::string &ir,
                                             const PipelineOptions &options,
                                             bool useCache,
                                             bool *fromCache = nullptr);

/// The backward entry of a forward entry (`forward`: one function holding
/// one fa4.attention on memrefs): a function `<name>_backward(Q, K, V, O,
/// dO, LSE, dQ, dK, dV, delta, dq_accum, extras...)` holding the
/// fa4.attention_backward with the forward's attributes, regions and
/// extras (`deterministic` as given), the tensors of the forward's types
/// (dO O's, dQ/dK/dV Q's/K's/V's; the LSE the forward's, else [batch,
/// q_heads, seq_q] f32; the workspace dense f32). A forward the backward
/// does not take (FP8, a V head dim of its own, a block mask, seqused_k,
/// a paged cache, split-KV, varlen) is refused, naming it. An entry on
/// tensors is bufferized first. In `forward`'s context.
llvm::Expected<OwningOpRef<ModuleOp>> backwardEntryOf(ModuleOp forward,
                                                      bool deterministic);

/// The backward entry `module` stands for: null when `module` holds an
/// fa4.attention_backward itself (`deterministic`, when set, added to it),
/// else the one backwardEntryOf derives from its forward, verified.
llvm::Expected<OwningOpRef<ModuleOp>> backwardEntryFor(ModuleOp module,
                                                       bool deterministic);

/// A copy of the forward entry `forward` that writes the LSE: unchanged
/// when it does, else with an LSE argument ([batch, q_heads, seq_q] f32)
/// after O. The forward whose backward backwardEntryOf derives must write
/// it; refused as backwardEntryOf refuses.
llvm::Expected<OwningOpRef<ModuleOp>> withLseOf(ModuleOp forward);

/// The backward entry IR of `ir` as text: backwardEntryOf of a forward
/// entry; a backward entry (fa4.attention_backward) as it is, `deterministic`
/// added when set. With `withLse`, instead, withLseOf's forward as text.
llvm::Expected<std::string> derivedEntryIr(const std::string &ir,
                                           bool deterministic, bool withLse);

/// compileBackward for entry IR given as text: a backward entry, or a
/// forward entry whose backward backwardEntryOf derives (`deterministic`
/// then asks for the fixed dQ order; with a backward entry it adds it).
llvm::Expected<runtime::BackwardKernel>
compileBackwardEntry(const std::string &ir, bool deterministic,
                     const PipelineOptions &options, bool useCache,
                     bool *fromCache = nullptr);

/// The stages variantIr prints: "entry" (the entry IR), the pipeline's
/// stages (getPipelineStages), "llvm" and "ptx".
std::vector<std::string> variantIrStages();

/// `variant` compiled up to `stage` and printed (see variantIrStages).
llvm::Expected<std::string> variantIr(const Variant &variant,
                                      const PipelineOptions &options,
                                      const std::string &stage);
/// The same for entry IR given as text (see compileEntry).
llvm::Expected<std::string> entryIr(const std::string &entry,
                                    const PipelineOptions &options,
                                    const std::string &stage);

} // namespace mlir::fa4

#endif // FA4_DRIVER_COMPILE_H
