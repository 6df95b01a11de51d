//===- Inputs.h - fa4-sim's inputs and expected O from files ----*- C++ -*-===//
//
// What an outside computation (the entry IR run by another executor) hands
// fa4-sim: one file per argument of the level-A entry function, and O as
// that function declares it. Every file is float32, little-endian,
// row-major in the declared shape; dynamic dimensions take the run's sizes.
// A `heads_first` attention declares Q, K, V and O as [batch, heads, seq,
// head_dim]; the simulator's buffers are [batch, seq, heads, head_dim]
// whatever the entry declares, so those are permuted on the way in.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_LIB_SIM_INPUTS_H
#define FA4_LIB_SIM_INPUTS_H

#include "fa4/Sim/Reference.h"

#include "fa4/Dialect/FA4/IR/FA4Dialect.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/StringRef.h"

#include <string>
#include <vector>

namespace mlir {
namespace func {
class FuncOp;
} // namespace func
} // namespace mlir

namespace mlir::fa4 {
class AttentionOp;
} // namespace mlir::fa4

namespace mlir::fa4::sim {

class Mods;

/// The argument of `func` that `value` is, directly or through
/// bufferization.to_buffer and to_tensor; null when it is none.
BlockArgument entryArgument(Value value, func::FuncOp func);

/// Reads Q, K and V of `op` into `q`, `k`, `v` ([batch, seq, heads,
/// head_dim], rounded to their element types) and its extras into `mods`,
/// each from `directory`/argN.bin, N the number of the entry-function
/// argument the operand is.
bool readInputs(AttentionOp op, const Problem &problem,
                llvm::StringRef directory, std::vector<float> &q,
                std::vector<float> &k, std::vector<float> &v, Mods &mods,
                std::string &error);

/// Reads `op`'s O, in the shape `op` declares, from `path` into `out`
/// ([batch, seq_q, heads, head_dim]).
bool readExpectedOutput(AttentionOp op, const Problem &problem,
                        llvm::StringRef path, std::vector<float> &out,
                        std::string &error);

struct Buffer;
struct RunOptions;
/// The dense attention a run of `options`' sizes makes of Q and K's types
/// (their heads and head dim) and a spec's mask, scale and softcap.
Problem attentionProblem(const RunOptions &options, MemRefType q, MemRefType k,
                         MaskKind mask, int64_t windowLeft,
                         int64_t windowRight, float scale, float softcap);
/// `buffer` for the memref argument `value` at the run's `shape`, which
/// must agree with every static dimension of the IR (and stay within 2^30
/// elements); zero-filled.
llvm::Error makeBuffer(Value value, llvm::ArrayRef<int64_t> shape,
                       Buffer &buffer);

} // namespace mlir::fa4::sim

#endif // FA4_LIB_SIM_INPUTS_H
