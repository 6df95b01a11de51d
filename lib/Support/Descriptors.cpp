//===- Descriptors.cpp - tensor-core descriptor bit encodings -------------===//

#include "fa4/Support/Descriptors.h"

using namespace mlir::fa4::tcgen05;

uint64_t mlir::fa4::tcgen05::smemDescriptor(uint32_t startAddress,
                                            uint32_t leadingByteOffset,
                                            uint32_t strideByteOffset,
                                            Swizzle swizzle) {
  uint64_t descriptor = smemAddressField(startAddress);
  descriptor |= uint64_t((leadingByteOffset >> 4) & 0x3fff) << 16;
  descriptor |= uint64_t((strideByteOffset >> 4) & 0x3fff) << 32;
  descriptor |= uint64_t(1) << 46;
  descriptor |= static_cast<uint64_t>(swizzle) << 61;
  return descriptor;
}

uint32_t mlir::fa4::tcgen05::instructionDescriptor(uint32_t aCode,
                                                   uint32_t bCode,
                                                   Major aMajor, Major bMajor,
                                                   uint32_t m, uint32_t n) {
  uint32_t descriptor = 1u << 4; // f32 accumulator
  descriptor |= aCode << 7;
  descriptor |= bCode << 10;
  descriptor |= static_cast<uint32_t>(aMajor) << 15;
  descriptor |= static_cast<uint32_t>(bMajor) << 16;
  descriptor |= ((n >> 3) & 0x3f) << 17;
  descriptor |= ((m >> 4) & 0x1f) << 24;
  return descriptor;
}

uint64_t mlir::fa4::wgmma::smemDescriptor(uint32_t startAddress,
                                          uint32_t leadingByteOffset,
                                          uint32_t strideByteOffset,
                                          Swizzle swizzle) {
  uint64_t descriptor = tcgen05::smemAddressField(startAddress);
  descriptor |= uint64_t((leadingByteOffset >> 4) & 0x3fff) << 16;
  descriptor |= uint64_t((strideByteOffset >> 4) & 0x3fff) << 32;
  descriptor |= static_cast<uint64_t>(swizzle) << 62;
  return descriptor;
}
