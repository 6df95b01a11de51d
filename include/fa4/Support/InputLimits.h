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

/// Checks that no bracket of `text` opens nesting level `limit + 1`; false
/// with `error` naming the line and column (1-based) where it does, and
/// `offset` (when given) that bracket's offset in `text`.
bool checkNestingDepth(std::string_view text, unsigned limit,
                       NestingSyntax syntax, std::string &error,
                       size_t *offset = nullptr);

/// The largest manifest, and the largest cubin or PTX, the runtime reads.
constexpr uint64_t kMaxManifestBytes = uint64_t(4) << 20;
constexpr uint64_t kMaxKernelFileBytes = uint64_t(256) << 20;

/// Reads `path` whole when it is a regular file (after symbolic links) of
/// at most `maxBytes`; opening does not block (a FIFO is refused, not
/// waited on). False with `error` ("cannot read PATH: ...") otherwise;
/// `missing` (when given) says whether the file does not exist.
bool readRegularFile(const std::string &path, uint64_t maxBytes,
                     std::string &contents, std::string &error,
                     bool *missing = nullptr);

} // namespace mlir::fa4

#endif // FA4_SUPPORT_INPUTLIMITS_H
