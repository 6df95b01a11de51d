//===- Interpreter.h - executes the level-B tile program --------*- C++ -*-===//

#ifndef FA4_LIB_SIM_INTERPRETER_H
#define FA4_LIB_SIM_INTERPRETER_H

#include "mlir/IR/Types.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"

#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace mlir {
class Block;
class Operation;
} // namespace mlir

namespace mlir::fa4::sim {

/// A memref's storage. Elements are held as float, already rounded to the
/// memref's element type.
struct Buffer {
  llvm::SmallVector<int64_t, 4> shape;
  std::vector<float> data;
};

/// A tile: the value of a ranked tensor, row-major, rounded to its element
/// type.
struct Tile {
  llvm::SmallVector<int64_t, 2> shape;
  std::vector<float> data;
};

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
/// A zero (or `fill`) tile of `result`'s tensor type.
std::shared_ptr<Tile> makeTile(Value result, float fill = 0.0f);

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
  void setHook(OpHook *newHook) { hook = newHook; }
  /// Only one role of a CTA counts the KV blocks; the others repeat them.
  void setCountsBlocks(bool counts) { countsBlocks = counts; }

  /// Runs a function body whose memref arguments are bound; returns false
  /// with `error` naming the op that cannot be run or the unbound argument.
  bool runFunction(Block &entry, std::string &error);
  bool run(Block &block, std::string &error);

  const InterpreterStats &getStats() const { return stats; }

  int64_t index(Value value) { return std::get<int64_t>(values[value]); }
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
  int64_t numTasks = 0;

private:
  using RuntimeValue =
      std::variant<std::monostate, int64_t, double, std::shared_ptr<Tile>,
                   Buffer *>;

  bool execute(Operation *op, std::string &error);

  llvm::DenseMap<Value, RuntimeValue> values;
  InterpreterStats stats;
  OpHook *hook = nullptr;
  bool countsBlocks = true;
};

} // namespace mlir::fa4::sim

#endif // FA4_LIB_SIM_INTERPRETER_H
