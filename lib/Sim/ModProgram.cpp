//===- ModProgram.cpp - score_mod and mask_mod regions, run per element ---===//

#include "ModProgram.h"

#include "Interpreter.h"

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Support/AttentionMath.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "llvm/ADT/DenseMap.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::fa4;
using namespace mlir::fa4::sim;

namespace {
/// One value: integers (index, iN) in `i`, floats in `f`.
struct Slot {
  int64_t i = 0;
  double f = 0.0;
};

enum class Code {
  Constant,
  // integers
  AddI, SubI, MulI, DivSI, DivUI, CeilDivUI, FloorDivSI, CeilDivSI, RemSI,
  RemUI, MinSI,
  MaxSI, MinUI, MaxUI, AndI, OrI, XOrI, ShLI, ShRSI, ShRUI, CmpI, ExtSI, ExtUI,
  TruncI, IndexCast, IndexCastUI,
  // floats
  AddF, SubF, MulF, DivF, RemF, NegF, MaximumF, MinimumF, MaxNumF, MinNumF,
  CmpF, SIToFP, UIToFP, FPToSI, FPToUI, ExtF, TruncF,
  Exp, Exp2, Log, Log2, Log1p, ExpM1, Tanh, Sqrt, Rsqrt, AbsF, AbsI, PowF, Erf,
  Sin, Cos, Floor, Ceil, Round, CopySign, Fma,
  Select, Load,
};
} // namespace

struct ModProgram::Instruction {
  Code code;
  int result = 0;
  llvm::SmallVector<int, 4> operands;
  Type type;        // the result's
  Type operandType; // the first operand's
  int64_t predicate = 0;
  Slot constant;
  int extra = -1; // Load: which extra
};

ModProgram::~ModProgram() = default;

/// A region's `index` is 64 bits wide, as on the host whose IR it comes from
/// (a front end's linalg.index): the kernel, whose own indices are 32-bit,
/// computes a region's index arithmetic in 64 bits wherever 32 could differ.
static unsigned widthOf(Type type) {
  if (type.isIndex())
    return 64;
  return type.getIntOrFloatBitWidth();
}

/// An integer as its type holds it: sign-extended from the type's width, as
/// MLIR reads integers signed (i1's true is -1).
static int64_t wrap(Type type, int64_t value) {
  unsigned width = widthOf(type);
  if (width >= 64)
    return value;
  uint64_t mask = (uint64_t(1) << width) - 1;
  uint64_t bits = static_cast<uint64_t>(value) & mask;
  if (bits >> (width - 1))
    bits |= ~mask;
  return static_cast<int64_t>(bits);
}

static uint64_t unsignedOf(Type type, int64_t value) {
  unsigned width = widthOf(type);
  if (width >= 64)
    return static_cast<uint64_t>(value);
  return static_cast<uint64_t>(value) & ((uint64_t(1) << width) - 1);
}

/// -x in two's complement, defined for the most negative value too.
static int64_t negate(int64_t x) {
  return static_cast<int64_t>(uint64_t(0) - static_cast<uint64_t>(x));
}

/// x / y rounded toward -inf (floordivsi) or +inf (ceildivsi), for either
/// sign of y (y != 0; y == -1 is the negation).
static int64_t roundedQuotient(int64_t x, int64_t y, bool up) {
  if (y == -1)
    return negate(x);
  int64_t quotient = x / y, remainder = x % y;
  bool negative = (remainder < 0) != (y < 0);
  if (remainder != 0 && !up && negative)
    --quotient;
  if (remainder != 0 && up && !negative)
    ++quotient;
  return quotient;
}

double mlir::fa4::sim::roundScalar(Type type, double value) {
  return type.isF64() ? value : roundTo(type, static_cast<float>(value));
}

std::unique_ptr<ModProgram> ModProgram::compile(Region &region,
                                                std::string &error) {
  std::unique_ptr<ModProgram> program(new ModProgram());
  Block &body = region.front();
  llvm::DenseMap<Value, int> slots;
  for (BlockArgument argument : body.getArguments()) {
    slots[argument] = program->numSlots++;
    program->argumentTypes.push_back(argument.getType());
  }
  for (Operation &op : body) {
    if (auto yield = dyn_cast<YieldOp>(op)) {
      program->resultSlot = slots.lookup(yield.getValue());
      program->resultIsFloat = isa<FloatType>(yield.getValue().getType());
      return program;
    }
    Instruction instruction;
    Code code;
    auto name = op.getName().getStringRef();
    if (auto constant = dyn_cast<arith::ConstantOp>(op)) {
      code = Code::Constant;
      if (auto integer = dyn_cast<IntegerAttr>(constant.getValue()))
        instruction.constant.i = wrap(integer.getType(), integer.getValue().getSExtValue());
      else if (auto real = dyn_cast<FloatAttr>(constant.getValue()))
        instruction.constant.f = real.getValueAsDouble();
      else {
        error = "fa4-sim runs scalar constants only in a mod region, got " +
                std::string(name);
        return nullptr;
      }
    } else if (auto cmp = dyn_cast<arith::CmpIOp>(op)) {
      code = Code::CmpI;
      instruction.predicate = static_cast<int64_t>(cmp.getPredicate());
    } else if (auto cmp = dyn_cast<arith::CmpFOp>(op)) {
      code = Code::CmpF;
      instruction.predicate = static_cast<int64_t>(cmp.getPredicate());
    } else if (auto load = dyn_cast<memref::LoadOp>(op)) {
      code = Code::Load;
      instruction.extra = cast<BlockArgument>(load.getMemRef()).getArgNumber();
    } else {
      static const llvm::StringMap<Code> codes = {
          {"arith.addi", Code::AddI}, {"arith.subi", Code::SubI},
          {"arith.muli", Code::MulI}, {"arith.divsi", Code::DivSI},
          {"arith.divui", Code::DivUI}, {"arith.ceildivui", Code::CeilDivUI},
          {"arith.floordivsi", Code::FloorDivSI},
          {"arith.ceildivsi", Code::CeilDivSI}, {"arith.remsi", Code::RemSI},
          {"arith.remui", Code::RemUI}, {"arith.minsi", Code::MinSI},
          {"arith.maxsi", Code::MaxSI}, {"arith.minui", Code::MinUI},
          {"arith.maxui", Code::MaxUI}, {"arith.andi", Code::AndI},
          {"arith.ori", Code::OrI}, {"arith.xori", Code::XOrI},
          {"arith.shli", Code::ShLI}, {"arith.shrsi", Code::ShRSI},
          {"arith.shrui", Code::ShRUI}, {"arith.extsi", Code::ExtSI},
          {"arith.extui", Code::ExtUI}, {"arith.trunci", Code::TruncI},
          {"arith.index_cast", Code::IndexCast},
          {"arith.index_castui", Code::IndexCastUI},
          {"arith.addf", Code::AddF}, {"arith.subf", Code::SubF},
          {"arith.mulf", Code::MulF}, {"arith.divf", Code::DivF},
          {"arith.remf", Code::RemF}, {"arith.negf", Code::NegF},
          {"arith.maximumf", Code::MaximumF}, {"arith.minimumf", Code::MinimumF},
          {"arith.maxnumf", Code::MaxNumF}, {"arith.minnumf", Code::MinNumF},
          {"arith.sitofp", Code::SIToFP}, {"arith.uitofp", Code::UIToFP},
          {"arith.fptosi", Code::FPToSI}, {"arith.fptoui", Code::FPToUI},
          {"arith.extf", Code::ExtF}, {"arith.truncf", Code::TruncF},
          {"arith.select", Code::Select}, {"math.exp", Code::Exp},
          {"math.exp2", Code::Exp2}, {"math.log", Code::Log},
          {"math.log2", Code::Log2}, {"math.log1p", Code::Log1p},
          {"math.expm1", Code::ExpM1}, {"math.tanh", Code::Tanh},
          {"math.sqrt", Code::Sqrt}, {"math.rsqrt", Code::Rsqrt},
          {"math.absf", Code::AbsF}, {"math.absi", Code::AbsI},
          {"math.powf", Code::PowF}, {"math.erf", Code::Erf},
          {"math.sin", Code::Sin}, {"math.cos", Code::Cos},
          {"math.floor", Code::Floor}, {"math.ceil", Code::Ceil},
          {"math.round", Code::Round}, {"math.copysign", Code::CopySign},
          {"math.fma", Code::Fma}};
      auto found = codes.find(name);
      if (found == codes.end() || op.getNumResults() != 1 ||
          isa<ShapedType>(op.getResult(0).getType())) {
        error = "fa4-sim cannot run '" + std::string(name) +
                "' in a score_mod or mask_mod region (it runs scalar arith, "
                "math and memref.load)";
        return nullptr;
      }
      code = found->second;
    }
    instruction.code = code;
    for (Value operand : op.getOperands())
      instruction.operands.push_back(slots.lookup(operand));
    if (op.getNumOperands())
      instruction.operandType = op.getOperand(0).getType();
    instruction.type = op.getResult(0).getType();
    if (code == Code::Select)
      instruction.operandType = op.getOperand(1).getType();
    instruction.result = program->numSlots++;
    slots[op.getResult(0)] = instruction.result;
    program->instructions.push_back(std::move(instruction));
  }
  error = "a mod region must end in fa4.yield";
  return nullptr;
}

/// arith.cmpi on the operands read signed (`x`, `y`) and unsigned (`ux`,
/// `uy`).
static bool compareIntegers(int64_t predicate, int64_t x, int64_t y,
                            uint64_t ux, uint64_t uy) {
  using P = arith::CmpIPredicate;
  switch (static_cast<P>(predicate)) {
  case P::eq: return x == y;
  case P::ne: return x != y;
  case P::slt: return x < y;
  case P::sle: return x <= y;
  case P::sgt: return x > y;
  case P::sge: return x >= y;
  case P::ult: return ux < uy;
  case P::ule: return ux <= uy;
  case P::ugt: return ux > uy;
  case P::uge: return ux >= uy;
  }
  return false;
}

/// arith.cmpf: ordered predicates are false, unordered ones true, when
/// either side is NaN.
static bool compareFloats(int64_t predicate, double f, double g) {
  using P = arith::CmpFPredicate;
  bool unordered = std::isnan(f) || std::isnan(g);
  switch (static_cast<P>(predicate)) {
  case P::AlwaysFalse: return false;
  case P::AlwaysTrue: return true;
  case P::OEQ: return !unordered && f == g;
  case P::OGT: return !unordered && f > g;
  case P::OGE: return !unordered && f >= g;
  case P::OLT: return !unordered && f < g;
  case P::OLE: return !unordered && f <= g;
  case P::ONE: return !unordered && f != g;
  case P::ORD: return !unordered;
  case P::UEQ: return unordered || f == g;
  case P::UGT: return unordered || f > g;
  case P::UGE: return unordered || f >= g;
  case P::ULT: return unordered || f < g;
  case P::ULE: return unordered || f <= g;
  case P::UNE: return unordered || f != g;
  case P::UNO: return unordered;
  }
  return false;
}

/// The integer arithmetic, casts and math.absi of `type`, before the
/// result is wrapped to the type's width; a divisor is never 0 here.
static int64_t integerResult(Code code, Type type, int64_t x, int64_t y,
                             uint64_t ux, uint64_t uy) {
  switch (code) {
  case Code::AddI: return static_cast<int64_t>(uint64_t(x) + uint64_t(y));
  case Code::SubI: return static_cast<int64_t>(uint64_t(x) - uint64_t(y));
  case Code::MulI: return static_cast<int64_t>(uint64_t(x) * uint64_t(y));
  case Code::DivSI: return y == -1 ? negate(x) : x / y;
  case Code::DivUI: return static_cast<int64_t>(ux / uy);
  case Code::CeilDivUI: return static_cast<int64_t>(ux / uy + (ux % uy != 0));
  case Code::FloorDivSI: return roundedQuotient(x, y, /*up=*/false);
  case Code::CeilDivSI: return roundedQuotient(x, y, /*up=*/true);
  case Code::RemSI: return y == -1 ? 0 : x % y;
  case Code::RemUI: return static_cast<int64_t>(ux % uy);
  case Code::MinSI: return std::min(x, y);
  case Code::MaxSI: return std::max(x, y);
  case Code::MinUI: return static_cast<int64_t>(std::min(ux, uy));
  case Code::MaxUI: return static_cast<int64_t>(std::max(ux, uy));
  case Code::AndI: return x & y;
  case Code::OrI: return x | y;
  case Code::XOrI: return x ^ y;
  case Code::ShLI: return uy >= widthOf(type) ? 0 : static_cast<int64_t>(ux << uy);
  case Code::ShRSI: return uy >= widthOf(type) ? (x < 0 ? -1 : 0) : x >> uy;
  case Code::ShRUI: return uy >= widthOf(type) ? 0 : static_cast<int64_t>(ux >> uy);
  case Code::ExtSI: case Code::TruncI: case Code::IndexCast: return x;
  case Code::ExtUI: case Code::IndexCastUI: return static_cast<int64_t>(ux);
  case Code::AbsI: return x < 0 ? negate(x) : x;
  default: llvm_unreachable("not an integer operation");
  }
}

/// The float arithmetic and math functions of one or two operands, before
/// the result is rounded to its type.
static double floatResult(Code code, double f, double g) {
  switch (code) {
  case Code::AddF: return f + g;
  case Code::SubF: return f - g;
  case Code::MulF: return f * g;
  case Code::DivF: return f / g;
  case Code::RemF: return std::fmod(f, g);
  case Code::NegF: return -f;
  case Code::MaximumF: return std::isnan(f) || std::isnan(g) ? NAN : std::max(f, g);
  case Code::MinimumF: return std::isnan(f) || std::isnan(g) ? NAN : std::min(f, g);
  case Code::MaxNumF: return std::fmax(f, g);
  case Code::MinNumF: return std::fmin(f, g);
  case Code::ExtF: case Code::TruncF: return f;
  case Code::Exp: return std::exp(f);
  case Code::Exp2: return std::exp2(f);
  case Code::Log: return std::log(f);
  case Code::Log2: return std::log2(f);
  case Code::Log1p: return std::log1p(f);
  case Code::ExpM1: return std::expm1(f);
  case Code::Tanh: return std::tanh(f);
  case Code::Sqrt: return std::sqrt(f);
  case Code::Rsqrt: return 1.0 / std::sqrt(f);
  case Code::AbsF: return std::fabs(f);
  case Code::PowF: return std::pow(f, g);
  case Code::Erf: return std::erf(f);
  case Code::Sin: return std::sin(f);
  case Code::Cos: return std::cos(f);
  case Code::Floor: return std::floor(f);
  case Code::Ceil: return std::ceil(f);
  case Code::Round: return std::round(f);
  case Code::CopySign: return std::copysign(f, g);
  default: llvm_unreachable("not a float operation");
  }
}

/// A memref.load of extra `extra` at the indices in `slot[indices]` into
/// `out`, as `type` holds it; false with `error` set when the run bound no
/// such extra or an index is out of bounds.
static bool loadExtra(int extra, ArrayRef<int> indices, Type type,
                      ArrayRef<Slot> slot, size_t leading,
                      ArrayRef<const ModBuffer *> extras, Slot &out,
                      std::string &error) {
  const ModBuffer *buffer =
      extra - static_cast<int>(leading) < static_cast<int>(extras.size())
          ? extras[extra - leading] : nullptr;
  if (!buffer) {
    error = "a mod region loads from an extra the run did not bind";
    return false;
  }
  int64_t offset = 0;
  for (auto [dim, operand] : llvm::enumerate(indices)) {
    int64_t index = slot[operand].i;
    if (index < 0 || index >= buffer->shape[dim]) {
      error = "a mod region loads index " + std::to_string(index) +
              " of dimension " + std::to_string(dim) + " of extra #" +
              std::to_string(extra - leading) + ", whose size is " +
              std::to_string(buffer->shape[dim]);
      return false;
    }
    offset = offset * buffer->shape[dim] + index;
  }
  if (type.isIntOrIndex())
    out.i = wrap(type, static_cast<int64_t>(buffer->data[offset]));
  else
    out.f = buffer->data[offset];
  return true;
}

bool ModProgram::run(ArrayRef<double> leading, ArrayRef<const ModBuffer *> extras,
                     bool rounded, double &result, std::string &error) const {
  llvm::SmallVector<Slot, 32> slot(numSlots);
  for (auto [position, value] : llvm::enumerate(leading)) {
    if (isa<FloatType>(argumentTypes[position]))
      slot[position].f = value;
    else
      slot[position].i = static_cast<int64_t>(value);
  }
  auto real = [&](Type type, double value) {
    return rounded ? roundScalar(type, value) : value;
  };
  for (const Instruction &in : instructions) {
    auto a = [&](unsigned n) -> const Slot & { return slot[in.operands[n]]; };
    Slot &out = slot[in.result];
    Type type = in.type;
    int64_t x = in.operands.size() > 0 ? a(0).i : 0;
    int64_t y = in.operands.size() > 1 ? a(1).i : 0;
    double f = in.operands.size() > 0 ? a(0).f : 0.0;
    double g = in.operands.size() > 1 ? a(1).f : 0.0;
    uint64_t ux = in.operandType && in.operandType.isIntOrIndex()
                      ? unsignedOf(in.operandType, x) : 0;
    uint64_t uy = in.operandType && in.operandType.isIntOrIndex()
                      ? unsignedOf(in.operandType, y) : 0;
    bool divides = in.code == Code::DivSI || in.code == Code::DivUI ||
                   in.code == Code::CeilDivUI ||
                   in.code == Code::FloorDivSI || in.code == Code::CeilDivSI ||
                   in.code == Code::RemSI || in.code == Code::RemUI;
    if (divides && y == 0) {
      error = "a mod region divides by zero";
      return false;
    }
    // The smallest signed value by -1 overflows: undefined in arith (as in
    // LLVM's sdiv and srem), so the kernel may compute anything there.
    bool signedDivides = in.code == Code::DivSI ||
                         in.code == Code::FloorDivSI ||
                         in.code == Code::CeilDivSI || in.code == Code::RemSI;
    if (signedDivides && y == -1) {
      unsigned width = in.operandType.isIndex()
                           ? 64
                           : in.operandType.getIntOrFloatBitWidth();
      if (width >= 1 && width <= 64 &&
          x == static_cast<int64_t>(~uint64_t(0) << (width - 1))) {
        error = "a mod region divides the smallest " + std::to_string(width) +
                "-bit integer by -1 (signed overflow)";
        return false;
      }
    }
    switch (in.code) {
    case Code::Constant: out = in.constant; break;
    case Code::AddI: case Code::SubI: case Code::MulI: case Code::DivSI:
    case Code::DivUI: case Code::CeilDivUI: case Code::FloorDivSI:
    case Code::CeilDivSI:
    case Code::RemSI: case Code::RemUI: case Code::MinSI: case Code::MaxSI:
    case Code::MinUI: case Code::MaxUI: case Code::AndI: case Code::OrI:
    case Code::XOrI: case Code::ShLI: case Code::ShRSI: case Code::ShRUI:
    case Code::ExtSI: case Code::TruncI: case Code::IndexCast:
    case Code::ExtUI: case Code::IndexCastUI: case Code::AbsI:
      out.i = wrap(type, integerResult(in.code, type, x, y, ux, uy));
      break;
    case Code::CmpI: out.i = compareIntegers(in.predicate, x, y, ux, uy) ? -1 : 0; break;
    case Code::CmpF: out.i = compareFloats(in.predicate, f, g) ? -1 : 0; break;
    case Code::SIToFP: out.f = real(type, static_cast<double>(x)); break;
    case Code::UIToFP: out.f = real(type, static_cast<double>(ux)); break;
    case Code::FPToSI: case Code::FPToUI:
      if (!(std::fabs(f) < 9.0e18)) {
        error = "a mod region converts " + std::to_string(f) +
                " to an integer it cannot hold";
        return false;
      }
      out.i = wrap(type, static_cast<int64_t>(f));
      break;
    case Code::Fma: out.f = real(type, f * g + a(2).f); break;
    case Code::Select: out = x ? a(1) : a(2); break;
    case Code::Load:
      if (!loadExtra(in.extra, ArrayRef(in.operands).drop_front(), type, slot,
                     leading.size(), extras, out, error))
        return false;
      break;
    default: out.f = real(type, floatResult(in.code, f, g)); break;
    }
  }
  const Slot &value = slot[resultSlot];
  result = resultIsFloat ? value.f : static_cast<double>(value.i);
  return true;
}
