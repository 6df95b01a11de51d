//===- ToolSession.h - what fa4's command-line tools share ------*- C++ -*-===//

#ifndef FA4_DRIVER_TOOLSESSION_H
#define FA4_DRIVER_TOOLSESSION_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <memory>

namespace mlir::fa4 {

/// A context with fa4's tile-level dialects loaded, whose diagnostics print as
/// file:line:col with the offending source line.
class ToolSession {
public:
  ToolSession();

  MLIRContext &getContext() { return context; }

  /// Parses `buffer` as a module, after refuseBeforeParsing (IrInput.h).
  /// Null when it is refused or does not parse, the diagnostics reported.
  /// The caller runs this and everything that walks the module on a stack
  /// sized for the text (runOnIrStack, runToolOnInput).
  OwningOpRef<ModuleOp> parse(std::unique_ptr<llvm::MemoryBuffer> buffer);
  /// Parses `text`, named `name` in diagnostics, the same way.
  OwningOpRef<ModuleOp> parseText(StringRef text, StringRef name);

private:
  MLIRContext context;
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics;
  /// Before `diagnostics`: one without a location (the IR fa4c writes from
  /// its flags has none) prints as "error: ..." instead of "<unknown>:0:".
  ScopedDiagnosticHandler unlocated;
};

} // namespace mlir::fa4

#endif // FA4_DRIVER_TOOLSESSION_H
