//===- Interpreter.h - executes the level-B tile program --------*- C++ -*-===//

#ifndef FA4_LIB_SIM_INTERPRETER_H
#define FA4_LIB_SIM_INTERPRETER_H

#include "ModProgram.h"
#include "fa4/Support/AttentionMath.h"
#include "fa4/Support/TileScheduler.h"
#include "fa4/Transforms/MaskAnalysis.h"

#include "mlir/IR/Types.h"
#include "mlir/IR/Value.h"
#include "mlir/IR/ValueRange.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace mlir {
class Block;
class Operation;
class Region;
namespace arith {
class ConstantOp;
class CmpIOp;
} // namespace arith
namespace memref {
class DimOp;
} // namespace memref
namespace scf {
class ForOp;
class IfOp;
} // namespace scf
namespace fa4 {
class KvBlockRangeOp;
class TaskCoordsOp;
class LoadQTileOp;
class LoadKvTileOp;
class ScoreModOp;
class MaskOp;
class OnlineSoftmaxOp;
class LoadDescaleOp;
class CorrectionOp;
class NormalizeOp;
class StoreOTileOp;
class StoreLseTileOp;
class StorePartialOOp;
class MergeSplitsOp;
class QBlockRangeOp;
class LoadRowTileOp;
class RowDotOp;
class ProbsFromLseOp;
class SoftmaxGradOp;
class SoftcapGradOp;
class ScoreModGradOp;
class ConvertTileOp;
class TransposedMmaOp;
class AccumulateDqOp;
class StoreKvTileOp;
class PrepareBackwardOp;
class FinishDqOp;
} // namespace fa4
} // namespace mlir

namespace mlir::fa4::sim {

/// A memref's storage. Elements are held as float, already rounded to the
/// memref's element type.
struct Buffer {
  llvm::SmallVector<int64_t, 4> shape;
  std::vector<float> data;
};

struct ModBuffer;
/// Key `position` of sequence `batch`, head `head`, in a paged cache
/// `[num_blocks, page, heads, dim]` through its block table `[batch,
/// max_blocks]`: null where the position lies past the table's blocks or
/// its entry outside [0, num_blocks) (the kernel reads zeros there).
const float *pagedRow(const Buffer &cache, const ModBuffer &table,
                      int64_t batch, int64_t head, int64_t position);

/// A tile: the value of a ranked tensor, row-major, rounded to its element
/// type.
struct Tile {
  llvm::SmallVector<int64_t, 2> shape;
  std::vector<float> data;
};

/// Loop iterations and CTAs one run may take: a bound far above what the
/// correct kernel needs, so that a wrong loop bound or grid ends the run with
/// an error instead of running for hours. Shared by every interpreter of a run
/// (roles run one at a time, so it needs no lock).
struct StepBudget {
  int64_t total = 0;
  int64_t used = 0;
  bool take(uint64_t steps) {
    if (steps > static_cast<uint64_t>(total - used))
      return false;
    used += static_cast<int64_t>(steps);
    return true;
  }
};

/// Indices and sizes the kernel computes with are 32-bit: an fa4 op's index
/// operand outside [0, 2^31), or integer attribute outside [-1, 2^31) (-1:
/// a window side left open), cannot come from a correct kernel, and bounding
/// them keeps the simulator's own arithmetic from overflowing.
constexpr int64_t kIndexLimit = int64_t(1) << 31;

/// Tiles are at most 256 x 128 in the kernel; a tensor type past this many
/// elements is refused rather than allocated.
constexpr int64_t kMaxTileElements = int64_t(1) << 20;

struct InterpreterStats {
  int64_t rescalesDone = 0;
  int64_t rescalesSkipped = 0;
  int64_t blocksVisited = 0;
  int64_t blocksSkipped = 0;
};

/// S += Q·Kᵀ for row-major q [m, d], k [n, d], s [m, n].
void scoreProduct(const float *q, const float *k, float *s, int64_t m,
                  int64_t n, int64_t d);
/// O += P·V for row-major p [m, n], v [n, d], o [m, d].
void valueProduct(const float *p, const float *v, float *o, int64_t m,
                  int64_t n, int64_t d);
float roundTo(Type element, float value);
/// A type as MLIR prints it, for messages.
std::string str(Type type);
/// A zero (or `fill`) tile of `result`'s tensor type (checked against
/// kMaxTileElements before the run starts).
std::shared_ptr<Tile> makeTile(Value result, float fill = 0.0f);

/// Checks that `op` may touch heads [head * ratio, (head + 1) * ratio) of
/// batch `batch` in `tensor`, a [batch, seq, heads, head_dim] buffer, with
/// rows of `dim` elements; otherwise names the op and the index in `error`.
bool checkTensorAccess(Operation *op, const Buffer &tensor, int64_t batch,
                       int64_t head, int64_t ratio, int64_t dim,
                       std::string &error);

/// Checks, before anything runs, what the verifiers leave open and the
/// simulator relies on: every integer attribute of an fa4 op is in
/// [-1, 2^31), every tensor is static and at most kMaxTileElements.
bool checkProgram(Operation *func, std::string &error);

class Interpreter;

/// Runs the ops the interpreter does not know itself: level C's, whose
/// meaning depends on the CTA they run in.
class OpHook {
public:
  virtual ~OpHook();
  virtual bool execute(Interpreter &interpreter, Operation *op,
                       std::string &error) = 0;
};

class Interpreter {
public:
  void bind(Value value, Buffer *buffer) { values[value] = buffer; }
  /// An extra operand the mod regions read.
  void bindExtra(Value value, const ModBuffer *buffer) { extras[value] = buffer; }
  /// The extra bound to `value`, null when none is.
  const ModBuffer *extra(Value value) const { return extras.lookup(value); }
  void setHook(OpHook *newHook) { hook = newHook; }
  void setBudget(StepBudget *newBudget) { budget = newBudget; }
  /// Only one role of a CTA counts the KV blocks; the others repeat them.
  void setCountsBlocks(bool counts) { countsBlocks = counts; }

  /// Runs a function body whose memref arguments are bound; returns false
  /// with `error` naming the op that cannot be run or the unbound argument.
  bool runFunction(Block &entry, std::string &error);
  bool run(Block &block, std::string &error);

  const InterpreterStats &getStats() const { return stats; }

  /// A grid-wide step of the backward (fa4.prepare_backward,
  /// fa4.finish_dq): run once per launch, so at level C the hook decides
  /// which CTA's run does it.
  bool runGridStep(Operation *op, std::string &error);

  int64_t index(Value value) { return std::get<int64_t>(values[value]); }
  /// The index `value` holds, if it has been computed.
  std::optional<int64_t> knownIndex(Value value) const {
    auto it = values.find(value);
    if (it == values.end() || !std::holds_alternative<int64_t>(it->second))
      return std::nullopt;
    return std::get<int64_t>(it->second);
  }
  /// An f32 scalar (FP8's descale factors), held as a double.
  double scalar(Value value) { return std::get<double>(values[value]); }
  void setIndex(Value value, int64_t v) { values[value] = v; }
  Buffer &buffer(Value value) { return *std::get<Buffer *>(values[value]); }
  const Tile &tile(Value value) {
    return *std::get<std::shared_ptr<Tile>>(values[value]);
  }
  void setTile(Value value, std::shared_ptr<Tile> tile) {
    values[value] = std::move(tile);
  }

  /// Set by the CTA that runs level C: the task count and grid size the
  /// scheduler ops read.
  int64_t ctaId = 0;
  /// The CTA's rank in its pair (a cta_pair schedule's fa4.cta_rank).
  int64_t ctaRank = 0;
  int64_t numTasks = 0;

private:
  using RuntimeValue =
      std::variant<std::monostate, int64_t, double, std::shared_ptr<Tile>,
                   Buffer *>;

  /// One op: execute dispatches, the ops of more than a few lines have a
  /// `run` of their own.
  bool execute(Operation *op, std::string &error);
  static bool unsupported(Operation *op, std::string &error);
  bool run(arith::ConstantOp constant, std::string &error);
  bool run(memref::DimOp dim, std::string &error);
  bool run(scf::ForOp loop, std::string &error);
  bool run(arith::CmpIOp compare, std::string &error);
  bool run(scf::IfOp branch, std::string &error);
  bool run(KvBlockRangeOp range, std::string &error);
  bool run(TaskCoordsOp coords, std::string &error);
  bool run(LoadQTileOp load, std::string &error);
  bool run(LoadKvTileOp load, std::string &error);
  bool run(ScoreModOp scoreMod, std::string &error);
  bool run(MaskOp mask, std::string &error);
  bool run(OnlineSoftmaxOp softmax, std::string &error);
  bool run(CorrectionOp correction, std::string &error);
  bool run(NormalizeOp normalize, std::string &error);
  bool run(LoadDescaleOp load, std::string &error);
  bool run(StoreOTileOp store, std::string &error);
  bool run(StorePartialOOp store, std::string &error);
  bool run(MergeSplitsOp merge, std::string &error);
  /// The split-KV workspace of a split op (the one extra a kernel writes),
  /// checked to hold the layout of `out`'s problem; null after an error.
  ModBuffer *splitWorkspace(Operation *op, Value workspace, const Buffer &out,
                            int64_t ratio, int64_t splits,
                            SplitWorkspaceLayout &layout, std::string &error);
  bool run(StoreLseTileOp store, std::string &error);
  // The backward's ops (InterpreterBackward.cpp).
  bool run(QBlockRangeOp range, std::string &error);
  bool run(LoadRowTileOp load, std::string &error);
  bool run(RowDotOp dot, std::string &error);
  bool run(ProbsFromLseOp probs, std::string &error);
  bool run(SoftmaxGradOp grad, std::string &error);
  bool run(SoftcapGradOp grad, std::string &error);
  bool run(ScoreModGradOp grad, std::string &error);
  bool run(ConvertTileOp convert, std::string &error);
  bool run(TransposedMmaOp mma, std::string &error);
  bool run(AccumulateDqOp accumulate, std::string &error);
  bool run(StoreKvTileOp store, std::string &error);
  bool run(PrepareBackwardOp prepare, std::string &error);
  bool run(FinishDqOp finish, std::string &error);
  bool checkOperands(Operation *op, std::string &error);
  const TileScheduler &scheduler(const TaskGridShape &shape,
                                 TileScheduler::Order order);

  /// A mod region, compiled once per op, and its extras' buffers.
  struct Mod {
    std::unique_ptr<ModProgram> program;
    llvm::SmallVector<const ModBuffer *, 2> extras;
  };
  /// Where a score tile of fa4.score_mod or fa4.score_mod_grad lies: its
  /// first packed row and key, the sequences' lengths, the task's batch and
  /// head group, the packing and the scale the region's score carries.
  struct ScoreTilePlace {
    int64_t row, col, seqQ, seqK, batch, head, ratio;
    float scale;
    /// The tile is the scores' transpose: rows are keys, columns packed
    /// rows.
    bool transposed;
  };
  template <typename ScoreOp> ScoreTilePlace placeOf(ScoreOp op) {
    return {index(op.getRow()),   index(op.getCol()),  index(op.getSeqQ()),
            index(op.getSeqK()),  index(op.getBatch()), index(op.getHead()),
            static_cast<int64_t>(op.getGqaRatio()),
            op.getScale().convertToFloat(), op.getTransposed()};
  }
  /// Runs `program` on element `at` = (r, c) of a `cols`-wide tile at
  /// `place` (or (c, r) of a transposed one) for each element inside the
  /// sequences that `wanted` accepts,
  /// with the score `scores[at] · scale` and its batch, query head, query
  /// position and key; `apply(at, value)` takes the region's value.
  bool runScoreRegion(const Mod &program, const ScoreTilePlace &place,
                      const Tile &scores,
                      llvm::function_ref<bool(int64_t at)> wanted,
                      llvm::function_ref<void(int64_t at, double value)> apply,
                      std::string &error);
  const Mod *mod(Operation *op, Region &region, ValueRange extraOperands,
                 std::string &error);
  /// The key bounds of a kv_block_range or a mask (its attribute mask and
  /// its mask_mod), analysed once per op, not once per task or tile.
  const MaskModBounds &boundsOf(Operation *op, MaskKind mask,
                                int64_t windowLeft, int64_t windowRight,
                                Region &maskMod);

  llvm::DenseMap<Value, RuntimeValue> values;
  llvm::DenseMap<Value, const ModBuffer *> extras;
  llvm::DenseMap<Operation *, std::shared_ptr<Mod>> mods;
  llvm::DenseMap<Operation *, MaskModBounds> bounds;
  InterpreterStats stats;
  OpHook *hook = nullptr;
  StepBudget *budget = nullptr;
  bool countsBlocks = true;
  /// The last task grid `fa4.task_coords` asked for: an LPT order costs
  /// O(m_blocks log m_blocks) to build, once rather than per task.
  std::array<int64_t, 10> schedulerKey = {};
  std::optional<TileScheduler> cachedScheduler;
};

} // namespace mlir::fa4::sim

#endif // FA4_LIB_SIM_INTERPRETER_H
