//===- ToolSession.cpp - what fa4's command-line tools share --------------===//

#include "fa4/Tools/ToolSession.h"

#include "fa4/Pipeline/Pipeline.h"
#include "fa4/Support/InputLimits.h"

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
  StringRef text = file->getBuffer();
  unsigned buffer = sourceMgr.AddNewSourceBuffer(std::move(file), llvm::SMLoc());
  // A refusal before parsing is a diagnostic at its place in the text, so
  // that an in-process caller (compileEntry) collects it with the rest.
  auto refuse = [&](size_t offset, const Twine &message) {
    auto [line, column] = sourceMgr.getLineAndColumn(
        llvm::SMLoc::getFromPointer(text.data() + offset), buffer);
    StringRef name = sourceMgr.getMemoryBuffer(buffer)->getBufferIdentifier();
    emitError(FileLineColLoc::get(&context, name, line, column)) << message;
    return nullptr;
  };
  // MLIR 22's parser crashes on a dense array of index elements
  // (`array<index>`, `array<index: ...>`; an upstream bug listed in
  // docs/Robustness.md): refuse it before parsing.
  static const llvm::Regex indexArray("array[[:space:]]*<[[:space:]]*index");
  SmallVector<StringRef, 1> match;
  if (indexArray.match(text, &match))
    return refuse(match.front().data() - text.data(),
                  "dense arrays of `index` are not accepted: MLIR 22's parser "
                  "crashes on them (use i64)");
  // The parser recurses once per bracket: IR nested thousands deep would
  // overflow the stack (fa4c's and a Python thread's alike).
  std::string depthError;
  size_t offset = 0;
  if (!checkNestingDepth(text, kMaxIrNesting, NestingSyntax::Mlir, depthError,
                         &offset))
    return refuse(offset, "nesting deeper than " + Twine(kMaxIrNesting) +
                              " levels: refused before parsing (the parser "
                              "would overflow its stack)");
  return parseSourceFile<ModuleOp>(sourceMgr, &context);
}
