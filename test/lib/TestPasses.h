//===- TestPasses.h - passes that exist only for fa4's tests ----*- C++ -*-===//
//
// Registered by fa4-opt and fa4c for testing; nothing in the product
// depends on them.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_TEST_LIB_TESTPASSES_H
#define FA4_TEST_LIB_TESTPASSES_H

#include "mlir/Pass/Pass.h"

#include <memory>
#include <string>

namespace mlir::fa4::test {

/// The protocol breakages `fa4-test-mutate-protocol` knows.
ArrayRef<StringRef> protocolMutations();

/// Breaks the level-C protocol of a schedule in the named way, so that the
/// tests can show fa4-sim catching each breakage.
std::unique_ptr<Pass> createMutateProtocolPass(const std::string &mutation);

void registerTestPasses();

} // namespace mlir::fa4::test

#endif // FA4_TEST_LIB_TESTPASSES_H
