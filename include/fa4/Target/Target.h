//===- Target.h - the chips fa4 compiles for, and their facts ---*- C++ -*-===//
//
// The one place a chip is named. Every chip fa4 targets is a row of one
// table (kChipTable, below): its name as ptxas and the PTX `.target`
// spell it, its family (which schedule and lowering it gets) and the facts
// the passes, the emulator and the runtime size things against. Elsewhere a
// chip is a `Chip` or a `ChipInfo`, found by name once, where a target is
// given (an option, a manifest, a PTX module), with an error that lists the
// table. Adding a chip is a row here plus its family's wing
// (docs/Targets.md).
//
// Plain C++ over LLVM Support: the C runtime (libfa4rt) links it too. The
// table is constant (a header) so that a wing's constants are its row's.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_TARGET_TARGET_H
#define FA4_TARGET_TARGET_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <string>

namespace mlir::fa4::target {

/// The chips fa4 compiles for.
enum class Chip { Sm100a, Sm103a, Sm90a };

/// A family shares one schedule (level C) and one lowering: a wing.
enum class Family {
  /// tcgen05 MMAs into tensor memory, FA4's warp-specialized schedule.
  Blackwell,
  /// wgmma into registers, the FA3-style warpgroup schedule.
  Hopper,
};

/// How far a chip's schedule takes fa4.attention_backward.
enum class BackwardLevel { Tile, Schedule, Kernels };

struct ChipInfo {
  Chip chip;
  /// As ptxas's -arch, the PTX `.target` and a manifest's "target" spell it.
  llvm::StringLiteral name;
  Family family;
  /// The family's name, and the schedule it gets, for messages and --help.
  llvm::StringLiteral familyName;
  llvm::StringLiteral schedule;
  /// The product whose SM count is the default persistent grid.
  llvm::StringLiteral product;
  /// CUDA's compute capability of the chip's GPUs (major, minor): how the
  /// torch op finds the target of a CUDA tensor.
  int computeMajor, computeMinor;
  int64_t smCount;
  /// Dynamic shared memory one CTA may use.
  int64_t smemBytesPerCta;
  /// 32-bit registers per SM, shared by every resident thread.
  int64_t registersPerSm;
  /// 32-bit columns of tensor memory per SM (0: none).
  int64_t tmemColumns;
  /// 128-row Q tiles one task (one CTA's unit of work) computes, at the
  /// head dims up to 192 (defaultQTilesPerTask says at which others).
  int64_t qTilesPerTask;
  /// MUFU `ex2` results per clock per SM.
  int64_t mufuExp2PerClock;
  /// The softmax's default share of exponentials computed by a polynomial
  /// on the FMA units beside MUFU (the exp2-emulation-fraction option's
  /// default; 0: MUFU alone). Blackwell's software exp2 is packed f32x2,
  /// Hopper's scalar.
  double exp2EmulationFraction;
  /// The same for FP8 (e4m3) kernels, whose MMAs take half the time of
  /// 16-bit ones while the softmax's exponentials stay as many.
  double exp2EmulationFractionFp8;
  /// The same for a 16-bit forward that runs as dense CTA pairs (2-CTA
  /// without a causal mask, a window, a mask_mod or a block mask: FA4's
  /// 2-CTA kernel, runsAsDensePairs): its tensor core no longer waits on
  /// shared memory, so MUFU is nearer the bound. A masked pair's softmax
  /// spills at this share and keeps exp2EmulationFraction, as does a pair
  /// with a score_mod (the relative-position and ALiBi examples without
  /// their masks spill 40 and 60 bytes at it, none at 16 of 128; their
  /// softmax is bound by its issue slots, not MUFU).
  double exp2EmulationFractionPair;
  /// The same for a 16-bit kernel whose Q/K head dim is at most 64: its
  /// QK^T and PV MMAs take half the tensor core's time of head dim 128's
  /// for as many exponentials, so MUFU, not the tensor core, bounds a K/V
  /// block (sm_90a hd64 bf16: 1056 MUFU cycles against 1024).
  double exp2EmulationFractionSmallHead;
  /// Which tensor-core instruction family the chip has.
  bool tcgen05;
  bool wgmma;
  /// Whether fa4-emu executes the chip's PTX.
  bool emulated;
  /// The chip MLIR's NVVM dialect and LLVM's NVPTX backend generate the
  /// code for, when they do not list this one for every instruction the
  /// schedule uses: the PTX is then retargeted (its `.target` directive
  /// names this chip) and ptxas checks it for this chip.
  llvm::StringLiteral codegenChip;
  /// How far the chip's schedule takes the backward: its tile program
  /// (level B), its level-C schedule (which fa4-sim runs), or kernels and a
  /// binary (level D).
  BackwardLevel backward;
};

/// The table: one row a chip, the first the default. Constant, so that a
/// wing's constants (fa4/Target/Blackwell/Chip.h) are its chip's row. SM counts
/// are the products' (B200 and B300: 148; H100 and H200 SXM: 132); every
/// chip lets a CTA use 227 KB of dynamic shared memory and has a
/// 64 K-register file per SM; Blackwell's tensor memory is 512 columns of
/// 128 lanes; its schedule computes two Q tiles a task (FA4's), Hopper's one
/// (FA3's). MUFU gives 16 ex2 per clock per SM on sm_100a and sm_90a and 32
/// on sm_103a (the B300's "attention acceleration": 10.7 against 5 tera-
/// exponentials a second), so FA4 computes a share of the exponentials with
/// a polynomial on sm_100a (16 of every 128) and none on sm_103a. FP8's
/// MMAs take half the tensor core's time, so on sm_100a its kernels move
/// more of them (40 of every 128): bench/sass_budget.py's model of an
/// unmasked hd128 tile on one SMSP is then 1406 issue slots and 1424 MUFU
/// cycles, against 1238 and 1808 at 16 of 128 (tensor core: 1024), its
/// best balance (docs/SassBudget.md, "FP8"); sm_103a's MUFU keeps up at 0.
/// A dense CTA pair's forward moves 24 of every 128, FA4's share for its
/// own 2-CTA kernel (its tuning table, measured on the B200): MUFU.EX2 105
/// a tile against 113, softmax 524 instructions against 496, no spill.
/// Hopper's default is MUFU alone but at head dims up to 64, where 16 of
/// every 128 (its scalar software exp2) ran 1-6 % faster at hd64 bf16 and
/// any share ran 1-8 % slower at hd128 bf16 and e4m3 (docs/Hopper.md, "The
/// software exp2 on Hopper": bench/h200/results/run57, on an H100).
inline constexpr ChipInfo kChipTable[] = {
    {Chip::Sm100a, "sm_100a", Family::Blackwell, "Blackwell",
     "the FA4 schedule: TMEM and tcgen05", "B200", /*compute=*/10, 0,
     /*smCount=*/148, /*smemBytesPerCta=*/227 * 1024,
     /*registersPerSm=*/64 * 1024, /*tmemColumns=*/512, /*qTilesPerTask=*/2,
     /*mufuExp2PerClock=*/16, /*exp2EmulationFraction=*/0.125,
     /*exp2EmulationFractionFp8=*/0.3125, /*exp2EmulationFractionPair=*/0.1875,
     /*exp2EmulationFractionSmallHead=*/0.125,
     /*tcgen05=*/true, /*wgmma=*/false, /*emulated=*/true,
     /*codegenChip=*/"sm_100a", /*backward=*/BackwardLevel::Kernels},
    {Chip::Sm103a, "sm_103a", Family::Blackwell, "Blackwell",
     "the FA4 schedule: TMEM and tcgen05", "B300", /*compute=*/10, 3,
     /*smCount=*/148, /*smemBytesPerCta=*/227 * 1024,
     /*registersPerSm=*/64 * 1024, /*tmemColumns=*/512, /*qTilesPerTask=*/2,
     /*mufuExp2PerClock=*/32, /*exp2EmulationFraction=*/0.0,
     /*exp2EmulationFractionFp8=*/0.0, /*exp2EmulationFractionPair=*/0.0,
     /*exp2EmulationFractionSmallHead=*/0.0,
     /*tcgen05=*/true, /*wgmma=*/false, /*emulated=*/true,
     // MLIR 22's NVVM dialect allows the tcgen05 ops on sm_100a and sm_101a
     // only (NVVMRequiresSMa<[100, 101]>), where the PTX ISA (8.8) has them
     // on sm_103a too, as a member of the sm_100f family: the code is
     // generated for sm_100a and retargeted.
     /*codegenChip=*/"sm_100a", /*backward=*/BackwardLevel::Kernels},
    {Chip::Sm90a, "sm_90a", Family::Hopper, "Hopper",
     "the FA3-style schedule: wgmma with register accumulators", "H100/H200",
     /*compute=*/9, 0,
     /*smCount=*/132, /*smemBytesPerCta=*/227 * 1024,
     /*registersPerSm=*/64 * 1024, /*tmemColumns=*/0, /*qTilesPerTask=*/1,
     /*mufuExp2PerClock=*/16, /*exp2EmulationFraction=*/0.0,
     /*exp2EmulationFractionFp8=*/0.0, /*exp2EmulationFractionPair=*/0.0,
     /*exp2EmulationFractionSmallHead=*/0.125,
     /*tcgen05=*/false, /*wgmma=*/true, /*emulated=*/true,
     /*codegenChip=*/"sm_90a", /*backward=*/BackwardLevel::Kernels},
};

/// Every chip, in the table's order.
inline llvm::ArrayRef<ChipInfo> chips() { return kChipTable; }
/// The chip compiled for when none is named.
constexpr const ChipInfo &defaultChip() { return kChipTable[0]; }
constexpr const ChipInfo &info(Chip chip) {
  for (const ChipInfo &row : kChipTable)
    if (row.chip == chip)
      return row;
  return kChipTable[0]; // unreachable: every Chip has a row
}
/// The chip named `name` ("sm_100a"), or null.
const ChipInfo *lookup(llvm::StringRef name);
/// "sm_100a for Blackwell or sm_90a for Hopper": the table, for errors.
std::string chipList();
/// "sm_100a and sm_90a": the chips fa4-emu executes.
std::string emulatedChips();
/// "unknown target 'NAME' (expected ...)".
std::string unknownChipMessage(llvm::StringRef name);
/// The `--target` and `--sm-count` options' help, from the table.
llvm::StringRef targetOptionHelp();
llvm::StringRef smCountOptionHelp();

/// The exp2-emulation-fraction option's default: the target chip's own
/// share (its row's exp2EmulationFraction; for FP8 kernels its
/// exp2EmulationFractionFp8, for a 16-bit forward run as dense CTA pairs
/// without a score_mod its exp2EmulationFractionPair, for another 16-bit
/// kernel of Q/K head dim at most 64 its exp2EmulationFractionSmallHead).
constexpr double kTargetExp2EmulationFraction = -1.0;
/// Whether the option takes `fraction`: [0, 1], or -1 (the chip's).
inline bool isExp2EmulationFraction(double fraction) {
  return fraction == kTargetExp2EmulationFraction ||
         (fraction >= 0.0 && fraction <= 1.0);
}
/// What a kernel's default share depends on.
struct Exp2Variant {
  /// Its inputs are e4m3.
  bool fp8 = false;
  /// It runs as dense CTA pairs without a score_mod.
  bool pair = false;
  /// Its Q/K head dim (0: not known, as 128).
  int64_t headDim = 0;
};
/// The share `option` asks for on `chip` for `variant`.
inline double exp2EmulationFraction(const ChipInfo &chip, double option,
                                    Exp2Variant variant = {}) {
  if (option != kTargetExp2EmulationFraction)
    return option;
  if (variant.fp8)
    return chip.exp2EmulationFractionFp8;
  if (variant.pair)
    return chip.exp2EmulationFractionPair;
  if (variant.headDim > 0 && variant.headDim <= 64)
    return chip.exp2EmulationFractionSmallHead;
  return chip.exp2EmulationFraction;
}
/// The option's help, with each chip's default from the table.
llvm::StringRef exp2EmulationOptionHelp();
/// "Blackwell", "Hopper": the family's name, from its first row.
llvm::StringRef familyName(Family family);
/// "sm_100a for Blackwell or sm_90a for Hopper" restricted to `family`'s
/// chips ("sm_90a").
std::string chipsOf(Family family);
/// The family's chips that have (`tcgen05`) or (`wgmma`) instructions, for
/// the emulator's "wgmma needs .target ..." ("sm_90a").
std::string chipsWithWgmma();
std::string chipsWithTcgen05();

/// Keys of a K/V block the chip's schedule takes by default at these head
/// dims and input width: 128, but fewer on Hopper where two K/V stages of
/// 128 keys do not fit (head dim 256: 80; hopper::ScheduleConfig).
int64_t defaultBlockN(const ChipInfo &chip, int64_t headDim,
                      int64_t valueHeadDim, int64_t elementBits);
/// 128-row Q tiles a task computes on the chip at these head dims: its
/// row's `qTilesPerTask`, but one on Blackwell past head dim 192 (two
/// tiles' S and O outgrow TMEM; blackwell::ScheduleConfig::qTilesFor).
int64_t defaultQTilesPerTask(const ChipInfo &chip, int64_t headDim,
                             int64_t valueHeadDim);
/// Why the chip's schedule cannot take blocks of `blockN` keys at these
/// head dims with `elementBits`-bit inputs, or empty when it can: Blackwell
/// takes 128 (S is 128 TMEM columns a Q tile), Hopper a multiple of 16 from
/// 16 to 256 (wgmma's N and P·V's 16-key steps), FP8 128.
std::string blockNProblem(const ChipInfo &chip, int64_t blockN,
                          int64_t elementBits);
/// Rows of Hopper's wide Q tile: three consumer warpgroups of 64.
constexpr int64_t kWideQTileRows = 192;
/// Why `chip` cannot run a kernel of these element bits, head dims and
/// K/V block in kWideQTileRows-row Q tiles, with a serving layout
/// (split-KV, varlen, a paged cache, seqused_k or a block mask) or
/// without; empty if it can. The tile pass (q-tile-rows) and Hopper's
/// roles pass (a tile program written by hand) ask it.
std::string wideQTileProblem(const ChipInfo &chip, int64_t elementBits,
                             int64_t headDim, int64_t valueHeadDim,
                             int64_t blockN, bool servingLayout);

} // namespace mlir::fa4::target

#endif // FA4_TARGET_TARGET_H
