//===- ToolSession.h - what fa4's command-line tools share ------*- C++ -*-===//

#ifndef FA4_TOOLS_TOOLSESSION_H
#define FA4_TOOLS_TOOLSESSION_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/SourceMgr.h"

#include <string>

namespace mlir::fa4 {

/// A context with fa4's tile-level dialects loaded, whose diagnostics print as
/// file:line:col with the offending source line.
class ToolSession {
public:
  ToolSession();

  MLIRContext &getContext() { return context; }

  /// Parses `path` ('-' reads stdin). Returns null with `error` set when the
  /// file cannot be opened, and null with `error` empty when it does not
  /// parse (the parser has already reported where).
  OwningOpRef<ModuleOp> parseFile(StringRef path, std::string &error);
  /// Parses `text` (named `name` in diagnostics) the same way.
  OwningOpRef<ModuleOp> parseText(StringRef text, StringRef name,
                                  std::string &error);

private:
  OwningOpRef<ModuleOp> parseBuffer(std::unique_ptr<llvm::MemoryBuffer> buffer);
  MLIRContext context;
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics;
};

} // namespace mlir::fa4

#endif // FA4_TOOLS_TOOLSESSION_H
