//===- NumberOption.h - a floating-point option that needs a value -*- C++ -*-===//
//
// LLVM's parser for a `double` option takes an empty value (`--softcap=`)
// as 0, where its integer parsers refuse one. The tools' floating-point
// options use this parser instead, which refuses it with the same message
// as any other value that is not a number.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_SUPPORT_NUMBEROPTION_H
#define FA4_SUPPORT_NUMBEROPTION_H

#include "llvm/ADT/Twine.h"
#include "llvm/Support/CommandLine.h"

namespace mlir::fa4 {

class NumberParser : public llvm::cl::parser<double> {
public:
  using llvm::cl::parser<double>::parser;

  bool parse(llvm::cl::Option &option, llvm::StringRef name,
             llvm::StringRef value, double &result) {
    if (value.trim().empty())
      return option.error("'" + value +
                          "' value invalid for floating point argument!");
    return llvm::cl::parser<double>::parse(option, name, value, result);
  }
};

/// `static NumberOption softcap("softcap", ...)`: cl::opt<double> whose
/// value may not be empty.
using NumberOption = llvm::cl::opt<double, false, NumberParser>;

} // namespace mlir::fa4

#endif // FA4_SUPPORT_NUMBEROPTION_H
