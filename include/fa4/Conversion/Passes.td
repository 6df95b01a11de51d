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
      `add.rm` against 1.5·2^23, a degree-3 polynomial, the exponent added
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
    Option<"exp2EmulationFraction", "exp2-emulation-fraction", "double", "0.125",
           "Fraction of each row's exponentials computed with the software "
           "exp2 on the FMA units instead of ex2.approx (0 to 1; default 16 "
           "of every 128, which balances MUFU and FMA as in FA4)">,
    Option<"chip", "chip", "std::string", "",
           "Target chip (fa4/Target/Target.h's table; the schedule must be "
           "its family's). Empty: the module's `fa4.target`, else the "
           "default chip; a chip that differs from the module's is an error">
  ];
}

#endif // FA4_CONVERSION_PASSES_TD
