//===- Descriptors.h - tensor-core descriptor bit encodings -----*- C++ -*-===//
//
// The descriptors the tensor cores read, encoded in one place: the two a
// tcgen05.mma reads (sm_100a) and the matrix descriptor of wgmma.mma_async
// (sm_90a). The field layouts are those of the PTX ISA ("Shared memory
// descriptor" and "Instruction descriptor" of the tcgen05 family, "Matrix
// Descriptor Format" of wgmma); the unit tests work the expected values out
// by hand, and test/Emu/cute-crosscheck.test compares them with CuTe's.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_SUPPORT_DESCRIPTORS_H
#define FA4_SUPPORT_DESCRIPTORS_H

#include <cstdint>

namespace mlir::fa4::tcgen05 {

/// Shared-memory swizzle modes, by their value in bits 61-63.
enum class Swizzle : uint64_t { None = 0, Bytes128 = 2, Bytes64 = 4, Bytes32 = 6 };

/// The 64-bit shared-memory matrix descriptor:
///   bits  0-13  start address >> 4
///   bits 16-29  leading-dimension byte offset >> 4
///   bits 32-45  stride-dimension byte offset >> 4
///   bits 46-48  fixed 0b001
///   bits 49-51  base offset (0: the tiles are 1024-byte aligned)
///   bit  52     leading-dimension mode (0: relative offset)
///   bits 61-63  swizzle mode
uint64_t smemDescriptor(uint32_t startAddress, uint32_t leadingByteOffset,
                        uint32_t strideByteOffset, Swizzle swizzle);

/// The descriptor with a zero start address: what the kernel ORs the
/// run-time address into.
inline uint64_t smemDescriptorTemplate(uint32_t leadingByteOffset,
                                       uint32_t strideByteOffset,
                                       Swizzle swizzle) {
  return smemDescriptor(0, leadingByteOffset, strideByteOffset, swizzle);
}

/// Bits 0-13 of a descriptor from a shared-memory byte address.
inline uint64_t smemAddressField(uint32_t address) {
  return (address >> 4) & 0x3fff;
}

enum class Element : uint32_t { F16 = 0, BF16 = 1 };
/// Which dimension of an operand is contiguous in shared memory.
enum class Major : uint32_t { K = 0, MN = 1 };

/// The 32-bit instruction descriptor of `tcgen05.mma .kind::f16`, dense:
///   bits  4-5   D type (1: f32)
///   bits  7-9   A type (0: f16, 1: bf16)
///   bits 10-12  B type
///   bit  15     A transposed (MN-major)
///   bit  16     B transposed (MN-major)
///   bits 17-22  N >> 3
///   bits 24-28  M >> 4
/// The fields of any kind's dense descriptor, A's and B's type codes the
/// kind's.
uint32_t instructionDescriptor(uint32_t aCode, uint32_t bCode, Major aMajor,
                               Major bMajor, uint32_t m, uint32_t n);
inline uint32_t instructionDescriptorF16(Element a, Element b, Major aMajor,
                                         Major bMajor, uint32_t m, uint32_t n) {
  return instructionDescriptor(uint32_t(a), uint32_t(b), aMajor, bMajor, m, n);
}

/// The 8-bit types of `tcgen05.mma .kind::f8f6f4`, by their code.
enum class Element8 : uint32_t { E4M3 = 0, E5M2 = 1 };
/// The instruction descriptor of `.kind::f8f6f4`, dense: the fields of
/// kind::f16's, with A and B's types the 8-bit codes. Either operand may be
/// MN-major (the ISA reserves K-major for the 4- and 6-bit types only).
inline uint32_t instructionDescriptorF8F6F4(Element8 a, Element8 b,
                                            Major aMajor, Major bMajor,
                                            uint32_t m, uint32_t n) {
  return instructionDescriptor(uint32_t(a), uint32_t(b), aMajor, bMajor, m, n);
}

/// The 128-byte swizzle of TMA and of the tensor core, as a function of the
/// byte offset inside a 1024-byte atom of 8 rows of 128 bytes: the 16-byte
/// chunk index is XORed with the row index.
inline uint32_t swizzle128(uint32_t offset) {
  return offset ^ (((offset >> 7) & 7) << 4);
}

} // namespace mlir::fa4::tcgen05

namespace mlir::fa4::wgmma {

/// Shared-memory swizzle modes, by their value in bits 62-63 (the same
/// modes as tcgen05's, numbered differently).
enum class Swizzle : uint64_t { None = 0, Bytes128 = 1, Bytes64 = 2, Bytes32 = 3 };

/// The 64-bit matrix descriptor of wgmma.mma_async. The start address and
/// the two byte offsets sit where tcgen05's do and mean the same; unlike
/// tcgen05's it has no fixed bits, and its swizzle field is two bits wide:
///   bits  0-13  start address >> 4
///   bits 16-29  leading-dimension byte offset >> 4
///   bits 32-45  stride-dimension byte offset >> 4
///   bits 49-51  base offset (0: the tiles are 1024-byte aligned)
///   bits 62-63  swizzle mode
uint64_t smemDescriptor(uint32_t startAddress, uint32_t leadingByteOffset,
                        uint32_t strideByteOffset, Swizzle swizzle);

/// The descriptor with a zero start address: what the kernel ORs the
/// run-time address field (tcgen05::smemAddressField) into.
inline uint64_t smemDescriptorTemplate(uint32_t leadingByteOffset,
                                       uint32_t strideByteOffset,
                                       Swizzle swizzle) {
  return smemDescriptor(0, leadingByteOffset, strideByteOffset, swizzle);
}

} // namespace mlir::fa4::wgmma

#endif // FA4_SUPPORT_DESCRIPTORS_H
