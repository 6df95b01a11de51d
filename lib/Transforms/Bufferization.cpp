//===- Bufferization.cpp - fa4.attention under one-shot-bufferize ---------===//

#include "fa4/Transforms/Bufferization.h"

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Transforms/Passes.h"

#include "mlir/Dialect/Arith/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Bufferization/IR/BufferizableOpInterface.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Bufferization/IR/DstBufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Bufferization/Transforms/FuncBufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Tensor/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/BitVector.h"

namespace mlir::fa4 {
#define GEN_PASS_DEF_FA4PROMOTEDESTINATIONS
#include "fa4/Transforms/Passes.h.inc"
} // namespace mlir::fa4

using namespace mlir;
using namespace mlir::fa4;

namespace {
/// Q, K and V are read; O and the LSE are destinations the kernel overwrites
/// whole (never read), each the buffer of its result.
struct AttentionOpInterface
    : public bufferization::DstBufferizableOpInterfaceExternalModel<AttentionOpInterface,
                                                                    AttentionOp> {
  bool bufferizesToMemoryRead(Operation *op, OpOperand &operand,
                              const bufferization::AnalysisState &) const {
    return !cast<DestinationStyleOpInterface>(op).isDpsInit(&operand);
  }

  LogicalResult bufferize(Operation *op, RewriterBase &rewriter,
                          const bufferization::BufferizationOptions &options,
                          bufferization::BufferizationState &state) const {
    auto attention = cast<AttentionOp>(op);
    SmallVector<Value> buffers;
    for (Value operand : op->getOperands()) {
      // The extras are memrefs already.
      if (!isa<TensorType>(operand.getType())) {
        buffers.push_back(operand);
        continue;
      }
      FailureOr<Value> buffer = bufferization::getBuffer(rewriter, operand, options, state);
      if (failed(buffer))
        return failure();
      buffers.push_back(*buffer);
    }
    rewriter.setInsertionPoint(op);
    // `heads_first` tensors are [batch, heads, seq, head_dim]; the memref
    // form sees the same buffers as [batch, seq, heads, head_dim] through
    // transposed (strided) views, and states the layout in the strides.
    SmallVector<Value> operands(buffers);
    if (attention.getHeadsFirst()) {
      AffineMap swap = AffineMap::getPermutationMap(
          ArrayRef<unsigned>{0, 2, 1, 3}, op->getContext());
      for (Value &operand : MutableArrayRef<Value>(operands).take_front(4))
        operand = memref::TransposeOp::create(rewriter, op->getLoc(), operand,
                                              AffineMapAttr::get(swap));
    }
    OperationState memrefForm(op->getLoc(), AttentionOp::getOperationName());
    memrefForm.addOperands(operands);
    memrefForm.propertiesAttr = attention->getPropertiesAsAttribute();
    memrefForm.addAttributes(attention->getAttrs());
    for (Region &region : op->getRegions())
      memrefForm.addRegion()->takeBody(region);
    Operation *created = rewriter.create(memrefForm);
    cast<AttentionOp>(created).setHeadsFirst(false);
    // The results are the destinations' buffers: O, then the LSE.
    bufferization::replaceOpWithBufferizedValues(
        rewriter, op,
        ArrayRef<Value>(buffers).slice(3, attention.getLse() ? 2 : 1));
    return success();
  }
};
} // namespace

namespace {
struct PromoteDestinationsPass
    : public fa4::impl::FA4PromoteDestinationsBase<PromoteDestinationsPass> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    // A function something calls keeps its signature.
    if (auto module = func->getParentOfType<ModuleOp>())
      if (!SymbolTable::symbolKnownUseEmpty(func, module))
        return;
    SmallVector<AttentionOp> attentions;
    func.walk([&](AttentionOp op) { attentions.push_back(op); });
    for (AttentionOp op : attentions) {
      if (op->getNumResults())
        continue; // not bufferized: fa4-tile says so
      for (OpOperand &destination : op.getDpsInitsMutable()) {
        memref::TransposeOp view =
            destination.get().getDefiningOp<memref::TransposeOp>();
        Value buffer = view && view->hasOneUse() ? view.getIn() : destination.get();
        auto alloc = buffer.getDefiningOp<memref::AllocOp>();
        if (!alloc || alloc->getBlock() != &func.getBody().front())
          continue;
        Operation *user = view && buffer == view.getIn() ? view.getOperation()
                                                         : op.getOperation();
        // O returned as it is, or (a raised collapsed attention) as a
        // collapse_shape view that only the return reads.
        auto returnedView = [&](Operation *owner) {
          auto collapse = dyn_cast<memref::CollapseShapeOp>(owner);
          return collapse && !view &&
                 llvm::all_of(collapse->getUsers(), [](Operation *reader) {
                   return isa<func::ReturnOp>(reader);
                 });
        };
        bool onlyHandedOver = llvm::all_of(alloc->getUses(), [&](OpOperand &use) {
          return use.getOwner() == user || isa<func::ReturnOp>(use.getOwner()) ||
                 returnedView(use.getOwner());
        });
        if (!onlyHandedOver)
          continue;
        promote(func, alloc, user == op.getOperation() ? nullptr : view);
      }
      // (After the destinations, whose sizes may have read the inputs.) A
      // `heads_first` operand reaches the op as a transposed view of its
      // buffer: the view becomes the parameter, whose strides then carry
      // the layout to the tensor map.
      for (OpOperand &operand : op->getOpOperands().take_front(4)) {
        // A `heads_first` operand: a transposed view of its buffer.
        if (auto view = operand.get().getDefiningOp<memref::TransposeOp>())
          promoteViewedArgument<memref::TransposeOp>(
              func, op, view, view.getIn(), [&](memref::TransposeOp other) {
                return other.getPermutation() == view.getPermutation();
              });
        // The raise's collapsed [batch·heads, seq, head_dim] input, viewed
        // as [batch·heads, seq, 1, head_dim]; the views' sizes (dynamic
        // shapes) may read the dimensions before the split one, which mean
        // the same in either type.
        if (auto view = operand.get().getDefiningOp<memref::ExpandShapeOp>())
          promoteViewedArgument<memref::ExpandShapeOp>(
              func, op, view, view.getSrc(),
              [&](memref::ExpandShapeOp other) {
                return other.getType() == view.getType();
              },
              [&](Operation *user) {
                auto dim = dyn_cast<memref::DimOp>(user);
                std::optional<int64_t> index =
                    dim ? dim.getConstantIndex() : std::nullopt;
                return index && *index < view.getSrcType().getRank() - 1;
              });
      }
    }
  }

  /// Where `view` of an argument `source` is what `op` reads, and every
  /// use of the argument is such a view (`sameView`) that only `op` reads
  /// (K and V one tensor, say), or a use `alsoAllowed` keeps valid in the
  /// view's type: the argument takes the view's type (the same memory: its
  /// strides carry the layout to the tensor map) and the views go.
  template <typename ViewOp>
  void promoteViewedArgument(
      func::FuncOp func, AttentionOp op, ViewOp view, Value source,
      function_ref<bool(ViewOp)> sameView,
      function_ref<bool(Operation *)> alsoAllowed = nullptr) {
    auto argument = dyn_cast<BlockArgument>(source);
    if (!argument || argument.getOwner() != &func.getBody().front())
      return;
    SmallVector<ViewOp> views;
    bool onlyViews = llvm::all_of(argument.getUses(), [&](OpOperand &use) {
      if (alsoAllowed && alsoAllowed(use.getOwner()))
        return true;
      auto other = dyn_cast<ViewOp>(use.getOwner());
      if (!other || !sameView(other) ||
          !llvm::all_of(other->getUsers(),
                        [&](Operation *user) { return user == op.getOperation(); }))
        return false;
      views.push_back(other);
      return true;
    });
    if (!onlyViews)
      return;
    argument.setType(view.getType());
    for (ViewOp other : views) {
      other.getResult().replaceAllUsesWith(argument);
      other.erase();
    }
    SmallVector<Type> inputs(func.getArgumentTypes());
    inputs[argument.getArgNumber()] = argument.getType();
    func.setType(FunctionType::get(func.getContext(), inputs,
                                   func.getResultTypes()));
  }

  /// `alloc` becomes a new last argument of `func` and leaves its results;
  /// with a `view` of it (the transposed O of a `heads_first` op), the view
  /// becomes the argument instead.
  void promote(func::FuncOp func, memref::AllocOp alloc, memref::TransposeOp view) {
    unsigned index = func.getNumArguments();
    Type type = view ? view.getType() : alloc.getType();
    if (failed(func.insertArgument(index, type, {}, alloc.getLoc())))
      return signalPassFailure();
    Value argument = func.getArgument(index);
    llvm::BitVector returned(func.getNumResults());
    // Returned as it is, or through a collapse_shape view only the return
    // reads (the collapsed form of a raised attention).
    SmallVector<Operation *> returnedViews;
    for (Operation *user : alloc->getUsers())
      if (isa<memref::CollapseShapeOp>(user))
        returnedViews.push_back(user);
    func.walk([&](func::ReturnOp ret) {
      for (OpOperand &operand : ret->getOpOperands())
        if (operand.get() == alloc.getResult() ||
            llvm::is_contained(returnedViews, operand.get().getDefiningOp()))
          returned.set(operand.getOperandNumber());
    });
    func.walk([&](func::ReturnOp ret) { ret->eraseOperands(returned); });
    for (Operation *returnedView : returnedViews)
      returnedView->erase();
    if (failed(func.eraseResults(returned)))
      return signalPassFailure();
    if (view) {
      view.getResult().replaceAllUsesWith(argument);
      view.erase();
    }
    SmallVector<Value> sizes(alloc.getOperands());
    if (!view)
      alloc.getResult().replaceAllUsesWith(argument);
    alloc.erase();
    // The sizes the allocation took (memref.dim of the inputs, constants)
    // are dead now: not kernel code.
    SmallVector<Operation *> maybeDead;
    for (Value size : sizes)
      if (Operation *def = size.getDefiningOp())
        maybeDead.push_back(def);
    while (!maybeDead.empty()) {
      Operation *op = maybeDead.pop_back_val();
      if (!op->use_empty() || !isMemoryEffectFree(op) || op->getNumRegions())
        continue;
      for (Value operand : op->getOperands())
        if (Operation *def = operand.getDefiningOp())
          maybeDead.push_back(def);
      op->erase();
    }
  }
};
} // namespace

void mlir::fa4::registerBufferizableOpInterfaceExternalModels(
    DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *context, FA4Dialect *) {
    AttentionOp::attachInterface<AttentionOpInterface>(*context);
  });
  bufferization::func_ext::registerBufferizableOpInterfaceExternalModels(registry);
  tensor::registerBufferizableOpInterfaceExternalModels(registry);
  arith::registerBufferizableOpInterfaceExternalModels(registry);
}
