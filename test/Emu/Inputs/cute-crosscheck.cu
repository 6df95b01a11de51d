//===- cute-crosscheck.cu - fa4's encodings against NVIDIA's CuTe ---------===//
//
// A host program, built by test/Emu/cute-crosscheck.test against the CuTe
// headers of a CUTLASS release. The emulator's reading of the tcgen05
// encodings (include/fa4/Emu/Layouts.h) and fa4's encoders
// (include/fa4/Support/Descriptors.h) were both written from the PTX ISA; this
// program holds them against a third, independent source: the shared-memory
// layouts, descriptors and partitioning with which CuTe drives the same
// tensor cores.
//
// For every canonical UMMA layout of 16-bit and of 8-bit elements (K-major
// and MN-major, no swizzle and 32/64/128-byte swizzles), and for the exact
// layouts fa4's kernels use, it tiles CuTe's layout atom to a realistic
// operand tile, partitions the tile for a tcgen05.mma the way CuTe's
// collective mainloops do (kind::f16's atom, kind::f8f6f4's), and for each
// K slice (16 elements of 16 bits, 32 of 8) decodes CuTe's descriptor with
// the emulator and compares, element by element, the shared-memory byte
// address CuTe gives the element with the one the emulator computes from
// the descriptor. For
// fa4's layouts it also compares fa4's descriptor bits for each K step with
// CuTe's, and the placement of a TMA box with the MMA's reading of it. Then
// the instruction descriptors and the swizzle functions.
//
// Then the same for wgmma (sm_90a): every canonical GMMA layout (of 8-bit
// elements the K-major ones, FP8 wgmma's only), partitioned
// for CuTe's SM90 SS atoms, each K step's GmmaDescriptor read by the
// emulator's wgmma decoder element by element and given back bit for bit by
// fa4's wgmma encoder; and fa4's Hopper Q, K and V tiles with fa4's own
// descriptors for each warpgroup and K step (as
// lib/Conversion/FA4ToNVVM/Hopper/Warpgroup.cpp forms them) against CuTe's.
//
// Prints one line per check and "cute cross-check: N layouts agree"; on the
// first disagreement prints it and exits 1.
//
//===----------------------------------------------------------------------===//

// Everything here is host code: nvcc's device pass is given nothing to
// compile, which takes a third off the build (it would parse all of CuTe).
#ifndef __CUDA_ARCH__

#include <cstdint>

// CuTe computes a descriptor's start address with cvta.to.shared, which has
// no host form: in host code its cast_smem_ptr_to_uint prints an error and
// answers 0. Its other route, __nvvm_get_smem_pointer (kept for CUDA 10.2
// and declared by CuTe only there), lets this program define the conversion:
// a block of host memory stands for the CTA's shared memory, and CuTe's
// descriptors then carry real start addresses that the emulator must decode.
#define CUTE_NVVM_GET_SMEM_POINTER_ACTIVATED 1
extern "C" uint32_t __nvvm_get_smem_pointer(void const *pointer);

#include <cute/arch/mma_sm100_desc.hpp>
#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_traits_sm100.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>

#include "fa4/Emu/Layouts.h"
#include "fa4/Support/Descriptors.h"

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace cute;
namespace emu = mlir::fa4::emu;
namespace tc = mlir::fa4::tcgen05;
namespace wg = mlir::fa4::wgmma;

namespace {

/// The 14-bit start-address field of a descriptor spans 256 KB: all of
/// shared memory. Swizzles are functions of address bits 4..9, so the
/// window is aligned like the hardware's (1024 bytes suffices).
constexpr uint32_t kSharedBytes = 256 * 1024;
alignas(1024) unsigned char shared[kSharedBytes];

uint32_t sharedAddress(void const *pointer) {
  return static_cast<uint32_t>(static_cast<unsigned char const *>(pointer) -
                               shared);
}

int layoutsAgreeing = 0;

[[noreturn]] void disagree(std::string const &what) {
  std::printf("DISAGREEMENT: %s\n", what.c_str());
  std::fflush(stdout);
  std::exit(1);
}

std::string hex(uint64_t value) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%016" PRIx64, value);
  return text;
}
std::string hex(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08" PRIx32, value);
  return text;
}

template <class T> constexpr char const *typeName() {
  return is_same_v<T, half_t>         ? "f16"
         : is_same_v<T, bfloat16_t>   ? "bf16"
         : is_same_v<T, float_e4m3_t> ? "e4m3"
                                      : "e5m2";
}
/// One MMA's K: 32 bytes of elements.
template <class T> constexpr int kStepOf = 32 / sizeof(T);
template <class T> constexpr tc::Element fa4Element() {
  return is_same_v<T, half_t> ? tc::Element::F16 : tc::Element::BF16;
}
constexpr emu::Major emuMajor(UMMA::Major major) {
  return major == UMMA::Major::K ? emu::Major::K : emu::Major::MN;
}
constexpr tc::Major fa4Major(UMMA::Major major) {
  return major == UMMA::Major::K ? tc::Major::K : tc::Major::MN;
}
tc::Swizzle fa4Swizzle(emu::Swizzle swizzle) {
  switch (swizzle) {
  case emu::Swizzle::None: return tc::Swizzle::None;
  case emu::Swizzle::Bytes32: return tc::Swizzle::Bytes32;
  case emu::Swizzle::Bytes64: return tc::Swizzle::Bytes64;
  case emu::Swizzle::Bytes128: return tc::Swizzle::Bytes128;
  }
  return tc::Swizzle::None;
}

/// fa4's descriptor for K step `step` of an operand tile at `start`, as
/// lib/Conversion/FA4ToNVVM/TensorCore.cpp forms it at run time: the
/// template ORed with the address field, plus the step's byte offset >> 4.
/// Null for layouts fa4 does not emit.
using Fa4Descriptor = uint64_t (*)(uint32_t start, int step);

/// Q and K: K-major 128B-swizzled, 64-column boxes of 16384 bytes; a step is
/// 16 columns, 32 bytes inside a box.
uint64_t fa4QueryKeyDescriptor(uint32_t start, int step) {
  int column = step * 16;
  uint32_t offset = (column / 64) * 16384 + (column % 64) * 2;
  uint64_t base = tc::smemDescriptorTemplate(16, 1024, tc::Swizzle::Bytes128) |
                  tc::smemAddressField(start);
  return base + (offset >> 4);
}

/// V: MN-major 128B-swizzled, head-dimension boxes 16384 bytes apart, 8-key
/// groups 1024; a step is 16 keys of 128 bytes.
uint64_t fa4ValueDescriptor(uint32_t start, int step) {
  uint64_t base =
      tc::smemDescriptorTemplate(16384, 1024, tc::Swizzle::Bytes128) |
      tc::smemAddressField(start);
  return base + ((step * 16 * 128) >> 4);
}

/// Where fa4's TMA puts element (mn, k) of a tile fa4 emits, by the
/// emulator's model of a TMA box: 64-element (128-byte) inner rows, boxes
/// 16384 bytes apart, each written densely and swizzled. Q and K boxes are
/// rows of the tile (k inner); V boxes are keys (mn inner).
using Fa4TmaPlacement = uint32_t (*)(uint32_t start, int mn, int k);

uint32_t fa4QueryKeyTma(uint32_t start, int mn, int k) {
  return emu::tmaBoxAddress(emu::Swizzle::Bytes128, start + (k / 64) * 16384,
                            mn * 128 + (k % 64) * 2);
}
uint32_t fa4ValueTma(uint32_t start, int mn, int k) {
  return emu::tmaBoxAddress(emu::Swizzle::Bytes128, start + (mn / 64) * 16384,
                            k * 128 + (mn % 64) * 2);
}

struct Fa4Use {
  char const *what = nullptr; // the operand and head dimensions
  Fa4Descriptor descriptor = nullptr;
  Fa4TmaPlacement tma = nullptr;
};

enum class Role { A, B };

/// CuTe's SM100 atom for operands of type T: kind::f16's for 16-bit types,
/// kind::f8f6f4's for 8-bit ones.
template <class T, int M, int N, UMMA::Major MA, UMMA::Major MB>
using Sm100Atom = conditional_t<
    sizeof(T) == 2, SM100_MMA_F16BF16_SS<T, T, float, M, N, MA, MB>,
    MMA_Traits<SM100_MMA_F8F6F4_SS, T, T, float, C<M>, C<N>,
               integral_constant<UMMA::Major, MA>,
               integral_constant<UMMA::Major, MB>,
               integral_constant<UMMA::ScaleIn, UMMA::ScaleIn::One>,
               integral_constant<UMMA::ScaleIn, UMMA::ScaleIn::One>>>;

/// Tiles `Atom` to an MN x K operand tile at shared address `start`, plays
/// it as operand `role` of one cta_group::1 tcgen05.mma of CuTe's
/// SM100_MMA_F16BF16_SS (SM100_MMA_F8F6F4_SS for 8-bit T), and compares
/// every element of every K slice.
template <class T, UMMA::Major Major, Role R, int MN, int K, class Atom,
          class Order>
void checkOperand(char const *layoutName, uint32_t start, Fa4Use fa4 = {}) {
  std::string name = std::string(Major == UMMA::Major::K ? "K" : "MN") +
                     "-major " + layoutName + " " + typeName<T>() + " " +
                     std::to_string(MN) + "x" + std::to_string(K);
  T *base = reinterpret_cast<T *>(shared + start);
  auto layout = tile_to_shape(Atom{}, make_shape(Int<MN>{}, Int<K>{}), Order{});
  Tensor tile = make_tensor(make_smem_ptr(base), layout); // (MN, K)

  // The MMA whose operand this is: M or N is the tile's MN extent, the other
  // operand's extent and major are immaterial to this one's partitioning.
  constexpr int M = R == Role::A ? MN : 128;
  constexpr int N = R == Role::A ? 128 : MN;
  using Op = Sm100Atom<T, M, N, R == Role::A ? Major : UMMA::Major::K,
                       R == Role::B ? Major : UMMA::Major::K>;
  auto slice = make_tiled_mma(Op{}).get_slice(0);
  // (MMA, 1, K / step) elements and (1, 1, K / step) descriptors: CuTe
  // steps along K by offsetting the first slice's descriptor.
  constexpr int kStep = kStepOf<T>;
  auto partitioned = [&] {
    if constexpr (R == Role::A)
      return slice.partition_A(tile);
    else
      return slice.partition_B(tile);
  }();
  auto descriptors = [&] {
    if constexpr (R == Role::A)
      return slice.make_fragment_A(partitioned);
    else
      return slice.make_fragment_B(partitioned);
  }();
  static_assert(decltype(size<1>(partitioned))::value == 1);
  constexpr int steps = decltype(size<2>(partitioned))::value;
  static_assert(steps * kStep == K);

  int elements = 0;
  bool leadingOffsetIgnored = false;
  for (int step = 0; step < steps; ++step) {
    uint64_t bits = descriptors(0, 0, step);
    std::string at = name + " step " + std::to_string(step);
    emu::SmemDescriptor decoded;
    std::string error;
    if (!emu::decodeSmemDescriptor(bits, decoded, error))
      disagree(at + ": the emulator rejects CuTe's descriptor " + hex(bits) +
               ": " + error);
    // fa4's encoder, given the fields the emulator read, must give CuTe's
    // bits back.
    uint64_t encoded = tc::smemDescriptor(
        decoded.startAddress, decoded.leadingByteOffset,
        decoded.strideByteOffset, fa4Swizzle(decoded.swizzle));
    if (encoded != bits)
      disagree(at + ": CuTe's descriptor " + hex(bits) +
               ", fa4's smemDescriptor of its decoded fields " + hex(encoded));
    // fa4's own descriptor for the step: CuTe's bits, except that CuTe
    // leaves the leading byte offset 0 where the tile has a single swizzle
    // atom along MN (the MMA never crosses to a next one), where fa4 writes
    // the box stride regardless. The emulator must then read fa4's
    // descriptor as it reads CuTe's, element for element, below.
    emu::SmemDescriptor fa4Decoded = decoded;
    if (fa4.descriptor) {
      uint64_t mine = fa4.descriptor(start, step);
      constexpr uint64_t leadingField = uint64_t(0x3fff) << 16;
      bool unusedLeading =
          Major == UMMA::Major::MN && decoded.swizzle != emu::Swizzle::None &&
          (bits & leadingField) == 0 &&
          MN * sizeof(T) <= emu::swizzleRowBytes(decoded.swizzle);
      if (mine != bits &&
          !(unusedLeading && (mine & ~leadingField) == (bits & ~leadingField)))
        disagree(at + ": CuTe's descriptor " + hex(bits) + ", fa4's " +
                 hex(mine));
      if (mine != bits)
        leadingOffsetIgnored = true;
      if (!emu::decodeSmemDescriptor(mine, fa4Decoded, error))
        disagree(at + ": the emulator rejects fa4's descriptor " + hex(mine) +
                 ": " + error);
    }
    for (int k = 0; k < kStep; ++k) {
      for (int mn = 0; mn < MN; ++mn) {
        // The MMA mode of the partition is (M or N, K step) of this step.
        uint32_t cute = sharedAddress(&partitioned(make_coord(mn, k), 0, step));
        uint32_t plain = sharedAddress(&tile(mn, step * kStep + k));
        uint32_t mine =
            emu::operandAddress(decoded, emuMajor(Major), mn, k, sizeof(T));
        if (cute != plain || cute != mine)
          disagree(at + ": element (mn " + std::to_string(mn) + ", k " +
                   std::to_string(k) + "): CuTe address " +
                   std::to_string(cute) + " (the tile's " +
                   std::to_string(plain) + "), emulator address " +
                   std::to_string(mine));
        uint32_t fa4Mine =
            emu::operandAddress(fa4Decoded, emuMajor(Major), mn, k, sizeof(T));
        if (fa4Mine != cute)
          disagree(at + ": element (mn " + std::to_string(mn) + ", k " +
                   std::to_string(k) + "): CuTe address " +
                   std::to_string(cute) +
                   ", emulator address from fa4's descriptor " +
                   std::to_string(fa4Mine));
        if (fa4.tma) {
          uint32_t placed = fa4.tma(start, mn, step * kStep + k);
          if (placed != cute)
            disagree(at + ": element (mn " + std::to_string(mn) + ", k " +
                     std::to_string(step * kStep + k) + "): CuTe address " +
                     std::to_string(cute) + ", fa4's TMA box writes it at " +
                     std::to_string(placed));
        }
        ++elements;
      }
    }
  }
  ++layoutsAgreeing;
  std::printf("%s: %d elements agree", name.c_str(), elements);
  if (fa4.what && !leadingOffsetIgnored)
    std::printf(" (fa4 %s: descriptors and TMA placement agree)", fa4.what);
  else if (fa4.what)
    std::printf(" (fa4 %s: descriptors agree but for the unused leading byte "
                "offset, which CuTe leaves 0; TMA placement agrees)",
                fa4.what);
  std::printf("\n");
}

/// How a check names one instruction descriptor's shape, types and majors.
template <class TA, class TB, int M, int N, UMMA::Major MA, UMMA::Major MB>
std::string instructionName() {
  return std::string("instruction descriptor A ") + typeName<TA>() +
         (MA == UMMA::Major::K ? " K" : " MN") + "-major, B " +
         typeName<TB>() + (MB == UMMA::Major::K ? " K" : " MN") +
         "-major, M " + std::to_string(M) + " N " + std::to_string(N);
}

/// The kind::f16 instruction descriptor for one shape, types and majors.
template <class TA, class TB, int M, int N, UMMA::Major MA, UMMA::Major MB>
int checkInstruction() {
  uint32_t bits = static_cast<uint32_t>(
      UMMA::make_instr_desc<TA, TB, float, M, N, MA, MB>());
  std::string at = instructionName<TA, TB, M, N, MA, MB>();
  emu::InstrDescriptor decoded;
  std::string error;
  if (!emu::decodeInstrDescriptorF16(bits, decoded, error))
    disagree(at + ": the emulator rejects CuTe's " + hex(bits) + ": " + error);
  if (!decoded.dF32 ||
      (decoded.aType == emu::MmaElement::BF16) != is_same_v<TA, bfloat16_t> ||
      (decoded.bType == emu::MmaElement::BF16) != is_same_v<TB, bfloat16_t> ||
      decoded.negateA || decoded.negateB || decoded.aMajor != emuMajor(MA) ||
      decoded.bMajor != emuMajor(MB) || decoded.m != M || decoded.n != N)
    disagree(at + ": the emulator misreads CuTe's " + hex(bits) + " as M " +
             std::to_string(decoded.m) + " N " + std::to_string(decoded.n));
  uint32_t mine = tc::instructionDescriptorF16(
      fa4Element<TA>(), fa4Element<TB>(), fa4Major(MA), fa4Major(MB), M, N);
  if (mine != bits)
    disagree(at + ": CuTe's " + hex(bits) + ", fa4's " + hex(mine));
  return 1;
}

/// The kind::f8f6f4 instruction descriptor for one shape, types and majors
/// (fa4 has no encoder of its own for it yet).
template <class TA, class TB, int M, int N, UMMA::Major MA, UMMA::Major MB>
int checkInstruction8() {
  uint32_t bits = static_cast<uint32_t>(
      UMMA::make_instr_desc<TA, TB, float, M, N, MA, MB>());
  std::string at = instructionName<TA, TB, M, N, MA, MB>();
  emu::InstrDescriptor decoded;
  std::string error;
  if (!emu::decodeInstrDescriptorF8F6F4(bits, decoded, error))
    disagree(at + ": the emulator rejects CuTe's " + hex(bits) + ": " + error);
  auto element = [](bool e5m2) {
    return e5m2 ? emu::MmaElement::E5M2 : emu::MmaElement::E4M3;
  };
  if (!decoded.dF32 || decoded.aType != element(is_same_v<TA, float_e5m2_t>) ||
      decoded.bType != element(is_same_v<TB, float_e5m2_t>) ||
      decoded.negateA || decoded.negateB || decoded.aMajor != emuMajor(MA) ||
      decoded.bMajor != emuMajor(MB) || decoded.m != M || decoded.n != N)
    disagree(at + ": the emulator misreads CuTe's " + hex(bits) + " as M " +
             std::to_string(decoded.m) + " N " + std::to_string(decoded.n));
  return 1;
}

template <class TA, class TB, int M, int N> int checkInstructionMajors() {
  constexpr auto K = UMMA::Major::K, MN = UMMA::Major::MN;
  if constexpr (sizeof(TA) == 1)
    return checkInstruction8<TA, TB, M, N, K, K>() +
           checkInstruction8<TA, TB, M, N, K, MN>() +
           checkInstruction8<TA, TB, M, N, MN, K>() +
           checkInstruction8<TA, TB, M, N, MN, MN>();
  else
    return checkInstruction<TA, TB, M, N, K, K>() +
           checkInstruction<TA, TB, M, N, K, MN>() +
           checkInstruction<TA, TB, M, N, MN, K>() +
           checkInstruction<TA, TB, M, N, MN, MN>();
}

/// M 64 and 128 (cta_group::1); N 64, 96 and 128 are fa4's head dimensions
/// (the P.V MMA) and 128 its key tile (Q.K^T); 256 is the largest N.
template <class TA, class TB> void checkInstructions() {
  int count = 0;
  count += checkInstructionMajors<TA, TB, 64, 64>();
  count += checkInstructionMajors<TA, TB, 64, 96>();
  count += checkInstructionMajors<TA, TB, 64, 128>();
  count += checkInstructionMajors<TA, TB, 64, 256>();
  count += checkInstructionMajors<TA, TB, 128, 64>();
  count += checkInstructionMajors<TA, TB, 128, 96>();
  count += checkInstructionMajors<TA, TB, 128, 128>();
  count += checkInstructionMajors<TA, TB, 128, 256>();
  ++layoutsAgreeing;
  std::printf("instruction descriptor A %s B %s: %d descriptors agree\n",
              typeName<TA>(), typeName<TB>(), count);
}

/// CuTe's Swizzle<B, 4, 3> on byte addresses, over all of shared memory.
template <int B> void checkSwizzle(emu::Swizzle mode) {
  Swizzle<B, 4, 3> swizzle;
  for (uint32_t address = 0; address < kSharedBytes; ++address) {
    uint32_t cute = static_cast<uint32_t>(swizzle(address));
    uint32_t mine = emu::swizzleAddress(mode, address);
    if (cute != mine)
      disagree("Swizzle<" + std::to_string(B) + ",4,3> of byte address " +
               std::to_string(address) + ": CuTe " + std::to_string(cute) +
               ", emulator " + std::to_string(mine));
    if (B == 3 && tc::swizzle128(address) != cute)
      disagree("Swizzle<3,4,3> of byte address " + std::to_string(address) +
               ": CuTe " + std::to_string(cute) + ", fa4's swizzle128 " +
               std::to_string(tc::swizzle128(address)));
  }
  ++layoutsAgreeing;
  std::printf("Swizzle<%d,4,3>: %u byte addresses agree%s\n", B, kSharedBytes,
              B == 3 ? " (and fa4's swizzle128)" : "");
}

//===----------------------------------------------------------------------===//
// wgmma (sm_90a)
//===----------------------------------------------------------------------===//

constexpr emu::Major emuMajor(GMMA::Major major) {
  return major == GMMA::Major::K ? emu::Major::K : emu::Major::MN;
}
wg::Swizzle fa4WgmmaSwizzle(emu::Swizzle swizzle) {
  switch (swizzle) {
  case emu::Swizzle::None: return wg::Swizzle::None;
  case emu::Swizzle::Bytes32: return wg::Swizzle::Bytes32;
  case emu::Swizzle::Bytes64: return wg::Swizzle::Bytes64;
  case emu::Swizzle::Bytes128: return wg::Swizzle::Bytes128;
  }
  return wg::Swizzle::None;
}

/// One wgmma's M: a warpgroup's 64 rows.
constexpr int kWgmmaM = 64;

/// fa4's wgmma descriptor for K step `step` of the 64-row block `block` of
/// an operand tile at `start`, as Hopper/Warpgroup.cpp forms it at run time:
/// the template ORed with the address field of the block's first row (a
/// consumer warpgroup's row offset), plus the step's byte offset >> 4.
using Fa4WgmmaDescriptor = uint64_t (*)(uint32_t start, int block, int step);

/// Q and K: K-major 128B-swizzled, 64-column boxes of 128 rows (16384
/// bytes); a step is 16 columns, 32 bytes inside a box.
uint64_t fa4WgmmaQueryKeyDescriptor(uint32_t start, int block, int step) {
  int column = step * 16;
  uint32_t offset = (column / 64) * 16384 + (column % 64) * 2;
  uint64_t base =
      wg::smemDescriptorTemplate(16, 1024, wg::Swizzle::Bytes128) |
      tc::smemAddressField(start + block * kWgmmaM * 128);
  return base + (offset >> 4);
}

/// V: MN-major 128B-swizzled, head-dimension boxes of 128 keys 16384 bytes
/// apart, 8-key groups 1024; a step is 16 keys of 128 bytes.
uint64_t fa4WgmmaValueDescriptor(uint32_t start, int block, int step) {
  uint64_t base =
      wg::smemDescriptorTemplate(16384, 1024, wg::Swizzle::Bytes128) |
      tc::smemAddressField(start + block * kWgmmaM * 128);
  return base + ((step * 16 * 128) >> 4);
}

struct Fa4WgmmaUse {
  char const *what = nullptr; // the operand and head dimensions
  Fa4WgmmaDescriptor descriptor = nullptr;
  Fa4TmaPlacement tma = nullptr;
};

/// Tiles `Atom` to an MN x K operand tile at shared address `start`, plays
/// it as operand `role` of CuTe's SM90 SS wgmma (A: MN / 64 warpgroups'
/// blocks of 64 rows; B: N = MN), and compares every element of every block
/// and K = 16 slice.
template <class T, GMMA::Major Major, Role R, int MN, int K, class Atom,
          class Order>
void checkWgmmaOperand(char const *layoutName, uint32_t start,
                       Fa4WgmmaUse fa4 = {}) {
  std::string name = std::string("wgmma ") +
                     (Major == GMMA::Major::K ? "K" : "MN") + "-major " +
                     layoutName + " " + typeName<T>() + " " +
                     std::to_string(MN) + "x" + std::to_string(K);
  T *base = reinterpret_cast<T *>(shared + start);
  auto layout = tile_to_shape(Atom{}, make_shape(Int<MN>{}, Int<K>{}), Order{});
  Tensor tile = make_tensor(make_smem_ptr(base), layout); // (MN, K)

  // The other operand's extent and major are immaterial to this one's
  // partitioning; CuTe's selector picks the atom for the shape.
  constexpr int N = R == Role::A ? 64 : MN;
  constexpr int rows = R == Role::A ? kWgmmaM : MN;
  using Op = decltype(GMMA::ss_op_selector<
                      T, T, float, Shape<Int<kWgmmaM>, Int<N>, Int<K>>,
                      R == Role::A ? Major : GMMA::Major::K,
                      R == Role::B ? Major : GMMA::Major::K>());
  auto slice = make_tiled_mma(Op{}).get_slice(0);
  // (MMA, blocks, K / step) elements and (1, blocks, K / step) descriptors.
  constexpr int kStep = kStepOf<T>;
  auto partitioned = [&] {
    if constexpr (R == Role::A)
      return slice.partition_A(tile);
    else
      return slice.partition_B(tile);
  }();
  auto descriptors = [&] {
    if constexpr (R == Role::A)
      return slice.make_fragment_A(partitioned);
    else
      return slice.make_fragment_B(partitioned);
  }();
  constexpr int blocks = decltype(size<1>(partitioned))::value;
  constexpr int steps = decltype(size<2>(partitioned))::value;
  static_assert(blocks * rows == MN && steps * kStep == K);

  int elements = 0;
  bool leadingOffsetIgnored = false;
  for (int block = 0; block < blocks; ++block) {
    for (int step = 0; step < steps; ++step) {
      uint64_t bits = descriptors(0, block, step);
      std::string at = name + " block " + std::to_string(block) + " step " +
                       std::to_string(step);
      emu::SmemDescriptor decoded;
      std::string error;
      if (!emu::decodeWgmmaDescriptor(bits, decoded, error))
        disagree(at + ": the emulator rejects CuTe's descriptor " + hex(bits) +
                 ": " + error);
      uint64_t encoded = wg::smemDescriptor(
          decoded.startAddress, decoded.leadingByteOffset,
          decoded.strideByteOffset, fa4WgmmaSwizzle(decoded.swizzle));
      if (encoded != bits)
        disagree(at + ": CuTe's descriptor " + hex(bits) +
                 ", fa4's wgmma smemDescriptor of its decoded fields " +
                 hex(encoded));
      // fa4's own descriptor: CuTe's bits, but for the leading byte offset
      // of an MN-major tile one swizzle atom wide, as for tcgen05.
      emu::SmemDescriptor fa4Decoded = decoded;
      if (fa4.descriptor) {
        uint64_t mine = fa4.descriptor(start, block, step);
        constexpr uint64_t leadingField = uint64_t(0x3fff) << 16;
        bool unusedLeading =
            Major == GMMA::Major::MN && decoded.swizzle != emu::Swizzle::None &&
            (bits & leadingField) == 0 &&
            rows * sizeof(T) <= emu::swizzleRowBytes(decoded.swizzle);
        bool otherwiseEqual =
            (mine & ~leadingField) == (bits & ~leadingField);
        if (mine != bits && !(unusedLeading && otherwiseEqual))
          disagree(at + ": CuTe's descriptor " + hex(bits) + ", fa4's " +
                   hex(mine));
        if (mine != bits)
          leadingOffsetIgnored = true;
        if (!emu::decodeWgmmaDescriptor(mine, fa4Decoded, error))
          disagree(at + ": the emulator rejects fa4's descriptor " +
                   hex(mine) + ": " + error);
      }
      for (int k = 0; k < kStep; ++k) {
        for (int mn = 0; mn < rows; ++mn) {
          int tileMn = block * rows + mn;
          uint32_t cute =
              sharedAddress(&partitioned(make_coord(mn, k), block, step));
          uint32_t plain = sharedAddress(&tile(tileMn, step * kStep + k));
          uint32_t mine =
              emu::operandAddress(decoded, emuMajor(Major), mn, k, sizeof(T));
          uint32_t fa4Mine = emu::operandAddress(fa4Decoded, emuMajor(Major),
                                                 mn, k, sizeof(T));
          std::string element = at + ": element (mn " + std::to_string(mn) +
                                ", k " + std::to_string(k) +
                                "): CuTe address " + std::to_string(cute);
          if (cute != plain || cute != mine)
            disagree(element + " (the tile's " + std::to_string(plain) +
                     "), emulator address " + std::to_string(mine));
          if (fa4Mine != cute)
            disagree(element + ", emulator address from fa4's descriptor " +
                     std::to_string(fa4Mine));
          if (fa4.tma && fa4.tma(start, tileMn, step * kStep + k) != cute)
            disagree(element + ", fa4's TMA box writes it at " +
                     std::to_string(fa4.tma(start, tileMn, step * kStep + k)));
          ++elements;
        }
      }
    }
  }
  ++layoutsAgreeing;
  std::printf("%s: %d elements agree", name.c_str(), elements);
  if (fa4.what && !leadingOffsetIgnored)
    std::printf(" (fa4 %s: descriptors and TMA placement agree)", fa4.what);
  else if (fa4.what)
    std::printf(" (fa4 %s: descriptors agree but for the unused leading byte "
                "offset, which CuTe leaves 0; TMA placement agrees)",
                fa4.what);
  std::printf("\n");
}

/// Operand tiles start at a 1024-byte aligned address other than 0, like a
/// second pipeline stage, so that the start-address field takes part.
constexpr uint32_t kTileStart = 0x8000;

} // namespace

extern "C" uint32_t __nvvm_get_smem_pointer(void const *pointer) {
  return sharedAddress(pointer);
}

int main() {
  using MNFirst = GenColMajor; // CuTe's default: MN atoms first, then K
  using KFirst = Step<_2, _1>; // K atoms first, MN atoms outermost
  constexpr auto Kmaj = UMMA::Major::K, MNmaj = UMMA::Major::MN;

  // Every canonical layout the emulator models, as the A operand of an
  // M=128 MMA over 64 columns of K.
  checkOperand<half_t, Kmaj, Role::A, 128, 64,
               UMMA::Layout_K_INTER_Atom<half_t>, MNFirst>("INTER", kTileStart);
  checkOperand<half_t, Kmaj, Role::A, 128, 64, UMMA::Layout_K_SW32_Atom<half_t>,
               MNFirst>("SW32", kTileStart);
  checkOperand<half_t, Kmaj, Role::A, 128, 64, UMMA::Layout_K_SW64_Atom<half_t>,
               MNFirst>("SW64", kTileStart);
  checkOperand<half_t, MNmaj, Role::A, 128, 64,
               UMMA::Layout_MN_INTER_Atom<half_t>, MNFirst>("INTER",
                                                            kTileStart);
  checkOperand<half_t, MNmaj, Role::A, 128, 64,
               UMMA::Layout_MN_SW32_Atom<half_t>, MNFirst>("SW32", kTileStart);
  checkOperand<half_t, MNmaj, Role::A, 128, 64,
               UMMA::Layout_MN_SW64_Atom<half_t>, MNFirst>("SW64", kTileStart);
  checkOperand<half_t, MNmaj, Role::A, 128, 64,
               UMMA::Layout_MN_SW128_Atom<half_t>, MNFirst>("SW128",
                                                            kTileStart);

  // The same of 8-bit elements (kind::f8f6f4), over 128 columns of K (one
  // 128-byte row): K-major as A, MN-major as B, which kind::f8f6f4 may
  // read transposed.
  using E4M3 = float_e4m3_t;
  checkOperand<E4M3, Kmaj, Role::A, 128, 128, UMMA::Layout_K_INTER_Atom<E4M3>,
               MNFirst>("INTER", kTileStart);
  checkOperand<E4M3, Kmaj, Role::A, 128, 128, UMMA::Layout_K_SW32_Atom<E4M3>,
               MNFirst>("SW32", kTileStart);
  checkOperand<E4M3, Kmaj, Role::A, 128, 128, UMMA::Layout_K_SW64_Atom<E4M3>,
               MNFirst>("SW64", kTileStart);
  checkOperand<E4M3, Kmaj, Role::A, 128, 128, UMMA::Layout_K_SW128_Atom<E4M3>,
               MNFirst>("SW128", kTileStart);
  checkOperand<E4M3, MNmaj, Role::B, 128, 128,
               UMMA::Layout_MN_INTER_Atom<E4M3>, MNFirst>("INTER", kTileStart);
  checkOperand<E4M3, MNmaj, Role::B, 128, 128, UMMA::Layout_MN_SW32_Atom<E4M3>,
               MNFirst>("SW32", kTileStart);
  checkOperand<E4M3, MNmaj, Role::B, 128, 128, UMMA::Layout_MN_SW64_Atom<E4M3>,
               MNFirst>("SW64", kTileStart);
  checkOperand<E4M3, MNmaj, Role::B, 128, 128,
               UMMA::Layout_MN_SW128_Atom<E4M3>, KFirst>("SW128", kTileStart);

  // fa4's operands. Q and K, the A and B operands of Q.K^T (each tile is
  // played as both, the element types alternating): 128 rows, K-major, one
  // 64-column box per 64 head dimensions, the boxes one after another
  // (CuTe's default order puts the 16 8-row atoms of a box first). Head
  // dimension 96 uses the first six K steps of the 128-column layout.
  Fa4Use qk64{"Q, K at head dim 64", fa4QueryKeyDescriptor, fa4QueryKeyTma};
  Fa4Use qk128{"Q, K at head dim 96, 128", fa4QueryKeyDescriptor,
               fa4QueryKeyTma};
  checkOperand<half_t, Kmaj, Role::A, 128, 64,
               UMMA::Layout_K_SW128_Atom<half_t>, MNFirst>("SW128", kTileStart,
                                                           qk64);
  checkOperand<bfloat16_t, Kmaj, Role::B, 128, 64,
               UMMA::Layout_K_SW128_Atom<bfloat16_t>, MNFirst>(
      "SW128", kTileStart, qk64);
  checkOperand<half_t, Kmaj, Role::A, 128, 128,
               UMMA::Layout_K_SW128_Atom<half_t>, MNFirst>("SW128", kTileStart,
                                                           qk128);
  checkOperand<bfloat16_t, Kmaj, Role::B, 128, 128,
               UMMA::Layout_K_SW128_Atom<bfloat16_t>, MNFirst>(
      "SW128", kTileStart, qk128);

  // V (B of P.V): N = head dimension, K = 128 keys, MN-major; the 8-key
  // atoms of a 64-column box follow one another (K first) and the boxes are
  // outermost, 16384 bytes apart.
  Fa4Use v64{"V at head dim 64", fa4ValueDescriptor, fa4ValueTma};
  Fa4Use v128{"V at head dim 96, 128", fa4ValueDescriptor, fa4ValueTma};
  checkOperand<half_t, MNmaj, Role::B, 64, 128,
               UMMA::Layout_MN_SW128_Atom<half_t>, KFirst>("SW128", kTileStart,
                                                           v64);
  checkOperand<bfloat16_t, MNmaj, Role::B, 64, 128,
               UMMA::Layout_MN_SW128_Atom<bfloat16_t>, KFirst>("SW128",
                                                               kTileStart, v64);
  checkOperand<half_t, MNmaj, Role::B, 128, 128,
               UMMA::Layout_MN_SW128_Atom<half_t>, KFirst>("SW128", kTileStart,
                                                           v128);
  checkOperand<bfloat16_t, MNmaj, Role::B, 128, 128,
               UMMA::Layout_MN_SW128_Atom<bfloat16_t>, KFirst>(
      "SW128", kTileStart, v128);

  // wgmma: every canonical GMMA layout as the A operand of two
  // warpgroups' 64-row blocks over 64 columns of K.
  constexpr auto Kgmma = GMMA::Major::K, MNgmma = GMMA::Major::MN;
  checkWgmmaOperand<half_t, Kgmma, Role::A, 128, 64,
                    GMMA::Layout_K_INTER_Atom<half_t>, MNFirst>("INTER",
                                                                kTileStart);
  checkWgmmaOperand<half_t, Kgmma, Role::A, 128, 64,
                    GMMA::Layout_K_SW32_Atom<half_t>, MNFirst>("SW32",
                                                               kTileStart);
  checkWgmmaOperand<half_t, Kgmma, Role::A, 128, 64,
                    GMMA::Layout_K_SW64_Atom<half_t>, MNFirst>("SW64",
                                                               kTileStart);
  checkWgmmaOperand<half_t, MNgmma, Role::A, 128, 64,
                    GMMA::Layout_MN_INTER_Atom<half_t>, MNFirst>("INTER",
                                                                 kTileStart);
  checkWgmmaOperand<half_t, MNgmma, Role::A, 128, 64,
                    GMMA::Layout_MN_SW32_Atom<half_t>, MNFirst>("SW32",
                                                                kTileStart);
  checkWgmmaOperand<half_t, MNgmma, Role::A, 128, 64,
                    GMMA::Layout_MN_SW64_Atom<half_t>, MNFirst>("SW64",
                                                                kTileStart);
  checkWgmmaOperand<half_t, MNgmma, Role::A, 128, 64,
                    GMMA::Layout_MN_SW128_Atom<half_t>, MNFirst>("SW128",
                                                                 kTileStart);
  // FP8 wgmma's operands, K-major only: as A, and as an N = 128 B.
  checkWgmmaOperand<E4M3, Kgmma, Role::A, 128, 128,
                    GMMA::Layout_K_INTER_Atom<E4M3>, MNFirst>("INTER",
                                                              kTileStart);
  checkWgmmaOperand<E4M3, Kgmma, Role::B, 128, 128,
                    GMMA::Layout_K_SW128_Atom<E4M3>, MNFirst>("SW128",
                                                              kTileStart);

  // fa4's Hopper operands, in the layouts of its Blackwell ones. Q, the A
  // of Q.K^T: a 128-row tile, each consumer warpgroup's 64 rows a block;
  // K, the B: N = 128 keys.
  Fa4WgmmaUse q64{"Q at head dim 64", fa4WgmmaQueryKeyDescriptor,
                  fa4QueryKeyTma};
  Fa4WgmmaUse q128{"Q at head dim 96, 128", fa4WgmmaQueryKeyDescriptor,
                   fa4QueryKeyTma};
  Fa4WgmmaUse k64{"K at head dim 64", fa4WgmmaQueryKeyDescriptor,
                  fa4QueryKeyTma};
  Fa4WgmmaUse k128{"K at head dim 96, 128", fa4WgmmaQueryKeyDescriptor,
                   fa4QueryKeyTma};
  checkWgmmaOperand<half_t, Kgmma, Role::A, 128, 64,
                    GMMA::Layout_K_SW128_Atom<half_t>, MNFirst>(
      "SW128", kTileStart, q64);
  checkWgmmaOperand<bfloat16_t, Kgmma, Role::B, 128, 64,
                    GMMA::Layout_K_SW128_Atom<bfloat16_t>, MNFirst>(
      "SW128", kTileStart, k64);
  checkWgmmaOperand<bfloat16_t, Kgmma, Role::A, 128, 128,
                    GMMA::Layout_K_SW128_Atom<bfloat16_t>, MNFirst>(
      "SW128", kTileStart, q128);
  checkWgmmaOperand<half_t, Kgmma, Role::B, 128, 128,
                    GMMA::Layout_K_SW128_Atom<half_t>, MNFirst>(
      "SW128", kTileStart, k128);

  // V, the B of P.V: N = head dimension, K = 128 keys, MN-major, boxes
  // outermost. fa4's descriptor does not depend on N, so head dimension 96
  // (an N = 96 wgmma) reads a subset of what the N = 128 one reads.
  Fa4WgmmaUse wv64{"V at head dim 64", fa4WgmmaValueDescriptor, fa4ValueTma};
  Fa4WgmmaUse wv128{"V at head dim 96, 128", fa4WgmmaValueDescriptor,
                    fa4ValueTma};
  checkWgmmaOperand<half_t, MNgmma, Role::B, 64, 128,
                    GMMA::Layout_MN_SW128_Atom<half_t>, KFirst>(
      "SW128", kTileStart, wv64);
  checkWgmmaOperand<bfloat16_t, MNgmma, Role::B, 64, 128,
                    GMMA::Layout_MN_SW128_Atom<bfloat16_t>, KFirst>(
      "SW128", kTileStart, wv64);
  checkWgmmaOperand<half_t, MNgmma, Role::B, 128, 128,
                    GMMA::Layout_MN_SW128_Atom<half_t>, KFirst>(
      "SW128", kTileStart, wv128);
  checkWgmmaOperand<bfloat16_t, MNgmma, Role::B, 128, 128,
                    GMMA::Layout_MN_SW128_Atom<bfloat16_t>, KFirst>(
      "SW128", kTileStart, wv128);

  checkInstructions<half_t, half_t>();
  checkInstructions<bfloat16_t, bfloat16_t>();
  checkInstructions<float_e4m3_t, float_e4m3_t>();
  checkInstructions<float_e5m2_t, float_e4m3_t>();

  checkSwizzle<1>(emu::Swizzle::Bytes32);
  checkSwizzle<2>(emu::Swizzle::Bytes64);
  checkSwizzle<3>(emu::Swizzle::Bytes128);

  std::printf("cute cross-check: %d layouts agree\n", layoutsAgreeing);
  return 0;
}

#endif // __CUDA_ARCH__
