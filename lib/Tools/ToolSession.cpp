//===- ToolSession.cpp - what fa4's command-line tools share --------------===//

#include "fa4/Tools/ToolSession.h"

#include "fa4/Pipeline/Pipeline.h"

#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/Regex.h"

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
  return parseBuffer(std::move(file));
}

OwningOpRef<ModuleOp> ToolSession::parseText(StringRef text, StringRef name,
                                             std::string &error) {
  error.clear();
  return parseBuffer(llvm::MemoryBuffer::getMemBufferCopy(text, name));
}

OwningOpRef<ModuleOp>
ToolSession::parseBuffer(std::unique_ptr<llvm::MemoryBuffer> file) {
  // MLIR 22's parser crashes on a dense array of index elements
  // (`array<index>`, `array<index: ...>`; an upstream bug listed in
  // docs/Robustness.md): refuse it with a diagnostic before parsing.
  StringRef text = file->getBuffer();
  static const llvm::Regex indexArray("array[[:space:]]*<[[:space:]]*index");
  SmallVector<StringRef, 1> match;
  unsigned buffer = sourceMgr.AddNewSourceBuffer(std::move(file), llvm::SMLoc());
  if (indexArray.match(text, &match)) {
    llvm::SMLoc where = llvm::SMLoc::getFromPointer(match.front().data());
    sourceMgr.PrintMessage(where, llvm::SourceMgr::DK_Error,
                           "dense arrays of `index` are not accepted: MLIR 22's "
                           "parser crashes on them (use i64)");
    (void)buffer;
    return nullptr;
  }
  return parseSourceFile<ModuleOp>(sourceMgr, &context);
}
