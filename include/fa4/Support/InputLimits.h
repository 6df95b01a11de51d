//===- InputLimits.h - bounds on what fa4 reads from outside ----*- C++ -*-===//
//
// Every reader of outside input shares these bounds: text nested deeper than
// a recursive-descent parser's stack allows (MLIR's parser and llvm::json
// both recurse once per bracket and die of a stack overflow far below the
// input sizes they accept), and files that are not regular files of a
// bounded size (a FIFO blocks a read forever, /dev/zero never ends). A
// refusal names the limit and where it was passed.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_SUPPORT_INPUTLIMITS_H
#define FA4_SUPPORT_INPUTLIMITS_H

#include "llvm/Support/Error.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mlir::fa4 {

/// Which brackets nest, and how strings and comments hide them.
enum class NestingSyntax {
  /// `[` `{`; strings in double quotes with backslash escapes.
  Json,
  /// `(` `[` `{` `<` (not the `>` of `->`); strings as in JSON, `//`
  /// comments to the end of the line.
  Mlir,
};

/// The deepest nesting a launch manifest needs is 3; the bound leaves room
/// for what a user adds and stays far from llvm::json's stack overflow.
constexpr unsigned kMaxJsonNesting = 64;
/// fa4's IR at every level nests below 40 brackets; MLIR's parser overflows
/// an 8 MiB stack at a few thousand.
constexpr unsigned kMaxIrNesting = 256;

/// Checks that no bracket of `text` opens nesting level `limit + 1`: an
/// error naming the line and column (1-based) where one does, with
/// `offset` (when given) set to that bracket's offset in `text`.
llvm::Error checkNestingDepth(std::string_view text, unsigned limit,
                              NestingSyntax syntax, size_t *offset = nullptr);

/// The largest manifest, and the largest cubin or PTX, the runtime reads.
constexpr uint64_t kMaxManifestBytes = uint64_t(4) << 20;
constexpr uint64_t kMaxKernelFileBytes = uint64_t(256) << 20;

/// The contents of `path`, read whole when it is a regular file (after
/// symbolic links) of at most `maxBytes`; opening does not block (a FIFO is
/// refused, not waited on). An error ("cannot read PATH: ...") otherwise;
/// `missing` (when given; an output beside the result, since a caller may
/// take an absent file as no file) says whether the file does not exist.
llvm::Expected<std::string> readRegularFile(const std::string &path,
                                            uint64_t maxBytes,
                                            bool *missing = nullptr);

/// The contents of `path` ('-' is standard input) as a stream: a regular
/// file, a pipe or a FIFO (opening one waits for its writer, as any tool
/// reading a pipe does), read in pieces and refused as soon as it passes
/// `maxBytes`, so that a device or a pipe that never ends (/dev/zero,
/// `yes`) is refused rather than read until memory runs out. The error says
/// "cannot open input file 'PATH': ..." or "PATH holds more than N bytes".
llvm::Expected<std::string> readBoundedStream(const std::string &path,
                                              uint64_t maxBytes);

} // namespace mlir::fa4

#endif // FA4_SUPPORT_INPUTLIMITS_H
