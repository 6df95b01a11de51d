//===- Passes.td - fa4 passes ------------------------------*- tablegen -*-===//

#ifndef FA4_TRANSFORMS_PASSES_TD
#define FA4_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def FA4TileAttention : Pass<"fa4-tile", "::mlir::func::FuncOp"> {
  let summary = "lower fa4.attention (level A) to the FlashAttention tile program (level B)";
  let description = [{
    Replaces the function's `fa4.attention` with the tile program of
    FlashAttention, one task per (batch, K/V head, m_block):

    * an m_block is two Q tiles of 128 GQA-packed rows (packed row `r` is query
      position `r / ratio` of the group's head `r % ratio`), so one K/V tile
      serves every query head of its group;
    * `fa4.kv_block_range` splits the KV blocks into the ones straddling a mask
      boundary (masked before the softmax) and the fully visible ones (no mask
      work); fully masked blocks lie outside the loop bounds;
    * three `scf.for` loops visit the KV blocks last to first (the masked high
      end first, as FlashAttention-4 does), carrying the row max, row sum and
      output accumulator of both Q tiles;
    * the softmax scale is folded into `scale_log2 = scale · log2(e)` (with a
      softcap, `log2(e)`: the softcap op applies the scale);
    * normalization is deferred to after the loop; the LSE is stored when the
      entry op asks for it.

    Requires: at most one `fa4.attention` per function, whose memrefs are the
    function's arguments (they become kernel parameters). Guarantees: no
    `fa4.attention` remains; the function carries `fa4.spec`, a dictionary of
    the entry op's configuration and argument positions, for the simulator and
    the later levels.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::tensor::TensorDialect"];
  let options = [
    Option<"rescaleThreshold", "rescale-threshold", "double", "8.0",
           "Keep a row's stale max unless it moved by more than this many "
           "log2 units (0 rescales on every move)">
  ];
}

#endif // FA4_TRANSFORMS_PASSES_TD
