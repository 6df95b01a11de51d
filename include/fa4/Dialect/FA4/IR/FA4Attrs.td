//===- FA4Attrs.td - fa4 attributes ------------------------*- tablegen -*-===//

#ifndef FA4_DIALECT_FA4_IR_FA4ATTRS_TD
#define FA4_DIALECT_FA4_IR_FA4ATTRS_TD

include "fa4/Dialect/FA4/IR/FA4Dialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def FA4_MaskKind : I32EnumAttr<"MaskKind", "which keys a query may attend to", [
    I32EnumAttrCase<"none", 0>,
    I32EnumAttrCase<"causal", 1>,
    I32EnumAttrCase<"window", 2>
  ]> {
  let cppNamespace = "::mlir::fa4";
  let genSpecializedAttr = 0;
}

def FA4_MaskKindAttr : EnumAttr<FA4_Dialect, FA4_MaskKind, "mask"> {
  let summary = "mask kind: none, causal (bottom-right aligned) or window";
  let assemblyFormat = "`<` $value `>`";
}

def FA4_BarrierKind : I32EnumAttr<"BarrierKind",
    "what completes an mbarrier's phase", [
    I32EnumAttrCase<"tma", 0>,
    I32EnumAttrCase<"tcgen05", 1>,
    I32EnumAttrCase<"threads", 2>
  ]> {
  let cppNamespace = "::mlir::fa4";
  let genSpecializedAttr = 0;
}

def FA4_TaskOrder : I32EnumAttr<"TaskOrder",
    "the order in which a persistent CTA takes its tasks", [
    I32EnumAttrCase<"static_order", 0, "static">,
    I32EnumAttrCase<"lpt", 1>
  ]> {
  let cppNamespace = "::mlir::fa4";
  let genSpecializedAttr = 0;
}

def FA4_TaskOrderAttr : EnumAttr<FA4_Dialect, FA4_TaskOrder, "task_order"> {
  let summary = "task order: static (round robin) or lpt (heaviest first)";
  let assemblyFormat = "`<` $value `>`";
}

// The chip a module is compiled for: a row of fa4/Target/Target.h's table.
// Written on the module as `fa4.target` by the pipeline's first stage
// (fa4-set-target) and read by every pass whose work depends on the chip.
def FA4_TargetAttr : AttrDef<FA4_Dialect, "Target"> {
  let mnemonic = "target";
  let summary = "the chip a module is compiled for (sm_100a, sm_90a, ...)";
  let description = [{
    `#fa4.target<sm_100a>` names a row of the chip table
    (fa4/Target/Target.h): the chip's family decides the schedule (level C)
    and the lowering, its facts (SM count, shared memory per CTA, Q tiles
    per task) size the kernel, and the NVVM target of the kernel module is
    derived from it. An unknown chip is a parse error that lists the table.
  }];
  let parameters = (ins "::mlir::fa4::target::Chip":$chip);
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    /// The chip's row of the table.
    const ::mlir::fa4::target::ChipInfo &getInfo() const {
      return ::mlir::fa4::target::info(getChip());
    }
  }];
}

// Parameters printed as MLIR writes them elsewhere: an f32 as a float
// literal, a flag as true/false.
class FA4_F32Parameter<string desc> : APFloatParameter<desc> {
  let parser = [{ ::mlir::fa4::detail::parseF32Field($_parser) }];
  let printer = [{ $_printer.printFloat($_self) }];
}
// A list in square brackets (ODS's own list has none, which struct(params)
// cannot tell from the next field).
class FA4_ListParameter<string of, string desc> : ArrayRefParameter<of, desc> {
  let parser = [{ ::mlir::fa4::detail::parseBracketList<}] # of # [{>($_parser) }];
  let printer = [{ ::mlir::fa4::detail::printBracketList($_printer, $_self) }];
}
class FA4_OptionalListParameter<string of, string desc>
    : OptionalArrayRefParameter<of, desc> {
  let parser = [{ ::mlir::fa4::detail::parseBracketList<}] # of # [{>($_parser) }];
  let printer = [{ ::mlir::fa4::detail::printBracketList($_printer, $_self) }];
}
class FA4_BoolParameter<string desc> : AttrParameter<"bool", desc> {
  let parser = [{ ::mlir::fa4::detail::parseBoolField($_parser) }];
  let printer = [{ $_printer << ($_self ? "true" : "false") }];
}
// A flag that is false unless written (omitted when false).
class FA4_DefaultFalseParameter<string desc> : FA4_BoolParameter<desc> {
  let defaultValue = "false";
}

// What a tiled kernel function computes: written on the function by fa4-tile
// (level B) and read by every later stage, the simulator and the manifest.
def FA4_KernelSpecAttr : AttrDef<FA4_Dialect, "KernelSpec"> {
  let mnemonic = "spec";
  let summary = "the variant a tiled kernel function computes (`fa4.spec`)";
  let description = [{
    `fa4-tile` replaces a function's `fa4.attention` with its tile program
    and records what the op said as `fa4.spec` on the function:

    ```mlir
    func.func @attention(...) attributes {fa4.spec = #fa4.spec<
        mask = causal, window_left = -1, window_right = -1, scale = 0.125,
        softcap = 0.0, lse = true, arguments = [0, 1, 2, 3, 4]>}
    ```

    `arguments` are the positions of Q, K, V, O (and the LSE when `lse`)
    among the function's arguments; `extras` those of the memrefs the
    `score_mod` / `mask_mod` regions read, `block_mask` the index among
    the extras of the block mask and `seqused_k` that of the per-sequence
    key counts; `num_splits` and `split_workspace` are the entry op's
    split-KV, `cu_seqlens_q` and `cu_seqlens_k` its varlen tables,
    `q_descale`, `k_descale` and `v_descale` its FP8 descale tables. The
    window bounds are in keys (-1: unbounded),
    `scale` is the resolved softmax scale and `softcap` 0 when there is none.
    The attribute checks itself with fa4.attention's own rules (window
    bounds that agree with the mask, the scale and softcap limits) and its
    positions (the count, distinct, non-negative, the block mask among the
    extras); on a function, that each position names a memref argument and
    that Q, K, V, O and the LSE describe one attention.
  }];
  let parameters = (ins
    EnumParameter<FA4_MaskKind>:$mask,
    "int64_t":$window_left,
    "int64_t":$window_right,
    FA4_F32Parameter<"the softmax scale">:$scale,
    FA4_F32Parameter<"the softcap, 0 for none">:$softcap,
    FA4_BoolParameter<"whether the kernel writes the LSE">:$lse,
    FA4_ListParameter<"int64_t", "positions of Q, K, V, O (, LSE)">:$arguments,
    FA4_OptionalListParameter<"int64_t", "positions of the mods' memrefs">:$extras,
    OptionalParameter<"std::optional<int64_t>", "index of the block mask among the extras">:$block_mask,
    OptionalParameter<"std::optional<int64_t>", "index of the seqused_k table among the extras">:$seqused_k,
    OptionalParameter<"std::optional<int64_t>", "index of the block table among the extras">:$block_table,
    OptionalParameter<"std::optional<int64_t>", "split-KV: parts per task's KV blocks">:$num_splits,
    OptionalParameter<"std::optional<int64_t>", "index of the split-KV workspace among the extras">:$split_workspace,
    OptionalParameter<"std::optional<int64_t>", "varlen: index of cu_seqlens_q among the extras">:$cu_seqlens_q,
    OptionalParameter<"std::optional<int64_t>", "varlen: index of cu_seqlens_k among the extras">:$cu_seqlens_k,
    OptionalParameter<"std::optional<int64_t>", "FP8: index of the Q descale table among the extras">:$q_descale,
    OptionalParameter<"std::optional<int64_t>", "FP8: index of the K descale table among the extras">:$k_descale,
    OptionalParameter<"std::optional<int64_t>", "FP8: index of the V descale table among the extras">:$v_descale
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The number of parts each task's KV blocks are split into (1: none).
    int64_t getSplits() const { return getNumSplits().value_or(1); }
    /// Whether the batch is variable-length (cu_seqlens tables).
    bool isVarlen() const { return getCuSeqlensQ().has_value(); }
    /// The scale and the softcap as the kernel computes with them.
    float getScaleValue() const { return getScale().convertToFloat(); }
    float getSoftcapValue() const { return getSoftcap().convertToFloat(); }
  }];
}

// What a tiled backward kernel function computes: written on the function
// by fa4-tile for an fa4.attention_backward, read by the simulator.
def FA4_BackwardSpecAttr : AttrDef<FA4_Dialect, "BackwardSpec"> {
  let mnemonic = "backward_spec";
  let summary = "the variant a tiled backward function differentiates (`fa4.backward_spec`)";
  let description = [{
    `fa4-tile` replaces a function's `fa4.attention_backward` with its tile
    program and records what the op said as `fa4.backward_spec` on the
    function:

    ```mlir
    func.func @attention_backward(...) attributes {fa4.backward_spec =
        #fa4.backward_spec<mask = causal, window_left = -1, window_right = -1,
        scale = 0.125, softcap = 0.0, deterministic = false,
        arguments = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]>}
    ```

    `arguments` are the positions of Q, K, V, O, dO, the LSE, dQ, dK, dV,
    the delta workspace and the dQ accumulator among the function's
    arguments, `extras` those of the memrefs the regions read. It checks
    itself with the entry op's rules (window bounds, scale and softcap) and
    its positions (eleven, distinct, non-negative); on a function, that each
    names a memref argument of the right rank and element type.
  }];
  let parameters = (ins
    EnumParameter<FA4_MaskKind>:$mask,
    "int64_t":$window_left,
    "int64_t":$window_right,
    FA4_F32Parameter<"the softmax scale">:$scale,
    FA4_F32Parameter<"the softcap, 0 for none">:$softcap,
    FA4_BoolParameter<"whether dQ is accumulated in a fixed order">:$deterministic,
    FA4_ListParameter<"int64_t", "positions of Q, K, V, O, dO, LSE, dQ, dK, dV, delta, dQ accumulator">:$arguments,
    FA4_OptionalListParameter<"int64_t", "positions of the mods' memrefs">:$extras
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    float getScaleValue() const { return getScale().convertToFloat(); }
    float getSoftcapValue() const { return getSoftcap().convertToFloat(); }
  }];
}

// How a kernel's tasks map to CTAs: written on fa4.warp_specialize by
// fa4-tile-scheduler as `fa4.grid`.
def FA4_GridAttr : AttrDef<FA4_Dialect, "Grid"> {
  let mnemonic = "grid";
  let summary = "the persistent grid: min(sm_count, tasks) CTAs, task order";
  let description = [{
    `#fa4.grid<sm_count = 148, order = lpt>`: the kernel runs min(sm_count,
    tasks) persistent CTAs, each taking every sm_count-th task in `order`
    (`static`, round robin, or `lpt`, the heaviest first).
  }];
  let parameters = (ins "int64_t":$sm_count, EnumParameter<FA4_TaskOrder>:$order);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

// The parts of fa4.launch (below).
def FA4_TensorMapInfoAttr : AttrDef<FA4_Dialect, "TensorMapInfo"> {
  let mnemonic = "tensor_map";
  let summary = "one tensor map a kernel takes: its tensor, box and layout";
  let description = [{
    `name` is the tensor (`q`, `k`, `v`, `o`), `dtype` its element type
    (`fp16`, `bf16`, `e4m3`), `heads` and `head_dim` its static sizes, `box`
    the TMA box [columns (one 128-byte swizzle span: 64 of 16 bits, 128 of
    8), heads, rows, batch]
    and `strides` the entry
    function's strides in elements, [batch, seq, heads, head_dim], dynamic
    ones as -1; `sizes`, where the entry fixed any, its [batch, seq] sizes
    (-1 where dynamic), which a launch must match. `layout` is empty for
    the entry's own layout, or `vt` for a V the runtime hands over
    transposed ([batch, kv_heads, head_dim, keys], its keys padded to a
    multiple of 16 and permuted within each 16: what sm_90a's FP8 wgmma
    reads, docs/FP8.md); the box is then [keys, heads, head_dim rows, batch].
  }];
  let parameters = (ins
    StringRefParameter<"the tensor">:$name,
    StringRefParameter<"the element type">:$dtype,
    "int64_t":$heads,
    "int64_t":$head_dim,
    FA4_ListParameter<"int64_t", "the TMA box">:$box,
    FA4_ListParameter<"int64_t", "the entry's strides">:$strides,
    DefaultValuedParameter<"int64_t", "0", "a paged cache's page size (0: dense)">:$page_size,
    FA4_OptionalListParameter<"int64_t", "the entry's static [batch, seq] sizes, -1 where dynamic">:$sizes,
    StringRefParameter<"the layout the kernel reads (empty: the entry's; vt: V transposed)", "\"\"">:$layout
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def FA4_RoleInfoAttr : AttrDef<FA4_Dialect, "RoleInfo"> {
  let mnemonic = "role_info";
  let summary = "one role's warps and registers, for tools that report per role";
  let parameters = (ins
    StringRefParameter<"the role">:$name,
    "int64_t":$first_warp,
    "int64_t":$num_warps,
    "int64_t":$registers
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def FA4_ExtraInfoAttr : AttrDef<FA4_Dialect, "ExtraInfo"> {
  let mnemonic = "extra";
  let summary = "one memref a mod region reads: element type and shape";
  let parameters = (ins
    StringRefParameter<"the element type">:$dtype,
    FA4_ListParameter<"int64_t", "the shape, dynamic sizes as -1">:$shape
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

// The level-C schedule's summaries, on its fa4.warp_specialize: what the
// mbarriers are (fa4-insert-barriers, fa4-allocate-tmem's dealloc barrier)
// and where the TMEM buffers sit (fa4-allocate-tmem). Written for the reader
// of the IR and its tests; the ops carry what the lowering uses.
def FA4_BarrierInfoAttr : AttrDef<FA4_Dialect, "BarrierInfo"> {
  let mnemonic = "barrier";
  let summary = "one mbarrier ring of a schedule: what completes it, for whom";
  let description = [{
    An entry of `fa4.barriers`: the ring's name, what completes a phase
    (`tma` bytes, a `tcgen05` commit, or `threads` arriving), the arrivals
    a phase takes, its stages, and the roles that arrive on it (producers)
    and wait on it (consumers). It checks a name, 1 to 2^20 - 1 arrivals
    (an mbarrier's count), at least one stage and one role on each side.
  }];
  let parameters = (ins
    StringRefParameter<"the barrier">:$name,
    EnumParameter<FA4_BarrierKind>:$kind,
    "int64_t":$count,
    "int64_t":$stages,
    FA4_ListParameter<"StringAttr", "the roles that arrive">:$producers,
    FA4_ListParameter<"StringAttr", "the roles that wait">:$consumers
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def FA4_TmemBufferAttr : AttrDef<FA4_Dialect, "TmemBuffer"> {
  let mnemonic = "tmem_buffer";
  let summary = "one TMEM buffer's columns";
  let parameters = (ins
    StringRefParameter<"the buffer">:$name,
    "int64_t":$column,
    "int64_t":$columns
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def FA4_TmemLayoutAttr : AttrDef<FA4_Dialect, "TmemLayout"> {
  let mnemonic = "tmem_layout";
  let summary = "the TMEM allocation of a schedule (`fa4.tmem`)";
  let description = [{
    The columns a CTA allocates (a power of two, 32 to 512, as
    `tcgen05.alloc` takes them) and each buffer's first column and width;
    it checks that the buffers lie inside the allocation and apart.
  }];
  let parameters = (ins
    "int64_t":$columns,
    FA4_ListParameter<"TmemBufferAttr", "the buffers">:$buffers
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

// What a launcher needs: written on the kernel's llvm.func by fa4-to-nvvm
// as `fa4.launch` and read by fa4c's manifest writer.
def FA4_LaunchAttr : AttrDef<FA4_Dialect, "Launch"> {
  let mnemonic = "launch";
  let summary = "how to launch a kernel (`fa4.launch`): the manifest's source";
  let description = [{
    Block size, dynamic shared memory, TMEM columns, rows per task, the
    grid, the variant (`#fa4.spec`), the roles, the tensor maps, whether the
    kernel writes the LSE or runs mod regions, the extras and the block
    mask: everything fa4c's manifest says, in one typed attribute. It checks
    its sizes (a positive block, non-negative byte and column counts), that
    it names Q, K, V and O's maps once each, that `lse` agrees with its
    spec and that the block mask is one of its extras; its parts check
    theirs. `o_by_address`: the kernel writes O row by row through its
    address (split-KV, varlen, or a Hopper schedule without O staging), so
    O's pointer and strides follow the extras among its parameters.
    `cluster`: 2 for a kernel of CTA pairs, launched as clusters of two
    (min(sm_count, tasks) clusters, a task a pair's rows).
  }];
  let parameters = (ins
    "int64_t":$block,
    "int64_t":$smem_bytes,
    "int64_t":$tmem_columns,
    "int64_t":$rows_per_task,
    OptionalParameter<"GridAttr", "the grid (none: one CTA)">:$grid,
    "KernelSpecAttr":$spec,
    FA4_ListParameter<"RoleInfoAttr", "the roles">:$roles,
    FA4_ListParameter<"TensorMapInfoAttr", "Q, K, V, O">:$tensor_maps,
    FA4_BoolParameter<"whether the kernel writes the LSE">:$lse,
    FA4_BoolParameter<"whether it runs a score_mod">:$score_mod,
    FA4_BoolParameter<"whether it runs a mask_mod">:$mask_mod,
    FA4_OptionalListParameter<"ExtraInfoAttr", "the mods' memrefs">:$extras,
    OptionalParameter<"std::optional<int64_t>", "index of the block mask">:$block_mask,
    OptionalParameter<"std::optional<int64_t>", "index of the seqused_k table">:$seqused_k,
    OptionalParameter<"std::optional<int64_t>", "index of the block table">:$block_table,
    FA4_DefaultFalseParameter<"whether O is written by address (its pointer "
                              "and strides are parameters)">:$o_by_address,
    DefaultValuedParameter<"int64_t", "1",
                           "CTAs a cluster: 2 for CTA pairs (the grid's "
                           "sm_count and tasks then count clusters)">:$cluster
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // FA4_DIALECT_FA4_IR_FA4ATTRS_TD
