//===- IrInput.h - IR text in, on a stack that fits it ----------*- C++ -*-===//
//
// MLIR 22's parser, printer, verifier and diagnostics recurse once per level
// of whatever they read: brackets, but also unary minus signs, `+` chains of
// an affine expression, and types, attributes and locations that aliases
// nest without a bracket in the text (`!t1 = tuple<!t0>`, `#l1 =
// loc(callsite(#l0 at ...))`). No text guard sees alias-built depth, so the
// tools parse IR, and run everything after that walks it, on a thread whose
// stack grows with the input: any depth is at most the number of tokens,
// which is at most the number of bytes. Two text guards stay in front of it
// because their error is clearer and their constructs cost the most stack per
// byte: brackets (kMaxIrNesting) and runs of unary minus signs.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_SUPPORT_IRINPUT_H
#define FA4_SUPPORT_IRINPUT_H

#include "mlir/Support/LLVM.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace mlir::fa4 {

/// The largest IR text a tool reads. fa4's own IR is kilobytes (level D of
/// the largest kernel is below 1 MiB); the bound keeps the stack that
/// irStackBytes sizes below the address space a thread can be given.
constexpr uint64_t kMaxIrBytes = uint64_t(16) << 20;
/// The longest run of unary minus signs accepted (`- - d0`). The affine parser
/// takes about 1.1 KiB of stack per sign, one byte of text: the largest per
/// byte of any construct, so it is bounded by count instead.
constexpr unsigned kMaxUnaryMinusRun = 16;

/// The stack a thread needs to parse, verify, transform and print `bytes` of
/// IR text that passed refuseBeforeParsing.
uint64_t irStackBytes(uint64_t bytes);

/// Where and why `text` is refused before the parser sees it.
struct IrRefusal {
  size_t offset;
  std::string message;
};
/// Refuses, before parsing, text larger than kMaxIrBytes, nesting deeper
/// than kMaxIrNesting, runs of more than kMaxUnaryMinusRun minus signs, and
/// dense arrays of `index` (MLIR 22's parser crashes on them) however they
/// are spelled: the text is read as tokens, as the parser reads it (comments
/// and whitespace skipped, strings opaque, type aliases resolved).
std::optional<IrRefusal> refuseBeforeParsing(StringRef text);

/// Prints `refusal` of `buffer`'s text on stderr as the parser prints an
/// error: `name:line:col: error: message` and the line.
void printRefusal(const llvm::MemoryBuffer &buffer, const IrRefusal &refusal);

/// Runs `body` on a thread with an irStackBytes(bytes) stack, waits for it
/// (fa4 builds without exceptions: nothing crosses the thread) and returns
/// what `body` returned; an error of its own when no such thread can be
/// started.
llvm::Error runOnIrStack(uint64_t bytes, function_ref<llvm::Error()> body);

/// A command-line tool's main after its options: reads `path` ('-' is stdin;
/// empty reads nothing and hands `body` null), then runs `body` with the
/// text on a thread whose stack fits it. A file that cannot be read, or is
/// larger than kMaxIrBytes, is reported on stderr and gives 2.
int runToolOnInput(StringRef tool, StringRef path,
                   function_ref<int(std::unique_ptr<llvm::MemoryBuffer>)> body);

} // namespace mlir::fa4

#endif // FA4_SUPPORT_IRINPUT_H
