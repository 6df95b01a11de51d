//===- FA4Dialect.cpp - the fa4 dialect -----------------------------------===//

#include "fa4/Dialect/FA4/IR/FA4Dialect.h"
#include "fa4/Dialect/FA4/IR/FA4Ops.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::fa4;

#include "fa4/Dialect/FA4/IR/FA4OpsDialect.cpp.inc"
#include "fa4/Dialect/FA4/IR/FA4Enums.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "fa4/Dialect/FA4/IR/FA4Attrs.cpp.inc"
#define GET_TYPEDEF_CLASSES
#include "fa4/Dialect/FA4/IR/FA4Types.cpp.inc"

void FA4Dialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "fa4/Dialect/FA4/IR/FA4Attrs.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "fa4/Dialect/FA4/IR/FA4Types.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "fa4/Dialect/FA4/IR/FA4Ops.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// The target attribute
//===----------------------------------------------------------------------===//

Attribute TargetAttr::parse(AsmParser &parser, Type) {
  std::string name;
  llvm::SMLoc loc = parser.getCurrentLocation();
  if (parser.parseLess() || parser.parseKeywordOrString(&name) ||
      parser.parseGreater())
    return {};
  const target::ChipInfo *chip = target::lookup(name);
  if (!chip) {
    parser.emitError(loc) << target::unknownChipMessage(name);
    return {};
  }
  return TargetAttr::get(parser.getContext(), chip->chip);
}

void TargetAttr::print(AsmPrinter &printer) const {
  printer << '<' << getInfo().name << '>';
}

LogicalResult FA4Dialect::verifyOperationAttribute(Operation *op,
                                                   NamedAttribute attribute) {
  // The other fa4.* attributes (fa4.spec, fa4.launch, ...) are checked by
  // the passes that read them.
  if (attribute.getName() != kTargetAttrName)
    return success();
  if (!isa<TargetAttr>(attribute.getValue()))
    return op->emitError() << "'" << kTargetAttrName
                           << "' must be a #fa4.target<...> (one of "
                           << target::chipList() << "), got "
                           << attribute.getValue();
  if (!isa<ModuleOp>(op))
    return op->emitError() << "'" << kTargetAttrName
                           << "' belongs on a builtin.module, not on '"
                           << op->getName() << "'";
  // One chip for everything a compile sees: a nested module may repeat its
  // enclosing module's chip, not name another.
  auto chip = cast<TargetAttr>(attribute.getValue());
  for (Operation *parent = op->getParentOp(); parent;
       parent = parent->getParentOp())
    if (auto outer = parent->getAttrOfType<TargetAttr>(kTargetAttrName))
      if (outer != chip)
        return op->emitError()
               << "'" << kTargetAttrName << "' names " << chip.getInfo().name
               << " inside a module for " << outer.getInfo().name
               << " (a compile is for one chip)";
  return success();
}

const target::ChipInfo *mlir::fa4::getModuleTarget(Operation *op) {
  for (Operation *at = op; at; at = at->getParentOp())
    if (auto module = dyn_cast<ModuleOp>(at))
      if (auto attr = module->getAttrOfType<TargetAttr>(kTargetAttrName))
        return &attr.getInfo();
  return nullptr;
}

const target::ChipInfo &mlir::fa4::getTargetOrDefault(Operation *op) {
  const target::ChipInfo *chip = getModuleTarget(op);
  return chip ? *chip : target::defaultChip();
}

LogicalResult mlir::fa4::checkModuleFamily(Operation *op,
                                           target::Family family,
                                           StringRef pass) {
  // A module that names no chip is compiled for the family of the pass
  // that runs on it.
  const target::ChipInfo *named = getModuleTarget(op);
  if (!named || named->family == family)
    return success();
  const target::ChipInfo &chip = *named;
  return op->emitError() << pass << " builds the "
                         << target::familyName(family) << " schedule, but the module is compiled for "
                         << chip.name << " (" << chip.familyName
                         << "); its chips are " << target::chipsOf(family);
}
