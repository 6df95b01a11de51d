//===- Program.h - parsed PTX, ready to execute -----------------*- C++ -*-===//
//
// The parser's output and the machine's input: every instruction decoded once
// into an opcode, its types and modifiers and resolved operands (register
// slots, immediates, symbol addresses, branch targets), so that executing one
// is a switch and a few loads.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_LIB_EMU_PROGRAM_H
#define FA4_LIB_EMU_PROGRAM_H

#include "fa4/Emu/Emulator.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir::fa4::emu {

/// Where the emulator places the state spaces. Dynamic shared memory starts
/// 1 KB into the CTA's shared window, as on hardware that reserves the first
/// kilobyte, so that a kernel confusing offsets with addresses is caught; the
/// window is sm_100a's 228 KB.
constexpr uint32_t kSharedBase = 1024;
constexpr uint32_t kSharedWindow = 228 * 1024 + kSharedBase;
/// Shared addresses carry the CTA's rank in a cluster above bit 24: CTA r's
/// window is [r << 24, (r << 24) + kSharedWindow), what its own shared::cta
/// addresses (its variables, cvta) and everyone's shared::cluster addresses
/// of it (mapa) are. The PTX ISA leaves the encoding open; CUTLASS's 2-SM
/// TMA relies on this one (it clears bit 24 of its own mbarrier's address
/// to name the even CTA's).
constexpr uint32_t kClusterRankShift = 24;
constexpr uint32_t kClusterStride = 1u << kClusterRankShift;
static_assert(kSharedWindow <= kClusterStride, "a CTA's window fits its stride");
/// The most CTAs a cluster may have (16, with the non-portable size).
constexpr uint32_t kMaxClusterSize = 16;
/// Generic addresses of the param and shared windows (cvta).
constexpr uint64_t kGenericParam = 0x7f0000000000ull;
constexpr uint64_t kGenericShared = 0x7e0000000000ull;
constexpr uint64_t kGlobalBegin = 0x100000000ull;
/// What registers, shared memory and tensor memory hold before anything
/// writes them: all ones, a NaN in f32, f16 and bf16.
constexpr uint64_t kPoison = ~0ull;

enum class Op : uint8_t {
  Mov, Add, Sub, Mul, Mad, Fma, Div, Rem, Min, Max, Neg, Abs, CopySign,
  And, Or, Xor, Not, Shl, Shr, Selp, Setp, Testp, Cvt, Cvta, Bfe, Bfi, Prmt,
  Popc, Clz,
  Ex2, Lg2, Rcp, Sqrt, Rsqrt,
  Ld, St, Atom, Red, Bra, Ret, Nop,
  MbarInit, MbarArrive, MbarExpectTx, MbarTryWait, MbarInval,
  TmaLoad, TmaStore, BulkCommit, BulkWait, FenceProxyAsync, FenceMbarrierInit,
  FenceAcqRel,
  TcAlloc, TcDealloc, TcRelinquish, TcMma, TcCommit, TcLd, TcSt, TcWaitLd,
  TcWaitSt, TcFenceBefore, TcFenceAfter,
  Elect, Vote, BarSync, BarArrive, BarWarpSync, SetMaxNReg, Shfl, StMatrix,
  WgFence, WgMma, WgCommit, WgWait,
  // Clusters: mapa, barrier.cluster.arrive / .wait.
  Mapa, GetCtaRank, ClusterArrive, ClusterWait,
};

/// E4M3 and E5M2 (the 8-bit floats, fa4/Support/Float8.h) and their packed
/// pairs appear only where the PTX ISA names them: wgmma's and cvt's types.
enum class Ty : uint8_t {
  None, B8, U8, S8, B16, U16, S16, F16, BF16, B32, U32, S32, F32,
  B64, U64, S64, F64, F16x2, BF16x2, F32x2, Pred,
  E4M3, E5M2, E4M3x2, E5M2x2,
};

inline unsigned bitsOf(Ty t) {
  switch (t) {
  case Ty::B8: case Ty::U8: case Ty::S8: case Ty::E4M3: case Ty::E5M2: return 8;
  case Ty::B16: case Ty::U16: case Ty::S16: case Ty::F16: case Ty::BF16:
  case Ty::E4M3x2: case Ty::E5M2x2: return 16;
  case Ty::B32: case Ty::U32: case Ty::S32: case Ty::F32: case Ty::F16x2:
  case Ty::BF16x2: return 32;
  case Ty::B64: case Ty::U64: case Ty::S64: case Ty::F64: case Ty::F32x2: return 64;
  case Ty::Pred: return 1;
  default: return 0;
  }
}
inline bool isSigned(Ty t) {
  return t == Ty::S8 || t == Ty::S16 || t == Ty::S32 || t == Ty::S64;
}
inline bool isFloat(Ty t) {
  return t == Ty::F16 || t == Ty::BF16 || t == Ty::F32 || t == Ty::F64 ||
         t == Ty::F16x2 || t == Ty::BF16x2 || t == Ty::F32x2;
}

enum class Space : uint8_t { Generic, Shared, Global, Param, Local, Const };
enum class Round : uint8_t { None, Rn, Rz, Rm, Rp, Rni, Rzi, Rmi, Rpi };
enum class Cmp : uint8_t {
  Eq, Ne, Lt, Le, Gt, Ge, Lo, Ls, Hi, Hs,
  Equ, Neu, Ltu, Leu, Gtu, Geu, Num, Nan,
};
enum class BoolOp : uint8_t { None, And, Or, Xor };
/// tcgen05.mma's .kind: which instruction-descriptor table applies and how
/// wide the operands' elements are (16 bits, K = 16; 8 bits, K = 32).
enum class MmaKind : uint8_t { F16, F8F6F4 };

/// Instruction modifiers (bit flags).
enum Flag : uint64_t {
  kLo = 1u << 0, kHi = 1u << 1, kWide = 1u << 2, kFtz = 1u << 3,
  kSat = 1u << 4, kRelu = 1u << 5, kNaN = 1u << 6, kApprox = 1u << 7,
  kInc = 1u << 8,          // setmaxnreg.inc
  kParity = 1u << 9,       // mbarrier.*_wait.parity
  kTest = 1u << 10,        // mbarrier.test_wait: never blocks
  kExpectTx = 1u << 11,    // mbarrier.arrive.expect_tx
  kArrive = 1u << 12,      // mbarrier.arrive*
  kRead = 1u << 13,        // cp.async.bulk.wait_group.read
  kTmemA = 1u << 14,       // tcgen05.mma with A in tensor memory
  kPack16 = 1u << 15,      // tcgen05.ld .pack::16b / st .unpack::16b
  kVoteAny = 1u << 16, kVoteAll = 1u << 17, kVoteUni = 1u << 18,
  kVoteBallot = 1u << 19,
  kShflUp = 1u << 20, kShflDown = 1u << 21, kShflBfly = 1u << 22,
  kShflIdx = 1u << 23,
  kToSpace = 1u << 24,     // cvta.to.<space>
  kCacheHint = 1u << 25,   // a trailing L2 cache-policy operand
  kUniform = 1u << 26,     // bra.uni: the branch is uniform across the warp
  // wgmma.mma_async: A from registers (the RS form), the immediate
  // transposes (1: MN-major) and scales (-1: negate) of A and B.
  kRegA = 1u << 27, kTransA = 1u << 28, kTransB = 1u << 29,
  kNegA = 1u << 30, kNegB = 1u << 31,
  // Clusters: an address of the shared::cluster window (ld, st, mbarrier
  // arrives, TMA's and tcgen05.commit's mbarriers); a TMA load or
  // tcgen05.commit to the CTAs of a mask (.multicast::cluster).
  kClusterSpace = 1ull << 32, kMulticast = 1ull << 33,
  kRelaxed = 1ull << 34,   // barrier.cluster.arrive.relaxed: no release
  kAlignedCluster = 1ull << 35, // barrier.cluster...aligned: the whole warp
  // .cta_group::2: tcgen05's alloc, dealloc, relinquish, mma and commit of a
  // CTA pair; a TMA load whose mbarrier may be in the peer CTA.
  kCtaGroup2 = 1ull << 36,
};

/// Special registers.
enum class Special : uint8_t {
  TidX, TidY, TidZ, NtidX, NtidY, NtidZ, CtaidX, CtaidY, CtaidZ,
  NctaidX, NctaidY, NctaidZ, LaneId, WarpId, NWarpId, SmId, NSmId,
  DynamicSmemSize, Clock, Clock64, GlobalTimer,
  // Clusters (PTX ISA, special registers).
  ClusterCtaRank, ClusterNCtaRank, ClusterCtaidX, ClusterCtaidY,
  ClusterCtaidZ, ClusterNCtaidX, ClusterNCtaidY, ClusterNCtaidZ,
  ClusteridX, ClusteridY, ClusteridZ, NClusteridX, NClusteridY,
  NClusteridZ, IsExplicitCluster,
};

constexpr uint32_t kNoReg = ~0u;
constexpr uint32_t kReconvergeAtExit = ~0u - 1;

struct Operand {
  enum class Kind : uint8_t { None, Reg, Imm, Special, Mem, Vec, Label, Sink };
  Kind kind = Kind::None;
  Special special = Special::TidX;
  /// Reg: the slot; Mem: the base register's slot or kNoReg. For a pair
  /// `a|b`, `reg2` is b's slot.
  uint32_t reg = kNoReg;
  uint32_t reg2 = kNoReg;
  /// Imm: the value's bits; Mem: the constant part of the address (symbol
  /// address plus offset).
  int64_t imm = 0;
  /// Vec: elements in Program::vectors.
  uint32_t vecBegin = 0, vecCount = 0;
  /// Imm or Mem naming a shared variable: its address is in the executing
  /// CTA's window, which the machine adds (its rank << 24).
  bool sharedSymbol = false;
};

struct Inst {
  Op op = Op::Nop;
  Ty type = Ty::None;
  /// cvt's source type; ld/st/tcgen05 element counts use `vec`. F32 on a
  /// TMA store: cp.reduce...add, which adds f32 elements into the tensor.
  /// wgmma.mma_async: A's element type.
  Ty type2 = Ty::None;
  /// wgmma.mma_async: B's element type (FP8 wgmma may mix e4m3 and e5m2).
  Ty type3 = Ty::None;
  MmaKind kind = MmaKind::F16;
  Round round = Round::None;
  Cmp cmp = Cmp::Eq;
  BoolOp boolOp = BoolOp::None;
  Space space = Space::Generic;
  uint8_t vec = 1;
  uint8_t numOperands = 0;
  /// TMA rank; tcgen05.ld/st repeat count.
  uint8_t count = 0;
  /// wgmma.mma_async's N (M = 64; K = 16 for 16-bit inputs, 32 for 8-bit).
  uint16_t shapeN = 0;
  bool guardNegated = false;
  uint32_t guard = kNoReg;
  uint64_t flags = 0;
  /// Bra: the instruction index jumped to, and where lanes that diverge at
  /// this branch meet again: the first instruction of the branch's
  /// immediate post-dominator (kReconvergeAtExit when only the exit is).
  uint32_t target = 0;
  uint32_t reconverge = 0;
  /// Index into Program::sources.
  uint32_t source = 0;
  Operand operands[6];
};

struct Kernel {
  std::string name;
  std::vector<KernelParam> params;
  std::vector<uint32_t> paramOffsets;
  uint32_t paramBytes = 0;
  uint32_t begin = 0, end = 0;
  uint32_t maxnreg = 0;
  uint32_t reqntid = 0;
  uint32_t maxntid = 0;
  /// .reqnctapercluster nx[, ny[, nz]] (0: none), and .explicitcluster.
  uint32_t reqCluster[3] = {0, 0, 0};
  /// .maxclusterrank n (0: none): the most CTAs a launch's cluster may have.
  uint32_t maxClusterRank = 0;
  bool explicitCluster = false;
  /// The .cta_group values its tcgen05 instructions name (bit 1: ::1,
  /// bit 2: ::2); the PTX ISA allows only one a kernel.
  uint8_t ctaGroups = 0;
};

struct Program {
  std::vector<Inst> code;
  std::vector<Operand> vectors;
  std::vector<Kernel> kernels;
  /// "line N: <instruction text>" of each instruction, for reports.
  std::vector<std::string> sources;
  /// Register slots every thread needs (all kernels share the numbering).
  uint32_t numRegs = 0;
  /// Static shared memory, laid out from kSharedBase; dynamic after it.
  uint32_t staticSmemBytes = 0;
  uint32_t dynamicSmemAlign = 16;
  /// The module's `.target` (e.g. "sm_90a"), and whether it uses wgmma
  /// (which turns on the per-register tracking wgmma's rules need).
  std::string target;
  bool usesWgmma = false;

  const Kernel *findKernel(const std::string &name) const {
    for (const Kernel &k : kernels)
      if (k.name == name)
        return &k;
    return nullptr;
  }
};

} // namespace mlir::fa4::emu

#endif // FA4_LIB_EMU_PROGRAM_H
