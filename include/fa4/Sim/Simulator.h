//===- Simulator.h - run fa4 IR on the CPU ----------------------*- C++ -*-===//
//
// fa4-sim's engine: executes the tile program (level B) of one function on
// seeded random inputs (or inputs read from files), computes an independent
// float64 reference, and compares the two (and, when given, O with an
// expected O computed elsewhere).
//
//===----------------------------------------------------------------------===//

#ifndef FA4_SIM_SIMULATOR_H
#define FA4_SIM_SIMULATOR_H

#include "fa4/Sim/Reference.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mlir {
class Operation;
namespace func {
class FuncOp;
} // namespace func
} // namespace mlir

namespace mlir::fa4::sim {


struct RunOptions {
  int64_t batch = 1;
  int64_t seqQ = 128;
  int64_t seqK = 128;
  uint64_t seed = 0;
  InputDistribution distribution = InputDistribution::Normal;
  /// FP8: rotate Q and K by one random orthogonal Hadamard transform
  /// before rounding them to e4m3 (the FlashAttention-3 paper's incoherent
  /// processing; Q·Kᵀ is unchanged, outliers are spread over the head dim).
  bool fp8Rotation = false;
  double atol = 1e-2;
  double rtol = 1e-2;
  /// Level C: schedules to run, each drawn from its own seed.
  int64_t interleavings = 1;
  /// For level-A input: the function holding fa4.attention as written,
  /// before lowering. The reference then runs its score_mod / mask_mod, not
  /// the copies the lowering made, so a lowering that loses or changes a
  /// region is caught. Null: the reference runs the program's own copies.
  Operation *entry = nullptr;
  /// Level A only. Non-empty: Q, K, V and the extras are read from
  /// `inputs`/argN.bin, N the number of the entry's argument each is (seed
  /// and distribution then do not apply).
  std::string inputs;
  /// Level A only. Non-empty: a file holding the O the entry function
  /// should produce, in the shape it declares; every run's O must lie
  /// within expectAtol of it.
  std::string expect;
  double expectAtol = 2e-2;
};

struct RunReport {
  double maxAbsErr = 0.0;
  /// Over the outputs whose reference magnitude exceeds atol.
  double maxRelErr = 0.0;
  /// -1 when the kernel does not write an LSE.
  double lseMaxAbsErr = -1.0;
  /// The low-precision reference's errors against the float64 one (the LSE's
  /// -1 without an LSE): what the input type alone costs.
  double refLowpMaxAbsErr = 0.0;
  double refLowpLseMaxAbsErr = -1.0;
  /// O's root-mean-square error against the float64 reference (the
  /// largest of the runs'), and the low-precision reference's.
  double rmsErr = 0.0;
  double refLowpRmsErr = 0.0;
  /// FP8 with drawn inputs: O's root-mean-square error against the float64
  /// attention of the inputs before their rounding to e4m3; -1 otherwise.
  double unquantizedRmsErr = -1.0;
  /// max |O - expected| over every run, -1 without an expected O (NaN where
  /// O or the expected O holds one).
  double expectMaxAbsErr = -1.0;
  /// Per (Q tile, KV block) where some row's max moved: a rescale happened
  /// (done) or every move stayed under the threshold (skipped).
  int64_t rescalesDone = 0;
  int64_t rescalesSkipped = 0;
  int64_t blocksVisited = 0;
  int64_t blocksSkipped = 0;

  /// Level C only: how the protocol fared.
  bool levelC = false;
  int64_t interleavings = 0;
  int64_t ctas = 0;
  /// The interleaving the first protocol failure came from, -1 without one.
  int64_t failingInterleaving = -1;
  /// One line per blocked role; empty without a deadlock.
  std::vector<std::string> deadlock;
  std::vector<std::string> hazards;
  int64_t hazardCount = 0;
  std::vector<std::string> barrierMisuse;
  std::map<std::string, int64_t> mmasIssued;

  /// The backward (a function with fa4.backward_spec): the gradients'
  /// max-abs errors against the float64 reference and the low-precision
  /// reference's; the O fields above are then unused.
  bool backward = false;
  double dqMaxAbsErr = 0.0, dkMaxAbsErr = 0.0, dvMaxAbsErr = 0.0;
  double refLowpDq = 0.0, refLowpDk = 0.0, refLowpDv = 0.0;

  bool ok = false;

  /// One JSON object on one line, the fields in a fixed order.
  std::string toJson() const;
  /// The level-C fields (interleavings, CTAs, the protocol's findings).
  void writeProtocol(llvm::raw_ostream &os) const;
};

/// Runs the backward's level-B or level-C function `func` (it carries
/// `fa4.backward_spec`): draws Q, K, V and dO from the seed, computes the
/// forward's O and LSE in float64 (O rounded to the input type, the LSE to
/// f32) as the kernel's inputs, and judges dQ, dK and dV against the
/// float64 gradients by FlashAttention's rule. The workspace starts as NaN:
/// the kernel must clear what it reads.
llvm::Expected<RunReport> simulateBackward(func::FuncOp func,
                                           const RunOptions &options);

/// Runs the level-B or level-C function `func` (it must carry `fa4.spec`)
/// and reports how it fared: `ok` says whether the result is within
/// tolerance. An error when the IR cannot be run.
llvm::Expected<RunReport> simulate(func::FuncOp func,
                                   const RunOptions &options);

} // namespace mlir::fa4::sim

#endif // FA4_SIM_SIMULATOR_H
