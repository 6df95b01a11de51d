//===- FA4Types.td - fa4 types -----------------------------*- tablegen -*-===//
//
// Level C's memories: staged shared-memory buffers, tensor-memory buffers and
// views, and mbarrier arrays.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_DIALECT_FA4_IR_FA4TYPES_TD
#define FA4_DIALECT_FA4_IR_FA4TYPES_TD

include "fa4/Dialect/FA4/IR/FA4Dialect.td"
include "fa4/Dialect/FA4/IR/FA4Attrs.td"
include "mlir/IR/AttrTypeBase.td"

class FA4_Type<string name, string typeMnemonic>
    : TypeDef<FA4_Dialect, name> {
  let mnemonic = typeMnemonic;
}

def FA4_SmemType : FA4_Type<"Smem", "smem"> {
  let summary = "a ring of shared-memory tiles";
  let description = [{
    `stages` tiles of `[rows, cols]` elements in shared memory. A producer and
    its consumers walk the ring with a running count: item `n` lives in stage
    `n % stages` and belongs to round `n / stages`.

    ```mlir
    !fa4.smem<[128, 128], f16, stages = 3>
    ```
  }];
  let parameters = (ins "int64_t":$rows, "int64_t":$cols, "Type":$elementType,
                        "int64_t":$stages);
  let assemblyFormat = [{
    `<` `[` $rows `,` $cols `]` `,` $elementType `,` `stages` `=` $stages `>`
  }];
  let extraClassDeclaration = [{
    /// Bytes of one stage. Rows are padded to whole 128-byte lines: the
    /// tiles are laid out in 128-byte swizzle atoms (64 f16/bf16 columns), as
    /// TMA writes them and the tensor core reads them.
    int64_t getStageBytes() const {
      int64_t rowBytes = getCols() * getElementType().getIntOrFloatBitWidth() / 8;
      return getRows() * ((rowBytes + 127) / 128 * 128);
    }
  }];
  let genVerifyDecl = 1;
}

def FA4_TmemType : FA4_Type<"Tmem", "tmem"> {
  let summary = "a tensor-memory buffer or a typed view of one";
  let description = [{
    `[lanes, cols]` elements in tensor memory: one lane per row, 32-bit
    columns, so `cols` f32 elements take `cols` columns and `cols` f16/bf16
    elements take `cols / 2`.

    ```mlir
    !fa4.tmem<[128, 128], f32>
    ```
  }];
  let parameters = (ins "int64_t":$lanes, "int64_t":$cols, "Type":$elementType);
  let assemblyFormat = "`<` `[` $lanes `,` $cols `]` `,` $elementType `>`";
  let extraClassDeclaration = [{
    /// 32-bit TMEM columns the buffer spans.
    int64_t getColumns() const {
      return getCols() * getElementType().getIntOrFloatBitWidth() / 32;
    }
  }];
  let genVerifyDecl = 1;
}

def FA4_MBarrierType : FA4_Type<"MBarrier", "mbarrier"> {
  let summary = "an array of mbarriers, one per stage of a ring";
  let description = [{
    `kind` says what completes a phase: `tma` (the announced transaction bytes
    landed, `expect_tx`), `tcgen05` (a `tcgen05.commit` after the tensor core's
    work), `threads` (a counted number of thread arrivals).

    ```mlir
    !fa4.mbarrier<tma, stages = 3>
    ```
  }];
  let parameters = (ins EnumParameter<FA4_BarrierKind>:$kind, "int64_t":$stages);
  let assemblyFormat = "`<` $kind `,` `stages` `=` $stages `>`";
  let genVerifyDecl = 1;
}

#endif // FA4_DIALECT_FA4_IR_FA4TYPES_TD
