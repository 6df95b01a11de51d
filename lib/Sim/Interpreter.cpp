//===- Interpreter.cpp - executes the level-B tile program ----------------===//
//
// Each fa4 op is executed as the hardware would compute it, up to the order of
// fp32 sums: f32 accumulation in both MMAs, probabilities rounded to the input
// type before P·V, the output rounded once after the deferred normalization.
//
//===----------------------------------------------------------------------===//

#include "Interpreter.h"

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Support/Float8.h"
#include "fa4/Support/TileScheduler.h"
#include "fa4/Transforms/MaskAnalysis.h"
#include "fa4/Transforms/TileConfig.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::fa4;
using namespace mlir::fa4::sim;

static constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

OpHook::~OpHook() = default;

float mlir::fa4::sim::roundTo(Type element, float value) {
  if (element.isF16())
    return roundToHalf(value);
  if (element.isBF16())
    return roundToBFloat16(value);
  if (isa<Float8E4M3FNType>(element))
    return roundToE4m3(value);
  return value;
}

std::shared_ptr<Tile> mlir::fa4::sim::makeTile(Value result, float fill) {
  auto type = cast<RankedTensorType>(result.getType());
  auto tile = std::make_shared<Tile>();
  tile->shape.assign(type.getShape().begin(), type.getShape().end());
  tile->data.assign(type.getNumElements(), fill);
  return tile;
}

static Type elementOf(Value value) { return getElementTypeOrSelf(value.getType()); }

static std::string nameOf(Operation *op) {
  return "'" + op->getName().getStringRef().str() + "'";
}

std::string mlir::fa4::sim::str(Type type) {
  std::string text;
  llvm::raw_string_ostream(text) << type;
  return text;
}

static bool isFa4(Operation *op) {
  return isa_and_nonnull<FA4Dialect>(op->getDialect());
}

bool mlir::fa4::sim::checkProgram(Operation *func, std::string &error) {
  WalkResult walk = func->walk([&](Operation *op) {
    if (isFa4(op))
      for (NamedAttribute attribute : op->getAttrs()) {
        auto integer = dyn_cast<IntegerAttr>(attribute.getValue());
        if (!integer ||
            !(integer.getType().isIndex() || integer.getType().isInteger(64)))
          continue;
        int64_t value = integer.getInt();
        if (value >= -1 && value < kIndexLimit)
          continue;
        error = nameOf(op) + " has " + attribute.getName().str() + " = " +
                std::to_string(value) +
                ", outside [-1, 2^31): the kernel's sizes and indices are "
                "32-bit";
        return WalkResult::interrupt();
      }
    for (Type type : op->getResultTypes()) {
      auto tensor = dyn_cast<RankedTensorType>(type);
      if (!tensor)
        continue;
      int64_t elements = 1;
      for (int64_t size : tensor.getShape()) {
        if (ShapedType::isDynamic(size) ||
            (size > 0 && elements > kMaxTileElements / size)) {
          error = nameOf(op) + " makes a " + str(type) +
                  "; tiles must be static and hold at most 2^20 elements";
          return WalkResult::interrupt();
        }
        elements *= size;
      }
    }
    return WalkResult::advance();
  });
  return !walk.wasInterrupted();
}

bool mlir::fa4::sim::checkTensorAccess(Operation *op, const Buffer &tensor,
                                       int64_t batch, int64_t head,
                                       int64_t ratio, int64_t dim,
                                       std::string &error) {
  if (tensor.shape.size() != 4 || tensor.shape[3] != dim) {
    error = nameOf(op) + " moves rows of " + std::to_string(dim) +
            " elements, but its tensor is not [batch, seq, heads, " +
            std::to_string(dim) + "]";
    return false;
  }
  if (batch < 0 || batch >= tensor.shape[0]) {
    error = nameOf(op) + " addresses batch index " + std::to_string(batch) +
            ", but the tensor's batch is " + std::to_string(tensor.shape[0]);
    return false;
  }
  if (ratio < 1 || head < 0 || head >= tensor.shape[2] / ratio) {
    error = nameOf(op) + " addresses heads [" + std::to_string(head * ratio) +
            ", " + std::to_string((head + 1) * ratio) + ") (head " +
            std::to_string(head) + ", gqa_ratio " + std::to_string(ratio) +
            "), but the tensor has " + std::to_string(tensor.shape[2]) +
            (tensor.shape[2] == 1 ? " head" : " heads");
    return false;
  }
  return true;
}

/// The m-blocks and tasks of a task grid; fails past 2^31 tasks (the
/// kernel's task index is 32-bit), which also keeps the products exact.
static bool countTasks(Operation *op, int64_t batch, int64_t headGroups,
                       int64_t gqaRatio, int64_t rows, int64_t seqQ,
                       int64_t &mBlocks, int64_t &tasks, std::string &error) {
  mBlocks = ceilDiv(seqQ * gqaRatio, rows);
  int64_t heads;
  if (llvm::MulOverflow(batch, headGroups, heads) ||
      llvm::MulOverflow(heads, mBlocks, tasks) || tasks >= kIndexLimit) {
    error = nameOf(op) + " makes batch " + std::to_string(batch) +
            " x head groups " + std::to_string(headGroups) + " x m_blocks " +
            std::to_string(mBlocks) +
            " tasks, 2^31 or more (the kernel's task index is 32-bit)";
    return false;
  }
  return true;
}

void mlir::fa4::sim::scoreProduct(const float *q, const float *k, float *s,
                                  int64_t m, int64_t n, int64_t d) {
  std::vector<float> kT(d * n);
  for (int64_t c = 0; c < n; ++c)
    for (int64_t x = 0; x < d; ++x)
      kT[x * n + c] = k[c * d + x];
  for (int64_t r = 0; r < m; ++r) {
    float *sRow = &s[r * n];
    for (int64_t x = 0; x < d; ++x) {
      float qValue = q[r * d + x];
      const float *kRow = &kT[x * n];
      for (int64_t c = 0; c < n; ++c)
        sRow[c] += qValue * kRow[c];
    }
  }
}

void mlir::fa4::sim::valueProduct(const float *p, const float *v, float *o,
                                  int64_t m, int64_t n, int64_t d) {
  // A zero weight adds nothing unless its V row holds a NaN or an infinity
  // (0 · NaN is NaN, as on the tensor core): those rows are always added.
  std::vector<char> finite(n, 1);
  for (int64_t c = 0; c < n; ++c)
    for (int64_t x = 0; x < d && finite[c]; ++x)
      finite[c] = std::isfinite(v[c * d + x]);
  for (int64_t r = 0; r < m; ++r) {
    float *oRow = &o[r * d];
    for (int64_t c = 0; c < n; ++c) {
      float weight = p[r * n + c];
      if (weight == 0.0f && finite[c])
        continue;
      const float *vRow = &v[c * d];
      for (int64_t x = 0; x < d; ++x)
        oRow[x] += weight * vRow[x];
    }
  }
}

static TileScheduler::Order orderOf(TaskOrder order) {
  return order == TaskOrder::lpt ? TileScheduler::Order::Lpt
                                 : TileScheduler::Order::Static;
}

bool Interpreter::runFunction(Block &entry, std::string &error) {
  // Every op binds its results, so only an argument that fa4.spec does not
  // name can be read unbound; check those once, before anything runs.
  for (BlockArgument argument : entry.getArguments()) {
    if (values.count(argument) || extras.count(argument) ||
        argument.use_empty())
      continue;
    OpOperand &use = *argument.use_begin();
    error = "operand #" + std::to_string(use.getOperandNumber()) + " of '" +
            use.getOwner()->getName().getStringRef().str() +
            "' has no value (is it a function argument that fa4.spec does "
            "not name?)";
    return false;
  }
  return run(entry, error);
}

bool Interpreter::run(Block &block, std::string &error) {
  for (Operation &op : block)
    if (!execute(&op, error))
      return false;
  return true;
}

bool Interpreter::checkOperands(Operation *op, std::string &error) {
  for (OpOperand &operand : op->getOpOperands()) {
    Type type = operand.get().getType();
    auto found = values.find(operand.get());
    const RuntimeValue *value = found == values.end() ? nullptr : &found->second;
    bool holds = true;
    if (isa<IndexType, IntegerType>(type))
      holds = value && std::holds_alternative<int64_t>(*value);
    else if (isa<RankedTensorType>(type))
      holds = value && std::holds_alternative<std::shared_ptr<Tile>>(*value);
    else if (isa<MemRefType>(type))
      holds = (value && std::holds_alternative<Buffer *>(*value)) ||
              extras.count(operand.get());
    if (!holds) {
      error = "operand #" + std::to_string(operand.getOperandNumber()) +
              " of " + nameOf(op) + " has no value";
      return false;
    }
    if (!isFa4(op) || !isa<IndexType, IntegerType>(type))
      continue;
    int64_t index = std::get<int64_t>(*value);
    if (index < 0 || index >= kIndexLimit) {
      error = "operand #" + std::to_string(operand.getOperandNumber()) +
              " of " + nameOf(op) + " is " + std::to_string(index) +
              ", outside [0, 2^31) where the kernel's indices and sizes live";
      return false;
    }
  }
  return true;
}

const Interpreter::Mod *Interpreter::mod(Operation *op, Region &region,
                                          ValueRange extraOperands,
                                          std::string &error) {
  std::shared_ptr<Mod> &cached = mods[op];
  if (cached)
    return cached.get();
  auto compiled = std::make_shared<Mod>();
  compiled->program = ModProgram::compile(region, error);
  if (!compiled->program)
    return nullptr;
  for (Value extra : extraOperands) {
    const ModBuffer *buffer = extras.lookup(extra);
    if (!buffer) {
      error = "'" + op->getName().getStringRef().str() +
              "' reads an extra that is not a bound argument of the kernel";
      return nullptr;
    }
    compiled->extras.push_back(buffer);
  }
  cached = std::move(compiled);
  return cached.get();
}

const MaskModBounds &Interpreter::boundsOf(Operation *op, MaskKind mask,
                                           int64_t windowLeft,
                                           int64_t windowRight,
                                           Region &maskMod) {
  auto found = bounds.find(op);
  if (found == bounds.end())
    found = bounds
                .try_emplace(op, maskBounds(mask, windowLeft, windowRight, maskMod))
                .first;
  return found->second;
}

const TileScheduler &Interpreter::scheduler(const TaskGridShape &shape,
                                            TileScheduler::Order order) {
  std::array<int64_t, 10> key = {
      shape.batch,     shape.headGroups, shape.gqaRatio, shape.rows,
      shape.blockN,    shape.seqQ,       shape.seqK,     shape.band.left,
      shape.band.right, static_cast<int64_t>(order)};
  if (!cachedScheduler || key != schedulerKey) {
    cachedScheduler.emplace(shape, order);
    schedulerKey = key;
  }
  return *cachedScheduler;
}

bool Interpreter::unsupported(Operation *op, std::string &error) {
  error = "cannot run " + nameOf(op);
  return false;
}

bool Interpreter::execute(Operation *op, std::string &error) {
  auto unsupported = [&]() { return Interpreter::unsupported(op, error); };
  if (!checkOperands(op, error))
    return false;
  // Index arithmetic wraps around in two's complement, as arith defines it.
  auto binary = [&](auto fn) {
    values[op->getResult(0)] = static_cast<int64_t>(
        fn(static_cast<uint64_t>(index(op->getOperand(0))),
           static_cast<uint64_t>(index(op->getOperand(1)))));
    return true;
  };
  auto remainder = [&]() {
    uint64_t a = index(op->getOperand(0)), b = index(op->getOperand(1));
    if (b == 0) {
      error = nameOf(op) + " divides " + std::to_string(a) + " by zero";
      return false;
    }
    values[op->getResult(0)] = static_cast<int64_t>(a % b);
    return true;
  };
  auto divide = [&](bool roundUp) {
    // The unsigned divisions of arith read their operands as unsigned.
    uint64_t a = index(op->getOperand(0)), b = index(op->getOperand(1));
    if (b == 0) {
      error = nameOf(op) + " divides " + std::to_string(a) + " by zero";
      return false;
    }
    values[op->getResult(0)] =
        static_cast<int64_t>(roundUp ? (a == 0 ? 0 : (a - 1) / b + 1) : a / b);
    return true;
  };

  return llvm::TypeSwitch<Operation *, bool>(op)
      // Scalar and loop plumbing.
      .Case([&](arith::ConstantOp constant) { return run(constant, error); })
      .Case([&](arith::AddIOp) { return binary(std::plus<uint64_t>()); })
      .Case([&](arith::SubIOp) { return binary(std::minus<uint64_t>()); })
      .Case([&](arith::MulIOp) { return binary(std::multiplies<uint64_t>()); })
      .Case([&](arith::CeilDivUIOp) { return divide(true); })
      .Case([&](arith::DivUIOp) { return divide(false); })
      .Case([&](arith::RemUIOp) { return remainder(); })
      .Case([&](arith::MinSIOp) {
        return binary([](uint64_t a, uint64_t b) {
          return std::min(static_cast<int64_t>(a), static_cast<int64_t>(b));
        });
      })
      .Case([&](arith::MaxSIOp) {
        return binary([](uint64_t a, uint64_t b) {
          return std::max(static_cast<int64_t>(a), static_cast<int64_t>(b));
        });
      })
      .Case([&](memref::DimOp dim) { return run(dim, error); })
      // FP8's descale factors: f32 scalars, held as doubles.
      .Case([&](LoadDescaleOp load) { return run(load, error); })
      .Case([&](arith::MulFOp mul) {
        if (!mul.getType().isF32())
          return unsupported();
        values[mul] = static_cast<double>(static_cast<float>(
            scalar(mul.getLhs()) * scalar(mul.getRhs())));
        return true;
      })
      .Case([&](scf::ForOp loop) { return run(loop, error); })
      .Case([&](arith::CmpIOp compare) { return run(compare, error); })
      .Case([&](arith::OrIOp) {
        return binary([](uint64_t a, uint64_t b) { return a | b; });
      })
      .Case([&](arith::AndIOp) {
        return binary([](uint64_t a, uint64_t b) { return a & b; });
      })
      .Case([&](arith::SelectOp select) {
        if (!isa<IndexType, IntegerType>(select.getType()))
          return unsupported();
        values[select] = index(select.getCondition())
                             ? index(select.getTrueValue())
                             : index(select.getFalseValue());
        return true;
      })
      .Case([&](scf::IfOp branch) { return run(branch, error); })
      .Case<scf::YieldOp, func::ReturnOp>([](Operation *) { return true; })
      // The tile program.
      .Case([&](KvBlockRangeOp range) { return run(range, error); })
      // The persistent scheduler.
      .Case([&](TaskCountOp count) {
        int64_t mBlocks;
        int64_t headGroups;
        if (llvm::MulOverflow<int64_t>(count.getKvHeads(), count.getGroupsPerKv(),
                              headGroups)) {
          error = "fa4.task_count: kv_heads x groups_per_kv overflows";
          return false;
        }
        if (count.getVarlen()) {
          // Varlen: the slots of AttentionMath.h's varlenSlot.
          int64_t batch = index(count.getBatch()), seqQ = index(count.getSeqQ());
          int64_t slots = varlenSlot(seqQ, batch, seqQ, count.getGqaRatio(),
                                     count.getRows());
          if (batch < 1 || llvm::MulOverflow(slots, headGroups, numTasks) ||
              numTasks >= kIndexLimit) {
            error = "fa4.task_count makes " + std::to_string(slots) +
                    " varlen slots x " + std::to_string(headGroups) +
                    " head groups, 2^31 or more (or no sequence)";
            return false;
          }
          values[count.getResult()] = numTasks;
          return true;
        }
        if (!countTasks(op, index(count.getBatch()), headGroups,
                        count.getGqaRatio(), count.getRows(),
                        index(count.getSeqQ()), mBlocks, numTasks, error))
          return false;
        values[count.getResult()] = numTasks;
        return true;
      })
      .Case([&](TaskCoordsOp coords) { return run(coords, error); })
      .Case([&](SequenceLengthOp length) {
        const ModBuffer *table = extras.lookup(length.getTable());
        int64_t batch = index(length.getBatch());
        if (!table || table->shape.size() != 1 || batch < 0 ||
            batch >= table->shape[0]) {
          error = "fa4.sequence_length reads entry " + std::to_string(batch) +
                  " of a seqused_k table that is not a bound extra of that "
                  "many entries";
          return false;
        }
        double keys = table->data[batch];
        int64_t seqK = index(length.getSeqK());
        values[length.getResult()] =
            keys <= 0 ? 0 : keys >= double(seqK) ? seqK : int64_t(keys);
        return true;
      })
      .Case([&](SequenceSpanOp span) {
        const ModBuffer *table = extras.lookup(span.getTable());
        int64_t batch = index(span.getBatch());
        if (!table || table->shape.size() != 1 || batch < 0 ||
            batch + 1 >= table->shape[0]) {
          error = "fa4.sequence_span reads entries " + std::to_string(batch) +
                  " and " + std::to_string(batch + 1) +
                  " of a cu_seqlens table that is not a bound extra of that "
                  "many entries";
          return false;
        }
        SequenceSpan rows = sequenceSpan(table->data[batch],
                                         table->data[batch + 1],
                                         index(span.getTotal()));
        values[span.getOffset()] = rows.offset;
        values[span.getLength()] = rows.length;
        return true;
      })
      .Case([&](CtaIdOp cta) {
        values[cta.getResult()] = ctaId;
        return true;
      })
      .Case([&](CtaRankOp rank) {
        values[rank.getResult()] = ctaRank;
        return true;
      })
      .Case([&](NeedsRescaleOp vote) {
        const Tile &scale = tile(vote.getAccScale());
        values[vote.getResult()] = static_cast<int64_t>(
            llvm::any_of(scale.data, [](float f) { return f != 1.0f; }));
        return true;
      })
      .Case([&](LoadQTileOp load) { return run(load, error); })
      .Case([&](LoadKvTileOp load) { return run(load, error); })
      .Case([&](ScoreMmaOp mma) {
        const Tile &q = tile(mma.getQuery()), &k = tile(mma.getKey());
        int64_t m = q.shape[0], n = k.shape[0], d = q.shape[1];
        auto s = makeTile(mma.getScores());
        scoreProduct(q.data.data(), k.data.data(), s->data.data(), m, n, d);
        setTile(mma.getScores(), s);
        return true;
      })
      .Case([&](SoftcapOp softcap) {
        auto result = std::make_shared<Tile>(tile(softcap.getScores()));
        float cap = softcap.getCap().convertToFloat();
        float scale = softcap.getScale().convertToFloat();
        if (Value factor = softcap.getFactor())
          scale *= static_cast<float>(scalar(factor));
        for (float &s : result->data)
          s = cap * std::tanh(s * scale / cap);
        setTile(softcap.getResult(), result);
        return true;
      })
      .Case([&](ScoreModOp scoreMod) { return run(scoreMod, error); })
      .Case([&](MaskOp mask) { return run(mask, error); })
      .Case([&](OnlineSoftmaxOp softmax) { return run(softmax, error); })
      .Case([&](CorrectionOp correction) { return run(correction, error); })
      .Case([&](ValueMmaOp mma) {
        const Tile &p = tile(mma.getProbs()), &v = tile(mma.getValue());
        auto result = std::make_shared<Tile>(tile(mma.getAcc()));
        int64_t m = p.shape[0], n = p.shape[1], d = v.shape[1];
        valueProduct(p.data.data(), v.data.data(), result->data.data(), m, n, d);
        setTile(mma.getResult(), result);
        return true;
      })
      .Case([&](NormalizeOp normalize) { return run(normalize, error); })
      .Case([&](StoreOTileOp store) { return run(store, error); })
      .Case([&](StoreLseTileOp store) { return run(store, error); })
      .Case([&](StorePartialOOp store) { return run(store, error); })
      .Case([&](MergeSplitsOp merge) { return run(merge, error); })
      // The backward's tile program.
      .Case<QBlockRangeOp, LoadRowTileOp, RowDotOp, ProbsFromLseOp,
            SoftmaxGradOp, SoftcapGradOp, ScoreModGradOp, ConvertTileOp,
            TransposedMmaOp, AccumulateDqOp, StoreKvTileOp>(
          [&](auto backwardOp) { return run(backwardOp, error); })
      .Case<PrepareBackwardOp, FinishDqOp>([&](Operation *step) {
        return hook ? hook->execute(*this, step, error)
                    : runGridStep(step, error);
      })
      .Default([&](Operation *) {
        if (hook && op->getDialect() == op->getContext()->getLoadedDialect<FA4Dialect>())
          return hook->execute(*this, op, error);
        return unsupported();
      });
}

bool Interpreter::run(arith::ConstantOp constant, std::string &error) {
  Attribute value = constant.getValue();
  if (auto integer = dyn_cast<IntegerAttr>(value)) {
    Type type = integer.getType();
    if (type.isInteger(1)) {
      values[constant] = static_cast<int64_t>(integer.getValue().getZExtValue());
    } else if (type.isIndex() || type.isInteger(64)) {
      values[constant] = integer.getValue().getSExtValue();
    } else {
      error = "arith.constant of type " + str(type) +
              ": the simulator computes in 64 bits, so it runs index, "
              "i64 and i1 values only";
      return false;
    }
  } else if (auto real = dyn_cast<FloatAttr>(value)) {
    values[constant] = real.getValueAsDouble();
  } else if (auto dense = dyn_cast<DenseFPElementsAttr>(value);
             dense && dense.isSplat()) {
    float fill = dense.getSplatValue<APFloat>().convertToFloat();
    setTile(constant, makeTile(constant, fill));
  } else {
    return unsupported(constant.getOperation(), error);
  }
  return true;
}

bool Interpreter::run(memref::DimOp dim, std::string &error) {
  // A tensor's buffer, or an extra (a block table's pages, say).
  const llvm::SmallVector<int64_t, 4> *shape = nullptr;
  auto bound = values.find(dim.getSource());
  if (bound != values.end() && std::holds_alternative<Buffer *>(bound->second))
    shape = &std::get<Buffer *>(bound->second)->shape;
  const ModBuffer *extra = extras.lookup(dim.getSource());
  llvm::SmallVector<int64_t, 4> extraShape;
  if (!shape && extra) {
    extraShape.assign(extra->shape.begin(), extra->shape.end());
    shape = &extraShape;
  }
  if (!shape) {
    error = "memref.dim of a memref that is no bound argument of the kernel";
    return false;
  }
  int64_t axis = index(dim.getIndex());
  int64_t rank = shape->size();
  if (axis < 0 || axis >= rank) {
    error = "memref.dim asks for dimension " + std::to_string(axis) +
            " of a rank-" + std::to_string(rank) +
            " memref (expected 0 to " + std::to_string(rank - 1) + ")";
    return false;
  }
  values[dim] = (*shape)[axis];
  return true;
}

bool Interpreter::run(scf::ForOp loop, std::string &error) {
  int64_t lower = index(loop.getLowerBound());
  int64_t upper = index(loop.getUpperBound());
  int64_t step = index(loop.getStep());
  if (step <= 0) {
    error = "scf.for with a non-positive step never ends";
    return false;
  }
  if (loop.getUnsignedCmp()) {
    error = "scf.for with unsignedCmp: the simulator runs loops with "
            "signed bounds only";
    return false;
  }
  // The distance may exceed INT64_MAX: count in unsigned arithmetic.
  uint64_t trips =
      upper > lower ? (static_cast<uint64_t>(upper) -
                       static_cast<uint64_t>(lower) - 1) /
                              static_cast<uint64_t>(step) +
                          1
                    : 0;
  if (!budget || !budget->take(trips)) {
    error = "scf.for from " + std::to_string(lower) + " to " +
            std::to_string(upper) + " step " + std::to_string(step) +
            " would run " + std::to_string(trips) +
            " iterations, past the run's budget of " +
            std::to_string(budget ? budget->total : 0) +
            " loop iterations and CTAs for these sizes (is a bound "
            "wrong?)";
    return false;
  }
  SmallVector<RuntimeValue> carried;
  for (Value init : loop.getInitArgs())
    carried.push_back(values[init]);
  Block *body = loop.getBody();
  for (uint64_t trip = 0; trip < trips; ++trip) {
    values[loop.getInductionVar()] = static_cast<int64_t>(
        static_cast<uint64_t>(lower) + trip * static_cast<uint64_t>(step));
    for (auto [arg, value] : llvm::zip(loop.getRegionIterArgs(), carried))
      values[arg] = value;
    if (!run(*body, error))
      return false;
    auto yield = cast<scf::YieldOp>(body->getTerminator());
    for (auto [slot, value] : llvm::zip(carried, yield.getOperands()))
      slot = values[value];
  }
  for (auto [result, value] : llvm::zip(loop.getResults(), carried))
    values[result] = value;
  return true;
}

bool Interpreter::run(arith::CmpIOp compare, std::string &error) {
  int64_t a = index(compare.getLhs()), b = index(compare.getRhs());
  bool result = false;
  switch (compare.getPredicate()) {
  case arith::CmpIPredicate::eq: result = a == b; break;
  case arith::CmpIPredicate::ne: result = a != b; break;
  case arith::CmpIPredicate::slt: result = a < b; break;
  case arith::CmpIPredicate::sle: result = a <= b; break;
  case arith::CmpIPredicate::sgt: result = a > b; break;
  case arith::CmpIPredicate::sge: result = a >= b; break;
  case arith::CmpIPredicate::ult: result = uint64_t(a) < uint64_t(b); break;
  case arith::CmpIPredicate::ule: result = uint64_t(a) <= uint64_t(b); break;
  case arith::CmpIPredicate::ugt: result = uint64_t(a) > uint64_t(b); break;
  case arith::CmpIPredicate::uge: result = uint64_t(a) >= uint64_t(b); break;
  default: return unsupported(compare.getOperation(), error);
  }
  values[compare] = static_cast<int64_t>(result);
  return true;
}

bool Interpreter::run(scf::IfOp branch, std::string &error) {
  Region &taken = index(branch.getCondition()) ? branch.getThenRegion()
                                               : branch.getElseRegion();
  if (taken.empty())
    return true;
  Block &body = taken.front();
  if (!run(body, error))
    return false;
  auto yield = cast<scf::YieldOp>(body.getTerminator());
  for (auto [result, value] : llvm::zip(branch.getResults(), yield.getOperands())) {
    RuntimeValue copy = values[value];
    values[result] = std::move(copy);
  }
  return true;
}

bool Interpreter::run(KvBlockRangeOp range, std::string &error) {
  Operation *op = range.getOperation();
  int64_t seqQ = index(range.getSeqQ()), seqK = index(range.getSeqK());
  const MaskModBounds &bounds =
      boundsOf(op, range.getMask(), range.getWindowLeft(),
               range.getWindowRight(), range.getMaskMod());
  KvBlockRange blocks = kvBlockRange(
      bounds.bounds, index(range.getRowBegin()), range.getRows(),
      range.getGqaRatio(), range.getBlockN(), seqQ, seqK, bounds.exact);
  if (Value blockMask = range.getBlockMask()) {
    const ModBuffer *table = extras.lookup(blockMask);
    if (!table || table->shape.size() != 4) {
      error = "fa4.kv_block_range's block mask is not a bound extra of "
              "the kernel";
      return false;
    }
    int64_t batch = index(range.getBatch());
    int64_t kvHead = index(range.getKvHead());
    int64_t ratio = range.getGqaRatio();
    KvBlockRange attribute = kvBlockRange(
        KeyBounds::band(maskBandFor(range.getMask(), range.getWindowLeft(),
                                    range.getWindowRight())),
        index(range.getRowBegin()), range.getRows(), ratio,
        range.getBlockN(), seqQ, seqK);
    std::string missing;
    blocks = narrowByBlockMask(
        blocks, attribute, index(range.getRowBegin()), range.getRows(),
        ratio, seqQ, table->shape[1] == 1 ? 1 : ratio,
        [&](int64_t queryBlock, int64_t headInGroup) {
          int64_t b = table->shape[0] == 1 ? 0 : batch;
          int64_t h = table->shape[1] == 1 ? 0 : kvHead * ratio + headInGroup;
          if (b >= table->shape[0] || h >= table->shape[1] ||
              queryBlock >= table->shape[2]) {
            missing = "the block mask has no entry for batch " +
                      std::to_string(b) + ", head " + std::to_string(h) +
                      ", query block " + std::to_string(queryBlock);
            return BlockMaskEntry();
          }
          const double *e =
              &table->data[((b * table->shape[1] + h) * table->shape[2] +
                            queryBlock) * 4];
          return BlockMaskEntry{int64_t(e[0]), int64_t(e[1]),
                                int64_t(e[2]), int64_t(e[3])};
        });
    if (!missing.empty()) {
      error = missing;
      return false;
    }
  }
  values[range.getBegin()] = blocks.begin;
  values[range.getFullBegin()] = blocks.fullBegin;
  values[range.getFullEnd()] = blocks.fullEnd;
  values[range.getEnd()] = blocks.end;
  if (countsBlocks) {
    stats.blocksVisited += blocks.end - blocks.begin;
    stats.blocksSkipped +=
        ceilDiv(seqK, range.getBlockN()) - (blocks.end - blocks.begin);
  }
  return true;
}

bool Interpreter::run(TaskCoordsOp coords, std::string &error) {
  Operation *op = coords.getOperation();
  TaskGridShape shape;
  shape.batch = index(coords.getBatch());
  if (llvm::MulOverflow<int64_t>(coords.getKvHeads(), coords.getGroupsPerKv(),
                        shape.headGroups)) {
    error = "fa4.task_coords: kv_heads x groups_per_kv overflows";
    return false;
  }
  shape.gqaRatio = coords.getGqaRatio();
  shape.rows = coords.getRows();
  shape.blockN = coords.getBlockN();
  shape.seqQ = index(coords.getSeqQ());
  shape.seqK = index(coords.getSeqK());
  shape.band = maskBandFor(coords.getMask(), coords.getWindowLeft(),
                           coords.getWindowRight());
  shape.l2Keys = static_cast<int64_t>(coords.getL2Keys());
  if (!coords.getMaskMod().empty())
    shape.bounds = boundsOf(op, coords.getMask(), coords.getWindowLeft(),
                            coords.getWindowRight(), coords.getMaskMod())
                       .bounds;
  int64_t mBlocks = 0, tasks = 0;
  if (Value cuSeqlens = coords.getCuSeqlens()) {
    // Varlen: AttentionMath.h's slots, the sequence by the table.
    const ModBuffer *table = extras.lookup(cuSeqlens);
    if (!table || table->shape.size() != 1 || table->shape[0] != shape.batch + 1) {
      error = "fa4.task_coords reads a cu_seqlens table that is not a bound "
              "extra of batch + 1 = " + std::to_string(shape.batch + 1) +
              " entries";
      return false;
    }
    int64_t slots = varlenSlot(shape.seqQ, shape.batch, shape.seqQ,
                               shape.gqaRatio, shape.rows);
    int64_t position = index(coords.getIndex());
    if (position < 0 || position >= slots * shape.headGroups) {
      error = "fa4.task_coords asked for task " + std::to_string(position) +
              " of " + std::to_string(slots * shape.headGroups);
      return false;
    }
    VarlenTask task = varlenTaskAt(
        position, shape.batch, shape.seqQ, shape.gqaRatio, shape.rows,
        shape.headGroups, [&](int64_t b) {
          double entry = table->data[b];
          return entry <= -1e18 ? int64_t(-1) : entry >= 1e18 ? int64_t(1) << 62
                                                              : int64_t(entry);
        });
    values[coords.getBatchIndex()] = task.batch;
    values[coords.getHeadGroup()] = task.headGroup;
    values[coords.getMBlock()] = task.mBlock;
    return true;
  }
  if (!countTasks(op, shape.batch, shape.headGroups, shape.gqaRatio,
                  shape.rows, shape.seqQ, mBlocks, tasks, error))
    return false;
  int64_t position = index(coords.getIndex());
  if (position >= tasks) {
    error = "fa4.task_coords asked for task " + std::to_string(position) +
            " of " + std::to_string(tasks);
    return false;
  }
  // An LPT order costs O(m_blocks log m_blocks) to build: refuse more
  // m_blocks than the run could visit within its budget.
  if (coords.getOrder() == TaskOrder::lpt &&
      (!budget || mBlocks > budget->total)) {
    error = "fa4.task_coords orders " + std::to_string(mBlocks) +
            " m_blocks, more than the run's budget of " +
            std::to_string(budget ? budget->total : 0) +
            " loop iterations and CTAs for these sizes";
    return false;
  }
  Task task = scheduler(shape, orderOf(coords.getOrder())).taskAt(position);
  values[coords.getBatchIndex()] = task.batch;
  values[coords.getHeadGroup()] = task.headGroup;
  values[coords.getMBlock()] = task.mBlock;
  return true;
}

bool Interpreter::run(LoadQTileOp load, std::string &error) {
  Operation *op = load.getOperation();
  const Buffer &q = buffer(load.getSource());
  auto tile = makeTile(load.getResult());
  int64_t rows = tile->shape[0], dim = tile->shape[1];
  int64_t batch = index(load.getBatch()), head = index(load.getHead());
  int64_t row = index(load.getRow()), ratio = load.getGqaRatio();
  if (!checkTensorAccess(op, q, batch, head, ratio, dim, error))
    return false;
  for (int64_t r = 0; r < rows; ++r) {
    PackedRow packed = unpackRow(row + r, ratio);
    if (packed.seqPos >= q.shape[1])
      continue;
    int64_t qHead = head * ratio + packed.headInGroup;
    const float *src =
        &q.data[((batch * q.shape[1] + packed.seqPos) * q.shape[2] + qHead) *
                dim];
    std::copy(src, src + dim, &tile->data[r * dim]);
  }
  setTile(load.getResult(), tile);
  return true;
}

const float *mlir::fa4::sim::pagedRow(const Buffer &cache,
                                      const ModBuffer &table, int64_t batch,
                                      int64_t head, int64_t position) {
  int64_t page = cache.shape[1];
  int64_t block = position / page;
  if (position < 0 || batch >= table.shape[0] || block >= table.shape[1])
    return nullptr;
  double entry = table.data[batch * table.shape[1] + block];
  if (!(entry >= 0.0) || entry >= double(cache.shape[0]))
    return nullptr;
  int64_t row = static_cast<int64_t>(entry) * page + position % page;
  return &cache.data[(row * cache.shape[2] + head) * cache.shape[3]];
}

bool Interpreter::run(LoadKvTileOp load, std::string &error) {
  Operation *op = load.getOperation();
  const Buffer &kv = buffer(load.getSource());
  auto tile = makeTile(load.getResult());
  int64_t rows = tile->shape[0], dim = tile->shape[1];
  int64_t batch = index(load.getBatch()), head = index(load.getHead());
  int64_t col = index(load.getCol());
  // Rows from clear_from on read as zero (no clear: every row is read).
  if (load.getClearFrom())
    rows = std::clamp<int64_t>(index(load.getClearFrom()), 0, rows);
  if (Value blockTable = load.getBlockTable()) {
    const ModBuffer *table = extras.lookup(blockTable);
    if (!table || table->shape.size() != 2 || kv.shape.size() != 4 ||
        kv.shape[3] != dim || head < 0 || head >= kv.shape[2] || batch < 0 ||
        batch >= table->shape[0]) {
      error = nameOf(op) + " reads a paged cache whose block table is not a "
                           "bound [batch, max_blocks] extra covering batch " +
              std::to_string(batch) + ", or head " + std::to_string(head) +
              " past the cache's";
      return false;
    }
    for (int64_t r = 0; r < rows; ++r)
      if (const float *src = pagedRow(kv, *table, batch, head, col + r))
        std::copy(src, src + dim, &tile->data[r * dim]);
    setTile(load.getResult(), tile);
    return true;
  }
  if (!checkTensorAccess(op, kv, batch, head, 1, dim, error))
    return false;
  for (int64_t r = 0; r < rows && col + r < kv.shape[1]; ++r) {
    const float *src =
        &kv.data[((batch * kv.shape[1] + col + r) * kv.shape[2] + head) * dim];
    std::copy(src, src + dim, &tile->data[r * dim]);
  }
  setTile(load.getResult(), tile);
  return true;
}

bool Interpreter::runScoreRegion(
    const Mod &program, const ScoreTilePlace &place, const Tile &scores,
    llvm::function_ref<bool(int64_t at)> wanted,
    llvm::function_ref<void(int64_t at, double value)> apply,
    std::string &error) {
  // Packed rows r and keys c, wherever the tile holds them.
  int64_t width = scores.shape[1];
  int64_t rows = place.transposed ? scores.shape[1] : scores.shape[0];
  int64_t cols = place.transposed ? scores.shape[0] : scores.shape[1];
  for (int64_t r = 0; r < rows; ++r) {
    PackedRow packed = unpackRow(place.row + r, place.ratio);
    if (packed.seqPos >= place.seqQ)
      continue;
    for (int64_t c = 0; c < cols && place.col + c < place.seqK; ++c) {
      int64_t at = place.transposed ? c * width + r : r * width + c;
      if (!wanted(at))
        continue;
      double value;
      double arguments[] = {
          scores.data[at] * place.scale, double(place.batch),
          double(place.head * place.ratio + packed.headInGroup),
          double(packed.seqPos), double(place.col + c)};
      if (!program.program->run(arguments, program.extras, /*rounded=*/true,
                                value, error))
        return false;
      apply(at, value);
    }
  }
  return true;
}

bool Interpreter::run(ScoreModOp scoreMod, std::string &error) {
  Operation *op = scoreMod.getOperation();
  const Mod *program = mod(op, scoreMod.getBody(), scoreMod.getExtras(),
                           error);
  if (!program)
    return false;
  const Tile &scores = tile(scoreMod.getScores());
  // Every score is scaled; those inside the sequences are then the region's.
  auto result = std::make_shared<Tile>(scores);
  float scale = scoreMod.getScale().convertToFloat();
  if (Value factor = scoreMod.getFactor())
    scale *= static_cast<float>(scalar(factor));
  for (float &s : result->data)
    s *= scale;
  // The region's score carries the descale factor too.
  ScoreTilePlace place = placeOf(scoreMod);
  place.scale = scale;
  if (!runScoreRegion(
          *program, place, scores, [](int64_t) { return true; },
          [&](int64_t at, double value) {
            result->data[at] = static_cast<float>(value);
          },
          error))
    return false;
  setTile(scoreMod.getResult(), result);
  return true;
}

bool Interpreter::run(MaskOp mask, std::string &error) {
  Operation *op = mask.getOperation();
  const MaskModBounds &bounds =
      boundsOf(op, mask.getMask(), mask.getWindowLeft(),
               mask.getWindowRight(), mask.getMaskMod());
  const Mod *program = nullptr;
  if (!bounds.exact) {
    program = mod(op, mask.getMaskMod(), mask.getExtras(), error);
    if (!program)
      return false;
  }
  auto result = std::make_shared<Tile>(tile(mask.getScores()));
  // Packed rows r and keys c, wherever the tile holds them.
  bool transposed = mask.getTransposed();
  int64_t width = result->shape[1];
  int64_t rows = transposed ? result->shape[1] : result->shape[0];
  int64_t cols = transposed ? result->shape[0] : result->shape[1];
  int64_t row = index(mask.getRow()), col = index(mask.getCol());
  int64_t seqQ = index(mask.getSeqQ()), seqK = index(mask.getSeqK());
  int64_t ratio = mask.getGqaRatio();
  int64_t batch = program ? index(mask.getBatch()) : 0;
  int64_t head = program ? index(mask.getHead()) : 0;
  for (int64_t r = 0; r < rows; ++r) {
    PackedRow packed = unpackRow(row + r, ratio);
    IndexRange keys = visibleKeys(bounds.bounds, packed.seqPos, seqQ, seqK);
    for (int64_t c = 0; c < cols; ++c) {
      float &s = result->data[transposed ? c * width + r : r * width + c];
      if (col + c < keys.begin || col + c >= keys.end) {
        s = kMinusInf;
        continue;
      }
      // Only a predicate the bounds do not capture runs per element.
      if (!program || packed.seqPos >= seqQ)
        continue;
      double visible;
      double arguments[] = {double(batch),
                            double(head * ratio + packed.headInGroup),
                            double(packed.seqPos), double(col + c)};
      if (!program->program->run(arguments, program->extras,
                                 /*rounded=*/true, visible, error))
        return false;
      if (visible == 0.0)
        s = kMinusInf;
    }
  }
  setTile(mask.getResult(), result);
  return true;
}

bool Interpreter::run(OnlineSoftmaxOp softmax, std::string &error) {
  const Tile &s = tile(softmax.getScores());
  const Tile &rowMax = tile(softmax.getRowMax());
  const Tile &rowSum = tile(softmax.getRowSum());
  int64_t rows = s.shape[0], cols = s.shape[1];
  // FP8: the descales' run-time factor multiplies the scale; the
  // probabilities are lifted by 2^prob_shift (the sums with them).
  float scaleLog2 = softmax.getScaleLog2().convertToFloat();
  if (Value factor = softmax.getFactor())
    scaleLog2 *= static_cast<float>(scalar(factor));
  float shift = static_cast<float>(softmax.getProbShift());
  float threshold = softmax.getRescaleThreshold().convertToFloat();
  Type probElement = elementOf(softmax.getProbs());
  auto probs = makeTile(softmax.getProbs());
  auto newMax = makeTile(softmax.getNewRowMax());
  auto newSum = makeTile(softmax.getNewRowSum());
  auto accScale = makeTile(softmax.getAccScale());
  bool anyMoved = false, anyRescaled = false;
  for (int64_t r = 0; r < rows; ++r) {
    const float *sRow = &s.data[r * cols];
    float oldMax = rowMax.data[r];
    float candidate = oldMax;
    // NaN propagates into the max (max.NaN.f32 in the kernel).
    for (int64_t c = 0; c < cols; ++c)
      candidate = std::isnan(sRow[c]) || std::isnan(candidate)
                      ? sRow[c] + candidate
                      : std::max(candidate, sRow[c]);
    // The first visible block sets the max; after that it moves only
    // past the threshold, and a kept (stale) max only lets the
    // exponentials grow up to 2^threshold.
    float maxNew = oldMax;
    float scale = 1.0f;
    if (oldMax == kMinusInf || std::isnan(candidate)) {
      maxNew = candidate;
    } else if (candidate > oldMax) {
      anyMoved = true;
      if ((candidate - oldMax) * scaleLog2 > threshold) {
        maxNew = candidate;
        scale = std::exp2((oldMax - maxNew) * scaleLog2);
        anyRescaled = true;
      }
    }
    // A row that has seen nothing yet subtracts 0, so exp2(-inf) = 0
    // rather than exp2(-inf + inf) = NaN.
    float maxScaled = maxNew == kMinusInf ? 0.0f : maxNew * scaleLog2;
    float sum = 0.0f;
    float *pRow = &probs->data[r * cols];
    for (int64_t c = 0; c < cols; ++c) {
      float p = std::exp2(sRow[c] * scaleLog2 - maxScaled + shift);
      sum += p;
      pRow[c] = roundTo(probElement, p);
    }
    newMax->data[r] = maxNew;
    newSum->data[r] = rowSum.data[r] * scale + sum;
    accScale->data[r] = scale;
  }
  if (anyRescaled)
    ++stats.rescalesDone;
  else if (anyMoved)
    ++stats.rescalesSkipped;
  setTile(softmax.getProbs(), probs);
  setTile(softmax.getNewRowMax(), newMax);
  setTile(softmax.getNewRowSum(), newSum);
  setTile(softmax.getAccScale(), accScale);
  return true;
}

bool Interpreter::run(LoadDescaleOp load, std::string &error) {
  const ModBuffer *table = extras.lookup(load.getTable());
  int64_t batch = index(load.getBatch()), head = index(load.getHead());
  if (!table || table->shape.size() != 2 || batch < 0 ||
      batch >= table->shape[0] || head < 0 || head >= table->shape[1]) {
    error = "fa4.load_descale reads entry [" + std::to_string(batch) + ", " +
            std::to_string(head) +
            "] of a descale table that is not a bound extra of that shape";
    return false;
  }
  values[load.getResult()] = table->data[batch * table->shape[1] + head];
  return true;
}

bool Interpreter::run(CorrectionOp correction, std::string &error) {
  const Tile &scale = tile(correction.getAccScale());
  if (llvm::all_of(scale.data, [](float f) { return f == 1.0f; })) {
    // Nothing to rescale: the accumulator passes through untouched.
    // (Copied out first: inserting the result may rehash the map.)
    RuntimeValue acc = values[correction.getAcc()];
    values[correction.getResult()] = std::move(acc);
    return true;
  }
  auto result = std::make_shared<Tile>(tile(correction.getAcc()));
  int64_t cols = result->shape[1];
  for (int64_t r = 0; r < result->shape[0]; ++r)
    for (int64_t c = 0; c < cols; ++c)
      result->data[r * cols + c] *= scale.data[r];
  setTile(correction.getResult(), result);
  return true;
}

bool Interpreter::run(NormalizeOp normalize, std::string &error) {
  const Tile &acc = tile(normalize.getAcc());
  const Tile &rowMax = tile(normalize.getRowMax());
  const Tile &rowSum = tile(normalize.getRowSum());
  float scaleLog2 = normalize.getScaleLog2().convertToFloat();
  if (Value factor = normalize.getFactor())
    scaleLog2 *= static_cast<float>(scalar(factor));
  float outFactor = 1.0f;
  if (Value factor = normalize.getOutFactor())
    outFactor = static_cast<float>(scalar(factor));
  float shift = static_cast<float>(normalize.getProbShift());
  Type outElement = elementOf(normalize.getOut());
  auto out = makeTile(normalize.getOut());
  auto lse = makeTile(normalize.getLse());
  int64_t cols = acc.shape[1];
  for (int64_t r = 0; r < acc.shape[0]; ++r) {
    float sum = rowSum.data[r];
    if (sum == 0.0f) {
      lse->data[r] = kMinusInf; // the row saw no key: O stays 0
      continue;
    }
    float inverse = outFactor / sum;
    for (int64_t c = 0; c < cols; ++c)
      out->data[r * cols + c] = roundTo(outElement, acc.data[r * cols + c] * inverse);
    lse->data[r] =
        (rowMax.data[r] * scaleLog2 + std::log2(sum) - shift) * float(M_LN2);
  }
  setTile(normalize.getOut(), out);
  setTile(normalize.getLse(), lse);
  return true;
}

bool Interpreter::run(StoreOTileOp store, std::string &error) {
  Operation *op = store.getOperation();
  Buffer &o = buffer(store.getDest());
  const Tile &t = tile(store.getTile());
  int64_t dim = t.shape[1], ratio = store.getGqaRatio();
  int64_t batch = index(store.getBatch()), head = index(store.getHead());
  int64_t row = index(store.getRow());
  int64_t column = store.getColumn();
  int64_t headDim = o.shape.size() == 4 ? o.shape[3] : 0;
  if (column + dim > headDim) {
    error = nameOf(op) + " stores columns [" + std::to_string(column) + ", " +
            std::to_string(column + dim) + ") of a head dim of " +
            std::to_string(headDim);
    return false;
  }
  if (!checkTensorAccess(op, o, batch, head, ratio, headDim, error))
    return false;
  // Varlen: the sequence's positions from its first row, up to its length.
  int64_t offset = 0, limit = o.shape[1];
  if (!store.getSpan().empty()) {
    offset = index(store.getSpan()[0]);
    limit = index(store.getSpan()[1]);
  }
  for (int64_t r = 0; r < t.shape[0]; ++r) {
    PackedRow packed = unpackRow(row + r, ratio);
    int64_t position = offset + packed.seqPos;
    if (packed.seqPos >= limit || position >= o.shape[1])
      continue;
    int64_t qHead = head * ratio + packed.headInGroup;
    std::copy_n(&t.data[r * dim], dim,
                &o.data[((batch * o.shape[1] + position) * o.shape[2] + qHead) *
                            headDim +
                        column]);
  }
  return true;
}

bool Interpreter::run(StoreLseTileOp store, std::string &error) {
  Operation *op = store.getOperation();
  Buffer &lse = buffer(store.getDest());
  const Tile &t = tile(store.getTile());
  int64_t ratio = store.getGqaRatio();
  int64_t batch = index(store.getBatch()), head = index(store.getHead());
  int64_t row = index(store.getRow());
  if (lse.shape.size() != 3 || batch >= lse.shape[0] ||
      head >= lse.shape[1] / ratio) {
    std::string shape;
    for (int64_t size : lse.shape)
      shape += (shape.empty() ? "" : ", ") + std::to_string(size);
    error = nameOf(op) + " addresses batch index " +
            std::to_string(batch) + " and heads [" +
            std::to_string(head * ratio) + ", " +
            std::to_string((head + 1) * ratio) + ") of an LSE of shape [" +
            shape + "] (expected [batch, q_heads, seq_q])";
    return false;
  }
  int64_t offset = 0, limit = lse.shape[2];
  if (!store.getSpan().empty()) {
    offset = index(store.getSpan()[0]);
    limit = index(store.getSpan()[1]);
  }
  for (int64_t r = 0; r < t.shape[0]; ++r) {
    PackedRow packed = unpackRow(row + r, ratio);
    int64_t position = offset + packed.seqPos;
    if (packed.seqPos >= limit || position >= lse.shape[2])
      continue;
    int64_t qHead = head * ratio + packed.headInGroup;
    lse.data[(batch * lse.shape[1] + qHead) * lse.shape[2] + position] =
        t.data[r];
  }
  return true;
}


ModBuffer *Interpreter::splitWorkspace(Operation *op, Value workspace,
                                       const Buffer &out, int64_t ratio,
                                       int64_t splits,
                                       SplitWorkspaceLayout &layout,
                                       std::string &error) {
  // The workspace is the one extra a kernel writes: the simulator owns the
  // buffer it bound.
  auto *buffer = const_cast<ModBuffer *>(extras.lookup(workspace));
  if (!buffer || buffer->shape.size() != 1 || out.shape.size() != 4 ||
      out.shape[2] % ratio != 0) {
    error = nameOf(op) + " writes a split-KV workspace that is not a bound "
                         "rank-1 extra, or O is not [batch, seq, heads, dim]";
    return nullptr;
  }
  layout = splitWorkspaceLayout(out.shape[0], out.shape[2] / ratio,
                                out.shape[1], ratio, splits, out.shape[3]);
  if (buffer->shape[0] < layout.words()) {
    error = nameOf(op) + " needs a split-KV workspace of " +
            std::to_string(layout.words()) + " words, got " +
            std::to_string(buffer->shape[0]);
    return nullptr;
  }
  return buffer;
}

/// The workspace slot of packed row `packedRow` of head group `head`.
static int64_t splitRowSlot(const Buffer &out, const SplitWorkspaceLayout &layout,
                            int64_t ratio, int64_t batch, int64_t head,
                            int64_t packedRow) {
  int64_t rowTiles = (out.shape[1] * ratio + 127) / 128;
  int64_t tile =
      (batch * (out.shape[2] / ratio) + head) * rowTiles + packedRow / 128;
  return tile * layout.rows + packedRow % 128;
}

/// A split op's batch and head within O, and its part within the layout's.
static bool checkSplitAccess(Operation *op, const Buffer &out,
                             const SplitWorkspaceLayout &layout, int64_t ratio,
                             int64_t batch, int64_t head, int64_t split,
                             std::string &error) {
  if (!checkTensorAccess(op, out, batch, head, ratio, layout.headDim, error))
    return false;
  if (split >= 0 && split < layout.splits)
    return true;
  error = nameOf(op) + " names part " + std::to_string(split) + " of " +
          std::to_string(layout.splits);
  return false;
}

bool Interpreter::run(StorePartialOOp store, std::string &error) {
  Operation *op = store.getOperation();
  const Buffer &out = buffer(store.getOut());
  const Tile &t = tile(store.getTile());
  int64_t ratio = store.getGqaRatio();
  SplitWorkspaceLayout layout;
  ModBuffer *ws = splitWorkspace(op, store.getWorkspace(), out, ratio,
                                 store.getNumSplits(), layout, error);
  if (!ws)
    return false;
  int64_t batch = index(store.getBatch()), head = index(store.getHead());
  int64_t row = index(store.getRow()), split = index(store.getSplit());
  int64_t column = store.getColumn(), cols = t.shape[1];
  if (!checkSplitAccess(op, out, layout, ratio, batch, head, split, error))
    return false;
  for (int64_t r = 0; r < t.shape[0]; ++r) {
    if (unpackRow(row + r, ratio).seqPos >= out.shape[1])
      continue;
    int64_t slot = splitRowSlot(out, layout, ratio, batch, head, row + r);
    double *part = &ws->data[layout.outWord() +
                             (split * layout.tiles * layout.rows + slot) * layout.headDim];
    for (int64_t c = 0; c < cols; ++c)
      part[column + c] = t.data[r * cols + c];
  }
  return true;
}

bool Interpreter::run(MergeSplitsOp merge, std::string &error) {
  Operation *op = merge.getOperation();
  Buffer &out = buffer(merge.getOut());
  const Tile &lse = tile(merge.getLse());
  int64_t ratio = merge.getGqaRatio();
  SplitWorkspaceLayout layout;
  ModBuffer *ws = splitWorkspace(op, merge.getWorkspace(), out, ratio,
                                 merge.getNumSplits(), layout, error);
  if (!ws)
    return false;
  int64_t batch = index(merge.getBatch()), head = index(merge.getHead());
  int64_t row = index(merge.getRow()), split = index(merge.getSplit());
  int64_t dim = layout.headDim;
  if (!checkSplitAccess(op, out, layout, ratio, batch, head, split, error))
    return false;
  Buffer *lseOut = merge.getLseOut() ? &buffer(merge.getLseOut()) : nullptr;
  Type outElement = getElementTypeOrSelf(merge.getOut().getType());
  for (int64_t r = 0; r < lse.shape[0]; ++r) {
    PackedRow packed = unpackRow(row + r, ratio);
    if (packed.seqPos >= out.shape[1])
      continue;
    int64_t slot = splitRowSlot(out, layout, ratio, batch, head, row + r);
    // The row's count is its first thread slot's (the simulator runs a row
    // as one thread).
    double &count = ws->data[slot * kSplitSlots];
    auto lseOf = [&](int64_t part) -> double & {
      return ws->data[layout.lseWord() +
                      (part * layout.tiles * layout.rows + slot) * kSplitSlots];
    };
    lseOf(split) = lse.data[r];
    if (++count < layout.splits)
      continue;
    count = 0;
    // The largest part LSE, a NaN carried through (the kernel's maximumf).
    float top = kMinusInf;
    for (int64_t part = 0; part < layout.splits; ++part)
      top = std::isnan(top) || std::isnan(float(lseOf(part)))
                ? std::numeric_limits<float>::quiet_NaN()
                : std::max(top, float(lseOf(part)));
    std::vector<float> merged(dim, 0.0f);
    float total = 0.0f;
    std::vector<float> weights(layout.splits, 0.0f);
    if (top != kMinusInf)
      for (int64_t part = 0; part < layout.splits; ++part)
        total += weights[part] = std::exp(float(lseOf(part)) - top);
    for (int64_t part = 0; part < layout.splits; ++part) {
      if (weights[part] == 0.0f)
        continue; // a part that saw no key: its O was never written
      const double *partO = &ws->data[layout.outWord() +
                                      (part * layout.tiles * layout.rows + slot) * dim];
      for (int64_t c = 0; c < dim; ++c)
        merged[c] += weights[part] / total * float(partO[c]);
    }
    int64_t qHead = head * ratio + packed.headInGroup;
    float *dest =
        &out.data[((batch * out.shape[1] + packed.seqPos) * out.shape[2] + qHead) *
                  dim];
    for (int64_t c = 0; c < dim; ++c)
      dest[c] = roundTo(outElement, merged[c]);
    if (lseOut)
      lseOut->data[(batch * lseOut->shape[1] + qHead) * lseOut->shape[2] +
                   packed.seqPos] =
          top == kMinusInf ? kMinusInf : top + std::log(total);
  }
  return true;
}
