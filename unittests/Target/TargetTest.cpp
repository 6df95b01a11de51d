//===- TargetTest.cpp - the chip table and #fa4.target --------------------===//

#include "fa4/Dialect/FA4/IR/FA4Dialect.h"
#include "fa4/Target/Target.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/AsmParser/AsmParser.h"

#include <gtest/gtest.h>

#include <set>

using namespace mlir;
using namespace mlir::fa4;

namespace {

TEST(ChipTable, EveryChipHasOneRowFoundByItsName) {
  std::set<std::string> names;
  for (const target::ChipInfo &row : target::chips()) {
    EXPECT_TRUE(names.insert(row.name.str()).second) << row.name.str();
    EXPECT_EQ(target::lookup(row.name), &row);
    EXPECT_EQ(&target::info(row.chip), &row);
    EXPECT_EQ(target::familyName(row.family), row.familyName);
    // Exactly one tensor-core family, and tensor memory with tcgen05 only.
    EXPECT_NE(row.tcgen05, row.wgmma) << row.name.str();
    EXPECT_EQ(row.tmemColumns > 0, row.tcgen05) << row.name.str();
    EXPECT_GT(row.smCount, 0);
    EXPECT_GT(row.smemBytesPerCta, 0);
    EXPECT_TRUE(row.qTilesPerTask == 1 || row.qTilesPerTask == 2);
  }
  EXPECT_EQ(&target::defaultChip(), &target::chips().front());
}

TEST(ChipTable, UnknownNamesAreRefusedWithTheList) {
  EXPECT_EQ(target::lookup("sm_80"), nullptr);
  EXPECT_EQ(target::lookup(""), nullptr);
  EXPECT_EQ(target::lookup("SM_100A"), nullptr);
  std::string message = target::unknownChipMessage("sm_80");
  for (const target::ChipInfo &row : target::chips())
    EXPECT_NE(message.find(row.name.str()), std::string::npos) << message;
  // The name is escaped (no control byte reaches a terminal) and cut.
  message = target::unknownChipMessage(llvm::StringRef("sm_90a\x01\0\n", 9));
  EXPECT_EQ(message.find('\x01'), std::string::npos);
  EXPECT_EQ(message.find('\n'), std::string::npos);
  EXPECT_NE(message.find("'sm_90a\\001\\000\\n'"), std::string::npos) << message;
  message = target::unknownChipMessage(std::string(1 << 20, 'x'));
  EXPECT_LT(message.size(), 200u);
  EXPECT_NE(message.find("(1048576 bytes)"), std::string::npos);
}

class TargetAttrTest : public ::testing::Test {
protected:
  TargetAttrTest() { context.loadDialect<FA4Dialect>(); }
  MLIRContext context;
};

TEST_F(TargetAttrTest, RoundTripsEveryChip) {
  for (const target::ChipInfo &row : target::chips()) {
    std::string text = "#fa4.target<" + row.name.str() + ">";
    Attribute attr = parseAttribute(text, &context);
    auto target = dyn_cast_or_null<TargetAttr>(attr);
    ASSERT_TRUE(target) << text;
    EXPECT_EQ(target.getChip(), row.chip);
    std::string printed;
    llvm::raw_string_ostream os(printed);
    attr.print(os);
    EXPECT_EQ(printed, text);
  }
}

TEST_F(TargetAttrTest, TheModuleNamesTheChipOfItsOps) {
  std::string diagnostics;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &d) {
    diagnostics += d.str();
    return success();
  });
  EXPECT_FALSE(parseAttribute("#fa4.target<sm_80>", &context));
  EXPECT_NE(diagnostics.find("unknown target 'sm_80'"), std::string::npos)
      << diagnostics;

  OwningOpRef<ModuleOp> module = ModuleOp::create(UnknownLoc::get(&context));
  EXPECT_EQ(getModuleTarget(*module), nullptr);
  EXPECT_EQ(&getTargetOrDefault(*module), &target::defaultChip());
  const target::ChipInfo &hopper = target::chips().back();
  (*module)->setAttr(kTargetAttrName, TargetAttr::get(&context, hopper.chip));
  EXPECT_EQ(getModuleTarget(*module), &hopper);
  // Another family's pass refuses the module; its own family's accepts it.
  for (const target::ChipInfo &row : target::chips()) {
    diagnostics.clear();
    bool same = row.family == hopper.family;
    EXPECT_EQ(succeeded(checkModuleFamily(*module, row.family, "a-pass")),
              same);
    if (!same) {
      EXPECT_NE(diagnostics.find("a-pass builds the"), std::string::npos)
          << diagnostics;
    }
  }
}

} // namespace
