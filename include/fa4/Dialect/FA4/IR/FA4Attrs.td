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

#endif // FA4_DIALECT_FA4_IR_FA4ATTRS_TD
