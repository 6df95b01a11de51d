//===- SimulatorBackward.cpp - fa4-sim's runner for the backward ----------===//
//
// Runs the backward's tile program on drawn inputs: Q, K, V as the forward's
// runs draw them, dO standard normal, O and the LSE from the float64
// forward (what a correct forward kernel hands the backward, rounded as it
// stores them). The gradients are judged against referenceAttentionBackward,
// which differentiates the definition of attention on its own, with the
// low-precision backward as the yardstick.
//
//===----------------------------------------------------------------------===//

#include "fa4/Sim/Simulator.h"

#include "Inputs.h"
#include "Interpreter.h"
#include "Protocol.h"
#include "fa4/Sim/Mods.h"

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Support/AttentionMath.h"
#include "fa4/Support/Error.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <cmath>
#include <random>

using namespace mlir;
using namespace mlir::fa4;
using namespace mlir::fa4::sim;

namespace {
/// One backward run's tensors, by their fa4.backward_spec roles.
struct BackwardBuffers {
  Buffer tensors[kBackwardArguments];
  Buffer &operator[](BackwardArgument role) { return tensors[role]; }
};

} // namespace

llvm::Expected<RunReport>
mlir::fa4::sim::simulateBackward(func::FuncOp func, const RunOptions &options) {
  BackwardSpecAttr spec = getBackwardSpec(func);
  if (options.distribution == InputDistribution::NonFinite)
    return makeError("--dist nonfinite checks that the forward keeps NaN and "
                     "infinite inputs to their rows; the backward's "
                     "gradients of such inputs have no reference to match");
  auto argument = [&](BackwardArgument role) {
    return func.getArgument(spec.getArguments()[role]);
  };
  // The inputs are drawn apart: one argument in two roles (K and V the same
  // memref, say) would be two tensors to the reference and one to the
  // program.
  static const char *names[] = {"Q", "K", "V", "O", "dO", "LSE"};
  for (size_t role = 0; role < 6; ++role)
    for (size_t other = 0; other < role; ++other)
      if (argument(static_cast<BackwardArgument>(role)) ==
          argument(static_cast<BackwardArgument>(other)))
        return makeError(std::string("the backward's ") + names[other] +
                         " and " + names[role] +
                         " are one argument; fa4-sim draws every input on "
                         "its own: give each its own argument");
  auto qType = cast<MemRefType>(argument(kBwdQ).getType());
  bool bf16 = qType.getElementType().isBF16();
  Problem problem = attentionProblem(
      options, qType, cast<MemRefType>(argument(kBwdK).getType()),
      spec.getMask(), spec.getWindowLeft(), spec.getWindowRight(),
      spec.getScaleValue(), spec.getSoftcapValue());

  const Problem &p = problem;
  SmallVector<int64_t, 4> queries{p.batch, p.seqQ, p.qHeads, p.headDim};
  SmallVector<int64_t, 4> keys{p.batch, p.seqK, p.kvHeads, p.headDim};
  SmallVector<int64_t, 3> rows{p.batch, p.qHeads, p.seqQ};
  BackwardBuffers buffers;
  for (BackwardArgument role :
       {kBwdQ, kBwdOut, kBwdDout, kBwdDq, kBwdDqAccum, kBwdK, kBwdV, kBwdDk,
        kBwdDv, kBwdLse, kBwdDelta}) {
    ArrayRef<int64_t> shape =
        role == kBwdK || role == kBwdV || role == kBwdDk || role == kBwdDv
            ? ArrayRef<int64_t>(keys)
        : role == kBwdLse || role == kBwdDelta ? ArrayRef<int64_t>(rows)
                                               : ArrayRef<int64_t>(queries);
    if (llvm::Error refused = makeBuffer(argument(role), shape, buffers[role]))
      return std::move(refused);
  }

  // The regions and their extras, run in double by the references (the
  // entry's, as written, when the run started from level A).
  auto entry = dyn_cast_or_null<func::FuncOp>(options.entry);
  llvm::Expected<std::unique_ptr<Mods>> madeMods =
      Mods::fromFunction(entry ? entry : func);
  if (!madeMods)
    return madeMods.takeError();
  std::unique_ptr<Mods> mods = std::move(*madeMods);
  if (llvm::Error refused = mods->fillExtras(problem, options.seed))
    return std::move(refused);
  mods->attach(problem);
  SmallVector<Value> extraArguments;
  for (auto [number, extra] :
       llvm::zip(mods->argumentNumbers(), mods->arguments())) {
    if (number >= func.getNumArguments() ||
        func.getArgument(number).getType() != extra.getType())
      return makeError("the lowered @" + func.getName().str() +
                       " has no extra argument #" + std::to_string(number) +
                       " of type " + str(extra.getType()));
    extraArguments.push_back(func.getArgument(number));
  }

  // Q, K, V as the forward's runs draw them; dO standard normal, from its
  // own stream of the seed.
  fillInputs(problem, bf16, options.seed, options.distribution,
             buffers[kBwdQ].data, buffers[kBwdK].data, buffers[kBwdV].data);
  std::mt19937_64 generator(options.seed * 0x9e3779b97f4a7c15ull + 17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float &x : buffers[kBwdDout].data)
    x = roundTo(qType.getElementType(), normal(generator));
  // The forward's O (rounded as a kernel stores it) and LSE (f32).
  std::vector<double> out, lse;
  referenceAttention(problem, buffers[kBwdQ].data, buffers[kBwdK].data,
                     buffers[kBwdV].data, out, lse);
  if (!mods->error().empty())
    return makeError("the reference's mod region: " + mods->error());
  for (auto [to, from] : llvm::zip_equal(buffers[kBwdOut].data, out))
    to = roundTo(qType.getElementType(), static_cast<float>(from));
  for (auto [to, from] : llvm::zip_equal(buffers[kBwdLse].data, lse))
    to = static_cast<float>(from);

  BackwardReference reference;
  computeBackwardReference(problem, bf16, buffers[kBwdQ].data,
                           buffers[kBwdK].data, buffers[kBwdV].data,
                           buffers[kBwdOut].data, buffers[kBwdDout].data,
                           buffers[kBwdLse].data, reference);
  if (!mods->error().empty())
    return makeError("the reference's mod region: " + mods->error());

  // The outputs and the workspace start as NaN: a gradient the program
  // does not write, or a workspace it reads before it clears, shows.
  for (BackwardArgument role : {kBwdDq, kBwdDk, kBwdDv, kBwdDelta, kBwdDqAccum})
    std::fill(buffers[role].data.begin(), buffers[role].data.end(),
              std::nanf(""));

  // The preprocessing and post-processing visit each query block once; the
  // main loop each (query block, K/V block) pair at most once per head
  // group, at about 64 steps per pair of 64-row tiles, as the forward's
  // budget counts.
  constexpr int64_t kStepsPerTilePair = 64;
  int64_t qTiles = p.batch * p.qHeads * ceilDiv(p.seqQ, 64);
  int64_t kvTiles = ceilDiv(p.seqK, 64);
  StepBudget budget;
  budget.total = kStepsPerTilePair * (qTiles * (kvTiles + 2) + 1);

  auto bindAll = [&](Interpreter &interpreter) {
    for (auto [extra, buffer] : llvm::zip(extraArguments, mods->buffers()))
      interpreter.bindExtra(extra, &buffer);
    for (size_t role = 0; role < kBackwardArguments; ++role)
      interpreter.bind(argument(static_cast<BackwardArgument>(role)),
                       &buffers.tensors[role]);
    interpreter.setBudget(&budget);
  };
  auto poison = [&] {
    for (BackwardArgument role :
         {kBwdDq, kBwdDk, kBwdDv, kBwdDelta, kBwdDqAccum})
      std::fill(buffers[role].data.begin(), buffers[role].data.end(),
                std::nanf(""));
  };
  RunReport report;
  report.backward = true;
  // The gradients of one run, folded into the report (the worst run's
  // errors).
  bool numericsOk = true;
  auto judge = [&] {
    GradientErrors errors;
    numericsOk = compareGradients(reference, buffers[kBwdDq].data,
                                  buffers[kBwdDk].data, buffers[kBwdDv].data,
                                  options.atol, errors) &&
                 numericsOk;
    auto worse = [](double &into, double value) {
      if (!std::isnan(into) && (std::isnan(value) || value > into))
        into = value;
    };
    worse(report.dqMaxAbsErr, errors.dq);
    worse(report.dkMaxAbsErr, errors.dk);
    worse(report.dvMaxAbsErr, errors.dv);
    report.refLowpDq = errors.refLowpDq;
    report.refLowpDk = errors.refLowpDk;
    report.refLowpDv = errors.refLowpDv;
  };

  WarpSpecializeOp specialize;
  func.walk([&](WarpSpecializeOp op) { specialize = op; });
  if (!specialize) {
    Interpreter interpreter;
    bindAll(interpreter);
    std::string error;
    if (!interpreter.runFunction(func.getBody().front(), error))
      return makeError(error);
    if (!mods->error().empty())
      return makeError("a mod region: " + mods->error());
    judge();
    report.ok = numericsOk;
    report.blocksVisited = interpreter.getStats().blocksVisited;
    report.blocksSkipped = interpreter.getStats().blocksSkipped;
    return std::move(report);
  }

  // Level C: the grid of CTAs under `interleavings` schedules, each CTA's
  // roles interleaved; the first schedule that breaks the protocol ends
  // the run. One task per (batch, K/V head, 128 keys).
  report.levelC = true;
  int64_t numTasks = p.batch * p.kvHeads * ceilDiv(p.seqK, 128);
  for (int64_t run = 0; run < options.interleavings; ++run) {
    poison();
    ProtocolReport protocol;
    InterpreterStats stats;
    LaunchHook launch(protocol, stats,
                      options.seed * 1000003u + static_cast<uint64_t>(run),
                      run % 2 == 1, numTasks);
    budget.used = 0;
    int64_t grid = 1;
    for (int64_t cta = 0; cta < grid; ++cta) {
      if (!budget.take(1))
        return makeError("the grid of " + std::to_string(grid) +
                         " CTAs runs past the run's budget");
      Interpreter interpreter;
      bindAll(interpreter);
      interpreter.setHook(&launch);
      interpreter.ctaId = cta;
      launch.ctaId = cta;
      std::string error;
      if (!interpreter.runFunction(func.getBody().front(), error))
        return makeError(error);
      if (cta == 0)
        grid = launch.gridSize;
      if (!protocol.clean())
        break;
    }
    if (!mods->error().empty())
      return makeError("a mod region: " + mods->error());
    report.interleavings = run + 1;
    report.ctas = grid;
    if (run == 0) {
      report.blocksVisited = stats.blocksVisited;
      report.blocksSkipped = stats.blocksSkipped;
      report.mmasIssued = protocol.mmasIssued;
    }
    judge();
    if (!protocol.clean()) {
      report.failingInterleaving = run;
      report.deadlock = protocol.deadlock;
      report.hazards = protocol.hazards;
      report.hazardCount = protocol.hazardCount;
      report.barrierMisuse = protocol.misuse;
      break;
    }
  }
  report.ok = numericsOk && report.failingInterleaving < 0;
  return std::move(report);
}

