//===- DescriptorsTest.cpp - tensor-core descriptor encodings, by hand ----===//

#include "fa4/Support/Descriptors.h"

#include <gtest/gtest.h>

using namespace mlir::fa4::tcgen05;

namespace {

TEST(Descriptors, KMajorSwizzled128Operand) {
  // A K-major Q or K tile at shared address 0x400 with 128-byte swizzle:
  // rows of 128 bytes, 8-row atoms of 1024 bytes, so the stride-dimension
  // offset (from one 8-row group to the next) is 1024; the leading offset is
  // unused for swizzled K-major operands and conventionally 16 bytes.
  //   start   0x400 >> 4 = 0x40               -> bits  0-13: 0x0000000000000040
  //   LBO     16 >> 4 = 1, << 16              ->             0x0000000000010000
  //   SBO     1024 >> 4 = 0x40, << 32         ->             0x0000004000000000
  //   fixed   1 << 46                         ->             0x0000400000000000
  //   swizzle 2 (128 B) << 61                 ->             0x4000000000000000
  EXPECT_EQ(smemDescriptor(0x400, 16, 1024, Swizzle::Bytes128),
            0x4000404000010040ull);
}

TEST(Descriptors, MnMajorSwizzled128Operand) {
  // V as an MN-major B operand, head dim 128 = two 64-column boxes of
  // 128 x 128 bytes: the leading offset steps from one box to the next along
  // N (16384 bytes), the stride offset from one 8-row group of keys to the
  // next (1024). Start address 0x1c000 (a K/V stage at 112 KB):
  //   start   0x1c000 >> 4 = 0x1c00           -> 0x0000000000001c00
  //   LBO     16384 >> 4 = 0x400, << 16       -> 0x0000000004000000
  //   SBO     1024 >> 4 = 0x40, << 32         -> 0x0000004000000000
  //   fixed   1 << 46                         -> 0x0000400000000000
  //   swizzle 2 << 61                         -> 0x4000000000000000
  EXPECT_EQ(smemDescriptor(0x1c000, 16384, 1024, Swizzle::Bytes128),
            0x4000404004001c00ull);
}

TEST(Descriptors, AddressFieldDropsTheLowFourBits) {
  // 14 bits of address >> 4 cover 256 KB of shared memory.
  EXPECT_EQ(smemAddressField(0x3fff0), 0x3fffu);
  EXPECT_EQ(smemAddressField(0x12345), 0x1234u);
  EXPECT_EQ(smemDescriptorTemplate(16, 1024, Swizzle::Bytes128) |
                smemAddressField(0x400),
            smemDescriptor(0x400, 16, 1024, Swizzle::Bytes128));
}

TEST(Descriptors, ScoreMmaInstruction) {
  // S = Q·Kᵀ, fp16, both K-major, M = N = 128, f32 accumulator:
  //   D f32        1 << 4                 = 0x00000010
  //   A, B f16     0                      = 0
  //   N >> 3 = 16, << 17                  = 0x00200000
  //   M >> 4 = 8,  << 24                  = 0x08000000
  EXPECT_EQ(instructionDescriptorF16(Element::F16, Element::F16, Major::K,
                                     Major::K, 128, 128),
            0x08200010u);
}

TEST(Descriptors, ValueMmaInstruction) {
  // O += P·V in bf16, P from TMEM (K-major), V MN-major, N = head dim 64:
  //   D f32        1 << 4                 = 0x00000010
  //   A bf16       1 << 7                 = 0x00000080
  //   B bf16       1 << 10                = 0x00000400
  //   B transposed 1 << 16                = 0x00010000
  //   N >> 3 = 8,  << 17                  = 0x00100000
  //   M >> 4 = 8,  << 24                  = 0x08000000
  EXPECT_EQ(instructionDescriptorF16(Element::BF16, Element::BF16, Major::K,
                                     Major::MN, 128, 64),
            0x08110490u);
}

TEST(Descriptors, Fp8ValueMmaInstruction) {
  // FP8's O += P·V, kind::f8f6f4: P e4m3 from TMEM (K-major), V e4m3
  // MN-major, N = a whole 128-column 8-bit atom:
  //   D f32        1 << 4                 = 0x00000010
  //   A, B e4m3    0 (e5m2 would be 1)    = 0
  //   B transposed 1 << 16                = 0x00010000
  //   N >> 3 = 16, << 17                  = 0x00200000
  //   M >> 4 = 8,  << 24                  = 0x08000000
  EXPECT_EQ(instructionDescriptorF8F6F4(Element8::E4M3, Element8::E4M3,
                                        Major::K, Major::MN, 128, 128),
            0x08210010u);
  // e5m2 A and B take code 1 in bits 7-9 and 10-12.
  EXPECT_EQ(instructionDescriptorF8F6F4(Element8::E5M2, Element8::E5M2,
                                        Major::K, Major::K, 128, 128),
            0x08200490u);
}

TEST(Descriptors, Swizzle128) {
  // Row r of an 8-row atom XORs its 16-byte chunk index with r.
  EXPECT_EQ(swizzle128(0), 0u);
  EXPECT_EQ(swizzle128(128 * 1 + 16 * 0), 128u + 16u);     // row 1, chunk 0 -> 1
  EXPECT_EQ(swizzle128(128 * 3 + 16 * 5), 128u * 3 + 16u * 6); // 5 ^ 3 = 6
  EXPECT_EQ(swizzle128(1024 + 128 * 7 + 16 * 7 + 4), 1024u + 128 * 7 + 4);
}

// The wgmma matrix descriptors of fa4's sm_90a kernels: the same fields as
// tcgen05's above, without the fixed 1 << 46, and 128-byte swizzle as 1 in
// bits 62-63 rather than 2 in bits 61-63 (both 1 << 62).
namespace wg = mlir::fa4::wgmma;

TEST(WgmmaDescriptors, KMajorSwizzled128Operand) {
  // Q (A) or K (B) of Q·Kᵀ, K-major, 128-byte rows, 8-row atoms 1024 bytes
  // apart; the leading offset is unused for swizzled K-major operands, 16 by
  // convention. Start 0x2400 (the second consumer warpgroup's rows 64.. of a
  // Q box at 0x400: 0x400 + 64 · 128):
  //   start   0x2400 >> 4 = 0x240             -> bits  0-13: 0x0000000000000240
  //   LBO     16 >> 4 = 1, << 16              ->             0x0000000000010000
  //   SBO     1024 >> 4 = 0x40, << 32         ->             0x0000004000000000
  //   swizzle 1 (128 B) << 62                 ->             0x4000000000000000
  EXPECT_EQ(wg::smemDescriptor(0x2400, 16, 1024, wg::Swizzle::Bytes128),
            0x4000004000010240ull);
  // What Hopper/Warpgroup.cpp ORs the address into, and what nvcc's PTX for
  // CuTe's K-major SW128 GMMA atoms ORs it into too.
  EXPECT_EQ(wg::smemDescriptorTemplate(16, 1024, wg::Swizzle::Bytes128),
            0x4000004000010000ull);
}

TEST(WgmmaDescriptors, MnMajorSwizzled128Operand) {
  // V, the MN-major B of O += P·V at head dim 128 with 128 keys: two
  // 64-column boxes of 128 keys x 128 bytes, so the leading offset (from one
  // box to the next along N) is 128 · 128 = 16384, the stride offset (from
  // one 8-key group to the next) 1024. Start 0x1c000 (a stage at 112 KB):
  //   start   0x1c000 >> 4 = 0x1c00           -> 0x0000000000001c00
  //   LBO     16384 >> 4 = 0x400, << 16       -> 0x0000000004000000
  //   SBO     1024 >> 4 = 0x40, << 32         -> 0x0000004000000000
  //   swizzle 1 << 62                         -> 0x4000000000000000
  EXPECT_EQ(wg::smemDescriptor(0x1c000, 16384, 1024, wg::Swizzle::Bytes128),
            0x4000004004001c00ull);
  EXPECT_EQ(wg::smemDescriptorTemplate(16384, 1024, wg::Swizzle::Bytes128),
            0x4000004004000000ull);
}

TEST(WgmmaDescriptors, SwizzleModes) {
  // Bits 62-63: 0 none, 1 128 B, 2 64 B, 3 32 B. An interleaved K-major
  // operand (no swizzle) uses both offsets: LBO 128 (0x8) between the two
  // 8-row x 16-byte core matrices of a K step, SBO 256 (0x10) between
  // 8-row groups. Swizzled, SBO is 8 rows of the swizzle's width.
  EXPECT_EQ(wg::smemDescriptor(0, 128, 256, wg::Swizzle::None),
            0x0000001000080000ull);
  EXPECT_EQ(wg::smemDescriptor(0, 16, 512, wg::Swizzle::Bytes64),
            0x8000002000010000ull);
  EXPECT_EQ(wg::smemDescriptor(0, 16, 256, wg::Swizzle::Bytes32),
            0xc000001000010000ull);
}

} // namespace
