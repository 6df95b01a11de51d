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
  AddI, SubI, MulI, DivSI, DivUI, FloorDivSI, CeilDivSI, RemSI, RemUI, MinSI,
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
          {"arith.divui", Code::DivUI}, {"arith.floordivsi", Code::FloorDivSI},
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
    auto integer = [&](int64_t value) { out.i = wrap(type, value); };
    auto floating = [&](double value) { out.f = real(type, value); };
    int64_t x = in.operands.size() > 0 ? a(0).i : 0;
    int64_t y = in.operands.size() > 1 ? a(1).i : 0;
    double f = in.operands.size() > 0 ? a(0).f : 0.0;
    double g = in.operands.size() > 1 ? a(1).f : 0.0;
    uint64_t ux = in.operandType && in.operandType.isIntOrIndex()
                      ? unsignedOf(in.operandType, x) : 0;
    uint64_t uy = in.operandType && in.operandType.isIntOrIndex()
                      ? unsignedOf(in.operandType, y) : 0;
    bool divides = in.code == Code::DivSI || in.code == Code::DivUI ||
                   in.code == Code::FloorDivSI || in.code == Code::CeilDivSI ||
                   in.code == Code::RemSI || in.code == Code::RemUI;
    if (divides && y == 0) {
      error = "a mod region divides by zero";
      return false;
    }
    switch (in.code) {
    case Code::Constant: out = in.constant; break;
    case Code::AddI: integer(static_cast<int64_t>(uint64_t(x) + uint64_t(y))); break;
    case Code::SubI: integer(static_cast<int64_t>(uint64_t(x) - uint64_t(y))); break;
    case Code::MulI: integer(static_cast<int64_t>(uint64_t(x) * uint64_t(y))); break;
    case Code::DivSI: integer(y == -1 ? negate(x) : x / y); break;
    case Code::DivUI: integer(static_cast<int64_t>(ux / uy)); break;
    case Code::FloorDivSI: integer(roundedQuotient(x, y, /*up=*/false)); break;
    case Code::CeilDivSI: integer(roundedQuotient(x, y, /*up=*/true)); break;
    case Code::RemSI: integer(y == -1 ? 0 : x % y); break;
    case Code::RemUI: integer(static_cast<int64_t>(ux % uy)); break;
    case Code::MinSI: integer(std::min(x, y)); break;
    case Code::MaxSI: integer(std::max(x, y)); break;
    case Code::MinUI: integer(static_cast<int64_t>(std::min(ux, uy))); break;
    case Code::MaxUI: integer(static_cast<int64_t>(std::max(ux, uy))); break;
    case Code::AndI: integer(x & y); break;
    case Code::OrI: integer(x | y); break;
    case Code::XOrI: integer(x ^ y); break;
    case Code::ShLI: integer(uy >= widthOf(type) ? 0 : static_cast<int64_t>(ux << uy)); break;
    case Code::ShRSI: integer(uy >= widthOf(type) ? (x < 0 ? -1 : 0) : x >> uy); break;
    case Code::ShRUI: integer(uy >= widthOf(type) ? 0 : static_cast<int64_t>(ux >> uy)); break;
    case Code::ExtSI: case Code::TruncI: case Code::IndexCast: integer(x); break;
    case Code::ExtUI: case Code::IndexCastUI: integer(static_cast<int64_t>(ux)); break;
    case Code::CmpI: {
      using P = arith::CmpIPredicate;
      bool r = false;
      switch (static_cast<P>(in.predicate)) {
      case P::eq: r = x == y; break;
      case P::ne: r = x != y; break;
      case P::slt: r = x < y; break;
      case P::sle: r = x <= y; break;
      case P::sgt: r = x > y; break;
      case P::sge: r = x >= y; break;
      case P::ult: r = ux < uy; break;
      case P::ule: r = ux <= uy; break;
      case P::ugt: r = ux > uy; break;
      case P::uge: r = ux >= uy; break;
      }
      out.i = r ? -1 : 0;
      break;
    }
    case Code::CmpF: {
      using P = arith::CmpFPredicate;
      bool unordered = std::isnan(f) || std::isnan(g);
      bool r = false;
      switch (static_cast<P>(in.predicate)) {
      case P::AlwaysFalse: r = false; break;
      case P::AlwaysTrue: r = true; break;
      case P::OEQ: r = !unordered && f == g; break;
      case P::OGT: r = !unordered && f > g; break;
      case P::OGE: r = !unordered && f >= g; break;
      case P::OLT: r = !unordered && f < g; break;
      case P::OLE: r = !unordered && f <= g; break;
      case P::ONE: r = !unordered && f != g; break;
      case P::ORD: r = !unordered; break;
      case P::UEQ: r = unordered || f == g; break;
      case P::UGT: r = unordered || f > g; break;
      case P::UGE: r = unordered || f >= g; break;
      case P::ULT: r = unordered || f < g; break;
      case P::ULE: r = unordered || f <= g; break;
      case P::UNE: r = unordered || f != g; break;
      case P::UNO: r = unordered; break;
      }
      out.i = r ? -1 : 0;
      break;
    }
    case Code::AddF: floating(f + g); break;
    case Code::SubF: floating(f - g); break;
    case Code::MulF: floating(f * g); break;
    case Code::DivF: floating(f / g); break;
    case Code::RemF: floating(std::fmod(f, g)); break;
    case Code::NegF: floating(-f); break;
    case Code::MaximumF: floating(std::isnan(f) || std::isnan(g) ? NAN : std::max(f, g)); break;
    case Code::MinimumF: floating(std::isnan(f) || std::isnan(g) ? NAN : std::min(f, g)); break;
    case Code::MaxNumF: floating(std::fmax(f, g)); break;
    case Code::MinNumF: floating(std::fmin(f, g)); break;
    case Code::SIToFP: floating(static_cast<double>(x)); break;
    case Code::UIToFP: floating(static_cast<double>(ux)); break;
    case Code::FPToSI: case Code::FPToUI:
      if (!(std::fabs(f) < 9.0e18)) {
        error = "a mod region converts " + std::to_string(f) +
                " to an integer it cannot hold";
        return false;
      }
      integer(static_cast<int64_t>(f));
      break;
    case Code::ExtF: case Code::TruncF: floating(f); break;
    case Code::Exp: floating(std::exp(f)); break;
    case Code::Exp2: floating(std::exp2(f)); break;
    case Code::Log: floating(std::log(f)); break;
    case Code::Log2: floating(std::log2(f)); break;
    case Code::Log1p: floating(std::log1p(f)); break;
    case Code::ExpM1: floating(std::expm1(f)); break;
    case Code::Tanh: floating(std::tanh(f)); break;
    case Code::Sqrt: floating(std::sqrt(f)); break;
    case Code::Rsqrt: floating(1.0 / std::sqrt(f)); break;
    case Code::AbsF: floating(std::fabs(f)); break;
    case Code::AbsI: integer(x < 0 ? negate(x) : x); break;
    case Code::PowF: floating(std::pow(f, g)); break;
    case Code::Erf: floating(std::erf(f)); break;
    case Code::Sin: floating(std::sin(f)); break;
    case Code::Cos: floating(std::cos(f)); break;
    case Code::Floor: floating(std::floor(f)); break;
    case Code::Ceil: floating(std::ceil(f)); break;
    case Code::Round: floating(std::round(f)); break;
    case Code::CopySign: floating(std::copysign(f, g)); break;
    case Code::Fma: floating(f * g + a(2).f); break;
    case Code::Select: out = x ? a(1) : a(2); break;
    case Code::Load: {
      const ModBuffer *buffer =
          in.extra - static_cast<int>(leading.size()) < static_cast<int>(extras.size())
              ? extras[in.extra - leading.size()] : nullptr;
      if (!buffer) {
        error = "a mod region loads from an extra the run did not bind";
        return false;
      }
      int64_t offset = 0;
      for (auto [dim, operand] : llvm::enumerate(ArrayRef(in.operands).drop_front())) {
        int64_t index = slot[operand].i;
        if (index < 0 || index >= buffer->shape[dim]) {
          error = "a mod region loads index " + std::to_string(index) +
                  " of dimension " + std::to_string(dim) + " of extra #" +
                  std::to_string(in.extra - leading.size()) + ", whose size is " +
                  std::to_string(buffer->shape[dim]);
          return false;
        }
        offset = offset * buffer->shape[dim] + index;
      }
      if (type.isIntOrIndex())
        out.i = wrap(type, static_cast<int64_t>(buffer->data[offset]));
      else
        out.f = buffer->data[offset];
      break;
    }
    }
  }
  const Slot &value = slot[resultSlot];
  result = resultIsFloat ? value.f : static_cast<double>(value.i);
  return true;
}
