//===- Float8Test.cpp - fa4-emu's e4m3 and e5m2 --------------------------===//
//
// The 8-bit floats of fa4/Support/Float8.h against the PTX ISA's definition of
// the formats, worked out here another way: every one of the 256 encodings
// of each decoded, every encodable value encoded back, and cvt.rn.satfinite's
// rounding at every midpoint between neighbours, at the subnormals, at the
// top of the range and for the special values (these as an H200 converts
// them).
//
//===----------------------------------------------------------------------===//

#include "fa4/Support/Float8.h"
#include "fa4/Support/AttentionMath.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <vector>

using namespace mlir::fa4;

namespace {

/// e4m3 by its definition: S.EEEE.MMM, bias 7, S.1111.111 NaN, no
/// infinities; exponent 0 is subnormal (0.MMM x 2^-6).
double e4m3ByDefinition(uint32_t bits) {
  uint32_t sign = bits >> 7, exponent = (bits >> 3) & 15, mantissa = bits & 7;
  if (exponent == 15 && mantissa == 7)
    return NAN;
  double magnitude =
      exponent ? (1 + mantissa / 8.0) * std::pow(2.0, int(exponent) - 7)
               : mantissa / 8.0 * std::pow(2.0, -6);
  return sign ? -magnitude : magnitude;
}

/// The finite non-negative values of a format, ascending, with their bits.
std::vector<std::pair<double, uint8_t>> ladder(Float8 format) {
  std::vector<std::pair<double, uint8_t>> values;
  for (uint32_t bits = 0; bits < 0x80; ++bits) {
    float v = float8ToFloat(format, static_cast<uint8_t>(bits));
    if (std::isfinite(v))
      values.push_back({v, static_cast<uint8_t>(bits)});
  }
  return values;
}

uint8_t encode(Float8 format, double x, bool relu = false) {
  return float8FromDouble(format, x, relu);
}

} // namespace

TEST(Float8, E4m3DecodesEveryEncodingByTheDefinition) {
  for (uint32_t bits = 0; bits < 256; ++bits) {
    double expected = e4m3ByDefinition(bits);
    float got = float8ToFloat(Float8::E4M3, static_cast<uint8_t>(bits));
    if (std::isnan(expected))
      EXPECT_TRUE(std::isnan(got)) << bits;
    else
      EXPECT_EQ(double(got), expected) << bits;
  }
  EXPECT_EQ(float8ToFloat(Float8::E4M3, 0x7e), 448.0f);
  EXPECT_EQ(float8ToFloat(Float8::E4M3, 0xfe), -448.0f);
  EXPECT_EQ(float8ToFloat(Float8::E4M3, 0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(float8ToFloat(Float8::E4M3, 0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(float8ToFloat(Float8::E4M3, 0x38), 1.0f);
  EXPECT_TRUE(std::isnan(float8ToFloat(Float8::E4M3, 0x7f)));
  EXPECT_TRUE(std::isnan(float8ToFloat(Float8::E4M3, 0xff)));
  // S.1111.110 is finite: only one NaN per sign, no infinity.
  int nans = 0;
  for (uint32_t bits = 0; bits < 256; ++bits)
    nans += std::isnan(float8ToFloat(Float8::E4M3, static_cast<uint8_t>(bits)));
  EXPECT_EQ(nans, 2);
}

TEST(Float8, E5m2IsTheUpperByteOfAnF16) {
  for (uint32_t bits = 0; bits < 256; ++bits) {
    float expected =
        mlir::fa4::halfBitsToFloat(static_cast<uint16_t>(bits << 8));
    float got = float8ToFloat(Float8::E5M2, static_cast<uint8_t>(bits));
    if (std::isnan(expected))
      EXPECT_TRUE(std::isnan(got)) << bits;
    else
      EXPECT_EQ(got, expected) << bits;
  }
  EXPECT_EQ(float8ToFloat(Float8::E5M2, 0x7b), 57344.0f);
  EXPECT_EQ(float8ToFloat(Float8::E5M2, 0x01), std::ldexp(1.0f, -16));
  EXPECT_EQ(float8ToFloat(Float8::E5M2, 0x7c), INFINITY);
  EXPECT_EQ(float8ToFloat(Float8::E5M2, 0xfc), -INFINITY);
}

TEST(Float8, EveryValueEncodesToItsOwnBits) {
  for (Float8 format : {Float8::E4M3, Float8::E5M2})
    for (uint32_t bits = 0; bits < 256; ++bits) {
      float v = float8ToFloat(format, static_cast<uint8_t>(bits));
      if (!std::isfinite(v))
        continue;
      EXPECT_EQ(encode(format, v), bits) << int(format) << " " << bits;
    }
}

TEST(Float8, MidpointsRoundToEvenAndTheirNeighboursToNearest) {
  for (Float8 format : {Float8::E4M3, Float8::E5M2}) {
    auto values = ladder(format);
    for (size_t i = 0; i + 1 < values.size(); ++i) {
      auto [low, lowBits] = values[i];
      auto [high, highBits] = values[i + 1];
      double middle = (low + high) / 2;
      uint8_t even = (lowBits & 1) ? highBits : lowBits;
      for (double sign : {1.0, -1.0}) {
        uint8_t signBit = sign < 0 ? 0x80 : 0;
        EXPECT_EQ(encode(format, sign * middle), even | signBit)
            << int(format) << " between " << low << " and " << high;
        EXPECT_EQ(encode(format, sign * std::nextafter(middle, 0.0)),
                  lowBits | signBit);
        EXPECT_EQ(encode(format, sign * std::nextafter(middle, INFINITY)),
                  highBits | signBit);
      }
    }
  }
}

TEST(Float8, SubnormalsAndZero) {
  // e4m3's smallest subnormal is 2^-9: half of it is a tie with zero (even),
  // anything above rounds up; 1.5 x 2^-9 ties to 2 x 2^-9 (even).
  EXPECT_EQ(encode(Float8::E4M3, std::ldexp(1.0, -10)), 0x00);
  EXPECT_EQ(encode(Float8::E4M3, -std::ldexp(1.0, -10)), 0x80);
  EXPECT_EQ(encode(Float8::E4M3, std::nextafter(std::ldexp(1.0, -10), 1.0)),
            0x01);
  EXPECT_EQ(encode(Float8::E4M3, 1.5 * std::ldexp(1.0, -9)), 0x02);
  EXPECT_EQ(encode(Float8::E4M3, 2.5 * std::ldexp(1.0, -9)), 0x02);
  // The largest subnormal (7 x 2^-9) and the smallest normal (2^-6 = 8 x
  // 2^-9) tie at 7.5 x 2^-9: the normal's mantissa field (0) is the even one.
  EXPECT_EQ(encode(Float8::E4M3, 7.5 * std::ldexp(1.0, -9)), 0x08);
  EXPECT_EQ(encode(Float8::E4M3, 6.5 * std::ldexp(1.0, -9)), 0x06);
  // e5m2's smallest subnormal is 2^-16.
  EXPECT_EQ(encode(Float8::E5M2, std::ldexp(1.0, -17)), 0x00);
  EXPECT_EQ(encode(Float8::E5M2, 1.5 * std::ldexp(1.0, -17)), 0x01);
  EXPECT_EQ(encode(Float8::E5M2, 3.5 * std::ldexp(1.0, -16)), 0x04);
  EXPECT_EQ(encode(Float8::E4M3, -0.0), 0x80);
  EXPECT_EQ(encode(Float8::E4M3, 1e-30), 0x00);
}

TEST(Float8, SatfiniteClampsAtTheLargestFiniteValue) {
  // e4m3: 448 is S.1111.110; 464 (the tie with the NaN code's 480) rounds
  // to even 448, and everything beyond saturates, infinity included.
  EXPECT_EQ(encode(Float8::E4M3, 448), 0x7e);
  EXPECT_EQ(encode(Float8::E4M3, 460), 0x7e);
  EXPECT_EQ(encode(Float8::E4M3, 464), 0x7e);
  EXPECT_EQ(encode(Float8::E4M3, 465), 0x7e);
  EXPECT_EQ(encode(Float8::E4M3, 1e30), 0x7e);
  EXPECT_EQ(encode(Float8::E4M3, INFINITY), 0x7e);
  EXPECT_EQ(encode(Float8::E4M3, -INFINITY), 0xfe);
  EXPECT_EQ(encode(Float8::E4M3, -1000), 0xfe);
  EXPECT_EQ(encode(Float8::E4M3, 416), 0x7d); // 1.625 x 2^8
  EXPECT_EQ(encode(Float8::E4M3, 432), 0x7e); // the tie 416/448: 448, even
  // e5m2: 57344 = 1.75 x 2^15; 61440 rounds up to 2^16, which saturates.
  EXPECT_EQ(encode(Float8::E5M2, 57344), 0x7b);
  EXPECT_EQ(encode(Float8::E5M2, 61439), 0x7b);
  EXPECT_EQ(encode(Float8::E5M2, 61440), 0x7b);
  EXPECT_EQ(encode(Float8::E5M2, INFINITY), 0x7b);
  EXPECT_EQ(encode(Float8::E5M2, -INFINITY), 0xfb);
}

TEST(Float8, NanAndReluAsTheHardwareWritesThem) {
  // Every NaN, of either sign, becomes 0x7f; .relu makes every negative
  // value, -0 included, +0 (an H200's cvt.rn.satfinite.relu).
  for (Float8 format : {Float8::E4M3, Float8::E5M2}) {
    EXPECT_EQ(encode(format, NAN), 0x7f);
    EXPECT_EQ(encode(format, -NAN), 0x7f);
    EXPECT_EQ(encode(format, NAN, true), 0x7f);
    EXPECT_EQ(encode(format, -0.0, true), 0x00);
    EXPECT_EQ(encode(format, -3.0, true), 0x00);
    EXPECT_EQ(encode(format, -INFINITY, true), 0x00);
    EXPECT_EQ(encode(format, 1.0, true), encode(format, 1.0));
  }
  EXPECT_EQ(encode(Float8::E4M3, 1.0), 0x38);
  EXPECT_EQ(encode(Float8::E5M2, 1.0), 0x3c);
}
