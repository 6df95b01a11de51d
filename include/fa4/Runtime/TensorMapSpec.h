//===- TensorMapSpec.h - what a TMA tensor map is made from -----*- C++ -*-===//
//
// The inputs of the driver's cuTensorMapEncodeTiled, as plain data: what the
// launch manifest says of each tensor map, bound to one launch's sizes and
// base address. The runtime fills it once; a backend encodes it (the CUDA
// driver into its opaque CUtensorMap, fa4-emu into its own 128 bytes).
//
//===----------------------------------------------------------------------===//

#ifndef FA4_RUNTIME_TENSORMAPSPEC_H
#define FA4_RUNTIME_TENSORMAPSPEC_H

#include <cstdint>

namespace mlir::fa4::runtime {

/// CUtensorMapDataType's values for the types fa4 uses.
enum class TensorMapDataType : uint32_t {
  UInt8 = 0,
  UInt16 = 1,
  UInt32 = 2,
  Int32 = 3,
  UInt64 = 4,
  Int64 = 5,
  Float16 = 6,
  Float32 = 7,
  Float64 = 8,
  BFloat16 = 9,
};

/// CUtensorMapSwizzle.
enum class TensorMapSwizzle : uint32_t { None = 0, Bytes32 = 1, Bytes64 = 2, Bytes128 = 3 };
/// "none", "32B", "64B", "128B": as manifests and contracts spell it.
inline const char *swizzleName(TensorMapSwizzle swizzle) {
  switch (swizzle) {
  case TensorMapSwizzle::None:
    return "none";
  case TensorMapSwizzle::Bytes32:
    return "32B";
  case TensorMapSwizzle::Bytes64:
    return "64B";
  case TensorMapSwizzle::Bytes128:
    return "128B";
  }
  return "none";
}

/// CUtensorMapFloatOOBfill: out-of-bounds elements read as zero, or as NaN
/// (the latter only for floating-point types).
enum class TensorMapOobFill : uint32_t { Zero = 0, NanRequestZeroFma = 1 };

struct TensorMapSpec {
  TensorMapDataType dataType = TensorMapDataType::Float16;
  uint32_t rank = 0;
  uint64_t globalAddress = 0;
  /// Innermost first, in elements.
  uint64_t globalDims[5] = {};
  /// Bytes between consecutive indices of dimensions 1..rank-1 (dimension
  /// 0 is contiguous).
  uint64_t globalStrides[4] = {};
  uint32_t boxDims[5] = {};
  uint32_t elementStrides[5] = {1, 1, 1, 1, 1};
  TensorMapSwizzle swizzle = TensorMapSwizzle::None;
  TensorMapOobFill oobFill = TensorMapOobFill::Zero;
};

/// Bytes per element of `type`.
inline uint32_t elementBytes(TensorMapDataType type) {
  switch (type) {
  case TensorMapDataType::UInt8: return 1;
  case TensorMapDataType::UInt16:
  case TensorMapDataType::Float16:
  case TensorMapDataType::BFloat16: return 2;
  case TensorMapDataType::UInt32:
  case TensorMapDataType::Int32:
  case TensorMapDataType::Float32: return 4;
  default: return 8;
  }
}

} // namespace mlir::fa4::runtime

#endif // FA4_RUNTIME_TENSORMAPSPEC_H
