//===- FA4Dialect.cpp - the fa4 dialect -----------------------------------===//

#include "fa4/Dialect/FA4/IR/FA4Dialect.h"
#include "fa4/Dialect/FA4/IR/FA4Ops.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

using namespace mlir;
using namespace mlir::fa4;

namespace mlir::fa4::detail {
/// `[a, b, ...]`: the lists of FA4Attrs.td's attributes.
template <typename T>
static FailureOr<SmallVector<T>> parseBracketList(AsmParser &parser) {
  SmallVector<T> items;
  if (parser.parseCommaSeparatedList(
          AsmParser::Delimiter::Square, [&]() -> ParseResult {
            FailureOr<T> item = FieldParser<T>::parse(parser);
            if (failed(item))
              return failure();
            items.push_back(*item);
            return success();
          }))
    return failure();
  return items;
}

template <typename T>
static void printBracketList(AsmPrinter &printer, ArrayRef<T> items) {
  printer << '[';
  llvm::interleaveComma(items, printer);
  printer << ']';
}
} // namespace mlir::fa4::detail

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

//===----------------------------------------------------------------------===//
// The kernel spec attribute
//===----------------------------------------------------------------------===//

FailureOr<llvm::APFloat> mlir::fa4::detail::parseF32Field(AsmParser &parser) {
  llvm::APFloat value(0.0f);
  if (parser.parseFloat(llvm::APFloat::IEEEsingle(), value))
    return failure();
  return value;
}

FailureOr<bool> mlir::fa4::detail::parseBoolField(AsmParser &parser) {
  llvm::SMLoc loc = parser.getCurrentLocation();
  StringRef word;
  if (parser.parseKeyword(&word))
    return failure();
  if (word == "true" || word == "false")
    return word == "true";
  return parser.emitError(loc) << "expected true or false, got '" << word << "'";
}

LogicalResult
KernelSpecAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                       MaskKind mask, int64_t windowLeft, int64_t windowRight,
                       llvm::APFloat scale, llvm::APFloat softcap, bool lse,
                       ArrayRef<int64_t> arguments, ArrayRef<int64_t> extras,
                       std::optional<int64_t> blockMask) {
  (void)mask;
  // Key positions are 32-bit in the kernels.
  constexpr int64_t kLimit = int64_t(1) << 31;
  for (int64_t bound : {windowLeft, windowRight})
    if (bound < -1 || bound >= kLimit)
      return emitError() << "fa4.spec: window bound " << bound
                         << " is neither -1 (unbounded) nor in [0, 2^31)";
  float scaleValue = scale.convertToFloat();
  if (!(scaleValue > 0.0f) || !std::isfinite(scaleValue))
    return emitError() << "fa4.spec: scale must be positive and finite";
  float softcapValue = softcap.convertToFloat();
  if (!(softcapValue >= 0.0f) || !std::isfinite(softcapValue))
    return emitError() << "fa4.spec: softcap must be non-negative and finite";
  size_t expected = lse ? 5 : 4;
  if (arguments.size() != expected)
    return emitError() << "fa4.spec: arguments names " << arguments.size()
                       << " positions; Q, K, V, O" << (lse ? " and the LSE" : "")
                       << " are " << expected;
  llvm::SmallDenseSet<int64_t> seen;
  for (ArrayRef<int64_t> positions : {arguments, extras})
    for (int64_t position : positions) {
      if (position < 0)
        return emitError() << "fa4.spec: argument position " << position
                           << " is negative";
      if (!seen.insert(position).second)
        return emitError() << "fa4.spec names argument #" << position
                           << " twice";
    }
  if (blockMask &&
      (*blockMask < 0 || *blockMask >= static_cast<int64_t>(extras.size())))
    return emitError() << "fa4.spec: block_mask " << *blockMask
                       << " is not the index of one of its " << extras.size()
                       << " extras";
  return success();
}

LogicalResult GridAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               int64_t smCount, TaskOrder order) {
  (void)order;
  if (smCount < 1 || smCount >= (int64_t(1) << 31))
    return emitError() << "fa4.grid: sm_count must be in [1, 2^31), got "
                       << smCount;
  return success();
}

/// `fa4.spec` on a function: each position it names is a memref argument.
static LogicalResult verifySpecOn(Operation *op, Attribute value) {
  auto spec = dyn_cast<KernelSpecAttr>(value);
  if (!spec)
    return op->emitError() << "'" << kSpecAttrName
                           << "' must be a #fa4.spec<...>, got " << value;
  auto function = dyn_cast<FunctionOpInterface>(op);
  if (!function)
    return op->emitError() << "'" << kSpecAttrName
                           << "' belongs on a function, not on '"
                           << op->getName() << "'";
  ArrayRef<Type> types = function.getArgumentTypes();
  for (ArrayRef<int64_t> positions : {spec.getArguments(), spec.getExtras()})
    for (int64_t position : positions)
      if (position >= static_cast<int64_t>(types.size()) ||
          !isa<MemRefType>(types[position]))
        return op->emitError() << "fa4.spec names argument #" << position
                               << ", which is not a memref argument of the "
                                  "function";
  return success();
}

LogicalResult FA4Dialect::verifyOperationAttribute(Operation *op,
                                                   NamedAttribute attribute) {
  // fa4.spec, fa4.grid and fa4.launch are typed; fa4.spec is also checked
  // against its function, fa4.target against the enclosing modules.
  if (attribute.getName() == kSpecAttrName)
    return verifySpecOn(op, attribute.getValue());
  if (attribute.getName() == kGridAttrName &&
      !isa<GridAttr>(attribute.getValue()))
    return op->emitError() << "'" << kGridAttrName
                           << "' must be a #fa4.grid<...>, got "
                           << attribute.getValue();
  if (attribute.getName() == kLaunchAttrName &&
      !isa<LaunchAttr>(attribute.getValue()))
    return op->emitError() << "'" << kLaunchAttrName
                           << "' must be a #fa4.launch<...>, got "
                           << attribute.getValue();
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

KernelSpecAttr mlir::fa4::getKernelSpec(Operation *op) {
  return op->getAttrOfType<KernelSpecAttr>(kSpecAttrName);
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
