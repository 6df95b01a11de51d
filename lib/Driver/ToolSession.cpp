//===- ToolSession.cpp - what fa4's command-line tools share --------------===//

#include "fa4/Driver/ToolSession.h"

#include "fa4/Pipeline/Pipeline.h"
#include "fa4/Support/IrInput.h"

#include "mlir/Parser/Parser.h"

using namespace mlir;
using namespace mlir::fa4;

static DialectRegistry pipelineRegistry() {
  DialectRegistry registry;
  registerPipelineDialects(registry);
  return registry;
}

ToolSession::ToolSession()
    : context(pipelineRegistry()), diagnostics(sourceMgr, &context),
      unlocated(&context, [](Diagnostic &diagnostic) -> LogicalResult {
        if (!isa<UnknownLoc>(diagnostic.getLocation()))
          return failure(); // the source manager's: file:line:col
        llvm::raw_ostream &os = llvm::errs();
        os << (diagnostic.getSeverity() == DiagnosticSeverity::Error ? "error: "
               : diagnostic.getSeverity() == DiagnosticSeverity::Warning
                   ? "warning: "
                   : diagnostic.getSeverity() == DiagnosticSeverity::Note
                         ? "note: "
                         : "remark: ")
           << diagnostic << "\n";
        for (Diagnostic &note : diagnostic.getNotes())
          os << "note: " << note << "\n";
        return success();
      }) {
  context.loadAllAvailableDialects();
  // A diagnostic names its cause; printing the whole function after it only
  // buries the message.
  context.printOpOnDiagnostic(false);
  // The IR is walked on one thread whose stack is sized to the input
  // (fa4/Support/IrInput.h); a pass run on the context's thread pool would
  // walk it on a worker's default stack instead. fa4's modules hold one
  // kernel, so the pool bought nothing.
  context.disableMultithreading();
}

OwningOpRef<ModuleOp>
ToolSession::parse(std::unique_ptr<llvm::MemoryBuffer> file) {
  StringRef text = file->getBuffer();
  unsigned buffer = sourceMgr.AddNewSourceBuffer(std::move(file), llvm::SMLoc());
  // A refusal before parsing is a diagnostic at its place in the text, so
  // that an in-process caller (compileEntry) collects it with the rest.
  if (std::optional<IrRefusal> refusal = refuseBeforeParsing(text)) {
    auto [line, column] = sourceMgr.getLineAndColumn(
        llvm::SMLoc::getFromPointer(text.data() + refusal->offset), buffer);
    StringRef name = sourceMgr.getMemoryBuffer(buffer)->getBufferIdentifier();
    emitError(FileLineColLoc::get(&context, name, line, column))
        << refusal->message;
    return nullptr;
  }
  return parseSourceFile<ModuleOp>(sourceMgr, &context);
}

OwningOpRef<ModuleOp> ToolSession::parseText(StringRef text, StringRef name) {
  return parse(llvm::MemoryBuffer::getMemBufferCopy(text, name));
}
