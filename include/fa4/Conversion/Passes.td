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
      twice in 32-column `tcgen05.ld` chunks (row max, then exponentials), so
      that no more than a chunk is live in registers; `exp2(x·scale_log2 - m)`
      is `ex2.approx`, or for the first `exp2-emulation-fraction` of each
      chunk the software exp2 (Cody–Waite range reduction and a degree-3
      polynomial on the FMA units); P is packed to f16/bf16 and written over
      S with `tcgen05.st`.
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
    Option<"exp2EmulationFraction", "exp2-emulation-fraction", "double", "0.0",
           "Fraction of each chunk's exponentials computed with the software "
           "exp2 on the FMA units instead of ex2.approx (0 to 1)">,
    Option<"chip", "chip", "std::string", "\"sm_100a\"", "Target chip">
  ];
}

#endif // FA4_CONVERSION_PASSES_TD
