//===- ToolSession.cpp - what fa4's command-line tools share --------------===//

#include "fa4/Tools/ToolSession.h"
#include "fa4/Pipeline/Pipeline.h"

#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"

using namespace mlir;
using namespace mlir::fa4;

static DialectRegistry pipelineRegistry() {
  DialectRegistry registry;
  registerPipelineDialects(registry);
  return registry;
}

ToolSession::ToolSession()
    : context(pipelineRegistry()), diagnostics(sourceMgr, &context) {
  context.loadAllAvailableDialects();
  // A diagnostic names its cause; printing the whole function after it only
  // buries the message.
  context.printOpOnDiagnostic(false);
}

OwningOpRef<ModuleOp> ToolSession::parseFile(StringRef path,
                                             std::string &error) {
  error.clear();
  std::unique_ptr<llvm::MemoryBuffer> file = openInputFile(path, &error);
  if (!file)
    return nullptr;
  sourceMgr.AddNewSourceBuffer(std::move(file), llvm::SMLoc());
  return parseSourceFile<ModuleOp>(sourceMgr, &context);
}
