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

#endif // FA4_DIALECT_FA4_IR_FA4ATTRS_TD
