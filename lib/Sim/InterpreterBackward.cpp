//===- InterpreterBackward.cpp - the backward's level-B ops ----------------===//
//
// The interpreter's part for fa4.attention_backward's tile program: each op
// as its description defines it, in f32 on tiles rounded to their element
// types, as Interpreter.cpp runs the forward's.
//
//===----------------------------------------------------------------------===//

#include "Interpreter.h"

#include "fa4/Dialect/FA4/IR/FA4Ops.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::fa4;
using namespace mlir::fa4::sim;

static std::string nameOf(Operation *op) {
  return "'" + op->getName().getStringRef().str() + "'";
}

static constexpr double kLog2E = 1.4426950408889634;

bool Interpreter::run(QBlockRangeOp range, std::string &error) {
  Operation *op = range.getOperation();
  int64_t seqQ = index(range.getSeqQ()), seqK = index(range.getSeqK());
  int64_t col = index(range.getCol());
  if (col % range.getBlockN() != 0) {
    error = nameOf(op) + " is asked for key " + std::to_string(col) +
            ", which does not start a block of " +
            std::to_string(range.getBlockN()) + " keys";
    return false;
  }
  // Its cost is a kv_block_range per query block: count them as steps.
  int64_t queryBlocks = ceilDiv(seqQ * range.getGqaRatio(), range.getRows());
  if (!budget || !budget->take(static_cast<uint64_t>(queryBlocks))) {
    error = nameOf(op) + " would scan " + std::to_string(queryBlocks) +
            " query blocks, past the run's budget";
    return false;
  }
  const MaskModBounds &bounds =
      boundsOf(op, range.getMask(), range.getWindowLeft(),
               range.getWindowRight(), range.getMaskMod());
  KvBlockRange blocks =
      queryBlockRange(bounds.bounds, col, range.getBlockN(), range.getRows(),
                      range.getGqaRatio(), seqQ, seqK, bounds.exact);
  values[range.getBegin()] = blocks.begin;
  values[range.getFullBegin()] = blocks.fullBegin;
  values[range.getFullEnd()] = blocks.fullEnd;
  values[range.getEnd()] = blocks.end;
  // (Query block, K/V block) pairs, as the forward counts them.
  if (countsBlocks) {
    stats.blocksVisited += blocks.end - blocks.begin;
    stats.blocksSkipped += queryBlocks - (blocks.end - blocks.begin);
  }
  return true;
}

bool Interpreter::run(LoadRowTileOp load, std::string &error) {
  Operation *op = load.getOperation();
  const Buffer &source = buffer(load.getSource());
  auto result = makeTile(load.getResult());
  int64_t ratio = load.getGqaRatio();
  int64_t batch = index(load.getBatch()), head = index(load.getHead());
  int64_t row = index(load.getRow());
  if (source.shape.size() != 3 || batch < 0 || batch >= source.shape[0] ||
      head < 0 || head >= source.shape[1] / ratio) {
    error = nameOf(op) + " addresses batch " + std::to_string(batch) +
            " and heads [" + std::to_string(head * ratio) + ", " +
            std::to_string((head + 1) * ratio) +
            ") of a memref that is not [batch, q_heads, seq_q] holding them";
    return false;
  }
  for (int64_t r = 0; r < result->shape[0]; ++r) {
    PackedRow packed = unpackRow(row + r, ratio);
    if (packed.seqPos >= source.shape[2])
      continue;
    int64_t qHead = head * ratio + packed.headInGroup;
    result->data[r] =
        source.data[(batch * source.shape[1] + qHead) * source.shape[2] +
                    packed.seqPos];
  }
  setTile(load.getResult(), result);
  return true;
}

bool Interpreter::run(RowDotOp dot, std::string &error) {
  const Tile &a = tile(dot.getLhs()), &b = tile(dot.getRhs());
  auto result = makeTile(dot.getResult());
  int64_t rows = a.shape[0], cols = a.shape[1];
  for (int64_t r = 0; r < rows; ++r) {
    float sum = 0.0f;
    for (int64_t c = 0; c < cols; ++c)
      sum += a.data[r * cols + c] * b.data[r * cols + c];
    result->data[r] = sum;
  }
  setTile(dot.getResult(), result);
  return true;
}

bool Interpreter::run(ProbsFromLseOp probs, std::string &error) {
  const Tile &lse = tile(probs.getLse());
  auto result = std::make_shared<Tile>(tile(probs.getScores()));
  int64_t rows = result->shape[0], cols = result->shape[1];
  float scaleLog2 = probs.getScaleLog2().convertToFloat();
  bool transposed = probs.getTransposed();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      // A row that saw no key: every P is 0 (never exp2(s + inf)).
      float rowLse = lse.data[transposed ? c : r];
      float &s = result->data[r * cols + c];
      s = rowLse == -std::numeric_limits<float>::infinity()
              ? 0.0f
              : std::exp2(s * scaleLog2 - rowLse * static_cast<float>(kLog2E));
    }
  setTile(probs.getResult(), result);
  return true;
}

bool Interpreter::run(SoftmaxGradOp grad, std::string &error) {
  const Tile &p = tile(grad.getProbs()), &dp = tile(grad.getDprobs());
  const Tile &delta = tile(grad.getDelta());
  auto result = makeTile(grad.getResult());
  int64_t rows = p.shape[0], cols = p.shape[1];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      int64_t at = r * cols + c;
      float rowDelta = delta.data[grad.getTransposed() ? c : r];
      result->data[at] = p.data[at] * (dp.data[at] - rowDelta);
    }
  setTile(grad.getResult(), result);
  return true;
}

bool Interpreter::run(SoftcapGradOp grad, std::string &error) {
  const Tile &capped = tile(grad.getCapped());
  auto result = std::make_shared<Tile>(tile(grad.getGrad()));
  float cap = grad.getCap().convertToFloat();
  for (auto [g, c] : llvm::zip_equal(result->data, capped.data)) {
    float t = c / cap;
    g *= 1.0f - t * t;
  }
  setTile(grad.getResult(), result);
  return true;
}

bool Interpreter::run(ScoreModGradOp grad, std::string &error) {
  Operation *op = grad.getOperation();
  const Mod *program = mod(op, grad.getBody(), grad.getExtras(), error);
  if (!program)
    return false;
  // Outside the sequences the gradient is 0; a zero gradient (a masked
  // score) stays 0 without running the derivative.
  const Tile &given = tile(grad.getGrad());
  auto result = makeTile(grad.getResult());
  if (!runScoreRegion(
          *program, placeOf(grad), tile(grad.getScores()),
          [&](int64_t at) { return given.data[at] != 0.0f; },
          [&](int64_t at, double derivative) {
            result->data[at] = static_cast<float>(given.data[at] * derivative);
          },
          error))
    return false;
  setTile(grad.getResult(), result);
  return true;
}

bool Interpreter::run(ConvertTileOp convert, std::string &error) {
  const Tile &from = tile(convert.getTile());
  auto result = makeTile(convert.getResult());
  Type element = getElementTypeOrSelf(convert.getResult().getType());
  float scale = convert.getScale().convertToFloat();
  for (auto [to, value] : llvm::zip_equal(result->data, from.data))
    to = roundTo(element, value * scale);
  setTile(convert.getResult(), result);
  return true;
}

bool Interpreter::run(TransposedMmaOp mma, std::string &error) {
  const Tile &a = tile(mma.getLhs()), &b = tile(mma.getRhs());
  auto result = std::make_shared<Tile>(tile(mma.getAcc()));
  int64_t m = a.shape[0], n = a.shape[1], d = b.shape[1];
  // acc[c] += Σ_r a[r][c] · b[r]: a zero weight adds nothing unless b's row
  // is not finite (0 · NaN is NaN, as on the tensor core).
  for (int64_t r = 0; r < m; ++r) {
    const float *bRow = &b.data[r * d];
    bool finite = true;
    for (int64_t x = 0; x < d && finite; ++x)
      finite = std::isfinite(bRow[x]);
    for (int64_t c = 0; c < n; ++c) {
      float weight = a.data[r * n + c];
      if (weight == 0.0f && finite)
        continue;
      float *accRow = &result->data[c * d];
      for (int64_t x = 0; x < d; ++x)
        accRow[x] += weight * bRow[x];
    }
  }
  setTile(mma.getResult(), result);
  return true;
}

bool Interpreter::run(AccumulateDqOp accumulate, std::string &error) {
  Operation *op = accumulate.getOperation();
  Buffer &dq = buffer(accumulate.getDest());
  const Tile &t = tile(accumulate.getTile());
  int64_t width = t.shape[1], ratio = accumulate.getGqaRatio();
  int64_t column = static_cast<int64_t>(accumulate.getColumn());
  int64_t dim = dq.shape.size() == 4 ? dq.shape[3] : width;
  int64_t batch = index(accumulate.getBatch());
  int64_t head = index(accumulate.getHead());
  int64_t row = index(accumulate.getRow());
  if (!checkTensorAccess(op, dq, batch, head, ratio, dim, error))
    return false;
  if (column + width > dim) {
    error = nameOf(op) + " adds columns [" + std::to_string(column) + ", " +
            std::to_string(column + width) + ") of rows of " +
            std::to_string(dim);
    return false;
  }
  for (int64_t r = 0; r < t.shape[0]; ++r) {
    PackedRow packed = unpackRow(row + r, ratio);
    if (packed.seqPos >= dq.shape[1])
      continue;
    int64_t qHead = head * ratio + packed.headInGroup;
    float *to =
        &dq.data[((batch * dq.shape[1] + packed.seqPos) * dq.shape[2] + qHead) *
                 dim];
    for (int64_t x = 0; x < width; ++x)
      to[column + x] += t.data[r * width + x];
  }
  return true;
}

bool Interpreter::run(PrepareBackwardOp prepare, std::string &error) {
  Operation *op = prepare.getOperation();
  const Buffer &out = buffer(prepare.getOut()), &dout = buffer(prepare.getDout());
  Buffer &delta = buffer(prepare.getDelta());
  Buffer &accum = buffer(prepare.getDqAccum());
  if (out.shape != dout.shape || out.shape != accum.shape ||
      delta.shape.size() != 3 || delta.shape[0] != out.shape[0] ||
      delta.shape[1] != out.shape[2] || delta.shape[2] != out.shape[1]) {
    error = nameOf(op) + " is given O, dO, delta and the dQ accumulator of "
                         "shapes that do not agree";
    return false;
  }
  int64_t batch = out.shape[0], seq = out.shape[1], heads = out.shape[2],
          dim = out.shape[3];
  if (!budget || !budget->take(static_cast<uint64_t>(batch * heads * seq))) {
    error = nameOf(op) + " would visit more rows than the run's budget";
    return false;
  }
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t q = 0; q < seq; ++q)
      for (int64_t h = 0; h < heads; ++h) {
        int64_t at = ((b * seq + q) * heads + h) * dim;
        float sum = 0.0f;
        for (int64_t x = 0; x < dim; ++x)
          sum += out.data[at + x] * dout.data[at + x];
        delta.data[(b * heads + h) * seq + q] = sum;
      }
  std::fill(accum.data.begin(), accum.data.end(), 0.0f);
  return true;
}

bool Interpreter::run(FinishDqOp finish, std::string &error) {
  Operation *op = finish.getOperation();
  const Buffer &accum = buffer(finish.getDqAccum());
  Buffer &dq = buffer(finish.getDq());
  if (accum.shape != dq.shape) {
    error = nameOf(op) + " is given a dQ accumulator and dQ of different "
                         "shapes";
    return false;
  }
  Type element = getElementTypeOrSelf(finish.getDq().getType());
  float scale = finish.getScale().convertToFloat();
  for (auto [to, from] : llvm::zip_equal(dq.data, accum.data))
    to = roundTo(element, from * scale);
  return true;
}

bool Interpreter::runGridStep(Operation *op, std::string &error) {
  if (auto prepare = dyn_cast<PrepareBackwardOp>(op))
    return run(prepare, error);
  if (auto finish = dyn_cast<FinishDqOp>(op))
    return run(finish, error);
  error = nameOf(op) + " is not a grid-wide step";
  return false;
}

bool Interpreter::run(StoreKvTileOp store, std::string &error) {
  Operation *op = store.getOperation();
  Buffer &kv = buffer(store.getDest());
  const Tile &t = tile(store.getTile());
  int64_t dim = t.shape[1];
  int64_t batch = index(store.getBatch()), head = index(store.getHead());
  int64_t col = index(store.getCol());
  if (!checkTensorAccess(op, kv, batch, head, 1, dim, error))
    return false;
  for (int64_t r = 0; r < t.shape[0]; ++r) {
    int64_t position = col + r;
    if (position < 0 || position >= kv.shape[1])
      continue;
    std::copy_n(&t.data[r * dim], dim,
                &kv.data[((batch * kv.shape[1] + position) * kv.shape[2] +
                          head) *
                         dim]);
  }
  return true;
}
