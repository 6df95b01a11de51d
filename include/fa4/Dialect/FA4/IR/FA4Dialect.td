//===- FA4Dialect.td - the fa4 dialect ---------------------*- tablegen -*-===//
//
// The fa4 dialect: one entry op that states which attention is wanted (level A)
// and the target-neutral tile program that FlashAttention computes (level B).
//
//===----------------------------------------------------------------------===//

#ifndef FA4_DIALECT_FA4_IR_FA4DIALECT_TD
#define FA4_DIALECT_FA4_IR_FA4DIALECT_TD

include "mlir/IR/OpBase.td"

def FA4_Dialect : Dialect {
  let name = "fa4";
  let cppNamespace = "::mlir::fa4";
  let summary = "FlashAttention-4 kernels for NVIDIA Blackwell";
  let description = [{
    The `fa4` dialect describes attention at two target-neutral levels:

    * **Level A (entry).** `fa4.attention` states *which* attention is wanted:
      the Q, K, V and O memrefs (`[batch, seq, heads, head_dim]`, dynamic batch
      and sequence lengths, static heads and head dim), the mask (none, causal
      aligned bottom-right, or a sliding window), the softmax scale, an optional
      softcap and an optional log-sum-exp output.
    * **Level B (tile program).** The FlashAttention algorithm on 128-row tiles:
      tile loads with grouped-query packing, `score_mma`, `mask`,
      `online_softmax`, `correction`, `value_mma`, `normalize` and tile stores,
      inside `scf.for` loops over KV blocks that carry the running row max, row
      sum and output accumulator.

    * **Level C (schedule).** Who does what when on Blackwell: warp roles as
      regions (`fa4.warp_specialize`, `fa4.role`), staged shared-memory and
      tensor-memory buffers with aliasing views, mbarriers of three kinds,
      asynchronous TMA and tensor-core ops, and the persistent tile scheduler.

    Tiles are SSA values of ranked tensor type. Every level can be executed on
    the CPU by `fa4-sim`.
  }];
  let useDefaultAttributePrinterParser = 1;
  let useDefaultTypePrinterParser = 1;
  // `fa4.target` is a module's, and a #fa4.target.
  let hasOperationAttrVerify = 1;
}

class FA4_Op<string mnemonic, list<Trait> traits = []>
    : Op<FA4_Dialect, mnemonic, traits>;

// Ops of one chip family only (fa4/Target/Target.h): tensor memory and
// tcgen05 on Blackwell, wgmma on Hopper. fa4.warp_specialize refuses a
// schedule that holds both, and fa4-to-nvvm lowers a schedule for the chip
// of its ops' family (fa4/Dialect/FA4/IR/FA4Traits.h).
def FA4_BlackwellOnly : NativeOpTrait<"BlackwellOnly"> {
  let cppNamespace = "::mlir::fa4";
}
def FA4_HopperOnly : NativeOpTrait<"HopperOnly"> {
  let cppNamespace = "::mlir::fa4";
}

#endif // FA4_DIALECT_FA4_IR_FA4DIALECT_TD
