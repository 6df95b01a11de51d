//===- Toggle.h - an on/off/auto option --------------------------*- C++ -*-===//
//
// A schedule choice a user may force or leave to fa4 (the Hopper overlap
// and ping-pong): one enum for the pass options, the pipeline's and fa4c's,
// parsed by LLVM's option parser where the option is declared, so that a
// bad value is refused there with the accepted ones listed.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_SUPPORT_TOGGLE_H
#define FA4_SUPPORT_TOGGLE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"

namespace mlir::fa4 {

enum class Toggle { Auto, On, Off };

/// "auto", "on" or "off".
inline llvm::StringRef toggleName(Toggle toggle) {
  switch (toggle) {
  case Toggle::Auto:
    return "auto";
  case Toggle::On:
    return "on";
  case Toggle::Off:
    return "off";
  }
  return "auto";
}

/// The values of a Toggle option, for `cl::values`.
inline llvm::cl::ValuesClass toggleValues() {
  return llvm::cl::values(
      clEnumValN(Toggle::Auto, "auto", "fa4 decides (the default)"),
      clEnumValN(Toggle::On, "on", "forced on"),
      clEnumValN(Toggle::Off, "off", "forced off"));
}

} // namespace mlir::fa4

#endif // FA4_SUPPORT_TOGGLE_H
