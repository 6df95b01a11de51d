//===- Interpreter.h - executes the level-B tile program --------*- C++ -*-===//

#ifndef FA4_LIB_SIM_INTERPRETER_H
#define FA4_LIB_SIM_INTERPRETER_H

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

class Interpreter {
public:
  void bind(Value value, Buffer *buffer) { values[value] = buffer; }

  /// Runs a function body whose memref arguments are bound; returns false
  /// with `error` naming the op that cannot be run or the unbound argument.
  bool runFunction(Block &entry, std::string &error);

  const InterpreterStats &getStats() const { return stats; }

private:
  using RuntimeValue =
      std::variant<std::monostate, int64_t, double, std::shared_ptr<Tile>,
                   Buffer *>;

  bool run(Block &block, std::string &error);
  bool execute(Operation *op, std::string &error);

  int64_t index(Value value) { return std::get<int64_t>(values[value]); }
  Buffer &buffer(Value value) { return *std::get<Buffer *>(values[value]); }
  const Tile &tile(Value value) {
    return *std::get<std::shared_ptr<Tile>>(values[value]);
  }
  void setTile(Value value, std::shared_ptr<Tile> tile) {
    values[value] = std::move(tile);
  }

  llvm::DenseMap<Value, RuntimeValue> values;
  InterpreterStats stats;
};

} // namespace mlir::fa4::sim

#endif // FA4_LIB_SIM_INTERPRETER_H
