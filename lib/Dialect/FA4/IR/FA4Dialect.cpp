//===- FA4Dialect.cpp - the fa4 dialect -----------------------------------===//

#include "fa4/Dialect/FA4/IR/FA4Dialect.h"
#include "fa4/Support/AttentionMath.h"
#include "fa4/Dialect/FA4/IR/FA4Ops.h"

#include "Verify.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
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
                       std::optional<int64_t> blockMask,
                       std::optional<int64_t> seqUsedK,
                       std::optional<int64_t> blockTable,
                       std::optional<int64_t> numSplits,
                       std::optional<int64_t> splitWorkspace,
                       std::optional<int64_t> cuSeqlensQ,
                       std::optional<int64_t> cuSeqlensK,
                       std::optional<int64_t> qDescale,
                       std::optional<int64_t> kDescale,
                       std::optional<int64_t> vDescale) {
  // The entry op's own rules (Verify.h): level B holds no variant level A
  // refuses.
  auto prefixed = [&]() { return emitError() << "fa4.spec: "; };
  if (failed(fa4::detail::verifyWindow(prefixed, mask, windowLeft, windowRight)) ||
      failed(fa4::detail::verifyScaleAndSoftcap(prefixed, scale.convertToFloat(),
                                           softcap.convertToFloat())))
    return failure();
  size_t expected = lse ? 5 : 4;
  if (arguments.size() != expected)
    return emitError() << "fa4.spec: arguments names " << arguments.size()
                       << " positions; Q, K, V, O" << (lse ? " and the LSE" : "")
                       << " are " << expected;
  SmallVector<int64_t> positions(arguments);
  positions.append(extras.begin(), extras.end());
  for (int64_t position : positions)
    if (position < 0)
      return emitError() << "fa4.spec: argument position " << position
                         << " is negative";
  llvm::sort(positions);
  for (size_t i = 1; i < positions.size(); ++i)
    if (positions[i] == positions[i - 1])
      return emitError() << "fa4.spec names argument #" << positions[i]
                         << " twice";
  if (blockMask &&
      (*blockMask < 0 || *blockMask >= static_cast<int64_t>(extras.size())))
    return emitError() << "fa4.spec: block_mask " << *blockMask
                       << " is not the index of one of its " << extras.size()
                       << " extras";
  if (seqUsedK &&
      (*seqUsedK < 0 || *seqUsedK >= static_cast<int64_t>(extras.size()) ||
       seqUsedK == blockMask))
    return emitError() << "fa4.spec: seqused_k " << *seqUsedK
                       << " is not the index of one of its " << extras.size()
                       << " extras other than the block mask";
  if (blockTable &&
      (*blockTable < 0 || *blockTable >= static_cast<int64_t>(extras.size()) ||
       blockTable == blockMask || blockTable == seqUsedK))
    return emitError() << "fa4.spec: block_table " << *blockTable
                       << " is not the index of one of its " << extras.size()
                       << " extras other than the block mask and seqused_k";
  if (numSplits.has_value() != splitWorkspace.has_value())
    return emitError() << "fa4.spec: num_splits and split_workspace go together";
  if (numSplits && (*numSplits < 2 || *numSplits > kMaxSplits))
    return emitError() << "fa4.spec: num_splits must be in [2, " << kMaxSplits
                       << "], got " << *numSplits;
  if (splitWorkspace &&
      (*splitWorkspace < 0 ||
       *splitWorkspace >= static_cast<int64_t>(extras.size()) ||
       splitWorkspace == blockMask || splitWorkspace == seqUsedK ||
       splitWorkspace == blockTable))
    return emitError() << "fa4.spec: split_workspace " << *splitWorkspace
                       << " is not the index of one of its " << extras.size()
                       << " extras other than the other tables";
  if (cuSeqlensQ.has_value() != cuSeqlensK.has_value())
    return emitError() << "fa4.spec: cu_seqlens_q and cu_seqlens_k go together";
  for (std::optional<int64_t> table : {cuSeqlensQ, cuSeqlensK})
    if (table && (*table < 0 || *table >= static_cast<int64_t>(extras.size()) ||
                  table == blockMask || table == seqUsedK ||
                  table == blockTable || table == splitWorkspace))
      return emitError() << "fa4.spec: cu_seqlens " << *table
                         << " is not the index of one of its " << extras.size()
                         << " extras other than the other tables";
  if (cuSeqlensQ && cuSeqlensQ == cuSeqlensK)
    return emitError() << "fa4.spec: cu_seqlens_q and cu_seqlens_k name the "
                          "same extra";
  if (cuSeqlensQ && (blockMask || blockTable || numSplits))
    return emitError() << "fa4.spec: a varlen kernel takes no block mask, "
                          "block table or split-KV";
  SmallVector<std::optional<int64_t>> tables = {
      blockMask, seqUsedK, blockTable, splitWorkspace, cuSeqlensQ, cuSeqlensK};
  for (auto [name, table] : {std::pair{"q_descale", qDescale},
                             std::pair{"k_descale", kDescale},
                             std::pair{"v_descale", vDescale}}) {
    if (table && (*table < 0 || *table >= static_cast<int64_t>(extras.size()) ||
                  llvm::is_contained(tables, table)))
      return emitError() << "fa4.spec: " << name << " " << *table
                         << " is not the index of one of its " << extras.size()
                         << " extras other than the other tables";
    tables.push_back(table);
  }
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

LogicalResult
TensorMapInfoAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                          StringRef name, StringRef dtype, int64_t heads,
                          int64_t headDim, ArrayRef<int64_t> box,
                          ArrayRef<int64_t> strides, int64_t pageSize,
                          ArrayRef<int64_t> sizes, StringRef layout) {
  if (!sizes.empty() &&
      (sizes.size() != 2 || llvm::any_of(sizes, [](int64_t size) {
         return size < -1 || size == 0;
       })))
    return emitError() << "fa4.tensor_map: sizes must be [batch, seq], each "
                          "-1 (dynamic) or positive";
  if (pageSize < 0 || (pageSize && (name == "q" || name == "o")))
    return emitError() << "fa4.tensor_map: page_size must be 0, or positive "
                          "for k and v, got "
                       << pageSize << " for '" << name << "'";
  if (!llvm::is_contained({"q", "k", "v", "o"}, name))
    return emitError() << "fa4.tensor_map: name must be q, k, v or o, got '"
                       << name << "'";
  if (dtype != "fp16" && dtype != "bf16" && dtype != "e4m3")
    return emitError() << "fa4.tensor_map: dtype must be fp16, bf16 or e4m3, "
                          "got '"
                       << dtype << "'";
  if (!layout.empty() && (layout != "vt" || name != "v" || dtype != "e4m3" ||
                          pageSize))
    return emitError() << "fa4.tensor_map: layout must be empty, or 'vt' for "
                          "a dense e4m3 v, got '"
                       << layout << "' for '" << name << "'";
  if (heads <= 0 || headDim <= 0)
    return emitError() << "fa4.tensor_map: heads and head_dim must be "
                          "positive, got "
                       << heads << " and " << headDim;
  // A TMA box: 4 dimensions of 1 to 256 elements.
  if (box.size() != 4 || llvm::any_of(box, [](int64_t size) {
        return size < 1 || size > 256;
      }))
    return emitError() << "fa4.tensor_map: box must be 4 sizes in [1, 256]";
  if (strides.size() != 4 || llvm::any_of(strides, [](int64_t stride) {
        return stride < -1;
      }))
    return emitError() << "fa4.tensor_map: strides must be 4 entries, each "
                          "-1 (dynamic) or a size";
  return success();
}

LogicalResult RoleInfoAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   StringRef name, int64_t firstWarp,
                                   int64_t numWarps, int64_t registers) {
  // A CTA of at most 1024 threads: 32 warps; setmaxnreg's range.
  if (name.empty() || firstWarp < 0 || numWarps < 1 || firstWarp + numWarps > 32 ||
      registers < 24 || registers > 256)
    return emitError() << "fa4.role_info: '" << name << "' needs a name, warps "
                       << "within a CTA's 32 and 24 to 256 registers, got "
                          "warps "
                       << firstWarp << " + " << numWarps << " and "
                       << registers << " registers";
  return success();
}

LogicalResult
ExtraInfoAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                      StringRef dtype, ArrayRef<int64_t> shape) {
  if (dtype.empty())
    return emitError() << "fa4.extra: dtype must name the element type";
  if (llvm::any_of(shape, [](int64_t size) { return size < -1; }))
    return emitError() << "fa4.extra: shape entries must be -1 (dynamic) or "
                          "sizes";
  return success();
}

LogicalResult BarrierInfoAttr::verify(
    function_ref<InFlightDiagnostic()> emitError, StringRef name,
    BarrierKind kind, int64_t count, int64_t stages,
    ArrayRef<StringAttr> producers, ArrayRef<StringAttr> consumers) {
  (void)kind;
  // An mbarrier's arrival count is 20 bits.
  if (name.empty() || count < 1 || count >= (int64_t(1) << 20) || stages < 1 ||
      stages >= (int64_t(1) << 20) || producers.empty() || consumers.empty())
    return emitError() << "fa4.barrier: '" << name
                       << "' needs a name, 1 to 2^20 - 1 arrivals and stages "
                          "and a role on each side, got count "
                       << count << ", stages " << stages << ", "
                       << producers.size() << " producers and "
                       << consumers.size() << " consumers";
  return success();
}

LogicalResult TmemBufferAttr::verify(
    function_ref<InFlightDiagnostic()> emitError, StringRef name,
    int64_t column, int64_t columns) {
  if (name.empty() || column < 0 || columns < 1 || column > 512 ||
      columns > 512 - column)
    return emitError() << "fa4.tmem_buffer: '" << name
                       << "' needs a name and columns inside TMEM's 512, got "
                       << columns << " from column " << column;
  return success();
}

LogicalResult TmemLayoutAttr::verify(
    function_ref<InFlightDiagnostic()> emitError, int64_t columns,
    ArrayRef<TmemBufferAttr> buffers) {
  if (columns < 32 || columns > 512 || !llvm::isPowerOf2_64(columns))
    return emitError() << "fa4.tmem_layout: columns must be a power of two "
                          "from 32 to 512 (tcgen05.alloc's), got "
                       << columns;
  SmallVector<TmemBufferAttr> sorted(buffers.begin(), buffers.end());
  llvm::sort(sorted, [](TmemBufferAttr a, TmemBufferAttr b) {
    return a.getColumn() < b.getColumn();
  });
  for (auto [i, buffer] : llvm::enumerate(sorted)) {
    if (buffer.getColumn() + buffer.getColumns() > columns)
      return emitError() << "fa4.tmem_layout: buffer '" << buffer.getName()
                         << "' ends at column "
                         << buffer.getColumn() + buffer.getColumns()
                         << ", past the " << columns << " allocated";
    if (i > 0 && sorted[i - 1].getColumn() + sorted[i - 1].getColumns() >
                     buffer.getColumn())
      return emitError() << "fa4.tmem_layout: buffers '"
                         << sorted[i - 1].getName() << "' and '"
                         << buffer.getName() << "' overlap";
  }
  return success();
}

LogicalResult LaunchAttr::verify(
    function_ref<InFlightDiagnostic()> emitError, int64_t block,
    int64_t smemBytes, int64_t tmemColumns, int64_t rowsPerTask, GridAttr grid,
    KernelSpecAttr spec, ArrayRef<RoleInfoAttr> roles,
    ArrayRef<TensorMapInfoAttr> tensorMaps, bool lse, bool scoreMod,
    bool maskMod, ArrayRef<ExtraInfoAttr> extras,
    std::optional<int64_t> blockMask, std::optional<int64_t> seqUsedK,
    std::optional<int64_t> blockTable, bool oByAddress, int64_t cluster) {
  (void)grid;
  if (cluster != 1 && cluster != 2)
    return emitError() << "fa4.launch: cluster must be 1 or 2 (CTA pairs), "
                          "got "
                       << cluster;
  if (!oByAddress && (spec.getSplitWorkspace() || spec.isVarlen()))
    return emitError() << "fa4.launch: a split-KV or varlen kernel writes O "
                          "by address (o_by_address = true)";
  (void)scoreMod;
  (void)maskMod;
  if (block < 1 || block > 1024 || block % 32 != 0)
    return emitError() << "fa4.launch: block must be whole warps, 32 to 1024 "
                          "threads, got "
                       << block;
  // Sizes the manifest carries as 32-bit unsigned numbers.
  constexpr int64_t kLimit = int64_t(1) << 31;
  for (auto [name, value] :
       {std::pair<StringRef, int64_t>{"smem_bytes", smemBytes},
        {"tmem_columns", tmemColumns},
        {"rows_per_task", rowsPerTask}})
    if (value < 0 || value >= kLimit)
      return emitError() << "fa4.launch: " << name
                         << " must be in [0, 2^31), got " << value;
  if (!spec)
    return emitError() << "fa4.launch: spec is required";
  if (roles.empty())
    return emitError() << "fa4.launch: roles must name at least one role";
  SmallVector<StringRef> names;
  for (TensorMapInfoAttr map : tensorMaps)
    names.push_back(map.getName());
  llvm::sort(names);
  if (names != ArrayRef<StringRef>{"k", "o", "q", "v"})
    return emitError() << "fa4.launch: tensor_maps must describe q, k, v and o "
                          "once each";
  if (lse != spec.getLse())
    return emitError() << "fa4.launch: lse = " << (lse ? "true" : "false")
                       << " but its spec says lse = "
                       << (spec.getLse() ? "true" : "false");
  if (blockMask &&
      (*blockMask < 0 || *blockMask >= static_cast<int64_t>(extras.size())))
    return emitError() << "fa4.launch: block_mask " << *blockMask
                       << " is not the index of one of its " << extras.size()
                       << " extras";
  if (seqUsedK != spec.getSequsedK() || blockTable != spec.getBlockTable())
    return emitError()
           << "fa4.launch: seqused_k or block_table differs from its spec's";
  return success();
}

LogicalResult mlir::fa4::detail::verifyMemrefPositions(
    Operation *op, StringRef attribute,
    std::initializer_list<ArrayRef<int64_t>> lists) {
  ArrayRef<Type> types = cast<FunctionOpInterface>(op).getArgumentTypes();
  for (ArrayRef<int64_t> positions : lists)
    for (int64_t position : positions)
      if (position >= static_cast<int64_t>(types.size()) ||
          !isa<MemRefType>(types[position]))
        return op->emitError() << attribute << " names argument #" << position
                               << ", which is not a memref argument of the "
                                  "function";
  return success();
}

/// `fa4.spec` on a function: each position it names is a memref argument,
/// and Q, K, V, O (and the LSE) describe one attention, as the entry op's
/// verifier requires of level A (the kernels and the simulator size
/// everything from these types).
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
  if (failed(fa4::detail::verifyMemrefPositions(
          op, kSpecAttrName, {spec.getArguments(), spec.getExtras()})))
    return failure();
  const char *names[] = {"Q", "K", "V", "O", "LSE"};
  auto typeOf = [&](size_t role) {
    return cast<MemRefType>(types[spec.getArguments()[role]]);
  };
  MemRefType q = typeOf(0), k = typeOf(1);
  // FP8: e4m3 Q, K and V, and an f16 or bf16 O.
  bool fp8 = isa<Float8E4M3FNType>(q.getElementType());
  for (size_t role = 0; role < 4; ++role) {
    MemRefType type = typeOf(role);
    Type element = type.getElementType();
    bool sixteenBits = element.isF16() || element.isBF16();
    bool fits = fp8 ? (role == 3 ? sixteenBits : element == q.getElementType())
                    : sixteenBits && element == q.getElementType();
    if (type.getRank() != 4 || type.isDynamicDim(2) || type.isDynamicDim(3) ||
        type.getDimSize(2) <= 0 || type.getDimSize(3) <= 0 || !fits)
      return op->emitError()
             << "fa4.spec's " << names[role] << " is " << type
             << "; expected a [batch, seq, heads, head_dim] memref of f16 or "
                "bf16 (Q's element type; or Q, K and V in f8E4M3FN with O "
                "in f16 or bf16) with static, positive heads and head dim";
  }
  for (std::optional<int64_t> position :
       {spec.getQDescale(), spec.getKDescale(), spec.getVDescale()}) {
    if (!position)
      continue;
    auto table = cast<MemRefType>(types[spec.getExtras()[*position]]);
    if (!fp8)
      return op->emitError() << "fa4.spec names a descale table, which needs "
                                "FP8 (e4m3) inputs; Q is "
                             << q.getElementType();
    if (table.getRank() != 2 || !table.getElementType().isF32() ||
        !table.getLayout().isIdentity() ||
        (!table.isDynamicDim(1) && table.getDimSize(1) != k.getDimSize(2)))
      return op->emitError() << "fa4.spec's descale table " << table
                             << ": expected a row-major f32 [batch, kv_heads = "
                             << k.getDimSize(2) << "] memref";
  }
  auto heads = [&](size_t role) { return typeOf(role).getDimSize(2); };
  auto dim = [&](size_t role) { return typeOf(role).getDimSize(3); };
  if (heads(2) != heads(1) || heads(3) != heads(0) || dim(1) != dim(0) ||
      dim(3) != dim(2) || dim(2) > dim(0) || heads(0) % heads(1) != 0)
    return op->emitError()
           << "fa4.spec's Q, K, V and O (" << q << ", " << k << ", "
           << typeOf(2) << ", " << typeOf(3)
           << ") do not describe one attention: K and V must agree in heads, "
              "O must match Q's, K share Q's head dim and O V's (at most "
              "Q's), and K's heads divide Q's";
  if (spec.getLse()) {
    MemRefType lse = typeOf(4);
    if (lse.getRank() != 3 || !lse.getElementType().isF32() ||
        !lse.getLayout().isIdentity() || lse.getDimSize(1) != heads(0))
      return op->emitError() << "fa4.spec's LSE is " << lse
                             << "; expected a row-major [batch, q_heads = "
                             << heads(0) << ", seq_q] memref of f32";
  }
  if (std::optional<int64_t> position = spec.getBlockTable()) {
    auto table = cast<MemRefType>(types[spec.getExtras()[*position]]);
    int64_t page = k.getDimSize(1);
    if (table.getRank() != 2 || !table.getElementType().isSignlessInteger(32) ||
        ShapedType::isDynamic(page) || page < 16 || (page & (page - 1)) != 0)
      return op->emitError()
             << "fa4.spec's block table " << table << " and paged K " << k
             << ": expected an i32 [batch, max_blocks] table and a static "
                "page size, a power of two of at least 16";
  }
  if (std::optional<int64_t> position = spec.getSequsedK()) {
    auto table = cast<MemRefType>(types[spec.getExtras()[*position]]);
    if (failed(fa4::detail::verifySeqUsedKType(
            [&] { return op->emitError() << "fa4.spec: "; }, table,
            q.getDimSize(0))))
      return failure();
  }
  if (std::optional<int64_t> position = spec.getSplitWorkspace()) {
    auto workspace = cast<MemRefType>(types[spec.getExtras()[*position]]);
    if (failed(fa4::detail::verifySplitWorkspaceType(
            [&] { return op->emitError() << "fa4.spec: "; }, workspace)))
      return failure();
  }
  if (spec.isVarlen()) {
    // Varlen: two [batch + 1] i32 tables, and Q, K, V and O packed.
    for (int64_t position : {*spec.getCuSeqlensQ(), *spec.getCuSeqlensK()}) {
      auto table = cast<MemRefType>(types[spec.getExtras()[position]]);
      if (table.getRank() != 1 || !table.getElementType().isSignlessInteger(32))
        return op->emitError() << "fa4.spec's cu_seqlens table " << table
                               << " is not an i32 memref [batch + 1]";
    }
    for (size_t role = 0; role < 4; ++role)
      if (!typeOf(role).isDynamicDim(0) && typeOf(role).getDimSize(0) != 1)
        return op->emitError()
               << "fa4.spec's varlen " << names[role] << " is "
               << typeOf(role) << "; packed tensors are [1, total, heads, "
                                  "head_dim]";
  }
  return success();
}

/// fa4.barriers against the schedule it summarizes: one entry per
/// fa4.mbarrier_alloc of the function, by name, with its kind, stages and
/// count, between roles of the fa4.warp_specialize it sits on.
static LogicalResult verifyBarrierTable(Operation *specialize,
                                        ArrayAttr table) {
  llvm::StringMap<MBarrierAllocOp> allocs;
  if (auto func = specialize->getParentOfType<FunctionOpInterface>())
    func->walk([&](MBarrierAllocOp alloc) { allocs[alloc.getName()] = alloc; });
  llvm::StringSet<> roles, named;
  for (Operation &op : specialize->getRegion(0).getOps())
    if (auto role = dyn_cast<RoleOp>(op))
      roles.insert(role.getName());
  for (Attribute entry : table) {
    auto barrier = cast<BarrierInfoAttr>(entry);
    StringRef name = barrier.getName();
    if (!named.insert(name).second)
      return specialize->emitError()
             << "'fa4.barriers' lists '" << name << "' twice";
    for (ArrayRef<StringAttr> side :
         {barrier.getProducers(), barrier.getConsumers()}) {
      llvm::StringSet<> onSide;
      for (StringAttr role : side) {
        if (!roles.contains(role.getValue()))
          return specialize->emitError()
                 << "'fa4.barriers': '" << name << "' names role '"
                 << role.getValue() << "', which the schedule does not have";
        if (!onSide.insert(role.getValue()).second)
          return specialize->emitError()
                 << "'fa4.barriers': '" << name << "' names role '"
                 << role.getValue() << "' twice on one side";
      }
    }
    MBarrierAllocOp alloc = allocs.lookup(name);
    if (!alloc)
      return specialize->emitError()
             << "'fa4.barriers' lists '" << name
             << "', which no fa4.mbarrier_alloc of the function makes";
    MBarrierType type = alloc.getBarrier().getType();
    if (type.getKind() != barrier.getKind() ||
        type.getStages() != barrier.getStages() ||
        static_cast<int64_t>(alloc.getCount()) != barrier.getCount())
      return specialize->emitError()
             << "'fa4.barriers': '" << name << "' says "
             << stringifyBarrierKind(barrier.getKind()) << ", "
             << barrier.getStages() << " stages, count " << barrier.getCount()
             << "; its fa4.mbarrier_alloc is "
             << stringifyBarrierKind(type.getKind()) << ", "
             << type.getStages() << " stages, count " << alloc.getCount();
  }
  for (auto &entry : allocs)
    if (!named.contains(entry.getKey()))
      return specialize->emitError()
             << "'fa4.barriers' does not list '" << entry.getKey()
             << "', an fa4.mbarrier_alloc of the function";
  return success();
}

/// fa4.tmem against the function's fa4.tmem_alloc ops: each buffer once,
/// at its op's column offset, and every op in the layout.
static LogicalResult verifyTmemLayout(Operation *specialize,
                                      TmemLayoutAttr layout) {
  llvm::StringMap<TmemAllocOp> allocs;
  if (auto func = specialize->getParentOfType<FunctionOpInterface>())
    func->walk([&](TmemAllocOp alloc) { allocs[alloc.getName()] = alloc; });
  if (allocs.empty())
    return specialize->emitError()
           << "'fa4.tmem' on a schedule that allocates no tensor memory";
  llvm::StringSet<> named;
  for (TmemBufferAttr buffer : layout.getBuffers()) {
    StringRef name = buffer.getName();
    if (!named.insert(name).second)
      return specialize->emitError()
             << "'fa4.tmem' lists buffer '" << name << "' twice";
    TmemAllocOp alloc = allocs.lookup(name);
    if (!alloc)
      return specialize->emitError()
             << "'fa4.tmem' lists '" << name
             << "', which no fa4.tmem_alloc of the function makes";
    if (std::optional<int64_t> offset = alloc.getColumnOffset();
        offset && *offset != buffer.getColumn())
      return specialize->emitError()
             << "'fa4.tmem' puts '" << name << "' at column "
             << buffer.getColumn() << "; its fa4.tmem_alloc says " << *offset;
    int64_t needed = alloc.getBuffer().getType().getColumns();
    if (buffer.getColumns() < needed)
      return specialize->emitError()
             << "'fa4.tmem' gives '" << name << "' " << buffer.getColumns()
             << " columns; its fa4.tmem_alloc needs " << needed;
  }
  for (auto &entry : allocs)
    if (!named.contains(entry.getKey()))
      return specialize->emitError()
             << "'fa4.tmem' does not list '" << entry.getKey()
             << "', an fa4.tmem_alloc of the function";
  return success();
}

LogicalResult FA4Dialect::verifyOperationAttribute(Operation *op,
                                                   NamedAttribute attribute) {
  // fa4.spec, fa4.grid and fa4.launch are typed; fa4.spec is also checked
  // against its function, fa4.target against the enclosing modules.
  if (attribute.getName() == kSpecAttrName)
    return verifySpecOn(op, attribute.getValue());
  if (attribute.getName() == kBackwardSpecAttrName) {
    auto spec = dyn_cast<BackwardSpecAttr>(attribute.getValue());
    if (!spec)
      return op->emitError() << "'" << kBackwardSpecAttrName
                             << "' must be a #fa4.backward_spec<...>, got "
                             << attribute.getValue();
    return verifyBackwardSpecOn(op, spec);
  }
  // fa4.grid, fa4.barriers and fa4.tmem belong on the schedule's
  // fa4.warp_specialize, fa4.launch on the kernel's llvm.func.
  auto barriers = dyn_cast<ArrayAttr>(attribute.getValue());
  bool barrierList = barriers && llvm::all_of(barriers, [](Attribute entry) {
    return isa<BarrierInfoAttr>(entry);
  });
  for (auto [name, owner, typed, spelling] :
       {std::tuple<StringRef, StringRef, bool, StringRef>{
            kGridAttrName, "fa4.warp_specialize",
            isa<GridAttr>(attribute.getValue()), "a #fa4.grid<...>"},
        {kBarriersAttrName, "fa4.warp_specialize", barrierList,
         "a list of #fa4.barrier<...>"},
        {kTmemAttrName, "fa4.warp_specialize",
         isa<TmemLayoutAttr>(attribute.getValue()), "a #fa4.tmem_layout<...>"},
        {kLaunchAttrName, "llvm.func", isa<LaunchAttr>(attribute.getValue()),
         "a #fa4.launch<...>"}}) {
    if (attribute.getName() != name)
      continue;
    if (!typed)
      return op->emitError() << "'" << name << "' must be " << spelling
                             << ", got " << attribute.getValue();
    if (op->getName().getStringRef() != owner)
      return op->emitError() << "'" << name << "' belongs on '" << owner
                             << "', not on '" << op->getName() << "'";
    // Attributes made in memory (the passes' ::get) are checked here too.
    if (barrierList && name == kBarriersAttrName) {
      for (Attribute entry : barriers) {
        auto barrier = cast<BarrierInfoAttr>(entry);
        if (failed(BarrierInfoAttr::verify(
                [&] { return op->emitError(); }, barrier.getName(),
                barrier.getKind(), barrier.getCount(), barrier.getStages(),
                barrier.getProducers(), barrier.getConsumers())))
          return failure();
      }
      return verifyBarrierTable(op, barriers);
    }
    if (auto layout = dyn_cast<TmemLayoutAttr>(attribute.getValue())) {
      for (TmemBufferAttr buffer : layout.getBuffers())
        if (failed(TmemBufferAttr::verify([&] { return op->emitError(); },
                                          buffer.getName(), buffer.getColumn(),
                                          buffer.getColumns())))
          return failure();
      if (failed(TmemLayoutAttr::verify([&] { return op->emitError(); },
                                        layout.getColumns(),
                                        layout.getBuffers())))
        return failure();
      return verifyTmemLayout(op, layout);
    }
    return success();
  }
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

LogicalResult mlir::fa4::verifyTablesAgainstSpec(Operation *func,
                                                 KernelSpecAttr spec,
                                                 Value key, Value value) {
  auto function = cast<FunctionOpInterface>(func);
  auto extraArgument = [&](std::optional<int64_t> position) -> Value {
    ArrayRef<int64_t> extras = spec.getExtras();
    if (!position || *position < 0 ||
        *position >= static_cast<int64_t>(extras.size()) ||
        extras[*position] < 0 ||
        extras[*position] >= static_cast<int64_t>(function.getNumArguments()))
      return Value();
    return function.getArgument(extras[*position]);
  };
  Value blockTable = extraArgument(spec.getBlockTable());
  Value seqUsedK = extraArgument(spec.getSequsedK());
  Value splitWorkspace = extraArgument(spec.getSplitWorkspace());
  Value cuSeqlensQ = extraArgument(spec.getCuSeqlensQ());
  Value cuSeqlensK = extraArgument(spec.getCuSeqlensK());
  auto checkLoad = [&](Operation *op, Value source, Value table) -> LogicalResult {
    if (source != key && source != value) {
      if (table)
        return op->emitOpError()
               << "reads a tensor other than K and V through a block table";
      return success();
    }
    if (table != blockTable)
      return op->emitOpError()
             << (blockTable ? (table ? "reads through a block table other "
                                       "than fa4.spec's"
                                     : "reads K or V densely, but fa4.spec "
                                       "makes them a paged cache")
                            : "reads K or V through a block table, but "
                              "fa4.spec names none");
    return success();
  };
  WalkResult walk = func->walk([&](Operation *op) {
    LogicalResult result = success();
    if (auto load = dyn_cast<LoadKvTileOp>(op))
      result = checkLoad(op, load.getSource(), load.getBlockTable());
    else if (auto load = dyn_cast<TmaLoadOp>(op))
      result = checkLoad(op, load.getSource(), load.getBlockTable());
    else if (auto length = dyn_cast<SequenceLengthOp>(op);
             length && length.getTable() != seqUsedK)
      result = length.emitOpError()
               << "reads a table that is not fa4.spec's seqused_k";
    else if (auto span = dyn_cast<SequenceSpanOp>(op);
             span && (!span.getTable() ||
                      (span.getTable() != cuSeqlensQ &&
                       span.getTable() != cuSeqlensK)))
      result = span.emitOpError()
               << "reads a table that is not one of fa4.spec's cu_seqlens";
    else if (auto coords = dyn_cast<TaskCoordsOp>(op);
             coords && coords.getCuSeqlens() != cuSeqlensQ)
      result = coords.emitOpError()
               << (cuSeqlensQ ? (coords.getCuSeqlens()
                                     ? "walks a varlen grid by a table that is "
                                       "not fa4.spec's cu_seqlens_q"
                                     : "walks a dense grid, but fa4.spec's "
                                       "batch is varlen (it takes cu_seqlens)")
                              : "walks a varlen grid, but fa4.spec's batch "
                                "is dense");
    else if (auto count = dyn_cast<TaskCountOp>(op);
             count && count.getVarlen() != static_cast<bool>(cuSeqlensQ))
      result = count.emitOpError()
               << (cuSeqlensQ ? "counts a dense grid, but fa4.spec's batch is "
                                "varlen (it takes the varlen attribute)"
                              : "counts a varlen grid, but fa4.spec's batch is "
                                "dense");
    else if (isa<StorePartialOOp, MergeSplitsOp>(op)) {
      // Split-KV ops belong to a split kernel, with its workspace and count.
      Value workspace = isa<StorePartialOOp>(op)
                            ? cast<StorePartialOOp>(op).getWorkspace()
                            : cast<MergeSplitsOp>(op).getWorkspace();
      int64_t splits = isa<StorePartialOOp>(op)
                           ? cast<StorePartialOOp>(op).getNumSplits()
                           : cast<MergeSplitsOp>(op).getNumSplits();
      if (!splitWorkspace)
        result = op->emitOpError()
                 << "writes a split-KV workspace, but fa4.spec splits no task";
      else if (workspace != splitWorkspace)
        result = op->emitOpError() << "writes a split-KV workspace other than "
                                      "fa4.spec's split_workspace";
      else if (splits != spec.getSplits())
        result = op->emitOpError()
                 << "counts " << splits << " parts, but fa4.spec's num_splits is "
                 << spec.getSplits();
    }
    return failed(result) ? WalkResult::interrupt() : WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
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
