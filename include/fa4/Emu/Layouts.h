//===- Layouts.h - how the emulator reads descriptors and swizzles -*- C++ -*-===//
//
// fa4-emu's reading of the encodings that place operands in shared memory
// and registers: the tcgen05 shared-memory matrix descriptor, the kind::f16
// and kind::f8f6f4 instruction descriptors, the swizzle that TMA and the
// tensor core apply to shared-memory addresses, and wgmma's A fragment. They
// are written from the PTX ISA's tables, not from fa4's encoders
// (include/fa4/Support/Descriptors.h), so that an encoding mistake cannot
// hide in both; the CuTe cross-check test compares them with NVIDIA's own
// layouts element by element.
//
// Header-only on purpose: the cross-check compiles it (with nvcc) without the
// rest of fa4 and without LLVM, which is why its decoders say what they
// refuse in a string rather than an llvm::Error.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_EMU_LAYOUTS_H
#define FA4_EMU_LAYOUTS_H

#include <cstdint>
#include <string>

namespace mlir::fa4::emu {

/// Shared-memory swizzle modes, as TMA and the tensor core apply them: the
/// 16-byte chunk index (address bits 4..6) is XORed with address bits 7..9,
/// of which 0 (none), 1 (32B), 2 (64B) or 3 (128B) bits take part. This is
/// CuTe's Swizzle<B, 4, 3> on byte addresses.
enum class Swizzle : uint32_t { None = 0, Bytes32 = 1, Bytes64 = 2, Bytes128 = 3 };

/// Width in bytes of one swizzled row (the swizzle atom's row), 16 for none.
inline uint32_t swizzleRowBytes(Swizzle swizzle) {
  return swizzle == Swizzle::None ? 16u : 16u << static_cast<uint32_t>(swizzle);
}

/// The physical shared-memory byte address of logical address `address`.
inline uint32_t swizzleAddress(Swizzle swizzle, uint32_t address) {
  uint32_t bits = static_cast<uint32_t>(swizzle);
  uint32_t mask = (1u << bits) - 1u;
  return address ^ (((address >> 7) & mask) << 4);
}

/// A decoded tcgen05 shared-memory matrix descriptor (PTX ISA, "Shared
/// memory descriptor"): bits 0-13 start address >> 4, 16-29 leading-dimension
/// byte offset >> 4, 32-45 stride-dimension byte offset >> 4, 46-48 the fixed
/// value 0b001, 49-51 base offset, 52 leading-dimension mode, 61-63 swizzle
/// (0 none, 1 128B with 32B atomic, 2 128B, 4 64B, 6 32B).
struct SmemDescriptor {
  uint32_t startAddress = 0;
  uint32_t leadingByteOffset = 0;
  uint32_t strideByteOffset = 0;
  uint32_t baseOffset = 0;
  bool absoluteLeadingOffset = false;
  Swizzle swizzle = Swizzle::None;
};

/// Decodes `bits`; false with `error` for encodings the emulator does not
/// model (a wrong fixed field, a base offset, 128B-with-32B-atom swizzle,
/// absolute leading-dimension mode).
inline bool decodeSmemDescriptor(uint64_t bits, SmemDescriptor &out,
                                 std::string &error) {
  out.startAddress = static_cast<uint32_t>(bits & 0x3fff) << 4;
  out.leadingByteOffset = static_cast<uint32_t>((bits >> 16) & 0x3fff) << 4;
  out.strideByteOffset = static_cast<uint32_t>((bits >> 32) & 0x3fff) << 4;
  uint32_t fixed = static_cast<uint32_t>((bits >> 46) & 0x7);
  out.baseOffset = static_cast<uint32_t>((bits >> 49) & 0x7);
  out.absoluteLeadingOffset = ((bits >> 52) & 1) != 0;
  uint32_t mode = static_cast<uint32_t>(bits >> 61);
  if (fixed != 1) {
    error = "shared-memory descriptor bits 46-48 are " + std::to_string(fixed) +
            " (the PTX ISA fixes them to 0b001 on sm_100a)";
    return false;
  }
  switch (mode) {
  case 0: out.swizzle = Swizzle::None; break;
  case 2: out.swizzle = Swizzle::Bytes128; break;
  case 4: out.swizzle = Swizzle::Bytes64; break;
  case 6: out.swizzle = Swizzle::Bytes32; break;
  default:
    error = "shared-memory descriptor swizzle mode " + std::to_string(mode) +
            " is not modelled (0 none, 2 128B, 4 64B, 6 32B are)";
    return false;
  }
  if (out.baseOffset != 0) {
    error = "shared-memory descriptor base offset " +
            std::to_string(out.baseOffset) +
            " is not modelled (operands must start on their swizzle "
            "pattern's repeat)";
    return false;
  }
  if (out.absoluteLeadingOffset) {
    error = "shared-memory descriptor absolute leading-dimension mode (bit "
            "52) is not modelled";
    return false;
  }
  return true;
}

/// Decodes a wgmma (sm_90) matrix descriptor (PTX ISA, "Matrix Descriptor
/// Format" of wgmma): the start address and the two byte offsets sit where
/// tcgen05's do and mean the same, bits 49-51 are the base offset, and the
/// swizzle is bits 62-63 (0 none, 1 128B, 2 64B, 3 32B); the other bits are
/// reserved. False with `error` for a base offset, which is not modelled.
inline bool decodeWgmmaDescriptor(uint64_t bits, SmemDescriptor &out,
                                  std::string &error) {
  out.startAddress = static_cast<uint32_t>(bits & 0x3fff) << 4;
  out.leadingByteOffset = static_cast<uint32_t>((bits >> 16) & 0x3fff) << 4;
  out.strideByteOffset = static_cast<uint32_t>((bits >> 32) & 0x3fff) << 4;
  out.baseOffset = static_cast<uint32_t>((bits >> 49) & 0x7);
  out.absoluteLeadingOffset = false;
  static constexpr Swizzle kModes[4] = {Swizzle::None, Swizzle::Bytes128,
                                        Swizzle::Bytes64, Swizzle::Bytes32};
  out.swizzle = kModes[bits >> 62];
  if (out.baseOffset != 0) {
    error = "wgmma descriptor base offset " + std::to_string(out.baseOffset) +
            " is not modelled (operands must start on their swizzle "
            "pattern's repeat)";
    return false;
  }
  return true;
}

/// Which dimension of an operand is contiguous in shared memory.
enum class Major : uint32_t { K = 0, MN = 1 };

/// The logical (unswizzled) byte address of element (mn, k) of an MMA operand
/// of `elementBytes`-byte elements, in the canonical layouts of the PTX ISA
/// ("Shared memory matrix layouts"), with T = 16 bytes:
///   K-major, no swizzle:  ((8,m),(T,2)) : ((1T,SBO),(1,LBO))
///   K-major, swizzled:    ((8,m),(T,2)) : ((wT,SBO),(1,T))   w = row / 16 B
///   MN-major, no swizzle: ((T,1,m),(8,k)) : ((1,T,SBO),(1T,LBO))
///   MN-major, swizzled:   ((T,w,m),(8,k)) : ((1,T,LBO),(wT,SBO))
/// The tensor core then swizzles the address (swizzleAddress).
inline uint32_t operandLogicalAddress(const SmemDescriptor &d, Major major,
                                      uint32_t mn, uint32_t k,
                                      uint32_t elementBytes) {
  uint32_t perChunk = 16 / elementBytes; // elements in 16 bytes
  uint32_t row = swizzleRowBytes(d.swizzle);
  uint32_t offset;
  if (major == Major::K) {
    if (d.swizzle == Swizzle::None)
      offset = (mn / 8) * d.strideByteOffset + (mn % 8) * 16 +
               (k / perChunk) * d.leadingByteOffset + (k % perChunk) * elementBytes;
    else
      offset = (mn / 8) * d.strideByteOffset + (mn % 8) * row + k * elementBytes;
  } else {
    if (d.swizzle == Swizzle::None) {
      offset = (mn / perChunk) * d.strideByteOffset +
               (mn % perChunk) * elementBytes + (k / 8) * d.leadingByteOffset +
               (k % 8) * 16;
    } else {
      uint32_t perRow = row / elementBytes;
      offset = (mn / perRow) * d.leadingByteOffset + (mn % perRow) * elementBytes +
               (k / 8) * d.strideByteOffset + (k % 8) * row;
    }
  }
  return d.startAddress + offset;
}

/// The physical byte address of element (mn, k) of an MMA operand.
inline uint32_t operandAddress(const SmemDescriptor &d, Major major,
                               uint32_t mn, uint32_t k, uint32_t elementBytes) {
  return swizzleAddress(d.swizzle,
                        operandLogicalAddress(d, major, mn, k, elementBytes));
}

/// The element types of MMA operands the emulator models, and their widths:
/// 16-bit (K = 16 per instruction) and 8-bit (K = 32), both 32 bytes of K.
enum class MmaElement : uint32_t { F16, BF16, E4M3, E5M2 };

inline uint32_t mmaElementBytes(MmaElement type) {
  return type == MmaElement::F16 || type == MmaElement::BF16 ? 2 : 1;
}
/// One MMA instruction's K for elements of `elementBytes`.
inline uint32_t mmaK(uint32_t elementBytes) { return 32 / elementBytes; }

/// A decoded tcgen05.mma instruction descriptor (PTX ISA, "Instruction
/// descriptor", the table for .kind::tf32, .kind::f16, .kind::f8f6f4 and
/// .kind::i8): bits 0-1 sparsity selector, 2 sparsity, 3 saturate (integer
/// kinds), 4-5 D type (0 f16, 1 f32), 7-9 A type and 10-12 B type (kind::f16:
/// 0 f16, 1 bf16; kind::f8f6f4: 0 e4m3, 1 e5m2, 3 e2m3, 4 e3m2, 5 e2m1),
/// 13/14 negate A/B, 15/16 A/B transposed (MN-major), 17-22 N >> 3, 24-28
/// M >> 4, 30-31 maximum shift (.ws only).
struct InstrDescriptor {
  bool dF32 = true;
  MmaElement aType = MmaElement::F16, bType = MmaElement::F16;
  bool negateA = false, negateB = false;
  Major aMajor = Major::K, bMajor = Major::K;
  uint32_t m = 0, n = 0;
};

namespace detail {
/// The fields both kinds share: sparsity and saturate (refused), D's type,
/// negation, majors, M and N (checked against cta_group::1's shapes).
inline bool decodeInstrDescriptorCommon(uint32_t bits, InstrDescriptor &out,
                                        const char *kind, std::string &error,
                                        unsigned ctaGroup) {
  if (bits & 0x7) {
    error = "instruction descriptor asks for sparsity (bits 0-2), which is "
            "not modelled";
    return false;
  }
  if (bits & 0x8) {
    error = std::string("instruction descriptor sets saturate (bit 3), "
                        "which ") +
            kind + " does not allow (integer kinds only)";
    return false;
  }
  uint32_t dType = (bits >> 4) & 3;
  if (dType > 1) {
    error = "instruction descriptor D type " + std::to_string(dType) +
            " is not a " + kind + " accumulator type (0 f16, 1 f32)";
    return false;
  }
  out.dF32 = dType == 1;
  out.negateA = (bits >> 13) & 1;
  out.negateB = (bits >> 14) & 1;
  out.aMajor = static_cast<Major>((bits >> 15) & 1);
  out.bMajor = static_cast<Major>((bits >> 16) & 1);
  out.n = ((bits >> 17) & 0x3f) << 3;
  out.m = ((bits >> 24) & 0x1f) << 4;
  if (ctaGroup == 2) {
    // A CTA pair's MMA: M = 128 or 256 rows over the two CTAs.
    if (out.m != 128 && out.m != 256) {
      error = "instruction descriptor M = " + std::to_string(out.m) +
              " (cta_group::2 allows 128 or 256)";
      return false;
    }
    if (out.n < 16 || out.n > 256 || out.n % 16 != 0) {
      error = "instruction descriptor N = " + std::to_string(out.n) +
              " (cta_group::2 allows 16..256 in steps of 16)";
      return false;
    }
    return true;
  }
  if (out.m != 64 && out.m != 128) {
    error = "instruction descriptor M = " + std::to_string(out.m) +
            " (cta_group::1 allows 64 or 128)";
    return false;
  }
  if (out.n < 8 || out.n > 256 || out.n % (out.m == 64 ? 8 : 16) != 0) {
    error = "instruction descriptor N = " + std::to_string(out.n) +
            " (M = " + std::to_string(out.m) +
            " allows 8..256 in steps of " + (out.m == 64 ? "8)" : "16)");
    return false;
  }
  return true;
}
} // namespace detail

/// `tcgen05.mma .kind::f16`: A and B f16 or bf16.
inline bool decodeInstrDescriptorF16(uint32_t bits, InstrDescriptor &out,
                                     std::string &error, unsigned ctaGroup = 1) {
  if (!detail::decodeInstrDescriptorCommon(bits, out, "kind::f16", error, ctaGroup))
    return false;
  uint32_t aType = (bits >> 7) & 7, bType = (bits >> 10) & 7;
  if (aType > 1 || bType > 1) {
    error = "instruction descriptor types A=" + std::to_string(aType) +
            " B=" + std::to_string(bType) +
            " are not kind::f16 types (0 f16, 1 bf16)";
    return false;
  }
  out.aType = aType ? MmaElement::BF16 : MmaElement::F16;
  out.bType = bType ? MmaElement::BF16 : MmaElement::F16;
  return true;
}

/// `tcgen05.mma .kind::f8f6f4` with 8-bit A and B, each e4m3 or e5m2 (they
/// may differ). The 6- and 4-bit formats the kind also takes (e2m3, e3m2,
/// e2m1, padded to a byte in shared memory) are refused. Both operands may
/// be MN-major (the ISA's transpose table allows it for kind::f8f6f4; an
/// 8-bit transposed B needs N a multiple of 16 with cta_group::1).
inline bool decodeInstrDescriptorF8F6F4(uint32_t bits, InstrDescriptor &out,
                                        std::string &error, unsigned ctaGroup = 1) {
  if (!detail::decodeInstrDescriptorCommon(bits, out, "kind::f8f6f4", error, ctaGroup))
    return false;
  auto element = [&](uint32_t code, const char *which, MmaElement &type) {
    if (code <= 1) {
      type = code ? MmaElement::E5M2 : MmaElement::E4M3;
      return true;
    }
    static const char *const names[8] = {"e4m3", "e5m2", "reserved",
                                         "e2m3", "e3m2", "e2m1",
                                         "reserved", "reserved"};
    error = std::string("instruction descriptor ") + which + " type " +
            std::to_string(code) + " (" + names[code] + ")" +
            (code >= 3 && code <= 5
                 ? " is a 6- or 4-bit format, which is not modelled"
                 : " is not a kind::f8f6f4 type") +
            " (0 e4m3, 1 e5m2 are)";
    return false;
  };
  if (!element((bits >> 7) & 7, "A", out.aType) ||
      !element((bits >> 10) & 7, "B", out.bType))
    return false;
  if (out.bMajor == Major::MN && out.n % 16 != 0) {
    error = "instruction descriptor N = " + std::to_string(out.n) +
            " with an 8-bit MN-major B (cta_group::1 allows 16..256 in steps "
            "of 16)";
    return false;
  }
  return true;
}

/// Where element (row, k) of a warp's 16 rows of wgmma's A lies when A comes
/// from registers (PTX ISA, "Register Fragments", .m64nNk16 and .m64nNk32):
/// the lane, the register j of {a0, a1, a2, a3}, and the element within it
/// (the lowest bits first). With e = 4 / elementBytes elements a register
/// and K = 8e, lane l's register j holds row l/4 + 8(j mod 2), columns
/// (K/2)(j/2) + e(l mod 4) + i for its elements i < e: for 16-bit elements
/// the ISA's a0..a7, for 8-bit ones a0..a15 (CuTe's ALayout_64x16 and
/// ALayout_64x32).
struct FragmentSlot {
  uint32_t lane, reg, element;
};
inline FragmentSlot wgmmaFragmentSlotA(uint32_t row, uint32_t k,
                                       uint32_t elementBytes) {
  uint32_t perRegister = 4 / elementBytes, halfK = 4 * perRegister;
  return {4 * (row % 8) + (k % halfK) / perRegister,
          2 * (k / halfK) + row / 8, k % perRegister};
}

/// The shared-memory address at which a TMA tile copy places byte `offset` of
/// its box (the box laid out densely, innermost dimension fastest) when the
/// destination starts at `base`: the dense address, swizzled.
inline uint32_t tmaBoxAddress(Swizzle swizzle, uint32_t base, uint32_t offset) {
  return swizzleAddress(swizzle, base + offset);
}

} // namespace mlir::fa4::emu

#endif // FA4_EMU_LAYOUTS_H
