//===- Target.cpp - the chip table ----------------------------------------===//

#include "fa4/Target/Target.h"

#include "llvm/Support/raw_ostream.h"

#include "llvm/ADT/STLExtras.h"

#include <cassert>

using namespace mlir::fa4::target;

namespace {
constexpr llvm::ArrayRef<ChipInfo> kChips = kChipTable;

std::string join(llvm::function_ref<bool(const ChipInfo &)> keep,
                 bool withFamily, const char *last = " or ") {
  std::string text;
  llvm::SmallVector<const ChipInfo *> kept;
  for (const ChipInfo &chip : kChips)
    if (keep(chip))
      kept.push_back(&chip);
  for (size_t i = 0; i < kept.size(); ++i) {
    if (i)
      text += i + 1 == kept.size() ? last : ", ";
    text += kept[i]->name.str();
    if (withFamily)
      text += " for " + kept[i]->familyName.str();
  }
  return text;
}
} // namespace

const ChipInfo *mlir::fa4::target::lookup(llvm::StringRef name) {
  for (const ChipInfo &row : kChips)
    if (row.name == name)
      return &row;
  return nullptr;
}

std::string mlir::fa4::target::chipList() {
  return join([](const ChipInfo &) { return true; }, /*withFamily=*/true);
}

std::string mlir::fa4::target::emulatedChips() {
  return join([](const ChipInfo &c) { return c.emulated; }, false, " and ");
}

std::string mlir::fa4::target::unknownChipMessage(llvm::StringRef name) {
  // The name as given, escaped (a control byte or a quote must not reach a
  // terminal or end the message) and cut at 64 bytes.
  constexpr size_t kShown = 64;
  std::string shown;
  llvm::raw_string_ostream os(shown);
  os.write_escaped(name.take_front(kShown));
  if (name.size() > kShown)
    os << "... (" << name.size() << " bytes)";
  return "unknown target '" + shown + "' (expected " + chipList() + ")";
}

llvm::StringRef mlir::fa4::target::targetOptionHelp() {
  static const std::string help = [] {
    std::string text = "Target chip: ";
    for (size_t i = 0; i < kChips.size(); ++i) {
      if (i)
        text += i + 1 == kChips.size() ? " or " : ", ";
      text += kChips[i].name.str() + " (" + kChips[i].familyName.str() + ", " +
              kChips[i].schedule.str() + ")";
    }
    return text;
  }();
  return help;
}

llvm::StringRef mlir::fa4::target::smCountOptionHelp() {
  static const std::string help = [] {
    std::string text = "SMs of the target, the persistent grid's size (default "
                       "0: the target's";
    for (const ChipInfo &chip : kChips)
      text += ", " + std::to_string(chip.smCount) + " for " + chip.name.str() +
              " (" + chip.product.str() + ")";
    return text + ")";
  }();
  return help;
}

llvm::StringRef mlir::fa4::target::familyName(Family family) {
  for (const ChipInfo &row : kChipTable)
    if (row.family == family)
      return row.familyName;
  return "unknown";
}

std::string mlir::fa4::target::chipsOf(Family family) {
  return join([&](const ChipInfo &c) { return c.family == family; }, false);
}

std::string mlir::fa4::target::chipsWithWgmma() {
  return join([](const ChipInfo &c) { return c.wgmma; }, false);
}

std::string mlir::fa4::target::chipsWithTcgen05() {
  return join([](const ChipInfo &c) { return c.tcgen05; }, false);
}
