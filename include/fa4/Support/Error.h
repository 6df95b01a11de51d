//===- Error.h - the errors fa4's fallible calls return ---------*- C++ -*-===//
//
// A fallible fa4 call returns llvm::Error, or llvm::Expected<T> when it has a
// result; a failure already reported as an MLIR diagnostic comes back as
// mlir::FailureOr<T> (or a null op) instead. The message is what a user
// reads: a tool prints it after its name, the Python package raises it,
// fa4rt_last_error() returns it. So it is made once, where the failure is
// found, passed on whole (a caller may put context before it) and consumed
// with llvm::toString only at those boundaries.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_SUPPORT_ERROR_H
#define FA4_SUPPORT_ERROR_H

#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace mlir::fa4 {

/// A failure whose message is `message`, word for word.
inline llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// `error` with `prefix` put before its message (a file's name and ": ",
/// say); success stays success.
inline llvm::Error prefixError(const llvm::Twine &prefix, llvm::Error error) {
  if (!error)
    return llvm::Error::success();
  return makeError(prefix + llvm::toString(std::move(error)));
}

/// `value` in the fewest significant digits that read back as the same
/// double (1.0000001, 1e-46, 0.125): what a message quotes of a number the
/// user gave, and what a key holds of one (std::to_string's six decimals
/// make 0.1249999 and 0.125 one text).
inline std::string roundTripDecimal(double value) {
  char digits[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(digits, sizeof(digits), "%.*g", precision, value);
    if (std::strtod(digits, nullptr) == value)
      break;
  }
  return digits;
}

} // namespace mlir::fa4

#endif // FA4_SUPPORT_ERROR_H
