//===- Passes.td - fa4 conversions -------------------------*- tablegen -*-===//

#ifndef FA4_CONVERSION_PASSES_TD
#define FA4_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def FA4ToNVVM : Pass<"fa4-to-nvvm", "::mlir::ModuleOp"> {
  let summary = "lower the level-C schedule to an NVVM kernel (level C -> D)";
  let description = [{
    Every function carrying `fa4.spec` and a `fa4.warp_specialize` becomes an
    `llvm.func` kernel (`nvvm.kernel`, 512 threads) in a `gpu.module` with an
    `#nvvm.target`. Per thread:

    * **Kernel and roles.** Parameters: one `CUtensorMap` per Q, K, V and O
      (128 bytes by value, `nvvm.grid_constant`), the LSE pointer when
      present, then batch, seq_q and seq_k. Thread 0 initializes every
      mbarrier; the TMEM-owning warp allocates the columns and relinquishes
      the permit; after a CTA barrier each warp branches on its index to its
      role, which first sets its register budget (`setmaxnreg`).
    * **TMA.** Q, K and V tiles arrive as 64-column boxes of 128-byte rows
      with 128-byte swizzle (`cp.async.bulk.tensor`, issued by one elected
      thread after `mbarrier.arrive.expect_tx`); GQA-packed Q and O tiles use
      a [64, ratio, 128 / ratio, 1] box; tails outside the tensors are zero
      filled on load and clipped on store by the tensor map's bounds.
    * **Tensor core.** `tcgen05.mma .kind::f16` in steps of K = 16 with shared
      memory descriptors (128-byte swizzle) and an instruction descriptor
      (`fa4/Support/Descriptors.h`); P·V takes A from TMEM and V as an
      MN-major B; `tcgen05.commit` signals the barriers.
    * **Softmax rows.** Thread t of a warpgroup owns TMEM lane t. S is read
      once per tile (32-column `tcgen05.ld`s, one wait) and stays in
      registers; the mask runs only in the tiles level B marks as
      straddling (a bit mask of visible keys per 32 columns); the row max is
      a tree of 3-input `max.f32`, `x = s·scale_log2 - m` packed
      `fma.rn.f32x2`; `exp2` is `ex2.approx`, or for an evenly spread
      `exp2-emulation-fraction` of the pairs the software exp2 (floor by an
      `fma.rm` against 1.5·2^23, a degree-3 polynomial, the exponent added
      as an integer) on the FMA pipe; P is packed to f16/bf16 two at a time
      and written over S with `tcgen05.st`; the row sum is a tree of packed
      `add.f32x2`.
    * **Waits** are `mbarrier.try_wait.parity` loops; `tcgen05.fence` orders
      tensor-core accesses around them; `fence.proxy.async` makes the
      correction role's O staging visible to the TMA store.
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect",
                           "::mlir::NVVM::NVVMDialect",
                           "::mlir::gpu::GPUDialect",
                           "::mlir::vector::VectorDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::arith::ArithDialect"];
  let options = [
    Option<"exp2EmulationFraction", "exp2-emulation-fraction", "double", "-1.0",
           "Fraction of each row's exponentials computed with the software "
           "exp2 on the FMA units instead of ex2.approx (0 to 1; default -1: "
           "the chip's own, 16 of every 128 on sm_100a as FA4, none on "
           "sm_103a, whose MUFU is twice as fast, and on sm_90a 16 of every "
           "128 for fp16/bf16 at head dims up to 64, else none)">,
    Option<"chip", "chip", "std::string", "",
           "Target chip (fa4/Target/Target.h's table; the schedule must be "
           "its family's). Empty: the module's `fa4.target`, else the "
           "default chip; a chip that differs from the module's is an error">
  ];
}

def FA4RaiseAttention : Pass<"fa4-raise-attention", "::mlir::func::FuncOp"> {
  let summary = "find attention in linalg-on-tensors IR and rewrite it into fa4.attention";
  let description = [{
    Finds `softmax(scores)·V` written as linalg on tensors, the way
    torch-mlir, IREE and StableHLO→linalg write it, and replaces it with one
    `fa4.attention` (on tensors) reading the function's own arguments.

    The pass follows each rank-4 (or rank-3) result back through the ops that compute
    it, as one expression per output element: linalg structured ops (named
    ops such as `linalg.batch_matmul`, `linalg.transpose`,
    `linalg.broadcast`, and `linalg.generic` with any indexing maps) become
    their bodies over affine indices, reductions become sums and maxima over
    a bound index, `linalg.softmax` its definition, and
    `tensor.expand_shape` / `collapse_shape` / `cast` index arithmetic. It
    then matches that expression against attention:
    `Σ_k softmax_k(s)·V` (or `(Σ_k e^{s-m}·V) / Σ_k e^{s-m}`), where
    `s` is a contraction of Q and K over the head dim, wrapped in
    modifications. Q, K and V must be function arguments, all
    `[batch, seq, heads, head_dim]` or all `[batch, heads, seq, head_dim]`
    (the latter sets `heads_first`); K and V may serve several query heads
    through a repeat of their heads (GQA), written with expand / broadcast /
    collapse or an indexing map. Attention over collapsed
    `[batch·heads, seq, head_dim]` arguments and result (rank 3, each batch
    entry one head) is raised too: the op reads `[batch·heads, seq, 1,
    head_dim]` `tensor.expand_shape` views of the arguments and its O is
    collapsed back (views: `fa4-promote-destinations` makes the expanded
    types the kernel's parameters, nothing is copied).

    A multiplication or division of the contraction by a constant becomes
    `scale`. `select(c, s, -inf)` and adding `select(c, 0, -inf)` become
    `mask_mod` (with `linalg.index` positions becoming the region's
    `q_idx` / `kv_idx`). Anything else between the contraction and the
    softmax becomes `score_mod`; tensors those regions read (a bias, a
    document-id table) must be function arguments and become `extras`.

    What the pass cannot prove equivalent it leaves alone, with a remark at
    the result's location saying why: a softmax over another dimension than
    the keys, a scale that is not a constant, a bias computed inside the
    function or broadcast in a way it cannot follow, operand layouts
    fa4.attention does not take, and so on. The rewritten ops it leaves
    unused are erased.
  }];
  let dependentDialects = ["::mlir::fa4::FA4Dialect",
                           "::mlir::bufferization::BufferizationDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::tensor::TensorDialect",
                           "::mlir::arith::ArithDialect"];
}

#endif // FA4_CONVERSION_PASSES_TD
