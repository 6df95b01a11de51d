//===- Bufferization.h - fa4.attention under one-shot-bufferize -*- C++ -*-===//
//
// fa4.attention on tensors is a destination-style op; this registers its
// BufferizableOpInterface, with which one-shot-bufferize turns it into the
// memref form the pipeline lowers.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_TRANSFORMS_BUFFERIZATION_H
#define FA4_TRANSFORMS_BUFFERIZATION_H

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace mlir::fa4 {

/// fa4.attention's BufferizableOpInterface, and those of the upstream
/// dialects an entry function on tensors uses (func, tensor, arith).
void registerBufferizableOpInterfaceExternalModels(DialectRegistry &registry);

} // namespace mlir::fa4

#endif // FA4_TRANSFORMS_BUFFERIZATION_H
