//===- Bufferization.cpp - fa4.attention under one-shot-bufferize ---------===//

#include "fa4/Transforms/Bufferization.h"

#include "fa4/Dialect/FA4/IR/FA4Ops.h"

#include "mlir/Dialect/Arith/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Bufferization/IR/BufferizableOpInterface.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Bufferization/IR/DstBufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Bufferization/Transforms/FuncBufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Tensor/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/IR/DialectRegistry.h"

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
      FailureOr<Value> buffer = bufferization::getBuffer(rewriter, operand, options, state);
      if (failed(buffer))
        return failure();
      buffers.push_back(*buffer);
    }
    rewriter.setInsertionPoint(op);
    OperationState memrefForm(op->getLoc(), AttentionOp::getOperationName());
    memrefForm.addOperands(buffers);
    memrefForm.addAttributes(attention->getAttrs());
    memrefForm.propertiesAttr = attention->getPropertiesAsAttribute();
    rewriter.create(memrefForm);
    // The results are the destinations' buffers: O, then the LSE.
    bufferization::replaceOpWithBufferizedValues(
        rewriter, op, ArrayRef<Value>(buffers).drop_front(3));
    return success();
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
