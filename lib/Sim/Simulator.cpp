//===- Simulator.cpp - fa4-sim's engine -----------------------------------===//

#include "fa4/Sim/Simulator.h"

#include "Inputs.h"
#include "Interpreter.h"
#include "Protocol.h"
#include "fa4/Sim/Mods.h"
#include "fa4/Sim/Reference.h"

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Support/AttentionMath.h"
#include "fa4/Support/Error.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <random>

using namespace mlir;
using namespace mlir::fa4;
using namespace mlir::fa4::sim;

namespace {
/// Positions of Q, K, V, O and LSE among `fa4.spec`'s `arguments`.
enum ArgumentRole { kQ, kK, kV, kOut, kLse };

} // namespace

std::string RunReport::toJson() const {
  std::string text;
  llvm::raw_string_ostream os(text);
  auto number = [&](double value) {
    if (std::isnan(value))
      os << "\"nan\"";
    else if (std::isinf(value))
      os << (value > 0 ? "\"inf\"" : "\"-inf\"");
    else
      os << llvm::format("%.6g", value);
  };
  if (backward) {
    os << "{\"level\":\"" << (levelC ? "C" : "B") << "\",\"backward\":true";
    for (auto [name, value] : {std::pair{"dq_max_abs_err", dqMaxAbsErr},
                               {"dk_max_abs_err", dkMaxAbsErr},
                               {"dv_max_abs_err", dvMaxAbsErr},
                               {"ref_lowp_dq_max_abs_err", refLowpDq},
                               {"ref_lowp_dk_max_abs_err", refLowpDk},
                               {"ref_lowp_dv_max_abs_err", refLowpDv}}) {
      os << ",\"" << name << "\":";
      number(value);
    }
    os << ",\"blocks_visited\":" << blocksVisited
       << ",\"blocks_skipped\":" << blocksSkipped;
    if (levelC)
      writeProtocol(os);
    os << ",\"ok\":" << (ok ? "true" : "false") << "}";
    return text;
  }
  os << "{\"max_abs_err\":";
  number(maxAbsErr);
  os << ",\"max_rel_err\":";
  number(maxRelErr);
  os << ",\"lse_max_abs_err\":";
  if (lseMaxAbsErr < 0)
    os << "null";
  else
    number(lseMaxAbsErr);
  os << ",\"ref_lowp_max_abs_err\":";
  number(refLowpMaxAbsErr);
  os << ",\"ref_lowp_lse_max_abs_err\":";
  if (refLowpLseMaxAbsErr < 0)
    os << "null";
  else
    number(refLowpLseMaxAbsErr);
  os << ",\"rms_err\":";
  number(rmsErr);
  os << ",\"ref_lowp_rms_err\":";
  number(refLowpRmsErr);
  if (!(unquantizedRmsErr < 0)) {
    os << ",\"unquantized_rms_err\":";
    number(unquantizedRmsErr);
  }
  if (!(expectMaxAbsErr < 0)) {
    os << ",\"expect_max_abs_err\":";
    number(expectMaxAbsErr);
  }
  os << ",\"rescales_done\":" << rescalesDone
     << ",\"rescales_skipped\":" << rescalesSkipped
     << ",\"blocks_visited\":" << blocksVisited
     << ",\"blocks_skipped\":" << blocksSkipped;
  if (levelC) {
    os << ",\"level\":\"C\"";
    writeProtocol(os);
  }
  os << ",\"ok\":" << (ok ? "true" : "false") << "}";
  return text;
}

void RunReport::writeProtocol(llvm::raw_ostream &os) const {
  {
    auto strings = [&](const std::vector<std::string> &list) {
      os << "[";
      for (size_t i = 0; i < list.size(); ++i) {
        os << (i ? "," : "") << "\"";
        os.write_escaped(list[i]);
        os << "\"";
      }
      os << "]";
    };
    os << ",\"interleavings\":" << interleavings
       << ",\"ctas\":" << ctas << ",\"deadlock\":";
    if (deadlock.empty())
      os << "null";
    else
      strings(deadlock);
    os << ",\"hazards\":";
    strings(hazards);
    os << ",\"hazard_count\":" << hazardCount << ",\"barrier_misuse\":";
    strings(barrierMisuse);
    os << ",\"failing_interleaving\":";
    if (failingInterleaving < 0)
      os << "null";
    else
      os << failingInterleaving;
    os << ",\"mmas_issued\":{";
    bool first = true;
    for (auto &[role, count] : mmasIssued) {
      os << (first ? "" : ",") << "\"" << role << "\":" << count;
      first = false;
    }
    os << "}";
  }
}

/// max |a - b|, NaN where either holds a NaN (equal infinities are no
/// difference).
static double maxAbsDifference(const std::vector<float> &a,
                               const std::vector<float> &b) {
  double largest = 0.0;
  for (auto [x, y] : llvm::zip_equal(a, b)) {
    if (std::isnan(x) || std::isnan(y))
      return std::nan("");
    if (x != y)
      largest = std::max(largest, std::fabs(double(x) - double(y)));
  }
  return largest;
}

namespace {
/// What every run of one simulation shares: the kernel's tensors as
/// buffers, the mods and their extras, the reference and the O the runs
/// are judged against.
struct Simulation {
  Simulation(func::FuncOp func, const RunOptions &options, KernelSpecAttr spec)
      : func(func), options(options), spec(spec), hasLse(spec.getLse()) {}

  /// The function argument that is `role` of the attention.
  Value argument(ArgumentRole role) {
    return func.getArgument(spec.getArguments()[role]);
  }
  void bindArguments(Interpreter &interpreter);
  /// NaN in every output, so that a skipped store shows up.
  void poisonOutputs() {
    std::fill(out.data.begin(), out.data.end(), std::nanf(""));
    std::fill(lse.data.begin(), lse.data.end(), std::nanf(""));
  }
  /// Folds one run's outputs into `report`; false past tolerance.
  bool compare(RunReport &report) const;

  func::FuncOp func;
  const RunOptions &options;
  KernelSpecAttr spec;
  bool hasLse;
  Problem problem;
  /// K and V as the reference reads them ([batch, seq_k, heads, dim]); with
  /// a block table the kernel reads kCache and vCache, scattered from them.
  Buffer q, k, v, out, lse, kCache, vCache;
  std::unique_ptr<Mods> mods;
  /// The program's extra arguments, by the entry's argument numbers.
  SmallVector<Value> extraArguments;
  std::vector<float> expected;
  Reference reference;
  /// FP8 with drawn inputs: O of the inputs before their rounding to e4m3
  /// (float64), which the kernel's O is also measured against (the input
  /// quantization's error included, as the FlashAttention-3 paper's FP8
  /// figures are).
  std::vector<double> unquantizedOut;
};
} // namespace

void Simulation::bindArguments(Interpreter &interpreter) {
  for (auto [extra, buffer] : llvm::zip(extraArguments, mods->buffers()))
    interpreter.bindExtra(extra, &buffer);
  interpreter.bind(argument(kQ), &q);
  bool paged = static_cast<bool>(spec.getBlockTable());
  interpreter.bind(argument(kK), paged ? &kCache : &k);
  interpreter.bind(argument(kV), paged ? &vCache : &v);
  interpreter.bind(argument(kOut), &out);
  if (hasLse)
    interpreter.bind(argument(kLse), &lse);
}

bool Simulation::compare(RunReport &report) const {
  Errors errors{report.maxAbsErr,        report.maxRelErr,
                report.lseMaxAbsErr,     report.refLowpMaxAbsErr,
                report.refLowpLseMaxAbsErr, report.rmsErr,
                report.refLowpRmsErr};
  bool ok = compareWithReference(reference, out.data,
                                 hasLse ? &lse.data : nullptr, options.atol,
                                 options.rtol, errors);
  report.maxAbsErr = errors.maxAbsErr;
  report.maxRelErr = errors.maxRelErr;
  report.lseMaxAbsErr = errors.lseMaxAbsErr;
  report.refLowpMaxAbsErr = errors.refLowpMaxAbsErr;
  report.refLowpLseMaxAbsErr = errors.refLowpLseMaxAbsErr;
  report.rmsErr = errors.rmsErr;
  report.refLowpRmsErr = errors.refLowpRmsErr;
  if (!unquantizedOut.empty()) {
    double sum = 0.0;
    int64_t count = 0;
    for (size_t i = 0; i < unquantizedOut.size(); ++i)
      if (std::isfinite(unquantizedOut[i])) {
        double err = out.data[i] - unquantizedOut[i];
        sum += err * err;
        ++count;
      }
    double rms = count ? std::sqrt(sum / double(count)) : 0.0;
    report.unquantizedRmsErr = std::max(report.unquantizedRmsErr,
                                        std::isnan(rms) ? INFINITY : rms);
  }
  if (options.expect.empty())
    return ok;
  double expectErr = maxAbsDifference(out.data, expected);
  double &largest = report.expectMaxAbsErr;
  if (!std::isnan(largest))
    largest = std::isnan(expectErr) ? expectErr : std::max(largest, expectErr);
  return ok && expectErr <= options.expectAtol;
}

Problem mlir::fa4::sim::attentionProblem(const RunOptions &options,
                                         MemRefType q, MemRefType k,
                                         MaskKind mask, int64_t windowLeft,
                                         int64_t windowRight, float scale,
                                         float softcap) {
  Problem problem;
  problem.batch = options.batch;
  problem.seqQ = options.seqQ;
  problem.seqK = options.seqK;
  problem.qHeads = q.getDimSize(2);
  problem.kvHeads = k.getDimSize(2);
  problem.headDim = q.getDimSize(3);
  problem.causal = mask == MaskKind::causal;
  problem.window = mask == MaskKind::window;
  problem.windowLeft = windowLeft;
  problem.windowRight = windowRight;
  problem.scale = scale;
  problem.softcap = softcap;
  return problem;
}

/// The attention `spec` describes (static, positive heads and head dims
/// that agree, f16/bf16, an f32 LSE: fa4.spec's verifier has checked) at
/// the run's sizes.
static Problem describeProblem(Simulation &sim) {
  const RunOptions &options = sim.options;
  KernelSpecAttr spec = sim.spec;
  auto kType = cast<MemRefType>(sim.argument(kK).getType());
  Problem problem = attentionProblem(
      options, cast<MemRefType>(sim.argument(kQ).getType()), kType,
      spec.getMask(), spec.getWindowLeft(), spec.getWindowRight(),
      spec.getScaleValue(), spec.getSoftcapValue());
  problem.valueHeadDim =
      cast<MemRefType>(sim.argument(kV).getType()).getDimSize(3);
  problem.fp8 = isa<Float8E4M3FNType>(
      cast<MemRefType>(sim.argument(kQ).getType()).getElementType());
  problem.fp8Rotation = options.fp8Rotation;
  // Varlen: --batch sequences of at most --seq-q queries and --seq-k keys,
  // drawn from the seed, packed.
  if (spec.isVarlen())
    drawVarlenBatch(problem, options.batch, options.seqQ, options.seqK,
                    options.seed);
  if (spec.getBlockTable()) {
    problem.pageSize = kType.getDimSize(1);
    problem.numBlocks = pagedCacheBlocks(
        problem.batch, ceilDiv(problem.seqK, problem.pageSize));
  }
  return problem;
}

llvm::Error mlir::fa4::sim::makeBuffer(Value value, ArrayRef<int64_t> shape,
                                      Buffer &buffer) {
  auto type = cast<MemRefType>(value.getType());
  if (type.getRank() != static_cast<int64_t>(shape.size()))
    return makeError("argument #" +
                     std::to_string(cast<BlockArgument>(value).getArgNumber()) +
                     " has the wrong rank");
  for (auto [dim, size] : llvm::enumerate(shape)) {
    if (!type.isDynamicDim(dim) && type.getDimSize(dim) != size)
      return makeError(
          "argument #" +
          std::to_string(cast<BlockArgument>(value).getArgNumber()) +
          " has static size " + std::to_string(type.getDimSize(dim)) +
          " in dimension " + std::to_string(dim) + " but the run asks for " +
          std::to_string(size) + " (check --batch, --seq-q and --seq-k)");
  }
  buffer.shape.assign(shape.begin(), shape.end());
  // Past 2^30 elements (4 GiB of floats) a buffer no longer fits the
  // machines this runs on; say so rather than fail to allocate.
  constexpr int64_t kMaxElements = int64_t(1) << 30;
  int64_t count = 1;
  for (int64_t size : shape) {
    if (size > kMaxElements / count)
      return makeError(
          "argument #" +
          std::to_string(cast<BlockArgument>(value).getArgNumber()) +
          " would need more than 2^30 elements; use smaller sizes");
    count *= size;
  }
  buffer.data.assign(count, 0.0f);
  return llvm::Error::success();
}

/// Q, K, V, O and the LSE at the run's sizes, the outputs poisoned.
static llvm::Error makeBuffers(Simulation &sim) {
  const Problem &p = sim.problem;
  SmallVector<int64_t, 4> queries{p.batch, p.seqQ, p.qHeads, p.headDim};
  SmallVector<int64_t, 4> keys{p.batch, p.seqK, p.kvHeads, p.headDim};
  // V and O: V's head dim.
  SmallVector<int64_t, 4> values{p.batch, p.seqK, p.kvHeads, p.vDim()};
  SmallVector<int64_t, 4> outs{p.batch, p.seqQ, p.qHeads, p.vDim()};
  struct Made {
    ArgumentRole role;
    ArrayRef<int64_t> shape;
    Buffer &buffer;
  };
  SmallVector<int64_t, 4> pages{p.numBlocks, p.pageSize, p.kvHeads,
                                p.headDim};
  SmallVector<int64_t, 4> valuePages{p.numBlocks, p.pageSize, p.kvHeads,
                                     p.vDim()};
  bool paged = p.pageSize > 0;
  if (paged && p.seqK % p.pageSize != 0)
    return makeError("a paged cache's seq_k is max_blocks x page_size: give "
                     "--seq-k a multiple of " + std::to_string(p.pageSize));
  SmallVector<Made, 5> made{{kQ, queries, sim.q},
                            {kK, paged ? pages : keys, paged ? sim.kCache : sim.k},
                            {kV, paged ? valuePages : values,
                             paged ? sim.vCache : sim.v},
                            {kOut, outs, sim.out}};
  if (paged) {
    // The reference's dense K and V, in no argument's type: within the
    // buffers' own limit.
    constexpr int64_t kMaxElements = int64_t(1) << 30;
    for (auto [dense, shape] : {std::pair{&sim.k, &keys}, {&sim.v, &values}}) {
      int64_t count = 1;
      for (int64_t size : *shape) {
        if (size <= 0 || size > kMaxElements / count)
          return makeError("K and V would need more than 2^30 elements at "
                           "--batch " + std::to_string(p.batch) + " --seq-k " +
                           std::to_string(p.seqK) + "; use smaller sizes");
        count *= size;
      }
      dense->shape.assign(shape->begin(), shape->end());
      dense->data.assign(count, 0.0f);
    }
  }
  SmallVector<int64_t, 3> rows{p.batch, p.qHeads, p.seqQ};
  if (sim.hasLse)
    made.push_back({kLse, rows, sim.lse});
  for (const Made &buffer : made)
    if (llvm::Error refused = makeBuffer(sim.argument(buffer.role),
                                         buffer.shape, buffer.buffer))
      return refused;
  sim.poisonOutputs();
  return llvm::Error::success();
}

/// The inputs and the mods' extras, drawn from the seed or read with
/// --inputs (the entry's `entryOp` names their arguments), and the expected
/// O of --expect. The reference runs the regions of `entry` (the program's
/// own without one) in double, the mathematics the user wrote.
static llvm::Error makeInputs(Simulation &sim, func::FuncOp entry,
                              AttentionOp entryOp) {
  const RunOptions &options = sim.options;
  // The low-precision type: the inputs' (O's, for FP8 inputs).
  bool bf16 = cast<MemRefType>(sim.argument(kOut).getType())
                  .getElementType()
                  .isBF16();
  llvm::Expected<std::unique_ptr<Mods>> madeMods =
      Mods::fromFunction(entry ? entry : sim.func);
  if (!madeMods)
    return madeMods.takeError();
  sim.mods = std::move(*madeMods);
  if (llvm::Error refused = sim.mods->fillExtras(sim.problem, options.seed))
    return refused;
  std::string error;
  const Problem &p = sim.problem;
  if (options.fp8Rotation &&
      (!p.fp8 || !options.inputs.empty() || (p.headDim & (p.headDim - 1))))
    return makeError("--fp8-rotation rotates drawn FP8 (e4m3) Q and K of a "
                     "power-of-two head dim; this attention has " +
                     std::string(p.fp8 ? "" : "no FP8 inputs, ") +
                     "head dim " + std::to_string(p.headDim) +
                     (options.inputs.empty() ? "" : " and --inputs"));
  if (options.inputs.empty()) {
    // The drawn extras first: the inputs put NaN past the seqused_k counts.
    sim.mods->attach(sim.problem);
    UnroundedInputs unrounded;
    fillInputs(sim.problem, bf16, options.seed, options.distribution,
               sim.q.data, sim.k.data, sim.v.data,
               sim.problem.fp8 ? &unrounded : nullptr);
    if (sim.problem.fp8) {
      std::vector<double> lse;
      referenceAttention(sim.problem, unrounded.q, unrounded.k, unrounded.v,
                         sim.unquantizedOut, lse);
    }
  } else if (sim.problem.isVarlen()) {
    return makeError("--inputs with a varlen batch is not supported: fa4-sim "
                     "draws the sequences' lengths and their cu_seqlens "
                     "tables itself");
  } else if (!readInputs(entryOp, sim.problem, options.inputs, sim.q.data,
                         sim.k.data, sim.v.data, *sim.mods, error)) {
    return makeError(error);
  } else {
    sim.mods->attach(sim.problem);
  }
  // A descale is a positive, finite factor: a zero one would make the
  // masked scores' exponent -inf · 0 (NaN), as the kernels' FFMA would.
  for (const std::vector<double> *table :
       {&sim.problem.qDescale, &sim.problem.kDescale, &sim.problem.vDescale})
    for (double value : *table)
      if (!(value > 0.0) || !std::isfinite(value))
        return makeError("a descale table holds " + std::to_string(value) +
                         "; descales are positive and finite (an all-zero "
                         "slice takes any positive one)");
  if (std::optional<size_t> table = sim.mods->blockTable()) {
    const Problem &p = sim.problem;
    if (!options.inputs.empty())
      return makeError("--inputs with a paged K/V cache is not supported: "
                       "fa4-sim draws the cache and its block table itself");
    const ModBuffer &blocks = sim.mods->buffers()[*table];
    scatterPages(sim.k.data, blocks, p.pageSize, p.kvHeads, p.headDim,
                 p.numBlocks, sim.kCache.data);
    scatterPages(sim.v.data, blocks, p.pageSize, p.kvHeads, p.vDim(),
                 p.numBlocks, sim.vCache.data);
  }
  if (!options.expect.empty() &&
      !readExpectedOutput(entryOp, sim.problem, options.expect, sim.expected,
                          error))
    return makeError(error);
  return llvm::Error::success();
}

/// The program's extra arguments, by the entry's argument numbers.
static llvm::Error findExtraArguments(Simulation &sim) {
  func::FuncOp func = sim.func;
  for (auto [number, extra] :
       llvm::zip(sim.mods->argumentNumbers(), sim.mods->arguments())) {
    if (number >= func.getNumArguments() ||
        func.getArgument(number).getType() != extra.getType())
      return makeError("the lowered @" + func.getName().str() +
                       " has no extra argument #" + std::to_string(number) +
                       " of type " + str(extra.getType()));
    sim.extraArguments.push_back(func.getArgument(number));
  }
  return llvm::Error::success();
}

static void recordStats(const InterpreterStats &stats, RunReport &report) {
  report.rescalesDone = stats.rescalesDone;
  report.rescalesSkipped = stats.rescalesSkipped;
  report.blocksVisited = stats.blocksVisited;
  report.blocksSkipped = stats.blocksSkipped;
}

/// Level A or B: the function once.
static llvm::Error runFunction(Simulation &sim, StepBudget &budget,
                               RunReport &report) {
  Interpreter interpreter;
  sim.bindArguments(interpreter);
  interpreter.setBudget(&budget);
  std::string error;
  if (!interpreter.runFunction(sim.func.getBody().front(), error))
    return makeError(error);
  bool numericsOk = sim.compare(report);
  recordStats(interpreter.getStats(), report);
  report.ok = numericsOk;
  return llvm::Error::success();
}

/// Level C: every CTA of the persistent grid (one CTA without `hasGrid`)
/// under schedule `run`, until one breaks the protocol; `grid` the CTAs.
static llvm::Error runGrid(Simulation &sim, int64_t run, bool hasGrid,
                           StepBudget &budget, ProtocolReport &protocol,
                           InterpreterStats &stats, int64_t &grid) {
  LaunchHook launch(protocol, stats,
                    sim.options.seed * 1000003u + static_cast<uint64_t>(run),
                    run % 2 == 1);
  budget.used = 0;
  grid = 1;
  // A schedule of CTA pairs runs each of its grid's clusters as two CTAs,
  // ranks 0 and 1, each reading the pair's K/V tiles whole (level C's view
  // of them).
  int64_t pair = 1;
  sim.func.walk([&](WarpSpecializeOp op) {
    if (op.getCtaPair())
      pair = 2;
  });
  int64_t clusters = 1;
  for (int64_t cta = 0; cta < clusters * pair; ++cta) {
    if (!budget.take(1))
      return makeError("the grid of " + std::to_string(clusters * pair) +
                       " CTAs runs past the run's budget of " +
                       std::to_string(budget.total) +
                       " loop iterations and CTAs for these sizes");
    Interpreter interpreter;
    sim.bindArguments(interpreter);
    interpreter.setBudget(&budget);
    interpreter.setHook(&launch);
    interpreter.ctaId = cta / pair;
    interpreter.ctaRank = cta % pair;
    launch.ctaId = cta;
    std::string error;
    if (!interpreter.runFunction(sim.func.getBody().front(), error))
      return makeError(error);
    if (cta == 0 && hasGrid)
      clusters = launch.gridSize;
    if (!protocol.clean())
      break;
  }
  grid = clusters * pair;
  return llvm::Error::success();
}

/// Level C under `interleavings` schedules; the first schedule that breaks
/// the protocol ends the run. Every second schedule completes asynchronous
/// work at the last moment (when no role can run), where a missing wait is
/// most likely to show.
static llvm::Error runSchedules(Simulation &sim, StepBudget &budget,
                                RunReport &report) {
  report.levelC = true;
  bool hasGrid = false;
  sim.func.walk([&](GridSizeOp) { hasGrid = true; });
  bool numericsOk = true;
  for (int64_t run = 0; run < sim.options.interleavings; ++run) {
    sim.poisonOutputs();
    ProtocolReport protocol;
    InterpreterStats stats;
    int64_t grid;
    if (llvm::Error refused =
            runGrid(sim, run, hasGrid, budget, protocol, stats, grid))
      return refused;
    report.interleavings = run + 1;
    report.ctas = grid;
    if (run == 0) {
      recordStats(stats, report);
      report.mmasIssued = protocol.mmasIssued;
    }
    numericsOk = sim.compare(report) && numericsOk;
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
  return llvm::Error::success();
}

llvm::Expected<RunReport> mlir::fa4::sim::simulate(func::FuncOp func,
                                                   const RunOptions &options) {
  // What the interpreter's own checks say of a failure.
  std::string error;
  if (!checkProgram(func, error))
    return makeError(error);
  // The backward's tile program has a runner of its own.
  if (getBackwardSpec(func)) {
    if (!options.inputs.empty() || !options.expect.empty())
      return makeError("--inputs and --expect apply to the forward; the "
                       "backward draws Q, K, V and dO from --seed");
    bool scheduled = false;
    func.walk([&](WarpSpecializeOp) { scheduled = true; });
    if (options.interleavings != 1 && !scheduled)
      return makeError("--interleavings runs a level-C schedule; this "
                       "backward is a tile program (level B): schedule it "
                       "first (fa4c --backward, which stops at the schedule)");
    return simulateBackward(func, options);
  }
  auto entry = dyn_cast_or_null<func::FuncOp>(options.entry);
  AttentionOp entryOp;
  if (entry)
    entry.walk([&](AttentionOp op) {
      if (!entryOp)
        entryOp = op;
    });
  if ((!options.inputs.empty() || !options.expect.empty()) && !entryOp)
    return makeError(
        "--inputs and --expect name the arguments and O of the level-A "
        "entry function; give level-A IR (a function with "
        "fa4.attention), not level B or C");
  // fa4.spec's verifier has checked its positions (distinct memref
  // arguments), window bounds, scale and softcap.
  KernelSpecAttr spec = getKernelSpec(func);
  if (!spec)
    return makeError(
        "@" + func.getName().str() +
        " has no fa4.spec (run fa4-tile first, or give level-A IR)");
  Simulation sim(func, options, spec);
  // A varlen kernel's packed rows are the drawn lengths' total: no flag
  // sets them, so the IR cannot fix them.
  if (spec.isVarlen())
    for (ArgumentRole role : {kQ, kK})
      if (!cast<MemRefType>(sim.argument(role).getType()).isDynamicDim(1))
        return makeError("a varlen kernel's packed " +
                         std::string(role == kQ ? "Q" : "K") +
                         " has a static total of rows; fa4-sim draws the "
                         "sequences' lengths (--batch of at most --seq-q / "
                         "--seq-k), so it needs a dynamic one");
  sim.problem = describeProblem(sim);
  if (llvm::Error refused = makeBuffers(sim))
    return std::move(refused);
  if (llvm::Error refused = makeInputs(sim, entry, entryOp))
    return std::move(refused);
  if (llvm::Error refused = findExtraArguments(sim))
    return std::move(refused);
  // The low-precision type: the inputs' (O's, for FP8 inputs).
  bool bf16 = cast<MemRefType>(sim.argument(kOut).getType())
                  .getElementType()
                  .isBF16();
  computeReference(sim.problem, bf16, sim.q.data, sim.k.data, sim.v.data,
                   sim.reference);
  if (!sim.mods->error().empty())
    return makeError("the reference's mod region: " + sim.mods->error());

  // Loop iterations and CTAs a run may take. The correct kernel takes a few
  // dozen per (Q tile, KV block) pair; counting pairs of 64-row tiles, finer
  // than any the kernel uses, at 64 steps each leaves a wide margin, while a
  // wrong loop bound or grid fails within seconds rather than hours.
  constexpr int64_t kStepsPerTilePair = 64;
  const Problem &p = sim.problem;
  int64_t qTiles = p.batch * p.qHeads * ceilDiv(p.seqQ, 64);
  int64_t kvTiles = ceilDiv(p.seqK, 64);
  // Split-KV runs each task once per part (each visiting its share of the
  // blocks, or none).
  int64_t parts = 1;
  if (KernelSpecAttr spec = getKernelSpec(sim.func))
    parts = spec.getSplits();
  else if (sim.mods->splitWorkspace())
    parts = kMaxSplits;
  StepBudget budget;
  budget.total = kStepsPerTilePair * (qTiles * (kvTiles + parts) + 1);

  RunReport report;
  if (!options.expect.empty())
    report.expectMaxAbsErr = 0.0;
  WarpSpecializeOp specialize;
  func.walk([&](WarpSpecializeOp op) { specialize = op; });
  // An FP8 program's own rules (one shift; at level C, V's 8-bit stages
  // loaded transposed): a broken one is refused by name, as fa4-to-nvvm
  // refuses it, rather than run to wrong numbers.
  if (holdsFp8Pieces(func)) {
    std::string diagnostic;
    ScopedDiagnosticHandler capture(func.getContext(), [&](Diagnostic &d) {
      if (diagnostic.empty())
        diagnostic = d.str();
      return success();
    });
    if (failed(verifyFp8Program(func)))
      return makeError(diagnostic);
  }
  llvm::Error refused = specialize ? runSchedules(sim, budget, report)
                                   : runFunction(sim, budget, report);
  if (refused)
    return std::move(refused);
  return std::move(report);
}
