//===- Interpreter.cpp - executes the level-B tile program ----------------===//
//
// Each fa4 op is executed as the hardware would compute it, up to the order of
// fp32 sums: f32 accumulation in both MMAs, probabilities rounded to the input
// type before P·V, the output rounded once after the deferred normalization.
//
//===----------------------------------------------------------------------===//

#include "Interpreter.h"

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Support/TileScheduler.h"
#include "fa4/Transforms/TileConfig.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/ADT/TypeSwitch.h"

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
  for (int64_t r = 0; r < m; ++r) {
    float *oRow = &o[r * d];
    for (int64_t c = 0; c < n; ++c) {
      float weight = p[r * n + c];
      if (weight == 0.0f)
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
    if (values.count(argument) || argument.use_empty())
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

bool Interpreter::execute(Operation *op, std::string &error) {
  auto unsupported = [&]() {
    error = "cannot run '" + op->getName().getStringRef().str() + "'";
    return false;
  };
  auto binary = [&](auto fn) {
    values[op->getResult(0)] =
        static_cast<int64_t>(fn(index(op->getOperand(0)), index(op->getOperand(1))));
    return true;
  };

  return llvm::TypeSwitch<Operation *, bool>(op)
      // Scalar and loop plumbing.
      .Case([&](arith::ConstantOp constant) {
        Attribute value = constant.getValue();
        if (auto integer = dyn_cast<IntegerAttr>(value)) {
          values[constant] = integer.getValue().getSExtValue();
        } else if (auto real = dyn_cast<FloatAttr>(value)) {
          values[constant] = real.getValueAsDouble();
        } else if (auto dense = dyn_cast<DenseFPElementsAttr>(value);
                   dense && dense.isSplat()) {
          float fill = dense.getSplatValue<APFloat>().convertToFloat();
          setTile(constant, makeTile(constant, fill));
        } else {
          return unsupported();
        }
        return true;
      })
      .Case([&](arith::AddIOp) { return binary(std::plus<int64_t>()); })
      .Case([&](arith::SubIOp) { return binary(std::minus<int64_t>()); })
      .Case([&](arith::MulIOp) { return binary(std::multiplies<int64_t>()); })
      .Case([&](arith::CeilDivUIOp) {
        return binary([](int64_t a, int64_t b) { return ceilDiv(a, b); });
      })
      .Case([&](arith::DivUIOp) {
        return binary([](int64_t a, int64_t b) { return a / b; });
      })
      .Case([&](arith::MinSIOp) {
        return binary([](int64_t a, int64_t b) { return std::min(a, b); });
      })
      .Case([&](arith::MaxSIOp) {
        return binary([](int64_t a, int64_t b) { return std::max(a, b); });
      })
      .Case([&](memref::DimOp dim) {
        std::optional<int64_t> axis = dim.getConstantIndex();
        if (!axis)
          return unsupported();
        values[dim] = buffer(dim.getSource()).shape[*axis];
        return true;
      })
      .Case([&](scf::ForOp loop) {
        int64_t lower = index(loop.getLowerBound());
        int64_t upper = index(loop.getUpperBound());
        int64_t step = index(loop.getStep());
        if (step <= 0) {
          error = "scf.for with a non-positive step never ends";
          return false;
        }
        SmallVector<RuntimeValue> carried;
        for (Value init : loop.getInitArgs())
          carried.push_back(values[init]);
        Block *body = loop.getBody();
        for (int64_t iv = lower; iv < upper; iv += step) {
          values[loop.getInductionVar()] = iv;
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
      })
      .Case([&](arith::CmpIOp compare) {
        int64_t a = index(compare.getLhs()), b = index(compare.getRhs());
        bool result = false;
        switch (compare.getPredicate()) {
        case arith::CmpIPredicate::eq: result = a == b; break;
        case arith::CmpIPredicate::ne: result = a != b; break;
        case arith::CmpIPredicate::slt: result = a < b; break;
        case arith::CmpIPredicate::sle: result = a <= b; break;
        case arith::CmpIPredicate::sgt: result = a > b; break;
        case arith::CmpIPredicate::sge: result = a >= b; break;
        default: return unsupported();
        }
        values[compare] = static_cast<int64_t>(result);
        return true;
      })
      .Case([&](arith::OrIOp) {
        return binary([](int64_t a, int64_t b) { return a | b; });
      })
      .Case([&](arith::AndIOp) {
        return binary([](int64_t a, int64_t b) { return a & b; });
      })
      .Case([&](scf::IfOp branch) {
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
      })
      .Case<scf::YieldOp, func::ReturnOp>([](Operation *) { return true; })
      // The tile program.
      .Case([&](KvBlockRangeOp range) {
        int64_t seqQ = index(range.getSeqQ()), seqK = index(range.getSeqK());
        KvBlockRange blocks = kvBlockRange(
            maskBandFor(range.getMask(), range.getWindowLeft(),
                        range.getWindowRight()),
            index(range.getRowBegin()), range.getRows(), range.getGqaRatio(),
            range.getBlockN(), seqQ, seqK);
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
      })
      // The persistent scheduler.
      .Case([&](TaskCountOp count) {
        int64_t batch = index(count.getBatch()), seqQ = index(count.getSeqQ());
        numTasks = batch * count.getKvHeads() *
                   ceilDiv(seqQ * count.getGqaRatio(), count.getRows());
        values[count.getResult()] = numTasks;
        return true;
      })
      .Case([&](TaskCoordsOp coords) {
        TaskGridShape shape;
        shape.batch = index(coords.getBatch());
        shape.kvHeads = coords.getKvHeads();
        shape.gqaRatio = coords.getGqaRatio();
        shape.rows = coords.getRows();
        shape.blockN = coords.getBlockN();
        shape.seqQ = index(coords.getSeqQ());
        shape.seqK = index(coords.getSeqK());
        shape.band = maskBandFor(coords.getMask(), coords.getWindowLeft(),
                                 coords.getWindowRight());
        TileScheduler scheduler(shape, orderOf(coords.getOrder()));
        int64_t position = index(coords.getIndex());
        if (position < 0 || position >= scheduler.numTasks()) {
          error = "fa4.task_coords asked for task " + std::to_string(position) +
                  " of " + std::to_string(scheduler.numTasks());
          return false;
        }
        Task task = scheduler.taskAt(position);
        values[coords.getBatchIndex()] = task.batch;
        values[coords.getKvHead()] = task.kvHead;
        values[coords.getMBlock()] = task.mBlock;
        return true;
      })
      .Case([&](CtaIdOp cta) {
        values[cta.getResult()] = ctaId;
        return true;
      })
      .Case([&](NeedsRescaleOp vote) {
        const Tile &scale = tile(vote.getAccScale());
        values[vote.getResult()] = static_cast<int64_t>(
            llvm::any_of(scale.data, [](float f) { return f != 1.0f; }));
        return true;
      })
      .Case([&](LoadQTileOp load) {
        const Buffer &q = buffer(load.getSource());
        auto tile = makeTile(load.getResult());
        int64_t rows = tile->shape[0], dim = tile->shape[1];
        int64_t batch = index(load.getBatch()), head = index(load.getHead());
        int64_t row = index(load.getRow()), ratio = load.getGqaRatio();
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
      })
      .Case([&](LoadKvTileOp load) {
        const Buffer &kv = buffer(load.getSource());
        auto tile = makeTile(load.getResult());
        int64_t rows = tile->shape[0], dim = tile->shape[1];
        int64_t batch = index(load.getBatch()), head = index(load.getHead());
        int64_t col = index(load.getCol());
        for (int64_t r = 0; r < rows && col + r < kv.shape[1]; ++r) {
          const float *src =
              &kv.data[((batch * kv.shape[1] + col + r) * kv.shape[2] + head) * dim];
          std::copy(src, src + dim, &tile->data[r * dim]);
        }
        setTile(load.getResult(), tile);
        return true;
      })
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
        for (float &s : result->data)
          s = cap * std::tanh(s * scale / cap);
        setTile(softcap.getResult(), result);
        return true;
      })
      .Case([&](MaskOp mask) {
        auto result = std::make_shared<Tile>(tile(mask.getScores()));
        int64_t rows = result->shape[0], cols = result->shape[1];
        int64_t row = index(mask.getRow()), col = index(mask.getCol());
        int64_t seqQ = index(mask.getSeqQ()), seqK = index(mask.getSeqK());
        MaskBand band = maskBandFor(mask.getMask(), mask.getWindowLeft(),
                                    mask.getWindowRight());
        for (int64_t r = 0; r < rows; ++r) {
          int64_t seqPos = unpackRow(row + r, mask.getGqaRatio()).seqPos;
          IndexRange keys = visibleKeys(band, seqPos, seqQ, seqK);
          for (int64_t c = 0; c < cols; ++c)
            if (col + c < keys.begin || col + c >= keys.end)
              result->data[r * cols + c] = kMinusInf;
        }
        setTile(mask.getResult(), result);
        return true;
      })
      .Case([&](OnlineSoftmaxOp softmax) {
        const Tile &s = tile(softmax.getScores());
        const Tile &rowMax = tile(softmax.getRowMax());
        const Tile &rowSum = tile(softmax.getRowSum());
        int64_t rows = s.shape[0], cols = s.shape[1];
        float scaleLog2 = softmax.getScaleLog2().convertToFloat();
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
          for (int64_t c = 0; c < cols; ++c)
            candidate = std::max(candidate, sRow[c]);
          // The first visible block sets the max; after that it moves only
          // past the threshold, and a kept (stale) max only lets the
          // exponentials grow up to 2^threshold.
          float maxNew = oldMax;
          float scale = 1.0f;
          if (oldMax == kMinusInf) {
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
            float p = std::exp2(sRow[c] * scaleLog2 - maxScaled);
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
      })
      .Case([&](CorrectionOp correction) {
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
      })
      .Case([&](ValueMmaOp mma) {
        const Tile &p = tile(mma.getProbs()), &v = tile(mma.getValue());
        auto result = std::make_shared<Tile>(tile(mma.getAcc()));
        int64_t m = p.shape[0], n = p.shape[1], d = v.shape[1];
        valueProduct(p.data.data(), v.data.data(), result->data.data(), m, n, d);
        setTile(mma.getResult(), result);
        return true;
      })
      .Case([&](NormalizeOp normalize) {
        const Tile &acc = tile(normalize.getAcc());
        const Tile &rowMax = tile(normalize.getRowMax());
        const Tile &rowSum = tile(normalize.getRowSum());
        float scaleLog2 = normalize.getScaleLog2().convertToFloat();
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
          float inverse = 1.0f / sum;
          for (int64_t c = 0; c < cols; ++c)
            out->data[r * cols + c] = roundTo(outElement, acc.data[r * cols + c] * inverse);
          lse->data[r] =
              (rowMax.data[r] * scaleLog2 + std::log2(sum)) * float(M_LN2);
        }
        setTile(normalize.getOut(), out);
        setTile(normalize.getLse(), lse);
        return true;
      })
      .Case([&](StoreOTileOp store) {
        Buffer &o = buffer(store.getDest());
        const Tile &t = tile(store.getTile());
        int64_t dim = t.shape[1], ratio = store.getGqaRatio();
        int64_t batch = index(store.getBatch()), head = index(store.getHead());
        int64_t row = index(store.getRow());
        for (int64_t r = 0; r < t.shape[0]; ++r) {
          PackedRow packed = unpackRow(row + r, ratio);
          if (packed.seqPos >= o.shape[1])
            continue;
          int64_t qHead = head * ratio + packed.headInGroup;
          std::copy(&t.data[r * dim], &t.data[(r + 1) * dim],
                    &o.data[((batch * o.shape[1] + packed.seqPos) * o.shape[2] +
                             qHead) *
                            dim]);
        }
        return true;
      })
      .Case([&](StoreLseTileOp store) {
        Buffer &lse = buffer(store.getDest());
        const Tile &t = tile(store.getTile());
        int64_t ratio = store.getGqaRatio();
        int64_t batch = index(store.getBatch()), head = index(store.getHead());
        int64_t row = index(store.getRow());
        for (int64_t r = 0; r < t.shape[0]; ++r) {
          PackedRow packed = unpackRow(row + r, ratio);
          if (packed.seqPos >= lse.shape[2])
            continue;
          int64_t qHead = head * ratio + packed.headInGroup;
          lse.data[(batch * lse.shape[1] + qHead) * lse.shape[2] + packed.seqPos] =
              t.data[r];
        }
        return true;
      })
      .Default([&](Operation *) {
        if (hook && op->getDialect() == op->getContext()->getLoadedDialect<FA4Dialect>())
          return hook->execute(*this, op, error);
        return unsupported();
      });
}
