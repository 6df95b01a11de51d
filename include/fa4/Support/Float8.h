//===- Float8.h - the PTX ISA's 8-bit floating-point formats ---*- C++ -*-===//
//
// fa4's reading of .e4m3 and .e5m2 (PTX ISA, "Alternate Floating Point
// Data Formats"), the element types of FP8 wgmma and tcgen05.mma
// .kind::f8f6f4 and of cvt's .e4m3x2 / .e5m2x2:
//
//   e4m3: sign, 4 exponent bits of bias 7, 3 mantissa bits. No infinities:
//         S.1111.111 is NaN, so the largest finite value is S.1111.110 =
//         448; subnormals down to 2^-9.
//   e5m2: sign, 5 exponent bits of bias 15, 2 mantissa bits, laid out as the
//         upper byte of an IEEE f16: S.11111.00 is infinity, S.11111.xx
//         (xx != 0) NaN, the largest finite value 57344; subnormals down to
//         2^-16.
//
// Decoding is exact; encoding is cvt.rn.satfinite's: round to nearest even,
// then finite magnitudes past the largest finite value, and infinities,
// become the largest finite value of their sign, and every NaN becomes
// 0x7f. An H200 converts every f32 and f16 edge case (each value, each
// midpoint between neighbours and the floats either side of it, subnormals,
// NaNs and infinities, with and without .relu) to the same bits.
//
// Header-only and free of LLVM: the emulator, the test tools and fa4-sim
// (which rounds FP8 inputs and probabilities with it) share it.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_SUPPORT_FLOAT8_H
#define FA4_SUPPORT_FLOAT8_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace mlir::fa4 {

enum class Float8 : uint8_t { E4M3, E5M2 };

/// The constants that tell the two formats apart.
struct Float8Format {
  int mantissaBits;
  int bias;
  /// The encoding of the largest finite magnitude, and that magnitude.
  uint8_t maxFiniteBits;
  double maxFinite;
  /// The NaN cvt writes (its sign bit clear).
  uint8_t nanBits;
};

inline Float8Format float8Format(Float8 format) {
  if (format == Float8::E4M3)
    return {3, 7, 0x7e, 448.0, 0x7f};
  return {2, 15, 0x7b, 57344.0, 0x7f};
}

/// The value of `bits` (exact: every e4m3 and e5m2 value is an f32).
inline float float8ToFloat(Float8 format, uint8_t bits) {
  const Float8Format f = float8Format(format);
  const int exponent = (bits & 0x7f) >> f.mantissaBits;
  const int mantissa = bits & ((1 << f.mantissaBits) - 1);
  const float sign = (bits & 0x80) ? -1.0f : 1.0f;
  if (format == Float8::E4M3 ? (bits & 0x7f) == 0x7f : exponent == 31) {
    if (format == Float8::E5M2 && mantissa == 0)
      return sign * std::numeric_limits<float>::infinity();
    return std::copysign(std::numeric_limits<float>::quiet_NaN(), sign);
  }
  // Subnormals (exponent field 0) have no implicit bit and the exponent of
  // the smallest normal.
  const int significand =
      exponent ? (1 << f.mantissaBits) | mantissa : mantissa;
  const int scale = (exponent ? exponent : 1) - f.bias - f.mantissaBits;
  return sign * std::ldexp(static_cast<float>(significand), scale);
}

/// `x` as cvt.rn.satfinite writes it (see the file comment); `relu` first
/// replaces a negative x, -0 included, by +0, as .relu does. Every f32 and
/// f16 is a double, so the rounding here is the conversion's only one.
inline uint8_t float8FromDouble(Float8 format, double x, bool relu = false) {
  const Float8Format f = float8Format(format);
  if (std::isnan(x))
    return f.nanBits;
  if (relu && std::signbit(x))
    x = 0;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double magnitude = std::fabs(x);
  if (magnitude == 0)
    return sign;
  if (magnitude > f.maxFinite) // infinities too
    return sign | f.maxFiniteBits;
  // The spacing of the format's values around `magnitude`: 2^(e - m) for a
  // binade 2^e, and the subnormals' spacing below the smallest normal.
  const int minExponent = 1 - f.bias;
  const int exponent = std::max(std::ilogb(magnitude), minExponent);
  const double quantum = std::ldexp(1.0, exponent - f.mantissaBits);
  // nearbyint rounds half to even (the default rounding mode). A rounded
  // value may carry into the next binade, or past the largest finite value
  // (e4m3's 464 and up, e5m2's 61440 and up), which saturates.
  const double rounded = std::nearbyint(magnitude / quantum) * quantum;
  if (rounded > f.maxFinite)
    return sign | f.maxFiniteBits;
  if (rounded == 0)
    return sign;
  const int e = std::ilogb(rounded);
  if (e < minExponent) // a subnormal: exponent field 0
    return sign | static_cast<uint8_t>(
                      rounded / std::ldexp(1.0, minExponent - f.mantissaBits));
  const int mantissa =
      static_cast<int>(rounded / std::ldexp(1.0, e - f.mantissaBits)) -
      (1 << f.mantissaBits);
  return sign |
         static_cast<uint8_t>(((e + f.bias) << f.mantissaBits) | mantissa);
}

/// `value` rounded to e4m3 as cvt.rn.satfinite.e4m3x2.f32 rounds it.
inline float roundToE4m3(float value) {
  return float8ToFloat(Float8::E4M3, float8FromDouble(Float8::E4M3, value));
}

} // namespace mlir::fa4

#endif // FA4_SUPPORT_FLOAT8_H
