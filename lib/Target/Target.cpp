//===- Target.cpp - the chip table ----------------------------------------===//

#include "fa4/Target/Target.h"
#include "fa4/Target/Blackwell/ScheduleConfig.h"
#include "fa4/Target/Hopper/ScheduleConfig.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
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
  // Grouped by family, in the table's order: "sm_100a or sm_103a for
  // Blackwell, or sm_90a for Hopper" (a comma before the last "or" once a
  // group has an "or" of its own).
  llvm::SmallVector<std::string> groups;
  llvm::SmallVector<Family> families;
  bool plural = false;
  for (const ChipInfo &chip : kChips) {
    if (llvm::is_contained(families, chip.family))
      continue;
    families.push_back(chip.family);
    std::string chips = chipsOf(chip.family);
    plural = plural || chips.find(' ') != std::string::npos;
    groups.push_back(chips + " for " + chip.familyName.str());
  }
  std::string text;
  for (size_t i = 0; i < groups.size(); ++i) {
    if (i)
      text += i + 1 < groups.size() ? ", " : plural ? ", or " : " or ";
    text += groups[i];
  }
  return text;
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

llvm::StringRef mlir::fa4::target::exp2EmulationOptionHelp() {
  static const std::string help = [] {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << "Fraction of the softmax exponentials computed with a polynomial on "
          "the FMA units instead of MUFU's ex2.approx: 0 to 1, or -1 (the "
          "default) for the target's own (";
    bool first = true;
    for (const ChipInfo &chip : kChips) {
      auto share = [&](llvm::StringRef what, double fraction) {
        os << what << llvm::format("%g", fraction) << ", ";
        if (fraction == 0.0)
          os << "MUFU alone";
        else
          os << static_cast<int>(fraction * 128) << " of every 128";
      };
      os << (first ? "" : "; ") << chip.name << ": ";
      share("", chip.exp2EmulationFraction);
      if (chip.exp2EmulationFractionFp8 != chip.exp2EmulationFraction)
        share("; e4m3 ", chip.exp2EmulationFractionFp8);
      if (chip.exp2EmulationFractionPair != chip.exp2EmulationFraction)
        share("; dense CTA pairs without a score_mod ",
              chip.exp2EmulationFractionPair);
      if (chip.exp2EmulationFractionSmallHead != chip.exp2EmulationFraction)
        share("; 16-bit at head dim <= 64 ", chip.exp2EmulationFractionSmallHead);
      first = false;
    }
    os << "). The share of a thread's row is rounded down: of its block_n/2 "
          "pairs on sm_100a and sm_103a (the packed software exp2), of its "
          "block_n/4 scores on sm_90a (scalar); less than one of them "
          "emulates none";
    return text;
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

int64_t mlir::fa4::target::defaultBlockN(const ChipInfo &chip, int64_t headDim,
                                         int64_t valueHeadDim,
                                         int64_t elementBits) {
  if (chip.family == Family::Hopper)
    return hopper::ScheduleConfig::defaultBlockN(headDim, valueHeadDim,
                                                 elementBits / 8);
  return 128;
}

int64_t mlir::fa4::target::defaultQTilesPerTask(const ChipInfo &chip,
                                                int64_t headDim,
                                                int64_t valueHeadDim) {
  if (chip.family == Family::Blackwell)
    return std::min(chip.qTilesPerTask,
                    mlir::fa4::ScheduleConfig::qTilesFor(headDim, valueHeadDim));
  return chip.qTilesPerTask;
}

std::string mlir::fa4::target::wideQTileProblem(
    const ChipInfo &chip, int64_t elementBits, int64_t headDim,
    int64_t valueHeadDim, int64_t blockN, bool servingLayout) {
  if (chip.family != Family::Hopper)
    return "the 192-row tile is Hopper's (three consumer warpgroups); " +
           chip.name.str() + "'s schedule takes 128-row Q tiles";
  if (elementBits != 16)
    return "built for fp16 and bf16 inputs (not e4m3)";
  if (headDim > 64 || valueHeadDim > 64)
    return "built for Q/K and V head dims up to 64 (three consumers' O and "
           "S fit their registers there), got (" +
           std::to_string(headDim) + ", " + std::to_string(valueHeadDim) +
           ")";
  if (servingLayout)
    return "not built with split-KV, varlen, a paged cache, seqused_k or a "
           "block mask (their workspaces, row slots and mask entries count "
           "128-row tiles)";
  if (blockN > 128)
    return "K/V blocks of at most 128 keys (a consumer's S of more spills "
           "its 160 registers, past 192 keys ptxas cannot allocate it), got "
           "block-n " +
           std::to_string(blockN);
  return "";
}

std::string mlir::fa4::target::blockNProblem(const ChipInfo &chip,
                                             int64_t blockN,
                                             int64_t elementBits) {
  std::string text;
  llvm::raw_string_ostream os(text);
  if (chip.family == Family::Blackwell) {
    if (blockN != 128)
      os << "the " << chip.familyName
         << " schedule takes K/V blocks of 128 keys (S is 128 TMEM columns "
            "a Q tile), got "
         << blockN;
    return text;
  }
  if (elementBits == 8) {
    if (blockN < 32 || blockN > 256 || blockN % 32 != 0)
      os << "the " << chip.familyName
         << " schedule's FP8 kernels take K/V blocks of a multiple of 32 "
            "keys from 32 to 256 (8-bit wgmma's K step), got "
         << blockN;
    return text;
  }
  if (blockN < 16 || blockN > 256 || blockN % 16 != 0)
    os << "the " << chip.familyName
       << " schedule takes K/V blocks of a multiple of 16 keys from 16 to "
          "256 (wgmma's N, and P·V's 16-key steps), got "
       << blockN;
  return text;
}
