//===- Succeeds.h - fa4's errors in GoogleTest assertions -------*- C++ -*-===//
//
// A fallible fa4 call returns llvm::Error or llvm::Expected<T>, which must
// be checked and consumed; `succeeds` does both and keeps the message for
// the assertion to show or search:
//
//   EXPECT_TRUE(succeeds(checkShapes(m, shapes), message)) << message;
//   EXPECT_FALSE(succeeds(parseManifest(json), m, message));
//   EXPECT_NE(message.find("\"kernel\""), std::string::npos) << message;
//
//===----------------------------------------------------------------------===//

#ifndef FA4_UNITTESTS_SUCCEEDS_H
#define FA4_UNITTESTS_SUCCEEDS_H

#include "llvm/Support/Error.h"

#include <string>

namespace fa4test {

/// Whether `result` is a success; otherwise false with `message` set to
/// what the error says.
inline bool succeeds(llvm::Error result, std::string &message) {
  if (!result)
    return true;
  message = llvm::toString(std::move(result));
  return false;
}

/// The same for a call with a result, moved into `value` on success.
template <typename T, typename U>
bool succeeds(llvm::Expected<T> result, U &value, std::string &message) {
  if (!result) {
    message = llvm::toString(result.takeError());
    return false;
  }
  value = std::move(*result);
  return true;
}

} // namespace fa4test

#endif // FA4_UNITTESTS_SUCCEEDS_H
