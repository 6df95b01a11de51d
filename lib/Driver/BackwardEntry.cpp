//===- BackwardEntry.cpp - the backward entry of a forward entry ----------===//
//
// A forward entry (one function holding one fa4.attention, as fa4c and
// fa4.compile_ir take it) names everything its gradients need: the
// tensors' types and layouts, the mask, window, scale and softcap, the
// score_mod and mask_mod regions and the extras they read. backwardEntryOf
// writes the fa4.attention_backward of the same attention, so that a
// variant written once as IR (a FlexAttention-style score_mod, say) has
// its backward without a second hand-written function; withLseOf adds the
// LSE a forward must write for that backward to read.
//
//===----------------------------------------------------------------------===//

#include "fa4/Driver/Compile.h"

#include "fa4/Dialect/FA4/IR/FA4Dialect.h"
#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Pipeline/Pipeline.h"
#include "fa4/Support/Error.h"
#include "fa4/Transforms/ScoreModGrad.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Pass/PassManager.h"

using namespace mlir;
using namespace mlir::fa4;

namespace {

/// The one fa4.attention of a forward entry and its function, or an error
/// saying what the module holds instead.
llvm::Expected<std::pair<func::FuncOp, AttentionOp>>
forwardAttention(ModuleOp module) {
  if (llvm::Error refused = checkEntryLevel(module))
    return std::move(refused);
  if (llvm::Error refused = checkOneKernel(module, /*allowBackward=*/true))
    return std::move(refused);
  SmallVector<AttentionOp> ops;
  module.walk([&](AttentionOp op) { ops.push_back(op); });
  if (ops.size() != 1)
    return makeError("the IR holds " + std::to_string(ops.size()) +
                     " fa4.attention ops; the backward is derived from a "
                     "function holding exactly one");
  auto func = ops.front()->getParentOfType<func::FuncOp>();
  if (!func)
    return makeError("the fa4.attention is not inside a func.func");
  return std::make_pair(func, ops.front());
}

/// What a backward cannot (yet) be derived for, named; empty when none.
std::string backwardRefusal(AttentionOp op) {
  for (Value operand : {op.getQ(), op.getK(), op.getV(), op.getOut()})
    if (!isa<MemRefType>(operand.getType()))
      return "its Q, K, V and O are not all memrefs after bufferization";
  if (op.getLse() && !isa<MemRefType>(op.getLse().getType()))
    return "its LSE is not a memref after bufferization";
  Type element = cast<MemRefType>(op.getQ().getType()).getElementType();
  if (!element.isF16() && !element.isBF16())
    return "its inputs are " + [&] {
      std::string text;
      llvm::raw_string_ostream os(text);
      os << element;
      return text;
    }() + ": the backward takes f16 or bf16 (not FP8)";
  if (op.getValueHeadDim() != op.getHeadDim())
    return "V's head dim (" + std::to_string(op.getValueHeadDim()) +
           ") differs from Q's (" + std::to_string(op.getHeadDim()) +
           "): the backward takes one head dim";
  std::pair<const char *, bool> unsupported[] = {
      {"a block mask (block_mask)", op.getBlockMask().has_value()},
      {"a seqused_k table", op.getSequsedK().has_value()},
      {"a paged K/V cache (block_table)", op.getBlockTable().has_value()},
      {"split-KV (num_splits)", op.getNumSplits().has_value()},
      {"varlen tables (cu_seqlens)",
       op.getCuSeqlensQ().has_value() || op.getCuSeqlensK().has_value()},
      {"FP8 descale tables",
       op.getQDescale().has_value() || op.getKDescale().has_value() ||
           op.getVDescale().has_value()}};
  for (auto [what, present] : unsupported)
    if (present)
      return std::string("it has ") + what +
             ", which the backward does not take (yet)";
  return {};
}

/// The LSE's type for a forward without one: [batch, q_heads, seq_q] f32,
/// the batch and sequence sizes Q's (static or dynamic).
MemRefType lseTypeFor(AttentionOp op) {
  auto q = cast<MemRefType>(op.getQ().getType());
  return MemRefType::get({q.getDimSize(0), q.getDimSize(2), q.getDimSize(1)},
                         Float32Type::get(op.getContext()));
}

/// The type `type`'s sizes and element `element` have densely (identity
/// layout): the workspace's.
MemRefType denseLike(MemRefType type, Type element) {
  return MemRefType::get(type.getShape(), element);
}

/// The forward entry `given` as the pipeline's first stage makes it, in
/// `copy`: bufferized (an entry on tensors to memrefs, destinations it
/// allocates promoted to parameters), every operand of its attention an
/// argument of its function (fa4-tile's rule for the forward: the
/// kernel's memrefs are its parameters), its score_mod differentiable.
/// `what` names the derivation in errors.
llvm::Expected<AttentionOp> forwardAsCompiled(ModuleOp given,
                                              OwningOpRef<ModuleOp> &copy,
                                              const std::string &what) {
  if (llvm::Expected<std::pair<func::FuncOp, AttentionOp>> found =
          forwardAttention(given);
      !found)
    return found.takeError();
  copy = OwningOpRef<ModuleOp>(cast<ModuleOp>(given->clone()));
  PassManager pm(given.getContext());
  addEntryBufferization(pm);
  if (failed(pm.run(*copy)))
    return makeError("the entry does not bufferize");
  llvm::Expected<std::pair<func::FuncOp, AttentionOp>> found =
      forwardAttention(*copy);
  if (!found)
    return found.takeError();
  auto [func, op] = *found;
  if (std::string why = backwardRefusal(op); !why.empty())
    return makeError(what + ": " + why);
  for (auto [position, operand] : llvm::enumerate(op->getOperands())) {
    auto argument = dyn_cast<BlockArgument>(operand);
    if (!argument || argument.getOwner() != &func.getBody().front())
      return makeError(what + ": its operand #" + std::to_string(position) +
                       " is not an argument of @" + func.getName().str() +
                       " (the kernel's memrefs are its parameters; the "
                       "forward is refused alike)");
    // Q, K, V, O and the LSE: tensors of their own (as fa4-tile holds the
    // forward to).
    if (position < (op.getLse() ? 5u : 4u))
      for (unsigned earlier = 0; earlier < position; ++earlier)
        if (op->getOperand(earlier) == operand)
          return makeError(what + ": its operands #" +
                           std::to_string(earlier) + " and #" +
                           std::to_string(position) +
                           " are the same argument (Q, K, V and O are "
                           "distinct tensors; the forward is refused alike)");
  }
  // The forward's function returns nothing or its destinations (fa4-tile
  // refuses anything else).
  for (Block &block : func.getBody())
    if (auto ret = dyn_cast<func::ReturnOp>(block.getTerminator()))
      for (auto [position, value] : llvm::enumerate(ret.getOperands()))
        if (auto argument = dyn_cast<BlockArgument>(value);
            !argument || argument.getOwner() != &func.getBody().front())
          return makeError(what + ": result #" + std::to_string(position) +
                           " of @" + func.getName().str() +
                           " is not one of its arguments (a kernel's function "
                           "returns nothing or the destinations it was given; "
                           "the forward is refused alike)");
  if (Operation *opaque = firstNonDifferentiable(op.getScoreMod())) {
    std::string name = opaque->getName().getStringRef().str();
    return makeError(what + ": the score flows through '" + name +
                     "' in its score_mod, which has no derivative rule");
  }
  return op;
}

} // namespace

llvm::Expected<OwningOpRef<ModuleOp>>
fa4::backwardEntryOf(ModuleOp given, bool deterministic) {
  OwningOpRef<ModuleOp> forward;
  llvm::Expected<AttentionOp> found = forwardAsCompiled(
      given, forward, "no backward for this fa4.attention");
  if (!found)
    return found.takeError();
  AttentionOp op = *found;
  auto forwardFunc = op->getParentOfType<func::FuncOp>();

  OpBuilder b(given.getContext());
  Location loc = op.getLoc();
  Type q = op.getQ().getType(), k = op.getK().getType(),
       v = op.getV().getType(), o = op.getOut().getType();
  auto lse = op.getLse() ? cast<MemRefType>(op.getLse().getType())
                         : lseTypeFor(op);
  Type f32 = b.getF32Type();
  // Q, K, V, O, dO, LSE -> dQ, dK, dV, the workspace, the extras.
  SmallVector<Type> arguments = {q, k, v, o, o, lse, q, k, v,
                                 denseLike(lse, f32),
                                 denseLike(cast<MemRefType>(q), f32)};
  for (Value extra : op.getExtras())
    arguments.push_back(extra.getType());

  // The module keeps the forward's attributes (its fa4.target: a chip it
  // names is the backward's too).
  OwningOpRef<ModuleOp> module = ModuleOp::create(given->getLoc());
  (*module)->setAttrs(given->getAttrDictionary());
  b.setInsertionPointToEnd(module->getBody());
  auto func = func::FuncOp::create(b, forwardFunc.getLoc(),
                                   (forwardFunc.getName() + "_backward").str(),
                                   b.getFunctionType(arguments, {}));
  Block *body = func.addEntryBlock();
  b.setInsertionPointToEnd(body);
  ValueRange args = body->getArguments();
  auto backward = AttentionBackwardOp::create(
      b, loc, args[0], args[1], args[2], args[3], args[4], args[5], args[6],
      args[7], args[8], args[9], args[10], args.drop_front(11),
      op.getMaskAttr(), op.getWindowLeftAttr(), op.getWindowRightAttr(),
      op.getScaleAttr(), op.getSoftcapAttr(),
      deterministic ? b.getUnitAttr() : UnitAttr());
  // The regions as they are: the backward's take the forward's arguments
  // (the score or nothing, then batch, head, query, key and the extras).
  IRMapping mapping;
  op.getScoreMod().cloneInto(&backward.getScoreMod(), mapping);
  op.getMaskMod().cloneInto(&backward.getMaskMod(), mapping);
  func::ReturnOp::create(b, loc);
  return std::move(module);
}

llvm::Expected<OwningOpRef<ModuleOp>> fa4::withLseOf(ModuleOp given) {
  OwningOpRef<ModuleOp> copy;
  llvm::Expected<AttentionOp> found =
      forwardAsCompiled(given, copy, "no LSE added to this fa4.attention");
  if (!found)
    return found.takeError();
  AttentionOp attention = *found;
  if (attention.getLse())
    return std::move(copy);
  // The LSE becomes the argument after the last of Q's, K's, V's and O's
  // (after O in the variant flags' entries).
  auto func = attention->getParentOfType<func::FuncOp>();
  unsigned position = 0;
  for (Value operand : {attention.getQ(), attention.getK(), attention.getV(),
                        attention.getOut()})
    position = std::max(position,
                        cast<BlockArgument>(operand).getArgNumber() + 1);
  MemRefType lse = lseTypeFor(attention);
  if (failed(func.insertArgument(position, lse, DictionaryAttr(),
                                 attention.getLoc())))
    return makeError("the LSE argument could not be added to @" +
                     func.getName().str());
  attention.getLseMutable().assign(func.getArgument(position));
  return std::move(copy);
}
