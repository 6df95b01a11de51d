//===- Machine.cpp - threads, the scheduler and the ALU ---------------------===//
//
// The threads' half of a CTA: the warp scheduler and its SIMT stack, operand
// access, the integer and floating-point instructions, loads and stores with
// their bounds and hazard checks, and the warp- and CTA-collective
// instructions. The asynchronous units live in Async.cpp.
//
//===----------------------------------------------------------------------===//

#include "Machine.h"

#include "fa4/Support/Float8.h"
#include "fa4/Support/AttentionMath.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

namespace mlir::fa4::emu {

namespace {
constexpr size_t kMaxMessages = 16;

inline float asF32(uint64_t v) {
  uint32_t b = static_cast<uint32_t>(v);
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline uint64_t fromF32(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
inline double asF64(uint64_t v) {
  double d;
  std::memcpy(&d, &v, 8);
  return d;
}
inline uint64_t fromF64(double d) {
  uint64_t b;
  std::memcpy(&b, &d, 8);
  return b;
}
inline uint64_t maskTo(uint64_t v, unsigned bits) {
  return bits >= 64 ? v : v & ((uint64_t(1) << bits) - 1);
}
inline int64_t signExtend(uint64_t v, unsigned bits) {
  if (bits >= 64)
    return static_cast<int64_t>(v);
  uint64_t m = uint64_t(1) << (bits - 1);
  v = maskTo(v, bits);
  return static_cast<int64_t>((v ^ m) - m);
}
inline float flush(float x) {
  return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x;
}
/// `rounded`, the round-to-nearest result of an operation whose exact
/// result is rounded + error, moved to the neighbour the directed rounding
/// mode `round` picks (Rz, Rm, Rp; Rn and None keep it).
inline float directed(float rounded, double error, Round round) {
  if (error == 0 || !std::isfinite(rounded))
    return rounded;
  switch (round) {
  case Round::Rm:
    return error < 0 ? std::nextafter(rounded, -INFINITY) : rounded;
  case Round::Rp:
    return error > 0 ? std::nextafter(rounded, INFINITY) : rounded;
  case Round::Rz:
    return (error < 0) == (rounded > 0) ? std::nextafter(rounded, 0.0f) : rounded;
  default:
    return rounded;
  }
}
/// a + b and a · b under `round`: the nearest result and its exact error
/// (TwoSum; the product's error from the exact double product).
inline float addRounded(float a, float b, Round round) {
  float sum = a + b;
  float bb = sum - a;
  double error = (double(a) - (double(sum) - double(bb))) + (double(b) - double(bb));
  return directed(sum, error, round);
}
inline float mulRounded(float a, float b, Round round) {
  float product = a * b;
  return directed(product, double(a) * double(b) - double(product), round);
}
/// a · b + c under `round`: the exact product in double, its sum with c by
/// TwoSum, the sign of what the nearest float result misses.
inline float fmaRounded(float a, float b, float c, Round round) {
  float nearest = std::fma(a, b, c);
  if (round != Round::Rz && round != Round::Rm && round != Round::Rp)
    return nearest;
  double product = double(a) * double(b);
  double sum = product + double(c);
  double back = sum - product;
  double sumError = (product - (sum - back)) + (double(c) - back);
  return directed(nearest, (sum - double(nearest)) + sumError, round);
}
/// .sat: clamped to [0, 1], NaN to +0.
inline float saturate(float x) {
  return std::isnan(x) ? 0.0f : std::min(1.0f, std::max(0.0f, x));
}
std::string hex(uint64_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}
/// PTX min/max: a NaN operand yields the other one, unless .NaN.
inline float fmin2(float a, float b, bool nan) {
  if (std::isnan(a) || std::isnan(b))
    return nan ? std::nanf("") : (std::isnan(a) ? b : a);
  if (a == 0 && b == 0)
    return std::signbit(a) ? a : b;
  return a < b ? a : b;
}
inline float fmax2(float a, float b, bool nan) {
  if (std::isnan(a) || std::isnan(b))
    return nan ? std::nanf("") : (std::isnan(a) ? b : a);
  if (a == 0 && b == 0)
    return std::signbit(a) ? b : a;
  return a > b ? a : b;
}
} // namespace

CtaMachine::CtaMachine(const Program &program, const Kernel &kernel,
                       Device &device, const LaunchConfig &config,
                       const std::vector<uint8_t> &params,
                       const std::vector<uint32_t> &ctaLinear, CtaReport &report)
    : program(program), kernel(kernel), device(device), config(config),
      params(params), report(report) {
  clusterSize = static_cast<uint32_t>(ctaLinear.size());
  for (uint32_t linear : ctaLinear)
    ctaIds.push_back({linear % config.grid[0],
                      (linear / config.grid[0]) % config.grid[1],
                      linear / (config.grid[0] * config.grid[1])});
  for (int d = 0; d < 3; ++d) {
    clusterDims[d] = std::max(1u, config.cluster[d]);
    clusterCoord[d] = ctaIds[0][d] / clusterDims[d];
  }
  rng.seed(config.seed * 0x9e3779b97f4a7c15ull + ctaLinear[0] + 1);
  numThreads = config.block[0] * config.block[1] * config.block[2];
  warpsPerCta = (numThreads + 31) / 32;
  // The launch refuses clusters of CTAs that are not whole warpgroups, so
  // a warpgroup never spans two CTAs here.
  uint32_t numWarps = warpsPerCta * clusterSize;
  threads.resize(size_t(numThreads) * clusterSize);
  warps.resize(numWarps);
  exitedInCta.assign(clusterSize, 0);
  namedBarriers.assign(size_t(kNamedBarriers) * clusterSize, NamedBarrier());
  tmemAllocations.assign(clusterSize, {});
  tmemRelinquished.assign(clusterSize, false);
  pairRendezvous.assign((clusterSize + 1) / 2, PairRendezvous());
  fenceOrders.assign(warps.size(), Order());
  relaxedAcquires.assign(warps.size(), Order());
  // Registers, shared memory and tensor memory start from a poison pattern,
  // all ones (a NaN in every float format fa4 uses, an address past every
  // allocation): a read of a value no instruction wrote, or of data before
  // the synchronization that publishes it, changes the result or faults
  // instead of finding a harmless zero.
  registerFile.assign(threads.size() * program.numRegs, kPoison);
  uint32_t initialRegisters =
      kernel.maxnreg ? kernel.maxnreg
                     : std::min<uint32_t>(255, 65536 / (warpsPerCta * 32)) & ~7u;
  for (uint32_t t = 0; t < threads.size(); ++t) {
    Thread &th = threads[t];
    th.tid = t;
    th.cta = t / numThreads;
    th.warp = th.cta * warpsPerCta + t % numThreads / 32;
    th.lane = t % 32;
    th.pc = kernel.begin;
    th.regs = registerFile.data() + size_t(t) * program.numRegs;
  }
  // The launch gives each warp its registers; setmaxnreg only moves them
  // between the CTA's warps through a per-CTA pool that starts empty (PTX
  // ISA, setmaxnreg): an increase waits for registers another warpgroup
  // released, never for the rest of the register file.
  registerPool.assign(clusterSize, 0);
  if (program.usesWgmma) {
    wgmmaRegisters.assign(size_t(numWarps) * program.numRegs, 0);
    registerEpochs.assign(size_t(numWarps) * program.numRegs, 0);
    registerReads.assign(size_t(numWarps) * program.numRegs, 0);
    wgmmaIssues.resize((numWarps + 3) / 4);
  }
  // One strand a warp; with skewed speeds the warps of a warpgroup (a role)
  // share theirs.
  strands.resize(numWarps);
  uint32_t speed = 512;
  for (uint32_t w = 0; w < numWarps; ++w) {
    Warp &warp = warps[w];
    warp.registers = initialRegisters;
    // Lanes past the block's size in a CTA's last warp never exist.
    if (w % warpsPerCta == warpsPerCta - 1 && numThreads % 32)
      warp.absent = ~0u << (numThreads % 32);
    warp.knownTc.assign(numWarps, 0);
    warp.knownProxy.assign(numWarps, 0);
    warp.tcVisible.assign(numWarps, 0);
    warp.knownSync.assign(numWarps, 0);
    warp.knownInit.assign(numWarps, 0);
    if (config.skewedSpeeds && w % 4 == 0)
      speed = drawSpeed();
    Strand &strand = strands[w];
    strand.warp = w;
    strand.lanes = warp.live();
    strand.speed = speed;
    strand.stack.push_back({kernel.begin, kReconvergeAtExit, warp.live()});
    makeRunnable(w);
  }
  uint32_t staticBytes = (program.staticSmemBytes + program.dynamicSmemAlign - 1) /
                         program.dynamicSmemAlign * program.dynamicSmemAlign;
  smemEnd = kSharedBase + staticBytes + config.dynamicSmemBytes;
  smemStride = (smemEnd + 1023) / 1024 * 1024;
  // CTA r's bytes are [r * smemStride, r * smemStride + smemEnd).
  uint32_t flatEnd = (clusterSize - 1) * smemStride + smemEnd;
  smem.assign(flatEnd, uint8_t(kPoison));
  unfencedOwner.assign(flatEnd, 0);
  genericTag.assign(flatEnd, 0);
  smemOrder.assign((flatEnd + 3) / 4, SmemWord());
  asyncLines.assign((flatEnd + 127) / 128, AsyncLine());
  tmem.assign(size_t(kTmemLanes) * kTmemColumns * clusterSize, uint32_t(kPoison));
  tmemOrder.assign(size_t(kTmemLanes / 32) * kTmemColumns * clusterSize, TmemCell());
  // Instructions per warp index of a CTA, summed over the cluster's CTAs.
  report.perWarp.assign(warpsPerCta, 0);
}

//===----------------------------------------------------------------------===//
// Reports
//===----------------------------------------------------------------------===//

std::string CtaMachine::threadName(const Thread &th) const {
  std::ostringstream os;
  const std::array<uint32_t, 3> &id = ctaIds[th.cta];
  os << "cta (" << id[0] << "," << id[1] << "," << id[2] << ") thread "
     << th.tid - th.cta * numThreads << " (warp " << th.warp - th.cta * warpsPerCta
     << " lane " << th.lane << ")";
  return os.str();
}
std::string CtaMachine::at(const Thread &th) const {
  uint32_t pc = std::min<uint32_t>(th.pc, kernel.end - 1);
  return threadName(th) + " at " + program.sources[program.code[pc].source];
}
void CtaMachine::error(const Thread &th, const std::string &message) {
  if (report.errors.size() < kMaxMessages)
    report.errors.push_back(at(th) + ": " + message);
  ++report.errorCount;
  stopped = true;
}
void CtaMachine::hazard(const std::string &message) {
  if (report.hazards.size() < kMaxMessages)
    report.hazards.push_back(message);
  ++report.hazardCount;
}
void CtaMachine::misuse(const std::string &message) {
  if (report.misuse.size() < kMaxMessages)
    report.misuse.push_back(message);
  ++report.misuseCount;
}

//===----------------------------------------------------------------------===//
// Scheduling
//===----------------------------------------------------------------------===//

void CtaMachine::makeRunnable(uint32_t s) {
  Strand &strand = strands[s];
  strand.state = State::Ready;
  if (strand.runnableIndex != ~0u)
    return;
  strand.runnableIndex = static_cast<uint32_t>(runnable.size());
  runnable.push_back(s);
}

void CtaMachine::block(uint32_t s, State state) {
  Strand &strand = strands[s];
  strand.state = state;
  if (strand.runnableIndex == ~0u)
    return;
  uint32_t last = runnable.back();
  runnable[strand.runnableIndex] = last;
  strands[last].runnableIndex = strand.runnableIndex;
  runnable.pop_back();
  strand.runnableIndex = ~0u;
}

void CtaMachine::wake(uint32_t w, State state) {
  for (uint32_t s = 0; s < strands.size(); ++s)
    if (strands[s].warp == w && strands[s].state == state)
      makeRunnable(s);
}

void CtaMachine::split(uint32_t s, uint32_t lanes, uint32_t pc) {
  // A strand merged away or exited is reused.
  uint32_t other = 0;
  while (other < strands.size() && strands[other].state != State::Merged &&
         (strands[other].state != State::Exited || strands[other].lanes))
    ++other;
  if (other == strands.size())
    strands.emplace_back();
  Strand &fresh = strands[other];
  fresh = Strand();
  fresh.warp = strands[s].warp;
  fresh.lanes = lanes;
  // With skewed speeds one side, either, is starved: it runs only when
  // nothing else can (as lanes that a try_wait suspended may oversleep on
  // hardware), so that the other may run whole rings and tasks ahead.
  if (config.skewedSpeeds) {
    bool starveFresh = rng() & 1;
    fresh.speed = starveFresh ? 0 : strands[s].speed;
    if (!starveFresh)
      strands[s].speed = 0;
  }
  fresh.stack.push_back({pc, kReconvergeAtExit, lanes});
  strands[s].lanes &= ~lanes;
  strands[s].stack.back().mask &= ~lanes;
  makeRunnable(other);
}

CtaMachine::Gather CtaMachine::gather(uint32_t s, uint32_t members, uint32_t pc) {
  Strand &strand = strands[s];
  Warp &warp = warps[strand.warp];
  uint32_t missing = members & ~strand.lanes;
  if (!missing)
    return Gather::Here;
  Thread &first = threads[strand.warp * 32 + __builtin_ctz(strand.lanes)];
  if (!config.independentThreads || (missing & ~warp.live())) {
    error(first, "a warp-collective instruction is reached by a divergent "
                 "warp: lanes " + hex(missing) + " of its members are not "
                 "here (" + hex(missing & ~warp.live()) + " have exited)");
    return Gather::Failed;
  }
  // The member lanes' strands wait at this instruction until all are here,
  // then run on as one.
  strand.convergeMembers = members;
  strand.stack.back().pc = pc;
  uint32_t here = strand.lanes;
  for (const Strand &other : strands)
    if (&other != &strand && other.warp == strand.warp &&
        other.state == State::Converge && other.stack.back().pc == pc)
      here |= other.lanes;
  if ((members & ~here) != 0) {
    block(s, State::Converge);
    return Gather::Waiting;
  }
  for (Strand &other : strands)
    if (&other != &strand && other.warp == strand.warp &&
        other.state == State::Converge && other.stack.back().pc == pc) {
      strand.lanes |= other.lanes;
      strand.stack.back().mask |= other.lanes;
      // Joined lanes run at the pace of the fastest: a starved side ends
      // with its parting.
      strand.speed = std::max(strand.speed, other.speed);
      other.lanes = 0;
      other.state = State::Merged;
    }
  makeRunnable(s);
  return Gather::Joined;
}

void CtaMachine::run() {
  while (!stopped) {
    completeAsync(false);
    if (stopped)
      break;
    if (runnable.empty()) {
      if (completeAsync(true))
        continue;
      if (exitedWarps == warps.size())
        break;
      reportDeadlock();
      break;
    }
    // Starved roles: a new stretch, a new warp or warpgroup kept waiting
    // (or, one stretch in four, none).
    if (config.starveRoles && report.instructions >= starvedUntil) {
      uint32_t numWarps = static_cast<uint32_t>(warps.size());
      switch (rng() % 4) {
      case 0: starvedCount = 0; break;
      case 1: starvedFirst = static_cast<uint32_t>(rng() % ((numWarps + 3) / 4)) * 4;
              starvedCount = 4; break;
      default: starvedFirst = static_cast<uint32_t>(rng() % numWarps);
               starvedCount = 1; break;
      }
      starvedUntil = report.instructions + (int64_t(1000) << (rng() % 9));
    }
    // A random strand runs for a random number of instructions; with
    // skewed speeds or starved roles each is drawn in proportion to its
    // speed.
    uint32_t s = runnable[rng() % runnable.size()];
    if (config.skewedSpeeds || config.starveRoles) {
      uint64_t total = 0;
      for (uint32_t r : runnable)
        total += speedOf(r);
      // Only starved strands can run: their turn comes once the
      // asynchronous units have nothing left to complete.
      if (total == 0 && completeAsync(true))
        continue;
      uint64_t pick = total ? rng() % total : 0;
      for (uint32_t r : runnable) {
        if (pick < speedOf(r)) {
          s = r;
          break;
        }
        pick -= speedOf(r);
      }
    }
    step(s, 1 + rng() % 256);
    if (report.instructions > int64_t(config.instructionLimit)) {
      error(threads[strands[s].warp * 32], "the CTA ran past " +
                                 std::to_string(config.instructionLimit) +
                                 " instructions (livelock?)");
      break;
    }
  }
  finish();
}

void CtaMachine::reportDeadlock() {
  std::ostringstream head;
  head << "cta (" << ctaIds[0][0] << "," << ctaIds[0][1] << "," << ctaIds[0][2]
       << ")" << (clusterSize > 1 ? " and its cluster" : "")
       << " deadlocked: every live warp is blocked and no asynchronous "
          "operation is in flight";
  report.deadlock.push_back(head.str());
  // One line per blocked strand (a warp, or some of its lanes): where it
  // waits and on what.
  for (const Strand &strand : strands) {
    if (strand.state == State::Exited || strand.state == State::Merged ||
        strand.stack.empty() || !strand.lanes)
      continue;
    const uint32_t w = strand.warp;
    const Warp &warp = warps[w];
    const StackEntry &top = strand.stack.back();
    const Inst &in = program.code[std::min(top.pc, kernel.end - 1)];
    uint32_t lanes = top.mask & strand.lanes;
    std::ostringstream os;
    if (clusterSize > 1)
      os << "cta rank " << w / warpsPerCta << " ";
    os << "warp " << w % warpsPerCta << " (" << __builtin_popcount(lanes) << " lanes";
    if (strand.lanes != warp.live())
      os << " " << hex(strand.lanes);
    os << ") " << program.sources[in.source] << ": ";
    switch (strand.state) {
    case State::Mbarrier: {
      auto it = barriers.find(strand.waitBarrier);
      os << "waits on the mbarrier at smem " << smemName(strand.waitBarrier);
      if (it != barriers.end()) {
        const Mbarrier &b = it->second;
        const Thread &lane = threads[w * 32 + __builtin_ctz(lanes ? lanes : strand.lanes)];
        if (in.flags & kParity)
          os << " for the phase of parity "
             << (const_cast<CtaMachine *>(this)->read(lane, in.operands[2], Ty::B32) & 1);
        os << "; it has completed " << b.phase << " phases (current parity "
           << (b.phase & 1) << "), " << b.pending << " of " << b.expected
           << " arrivals pending, tx-count " << b.tx;
      }
      break;
    }
    case State::CtaBarrier: {
      const NamedBarrier &bar = namedBarriers[strand.namedBarrier];
      os << "waits at named barrier " << strand.namedBarrier % kNamedBarriers
         << " (";
      if (bar.expected)
        os << bar.arrivedWarps * 32 << " of " << bar.expected
           << " threads arrived)";
      else
        os << bar.arrivedWarps << " of "
           << warpsPerCta - exitedInCta[strand.namedBarrier / kNamedBarriers]
           << " live warps arrived)";
      break;
    }
    case State::PairWait:
      os << "waits for a warp of its peer CTA (rank " << (w / warpsPerCta ^ 1)
         << ") to issue it too (.cta_group::2 is collective across the CTA pair)";
      break;
    case State::ClusterBarrier: {
      os << "waits in barrier.cluster.wait (" << clusterBarrier.arrived
         << " of " << threads.size() - clusterBarrier.exitedIdle
         << " live threads of the cluster arrived)";
      // Lanes of this warp held at a reconvergence point behind the wait
      // (lockstep): a non-.aligned cluster barrier in divergent code, which
      // hardware's independent thread scheduling would run.
      uint32_t behind = warp.live() & ~strand.lanes;
      for (const Strand &other : strands)
        if (&other != &strand && other.warp == w)
          behind &= ~other.lanes;
      uint32_t held = strand.lanes & warp.live() & ~top.mask;
      if (!config.independentThreads && (behind | held))
        os << "; lanes " << hex(behind | held)
           << " of the warp wait at a reconvergence point behind it (fa4-emu "
              "runs a divergent non-.aligned barrier.cluster.wait under "
              "independent thread scheduling only)";
      break;
    }
    case State::WgmmaWait:
      os << "waits in wgmma.wait_group " << strand.wgWaitAllowed << " for "
         << warp.wgInFlight << " wgmma operations in flight";
      break;
    case State::Converge:
      os << "waits for lanes " << hex(strand.convergeMembers & ~strand.lanes)
         << " of its warp to reach this warp-synchronous instruction";
      break;
    case State::BulkWait:
      os << "waits for its bulk async-groups (TMA stores) to complete";
      break;
    case State::Registers:
      os << "waits in setmaxnreg.inc for registers no other warp frees";
      break;
    default:
      os << "is runnable";
      break;
    }
    report.deadlock.push_back(os.str());
  }
  stopped = true;
}

void CtaMachine::finish() {
  for (const Thread &th : threads)
    report.perWarp[th.warp % warpsPerCta] += th.executed;
  if (report.errorCount || !report.deadlock.empty())
    return;
  if (!tmaInFlight.empty() || !tensorPipe.empty() || !wgmmaInFlight.empty())
    hazard("cta (" + std::to_string(ctaIds[0][0]) + ")" +
           (clusterSize > 1 ? " and its cluster" : "") + " exited with " +
           std::to_string(tmaInFlight.size()) + " TMA and " +
           std::to_string(tensorPipe.size()) +
           " tensor-core operations still in flight");
  for (size_t g = 0; g < wgmmaIssues.size(); ++g)
    if (!wgmmaIssues[g].empty()) {
      const WgmmaIssue &issue = wgmmaIssues[g].begin()->second;
      error(threads[g * 128], "only " + std::to_string(issue.seen) +
                                  " warps of warpgroup " + std::to_string(g) +
                                  " issued " +
                                  program.sources[program.code[issue.pc].source] +
                                  " (wgmma is warpgroup-collective)");
      return;
    }
  for (uint32_t cta = 0; cta < clusterSize; ++cta)
    for (auto [column, count] : tmemAllocations[cta])
      misuse("cta (" + std::to_string(ctaIds[cta][0]) + ") exited holding " +
             std::to_string(count) + " TMEM columns from column " +
             std::to_string(column) + " (no tcgen05.dealloc)");
  // setmaxnreg is warpgroup-collective: every warp of a warpgroup must have
  // made the same requests.
  for (uint32_t g = 0; g * 4 < warps.size(); ++g)
    for (uint32_t w = g * 4 + 1; w < std::min<size_t>(g * 4 + 4, warps.size()); ++w)
      if (warps[w].setmaxnregValues.size() != warps[g * 4].setmaxnregValues.size()) {
        error(threads[w * 32], "warp " + std::to_string(w) + " executed " +
                                   std::to_string(warps[w].setmaxnregValues.size()) +
                                   " setmaxnreg but warp " + std::to_string(g * 4) +
                                   " of its warpgroup executed " +
                                   std::to_string(warps[g * 4].setmaxnregValues.size()) +
                                   " (setmaxnreg is warpgroup-collective)");
        return;
      }
}

//===----------------------------------------------------------------------===//
// Operands
//===----------------------------------------------------------------------===//

uint64_t CtaMachine::special(const Thread &th, Special s) const {
  const uint32_t tid = th.tid - th.cta * numThreads;
  const std::array<uint32_t, 3> &ctaId = ctaIds[th.cta];
  switch (s) {
  case Special::TidX: return tid % config.block[0];
  case Special::TidY: return (tid / config.block[0]) % config.block[1];
  case Special::TidZ: return tid / (config.block[0] * config.block[1]);
  case Special::NtidX: return config.block[0];
  case Special::NtidY: return config.block[1];
  case Special::NtidZ: return config.block[2];
  case Special::CtaidX: return ctaId[0];
  case Special::CtaidY: return ctaId[1];
  case Special::CtaidZ: return ctaId[2];
  case Special::NctaidX: return config.grid[0];
  case Special::NctaidY: return config.grid[1];
  case Special::NctaidZ: return config.grid[2];
  case Special::LaneId: return th.lane;
  case Special::WarpId: return th.warp - th.cta * warpsPerCta;
  case Special::NWarpId: return warpsPerCta;
  case Special::SmId: return ctaId[0];
  case Special::NSmId: return config.grid[0];
  case Special::ClusterCtaRank: return th.cta;
  case Special::ClusterNCtaRank: return clusterSize;
  case Special::ClusterCtaidX: return ctaId[0] % clusterDims[0];
  case Special::ClusterCtaidY: return ctaId[1] % clusterDims[1];
  case Special::ClusterCtaidZ: return ctaId[2] % clusterDims[2];
  case Special::ClusterNCtaidX: return clusterDims[0];
  case Special::ClusterNCtaidY: return clusterDims[1];
  case Special::ClusterNCtaidZ: return clusterDims[2];
  case Special::ClusteridX: return clusterCoord[0];
  case Special::ClusteridY: return clusterCoord[1];
  case Special::ClusteridZ: return clusterCoord[2];
  case Special::NClusteridX: return config.grid[0] / clusterDims[0];
  case Special::NClusteridY: return config.grid[1] / clusterDims[1];
  case Special::NClusteridZ: return config.grid[2] / clusterDims[2];
  case Special::IsExplicitCluster:
    return kernel.explicitCluster || clusterSize > 1 ||
           kernel.reqCluster[0] != 0;
  case Special::DynamicSmemSize: return config.dynamicSmemBytes;
  case Special::Clock: case Special::Clock64: case Special::GlobalTimer:
    return now;
  }
  return 0;
}

uint64_t CtaMachine::read(const Thread &th, const Operand &o, Ty type) {
  switch (o.kind) {
  case Operand::Kind::Reg:
    if (!registerReads.empty())
      registerReads[size_t(th.warp) * program.numRegs + o.reg] = warps[th.warp].wgFenceEpoch;
    return th.regs[o.reg];
  case Operand::Kind::Imm:
    return maskTo(static_cast<uint64_t>(o.imm) +
                      (o.sharedSymbol ? uint64_t(th.cta) << kClusterRankShift : 0),
                  bitsOf(type) ? bitsOf(type) : 64);
  case Operand::Kind::Special: return special(th, o.special);
  default: return 0;
  }
}

void CtaMachine::write(Thread &th, const Operand &o, uint64_t value, Ty type) {
  if (o.kind != Operand::Kind::Reg)
    return;
  unsigned bits = bitsOf(type);
  th.regs[o.reg] = bits == 1 ? (value & 1) : maskTo(value, bits ? bits : 64);
  if (!registerEpochs.empty())
    registerEpochs[size_t(th.warp) * program.numRegs + o.reg] =
        warps[th.warp].wgFenceEpoch;
}

uint64_t CtaMachine::address(const Thread &th, const Operand &o) const {
  uint64_t base = o.reg == kNoReg ? 0 : th.regs[o.reg];
  if (o.sharedSymbol)
    base += uint64_t(th.cta) << kClusterRankShift;
  return base + static_cast<uint64_t>(o.imm);
}

std::string CtaMachine::warpName(uint32_t w) const {
  if (clusterSize == 1)
    return "warp " + std::to_string(w);
  return "warp " + std::to_string(w % warpsPerCta) + " of CTA rank " +
         std::to_string(w / warpsPerCta);
}

std::string CtaMachine::smemName(uint32_t flat, bool end) const {
  if (clusterSize == 1)
    return hex(flat);
  // An end address belongs to the CTA of the byte before it.
  uint32_t rank = (end && flat ? flat - 1 : flat) / smemStride;
  return hex(uint64_t(rank) << kClusterRankShift | (flat - rank * smemStride));
}

bool CtaMachine::sharedAddress(Thread &th, uint64_t addr, uint32_t bytes,
                               bool cluster, const char *what, uint32_t &flat,
                               bool access) {
  if (flatShared(th.cta, addr, bytes, cluster, flat)) {
    const uint32_t owner = ctaOfShared(flat);
    if (access && owner != th.cta && exitedInCta[owner] == warpsPerCta) {
      error(th, std::string(what) + " at " + hex(addr) + " reaches the shared "
                    "memory of CTA rank " + std::to_string(owner) +
                    ", which has exited (its shared memory ended with it)");
      return false;
    }
    return true;
  }
  uint64_t rank = addr >> kClusterRankShift;
  if (rank != th.cta && (!cluster || rank >= clusterSize)) {
    error(th, std::string(what) + " at " + hex(addr) + " is " +
                  (cluster ? "an address of CTA rank " + std::to_string(rank) +
                                 ", outside the " + std::to_string(clusterSize) +
                                 "-CTA cluster"
                           : "CTA rank " + std::to_string(rank) +
                                 "'s shared::cluster address, given to a "
                                 ".shared::cta access of CTA rank " +
                                 std::to_string(th.cta)));
    return false;
  }
  error(th, std::string(what) + " of " + std::to_string(bytes) + " bytes at " +
                hex(addr) + " is outside " +
                (rank == th.cta ? std::string("the CTA's")
                                : "CTA rank " + std::to_string(rank) + "'s") +
                " shared memory [" +
                hex(uint64_t(rank) << kClusterRankShift | kSharedBase) + ", " +
                hex(uint64_t(rank) << kClusterRankShift | smemEnd) + ")");
  return false;
}

/// The host bytes behind [addr, addr + bytes) of `space`, bounds-checked.
/// `smemAddr` is set for shared accesses (their flat address, for hazard
/// checks).
uint8_t *CtaMachine::memory(Thread &th, Space space, uint64_t addr,
                            uint32_t bytes, bool store, uint32_t &smemAddr,
                            bool cluster) {
  smemAddr = 0;
  if (space == Space::Generic) {
    cluster = true;
    if (addr >= kGenericParam && addr < kGenericParam + (1ull << 32)) {
      space = Space::Param;
      addr -= kGenericParam;
    } else if (addr >= kGenericShared && addr < kGenericShared + (1ull << 32)) {
      space = Space::Shared;
      addr -= kGenericShared;
    } else {
      space = Space::Global;
    }
  }
  // Natural alignment, up to the 16 bytes of the widest vector access.
  if (bytes > 1 && addr % std::min(bytes, 16u) != 0 && space != Space::Param) {
    error(th, "misaligned " + std::to_string(bytes) + "-byte access at " + hex(addr));
    return nullptr;
  }
  switch (space) {
  case Space::Shared:
    if (addr > 0xffffffffull) {
      error(th, "shared-memory access of " + std::to_string(bytes) + " bytes at " +
                    hex(addr) + " is outside the CTA's shared memory [" +
                    hex(kSharedBase) + ", " + hex(smemEnd) + ")");
      return nullptr;
    }
    if (!sharedAddress(th, addr, bytes, cluster, "shared-memory access", smemAddr))
      return nullptr;
    return smem.data() + smemAddr;
  case Space::Param:
    if (store) {
      error(th, "store to the kernel's parameter space");
      return nullptr;
    }
    if (addr + bytes > params.size()) {
      error(th, "parameter access at offset " + std::to_string(addr) +
                    " past the " + std::to_string(params.size()) +
                    " bytes of parameters");
      return nullptr;
    }
    return const_cast<uint8_t *>(params.data()) + addr;
  case Space::Global: {
    uint8_t *p = device.host(addr, bytes);
    if (!p)
      error(th, std::string(store ? "store" : "load") + " of " +
                    std::to_string(bytes) + " bytes at global address " +
                    hex(addr) + " is outside every allocation");
    return p;
  }
  default:
    error(th, "unsupported state space");
    return nullptr;
  }
}

void CtaMachine::checkPendingLd(Thread &th, const Inst &in) {
  auto pending = [&](uint32_t reg) {
    return std::find(th.pendingLd.begin(), th.pendingLd.end(), reg) !=
           th.pendingLd.end();
  };
  // Every register the instruction reads: sources, addresses, guards.
  bool bad = in.guard != kNoReg && pending(in.guard);
  bool writesFirst = !(in.op == Op::St || in.op == Op::TcSt || in.op == Op::TcMma ||
                       in.op == Op::TmaLoad || in.op == Op::TmaStore ||
                       in.op == Op::MbarInit || in.op == Op::Bra);
  for (uint32_t i = 0; i < in.numOperands && !bad; ++i) {
    const Operand &o = in.operands[i];
    if (i == 0 && writesFirst && o.kind != Operand::Kind::Mem)
      continue;
    if (o.kind == Operand::Kind::Reg || o.kind == Operand::Kind::Mem)
      bad = o.reg != kNoReg && pending(o.reg);
    if (o.kind == Operand::Kind::Vec)
      for (uint32_t e = 0; e < o.vecCount && !bad; ++e) {
        const Operand &v = program.vectors[o.vecBegin + e];
        bad = v.kind == Operand::Kind::Reg && pending(v.reg);
      }
  }
  if (bad) {
    hazard(at(th) + ": reads a destination of tcgen05.ld before "
                    "tcgen05.wait::ld");
    th.pendingLd.clear();
  }
}

void CtaMachine::onSharedAccess(Thread &th, Interval range, bool store) {
  orderShared(th, range, store);
  orderAsync(th.warp, th.pc, range, store, [&] { return at(th); });
  if (store)
    // The generic proxy's tracking takes these bytes over (a partial line
    // forgets the rest: a missed report at worst, never a false one).
    for (uint32_t line = range.begin / 128; line < (range.end + 127) / 128 &&
                                            line < asyncLines.size();
         ++line)
      asyncLines[line] = AsyncLine();
  for (const TmaOp &op : tmaInFlight) {
    Interval region{op.smem, op.smem + op.bytes};
    if (!region.overlaps(range))
      continue;
    if (op.load)
      hazard(at(th) + ": " + (store ? "writes" : "reads") + " shared memory " +
             smemName(range.begin) + " that an in-flight TMA load (" +
             program.sources[op.source] + ") is writing");
    else if (store)
      hazard(at(th) + ": writes shared memory " + smemName(range.begin) +
             " that an in-flight TMA store (" + program.sources[op.source] +
             ") is still reading");
  }
  if (store) {
    if (uint32_t bar = barrierIn(range); bar != ~0u) {
      error(th, "a store to shared memory " + smemName(range.begin) +
                    " overwrites the live mbarrier at smem " + smemName(bar) +
                    " (an mbarrier changes through mbarrier instructions "
                    "only; mbarrier.inval ends its life)");
      return;
    }
    for (const TensorOp &op : tensorPipe)
      if (op.readsShared(range))
        hazard(at(th) + ": writes shared memory " + smemName(range.begin) +
               " that an in-flight MMA (" + program.sources[op.source] +
               ") is still reading");
    for (const WgmmaOp &op : wgmmaInFlight)
      if (op.aSmem.overlaps(range) || op.bSmem.overlaps(range)) {
        hazard(at(th) + ": writes shared memory " + smemName(range.begin) +
               " that an in-flight wgmma (" +
               program.sources[program.code[op.pc].source] +
               ") is still reading");
        break;
      }
    // Generic-proxy writes must be fenced before the async proxy reads them:
    // by this thread (unfencedOwner) and, for another warp's async read,
    // before a release that warp acquired (genericTag, orderProxy).
    Warp &warp = warps[th.warp];
    warp.lastGenericTag = warp.proxyFences + 1;
    uint32_t tag = (th.warp + 1) << 24 | (warp.lastGenericTag & 0xffffff);
    std::fill(genericTag.begin() + range.begin, genericTag.begin() + range.end, tag);
    for (uint32_t a = range.begin; a < range.end; ++a) {
      if (!unfencedOwner[a])
        ++unfencedBytes;
      unfencedOwner[a] = static_cast<uint16_t>(th.tid + 1);
    }
    if (!th.unfenced.empty() && th.unfenced.back().end == range.begin)
      th.unfenced.back().end = range.end;
    else
      th.unfenced.push_back(range);
  }
}

//===----------------------------------------------------------------------===//
// The interpreter loop
//===----------------------------------------------------------------------===//

/// Runs warp `w` for up to `budget` instructions, lanes in lockstep under
/// a SIMT stack: a branch that splits the active lanes pushes the two paths,
/// taken first, each to run until the branch's reconvergence point.
void CtaMachine::step(uint32_t s, uint64_t budget) {
  const Inst *code = program.code.data();
  while (budget && strands[s].state == State::Ready && !stopped) {
    // Re-read each round: a split may have grown the strands.
    Strand &strand = strands[s];
    const uint32_t w = strand.warp;
    Warp &warp = warps[w];
    if (strand.stack.empty()) {
      exitLanes(s, strand.lanes);
      return;
    }
    StackEntry top = strand.stack.back();
    uint32_t mask = top.mask & strand.lanes;
    if (!mask || top.pc == top.reconverge || top.pc == kReconvergeAtExit) {
      strand.stack.pop_back();
      continue;
    }
    const Inst &in = code[top.pc];
    --budget;
    uint32_t active = mask;
    for (uint32_t lanes = mask; lanes; lanes &= lanes - 1) {
      Thread &th = threads[w * 32 + __builtin_ctz(lanes)];
      th.pc = top.pc;
      ++th.executed;
      if (!th.pendingLd.empty())
        checkPendingLd(th, in);
      if (in.guard != kNoReg &&
          ((th.regs[in.guard] & 1) != 0) == in.guardNegated)
        active &= ~(1u << th.lane);
    }
    report.instructions += __builtin_popcount(mask);
    now += 1;
    if (warp.wgInFlight && in.op != Op::WgMma && in.op != Op::WgWait &&
        in.op != Op::WgCommit && in.op != Op::WgFence)
      checkWgmmaRegisters(w, in);
    const Issue issue{s, w, top, mask, active};
    Flow flow;
    switch (in.op) {
    case Op::Bra:
      flow = stepBranch(issue, in);
      break;
    case Op::Ret:
      if (active != mask)
        advance(issue);
      exitLanes(s, active);
      flow = Flow::Continue;
      break;
    case Op::MbarTryWait:
      flow = stepMbarrierWait(issue, in);
      break;
    case Op::ClusterArrive: case Op::ClusterWait:
      flow = stepCluster(issue, in);
      break;
    case Op::BulkWait:
      flow = stepBulkWait(issue, in);
      break;
    case Op::BarSync: case Op::BarArrive:
    case Op::WgFence: case Op::WgCommit: case Op::WgMma: case Op::WgWait:
      flow = stepAligned(issue, in);
      break;
    case Op::TcAlloc: case Op::TcDealloc: case Op::TcRelinquish:
    case Op::TcLd: case Op::TcSt: case Op::TcWaitLd: case Op::TcWaitSt:
    case Op::Elect: case Op::Vote: case Op::Shfl: case Op::SetMaxNReg:
    case Op::BarWarpSync: case Op::StMatrix:
      flow = stepCollective(issue, in);
      break;
    default:
      flow = stepLanes(issue, in);
      break;
    }
    if (flow == Flow::Stop)
      return;
  }
}

CtaMachine::Thread &CtaMachine::firstLane(const Issue &issue) {
  return threads[issue.warp * 32 +
                 __builtin_ctz(issue.active ? issue.active : issue.mask)];
}

void CtaMachine::advance(const Issue &issue) {
  strands[issue.strand].stack.back().pc = issue.top.pc + 1;
}

CtaMachine::Flow CtaMachine::stepBranch(const Issue &issue, const Inst &in) {
  Strand &strand = strands[issue.strand];
  const uint32_t pc = issue.top.pc;
  uint32_t taken = issue.active, fallthrough = issue.mask & ~issue.active;
  if (!fallthrough) {
    strand.stack.back().pc = in.target;
    return Flow::Continue;
  }
  if (!taken) {
    advance(issue);
    return Flow::Continue;
  }
  if (in.flags & kUniform) {
    error(firstLane(issue), "bra.uni with a predicate that differs across the "
                            "warp's active lanes (taken by " + hex(taken) +
                            ", not by " + hex(fallthrough) + ")");
    return Flow::Stop;
  }
  // Either side may run first: the hardware promises no order.
  bool takenFirst = rng() & 1;
  if (config.independentThreads) {
    // The sides part: one stays, the other runs as a strand of its own
    // until a warp-synchronous instruction joins them.
    strand.stack.back().pc = takenFirst ? in.target : pc + 1;
    split(issue.strand, takenFirst ? fallthrough : taken,
          takenFirst ? pc + 1 : in.target);
    return Flow::Continue;
  }
  strand.stack.back().pc = in.reconverge;
  StackEntry takenSide{in.target, in.reconverge, taken};
  StackEntry otherSide{pc + 1, in.reconverge, fallthrough};
  strand.stack.push_back(takenFirst ? otherSide : takenSide);
  strand.stack.push_back(takenFirst ? takenSide : otherSide);
  return Flow::Continue;
}

CtaMachine::Flow CtaMachine::stepMbarrierWait(const Issue &issue,
                                              const Inst &in) {
  // Every lane tries; a strand none of whose lanes saw the phase complete
  // sleeps until the barrier moves, then tries again.
  const uint32_t s = issue.strand, w = issue.warp;
  Strand &strand = strands[s];
  bool any = false;
  for (uint32_t lanes = issue.active; lanes; lanes &= lanes - 1)
    any |= execMbarrier(threads[w * 32 + __builtin_ctz(lanes)], in);
  if (stopped)
    return Flow::Stop;
  // The barrier's flat address (execMbarrier has checked it).
  auto flatOf = [&](const Thread &th) {
    uint32_t flat = 0;
    flatShared(th.cta, address(th, in.operands[1]), 8, in.flags & kClusterSpace,
               flat);
    return flat;
  };
  if (any) {
    // The wait returned: it acquires what the phase's arrivals released.
    uint32_t addr = flatOf(firstLane(issue));
    if (auto it = barriers.find(addr); it != barriers.end()) {
      // A .relaxed wait acquires nothing itself: a fence after it does.
      const bool relaxed = in.flags & kRelaxed;
      if (relaxed) {
        relaxedAcquires[w].join(it->second.released);
      } else {
        acquire(w, it->second.released);
      }
      // And the TMA loads that completed the phases it has seen.
      std::vector<uint64_t> &known =
          relaxed ? relaxedAcquires[w].phase : warps[w].knownPhase;
      if (known.size() <= it->second.id)
        known.resize(it->second.id + 1, 0);
      known[it->second.id] = std::max(known[it->second.id], it->second.phase);
    }
  }
  if (any || !issue.active || (in.flags & kTest)) {
    strand.waiting = false;
    advance(issue);
    return Flow::Continue;
  }
  Thread &first = firstLane(issue);
  uint32_t addr = flatOf(first);
  Mbarrier &bar = barriers[addr];
  if (strand.waiting && strand.waitBarrier == addr &&
      bar.phase >= strand.waitSnapshot + 2)
    misuse(at(first) + ": waited for a phase of the mbarrier at smem " +
           smemName(addr) + " while it completed " +
           std::to_string(bar.phase - strand.waitSnapshot) +
           " phases: its producer lapped this consumer");
  if (!strand.waiting || strand.waitBarrier != addr) {
    strand.waiting = true;
    strand.waitBarrier = addr;
    strand.waitSnapshot = bar.phase;
  }
  bar.waiters.push_back(s);
  block(s, State::Mbarrier);
  return Flow::Stop;
}

CtaMachine::Flow CtaMachine::stepBulkWait(const Issue &issue, const Inst &in) {
  const uint32_t w = issue.warp;
  bool done = true;
  for (uint32_t lanes = issue.active; lanes; lanes &= lanes - 1)
    done &= bulkGroupsDone(threads[w * 32 + __builtin_ctz(lanes)], in);
  if (!done) {
    block(issue.strand, State::BulkWait);
    return Flow::Stop;
  }
  // The stores of the groups it waited for have read their shared memory.
  for (uint32_t lanes = issue.active; lanes; lanes &= lanes - 1) {
    Thread &th = threads[w * 32 + __builtin_ctz(lanes)];
    uint32_t allowed = static_cast<uint32_t>(in.operands[0].imm);
    if (th.committedGroups > allowed)
      finishTokens(w, th.storeTokens, th.committedGroups - allowed);
  }
  advance(issue);
  return Flow::Continue;
}

CtaMachine::Flow CtaMachine::stepAligned(const Issue &issue, const Inst &in) {
  const uint32_t s = issue.strand, w = issue.warp;
  Warp &warp = warps[w];
  if (!issue.active) {
    advance(issue);
    return Flow::Continue;
  }
  // .aligned: every live lane of the warp executes it together (a strand
  // that gathers them runs it again with all of them).
  Gather g = gather(s, warp.live(), issue.top.pc);
  if (g == Gather::Waiting || g == Gather::Failed)
    return Flow::Stop;
  if (g == Gather::Joined)
    return Flow::Continue;
  if (issue.active != warp.live()) {
    error(firstLane(issue), "an .aligned instruction is reached by a divergent "
                            "warp (active lanes " + hex(issue.active) + " of " +
                            hex(warp.live()) + ")");
    return Flow::Stop;
  }
  if (in.op == Op::BarSync || in.op == Op::BarArrive) {
    // bar.sync blocks the strand; its release moves it past the barrier.
    if (!arriveNamedBarrier(s, in, in.op == Op::BarSync) ||
        in.op == Op::BarSync)
      return Flow::Stop;
  } else if (in.op == Op::WgWait) {
    Strand &strand = strands[s];
    strand.wgWaitAllowed = static_cast<uint32_t>(in.operands[0].imm);
    if (!wgmmaGroupsDone(warp, strand.wgWaitAllowed)) {
      block(s, State::WgmmaWait);
      return Flow::Stop;
    }
    if (warp.wgCommitted > strand.wgWaitAllowed)
      finishTokens(w, warp.wgTokens, warp.wgCommitted - strand.wgWaitAllowed);
  } else if (in.op == Op::WgFence) {
    ++warp.wgFenceEpoch;
  } else if (in.op == Op::WgCommit) {
    ++warp.wgCommitted;
  } else {
    execWgmma(w, issue.active, in);
    if (stopped)
      return Flow::Stop;
  }
  advance(issue);
  return Flow::Continue;
}

CtaMachine::Flow CtaMachine::stepCollective(const Issue &issue,
                                            const Inst &in) {
  const uint32_t s = issue.strand, w = issue.warp, active = issue.active;
  Warp &warp = warps[w];
  if (!active) {
    advance(issue);
    return Flow::Continue;
  }
  // The lanes the collective names must all be here: its member mask where
  // it has one, else (.aligned) every live lane of the warp.
  uint32_t members = warp.live();
  const Operand *maskOperand = in.op == Op::Elect         ? &in.operands[1]
                               : in.op == Op::Vote        ? &in.operands[2]
                               : in.op == Op::Shfl        ? &in.operands[4]
                               : in.op == Op::BarWarpSync ? &in.operands[0]
                                                          : nullptr;
  if (maskOperand)
    members = static_cast<uint32_t>(read(firstLane(issue), *maskOperand, Ty::B32));
  // A lane outside its own member mask is undefined behaviour (PTX ISA).
  if (active & ~members) {
    error(firstLane(issue), "lanes " + hex(active & ~members) +
                                " execute a warp-collective instruction whose "
                                "member mask " + hex(members) + " leaves them out");
    return Flow::Stop;
  }
  Gather g = gather(s, members, issue.top.pc);
  if (g == Gather::Waiting || g == Gather::Failed)
    return Flow::Stop;
  if (g == Gather::Joined)
    return Flow::Continue;
  if ((members & active) != members || (!maskOperand && active != members)) {
    error(firstLane(issue), "a warp-collective instruction is reached by a "
                            "divergent warp: lanes " + hex(members & ~active) +
                            " of its members are not here (" +
                            hex(members & warp.exited) + " have exited)");
    return Flow::Stop;
  }
  bool waitForRegisters = false;
  collectiveStrand = s;
  waitForPeer = false;
  execCollective(w, members, in, waitForRegisters);
  if (stopped)
    return Flow::Stop;
  if (waitForPeer) {
    // The peer CTA's warp moves this one past the instruction.
    block(s, State::PairWait);
    return Flow::Stop;
  }
  if (waitForRegisters) {
    registerWaiters.push_back(s);
    block(s, State::Registers);
    return Flow::Stop;
  }
  advance(issue);
  // Registers a warp gave back may let a waiting setmaxnreg.inc go on.
  if (in.op == Op::SetMaxNReg && !(in.flags & kInc)) {
    std::vector<uint32_t> waiting;
    waiting.swap(registerWaiters);
    for (uint32_t other : waiting)
      makeRunnable(other);
  }
  return Flow::Continue;
}

CtaMachine::Flow CtaMachine::stepLanes(const Issue &issue, const Inst &in) {
  const uint32_t w = issue.warp;
  for (uint32_t lanes = issue.active; lanes && !stopped; lanes &= lanes - 1)
    execLane(threads[w * 32 + __builtin_ctz(lanes)], in);
  advance(issue);
  // Completions and other warps may come between two arrivals.
  if (!config.yieldAtArrives || !issue.active ||
      (in.op != Op::MbarArrive && in.op != Op::TcCommit))
    return Flow::Continue;
  // A warp that has just released a resource is a good one to keep waiting:
  // what it does before its next wait (a store still reading the resource,
  // say) then stays undone the longest.
  if (config.starveRoles && (starvedCount == 0 || report.instructions >= starvedUntil) &&
      rng() % 4 == 0) {
    starvedFirst = w;
    starvedCount = 1;
    starvedUntil = report.instructions + (int64_t(1000) << (rng() % 9));
  }
  return Flow::Stop;
}

void CtaMachine::execLane(Thread &th, const Inst &in) {
  switch (in.op) {
  case Op::Nop:
    return;
  case Op::Ld: case Op::St:
    execMemory(th, in);
    return;
  case Op::Atom: {
    // Global memory is shared by the CTAs the launch runs on host threads:
    // the add is a host atomic (sequentially consistent, as the emulator's
    // memory is).
    uint32_t smemAddr;
    uint8_t *p = memory(th, in.space, address(th, in.operands[1]), 4, true,
                        smemAddr, in.flags & kClusterSpace);
    if (!p)
      return;
    if (reinterpret_cast<uintptr_t>(p) % 4) {
      error(th, "atom at an address not aligned to 4 bytes");
      return;
    }
    uint32_t add = static_cast<uint32_t>(read(th, in.operands[2], in.type));
    uint32_t old = __atomic_fetch_add(reinterpret_cast<uint32_t *>(p), add,
                                      __ATOMIC_SEQ_CST);
    write(th, in.operands[0], old, in.type);
    return;
  }
  case Op::Red: {
    // An add to global memory, one element after another (the vector
    // forms' elements are separate adds): host atomics, as atom's.
    unsigned count = std::max<unsigned>(1, in.vec);
    uint32_t smemAddr;
    uint8_t *p = memory(th, in.space, address(th, in.operands[0]), 4 * count,
                        true, smemAddr, in.flags & kClusterSpace);
    if (!p)
      return; // (memory() reported it: out of bounds or misaligned)
    const Operand &value = in.operands[1];
    if (count > 1 &&
        (value.kind != Operand::Kind::Vec || value.vecCount != count)) {
      error(th, "vector reduction needs " + std::to_string(count) +
                    " registers");
      return;
    }
    for (unsigned i = 0; i < count; ++i) {
      const Operand &element =
          value.kind == Operand::Kind::Vec ? program.vectors[value.vecBegin + i]
                                           : value;
      uint32_t add = static_cast<uint32_t>(read(th, element, in.type));
      auto *word = reinterpret_cast<uint32_t *>(p + 4 * i);
      if (in.type != Ty::F32) {
        __atomic_fetch_add(word, add, __ATOMIC_SEQ_CST);
        continue;
      }
      float addend;
      std::memcpy(&addend, &add, 4);
      atomicAddF32(word, addend);
    }
    return;
  }
  case Op::Cvt:
    execCvt(th, in);
    return;
  case Op::MbarInit: case Op::MbarArrive: case Op::MbarExpectTx: case Op::MbarInval:
    execMbarrier(th, in);
    return;
  case Op::TmaLoad: case Op::TmaStore:
    execTma(th, in);
    return;
  case Op::BulkCommit:
    ++th.committedGroups;
    return;
  case Op::FenceProxyAsync:
    ++warps[th.warp].proxyFences;
    for (const Interval &range : th.unfenced)
      for (uint32_t a = range.begin; a < range.end; ++a)
        if (unfencedOwner[a] == th.tid + 1) {
          unfencedOwner[a] = 0;
          --unfencedBytes;
        }
    th.unfenced.clear();
    return;
  case Op::TcFenceBefore:
    ++warps[th.warp].tcFences;
    return;
  case Op::TcFenceAfter: {
    Warp &warp = warps[th.warp];
    warp.tcVisible = warp.knownTc;
    return;
  }
  case Op::FenceMbarrierInit:
    for (auto &[addr, bar] : barriers)
      if (bar.initThread == th.tid)
        bar.fenced = true;
    {
      // fence.mbarrier_init.release.cluster is a light release fence of the
      // thread's mbarrier inits alone, for a relaxed arrive after it.
      Warp &warp = warps[th.warp];
      Order &fence = fenceOrders[th.warp];
      if (fence.init.size() < warps.size())
        fence.init.resize(warps.size(), 0);
      for (size_t v = 0; v < warp.knownInit.size(); ++v)
        fence.init[v] = std::max(fence.init[v], warp.knownInit[v]);
      fence.init[th.warp] = std::max(fence.init[th.warp], warp.initEpoch);
      ++warp.initEpoch;
      warp.fenced = true;
    }
    return;
  case Op::FenceAcqRel: {
    // A release fence of everything before it (for a relaxed arrive after
    // it), and an acquire of what relaxed waits before it saw released.
    Warp &warp = warps[th.warp];
    release(th.warp, fenceOrders[th.warp]);
    warp.fenced = true;
    acquire(th.warp, relaxedAcquires[th.warp]);
    relaxedAcquires[th.warp] = Order();
    return;
  }
  case Op::TcMma:
    execMma(th, in);
    return;
  case Op::TcCommit:
    execCommit(th, in);
    return;
  case Op::Mapa: case Op::GetCtaRank:
    execMapa(th, in);
    return;
  default:
    execAlu(th, in);
    return;
  }
}

void CtaMachine::exitLanes(uint32_t s, uint32_t lanes) {
  const uint32_t w = strands[s].warp;
  Warp &warp = warps[w];
  warp.exited |= lanes;
  // The cluster barrier waits for the threads that have not exited; one
  // that arrived counts for the phase it arrived in.
  for (uint32_t l = lanes; l; l &= l - 1) {
    const Thread &th = threads[w * 32 + __builtin_ctz(l)];
    if (!th.clusterArrived || th.clusterPhase != clusterBarrier.phase)
      ++clusterBarrier.exitedIdle;
  }
  if (clusterBarrier.arrived)
    completeClusterPhaseIfDone();
  strands[s].lanes &= ~lanes;
  if (!strands[s].lanes)
    block(s, State::Exited);
  // Strands waiting for lanes at an .aligned instruction need those that
  // live no more: they look again.
  wake(w, State::Converge);
  if (warp.live())
    return;
  if (warp.wgInFlight)
    hazard("cta (" + std::to_string(ctaIds[w / warpsPerCta][0]) + ") warp " + std::to_string(w % warpsPerCta) +
           " exited with " + std::to_string(warp.wgInFlight) +
           " wgmma operations in flight (no wgmma.wait_group)");
  ++exitedWarps;
  const uint32_t cta = w / warpsPerCta;
  if (++exitedInCta[cta] == warpsPerCta && clusterSize > 1)
    checkExitOfCta(cta);
  // A barrier of the whole CTA waits only for the warps that have not
  // exited.
  for (uint32_t id = cta * kNamedBarriers; id < (cta + 1) * kNamedBarriers; ++id)
    if (namedBarriers[id].arrivedWarps && !namedBarriers[id].expected &&
        namedBarrierComplete(namedBarriers[id], cta))
      releaseNamedBarrier(id);
}

//===----------------------------------------------------------------------===//
// Named barriers (bar.sync, bar.arrive)
//===----------------------------------------------------------------------===//

bool CtaMachine::namedBarrierComplete(const NamedBarrier &bar,
                                      uint32_t cta) const {
  return bar.expected ? bar.arrivedWarps * 32 >= bar.expected
                      : bar.arrivedWarps + exitedInCta[cta] >= warpsPerCta;
}

/// A warp's arrival at named barrier a of b threads (PTX ISA, bar): the
/// hardware counts arrivals per warp, the barrier completes when b threads
/// (every non-exited thread of the CTA without b) have arrived, and it is
/// then ready for its next use at once. Every arrival of one use must give
/// the same b.
bool CtaMachine::arriveNamedBarrier(uint32_t s, const Inst &in, bool wait) {
  const uint32_t w = strands[s].warp;
  Thread &first = threads[w * 32 + __builtin_ctz(warps[w].live())];
  uint32_t id = static_cast<uint32_t>(read(first, in.operands[0], Ty::U32));
  const char *name = wait ? "bar.sync" : "bar.arrive";
  if (id >= kNamedBarriers) {
    error(first, std::string(name) + " on barrier " + std::to_string(id) +
                     " (a CTA has barriers 0..15)");
    return false;
  }
  uint32_t expected = 0;
  if (in.numOperands == 2) {
    expected = static_cast<uint32_t>(read(first, in.operands[1], Ty::U32));
    if (expected == 0 || expected % 32 || expected > numThreads) {
      error(first, std::string(name) + " with a thread count of " +
                       std::to_string(expected) +
                       " (a non-zero multiple of 32, at most the CTA's " +
                       std::to_string(numThreads) + " threads)");
      return false;
    }
  }
  const uint32_t cta = w / warpsPerCta;
  NamedBarrier &bar = namedBarriers[cta * kNamedBarriers + id];
  if (bar.arrivedWarps && bar.expected != expected) {
    error(first, std::string(name) + " on barrier " + std::to_string(id) +
                     " expects " +
                     (expected ? std::to_string(expected) + " threads"
                               : std::string("the whole CTA")) +
                     " but earlier arrivals of this use expect " +
                     (bar.expected ? std::to_string(bar.expected) + " threads"
                                   : std::string("the whole CTA")));
    return false;
  }
  bar.expected = expected;
  ++bar.arrivedWarps;
  release(w, bar.order);
  if (wait) {
    strands[s].namedBarrier = cta * kNamedBarriers + id;
    bar.waiters.push_back(s);
    block(s, State::CtaBarrier);
  }
  if (namedBarrierComplete(bar, cta))
    releaseNamedBarrier(cta * kNamedBarriers + id);
  return true;
}

void CtaMachine::releaseNamedBarrier(uint32_t id) {
  NamedBarrier &bar = namedBarriers[id];
  std::vector<uint32_t> waiters;
  waiters.swap(bar.waiters);
  Order order = std::move(bar.order);
  bar = NamedBarrier();
  for (uint32_t s : waiters)
    if (strands[s].state == State::CtaBarrier) {
      acquire(strands[s].warp, order);
      ++strands[s].stack.back().pc;
      makeRunnable(s);
    }
}

//===----------------------------------------------------------------------===//
// Clusters (mapa, barrier.cluster)
//===----------------------------------------------------------------------===//

void CtaMachine::checkExitOfCta(uint32_t cta) {
  // A CTA's shared memory ends with it: every access of it by a peer's warp
  // must happen before the exit, known to one of its warps through a
  // synchronization (CUTLASS's kernels end with a cluster barrier for it).
  const uint32_t begin = sharedBase(cta) / 4;
  const uint32_t end = std::min<size_t>((sharedBase(cta) + smemEnd + 3) / 4, smemOrder.size());
  for (uint32_t word = begin; word < end; ++word) {
    const SmemWord &cell = smemOrder[word];
    for (const SmemAccess *access : {&cell.write, &cell.reads[0], &cell.reads[1]}) {
      if (access->warp == 0xffff || access->warp / warpsPerCta == cta)
        continue;
      bool ordered = false;
      for (uint32_t w = cta * warpsPerCta; w < (cta + 1) * warpsPerCta && !ordered; ++w) {
        const std::vector<uint32_t> &known =
            access->init ? warps[w].knownInit : warps[w].knownSync;
        ordered = known[access->warp] >= access->epoch;
      }
      if (ordered)
        continue;
      hazard("cta (" + std::to_string(ctaIds[cta][0]) + "), rank " + std::to_string(cta) +
             " of its cluster, exited with its shared memory at " + smemName(word * 4) +
             " accessed by " + warpName(access->warp) + " at " +
             program.sources[program.code[access->pc].source] +
             " and that access not ordered before the exit (a CTA's shared memory "
             "ends with it: a barrier.cluster, or another synchronization, must "
             "come between a peer's last access and the exit)");
      return;
    }
  }
}

void CtaMachine::execMapa(Thread &th, const Inst &in) {
  const bool getRank = in.op == Op::GetCtaRank;
  const char *name = getRank ? "getctarank" : "mapa";
  uint64_t addr = read(th, in.operands[1], in.type);
  uint64_t rank = getRank ? 0 : read(th, in.operands[2], Ty::U32);
  if (rank >= clusterSize) {
    error(th, "mapa to CTA rank " + std::to_string(rank) + " of a " +
                  std::to_string(clusterSize) + "-CTA cluster");
    return;
  }
  // The variable's offset in its CTA's window, from a shared::cta or
  // shared::cluster address (generic ones in the shared window without
  // .shared::cluster).
  const bool generic = !(in.flags & kClusterSpace);
  uint64_t shared = addr;
  if (generic) {
    if (addr < kGenericShared || addr >= kGenericShared + (1ull << 32)) {
      error(th, std::string(name) + " of the generic address " + hex(addr) +
                    ", which is not in the shared window");
      return;
    }
    shared = addr - kGenericShared;
  }
  uint32_t flat;
  if (!sharedAddress(th, shared, 1, true,
                     getRank ? "getctarank's address" : "mapa's source", flat,
                     /*access=*/false))
    return;
  if (getRank) {
    write(th, in.operands[0], ctaOfShared(flat), in.type);
    return;
  }
  uint64_t mapped = rank << kClusterRankShift | flat % smemStride;
  write(th, in.operands[0], generic ? kGenericShared + mapped : mapped, in.type);
}

void CtaMachine::arriveCluster(Thread &th, const Inst &in) {
  if (th.clusterArrived) {
    misuse(at(th) + ": arrives at the cluster barrier again before its "
                    "barrier.cluster.wait");
    return;
  }
  th.clusterArrived = true;
  th.clusterPhase = clusterBarrier.phase;
  ++clusterBarrier.arrived;
  // .release (the default) makes what the thread did before visible to the
  // threads that wait on the phase; .relaxed only what a fence before it
  // ordered.
  if (in.flags & kRelaxed)
    releaseRelaxed(th.warp, clusterBarrier.releasing);
  else
    release(th.warp, clusterBarrier.releasing);
  completeClusterPhaseIfDone();
}

void CtaMachine::completeClusterPhaseIfDone() {
  ClusterBarrier &bar = clusterBarrier;
  if (bar.arrived + bar.exitedIdle < threads.size())
    return;
  ++bar.phase;
  bar.released = std::move(bar.releasing);
  bar.releasing = Order();
  bar.arrived = 0;
  // Threads that arrived and have exited since count as exited from now on.
  for (Thread &th : threads)
    if (th.clusterArrived && th.clusterPhase + 1 == bar.phase &&
        (warps[th.warp].exited >> th.lane & 1))
      ++bar.exitedIdle;
  for (uint32_t s = 0; s < strands.size(); ++s)
    if (strands[s].state == State::ClusterBarrier)
      makeRunnable(s);
}

CtaMachine::Flow CtaMachine::stepCluster(const Issue &issue, const Inst &in) {
  if (!issue.active) {
    advance(issue);
    return Flow::Continue;
  }
  if (in.flags & kAlignedCluster) {
    // .aligned: every live lane of the warp executes it together.
    const Warp &warp = warps[issue.warp];
    Gather g = gather(issue.strand, warp.live(), issue.top.pc);
    if (g == Gather::Waiting || g == Gather::Failed)
      return Flow::Stop;
    if (g == Gather::Joined)
      return Flow::Continue;
    if (issue.active != warp.live()) {
      error(firstLane(issue), "an .aligned barrier.cluster is reached by a "
                              "divergent warp (active lanes " +
                                  hex(issue.active) + " of " + hex(warp.live()) + ")");
      return Flow::Stop;
    }
  }
  if (in.op == Op::ClusterWait)
    return stepClusterWait(issue, in);
  for (uint32_t lanes = issue.active; lanes && !stopped; lanes &= lanes - 1)
    arriveCluster(threads[issue.warp * 32 + __builtin_ctz(lanes)], in);
  advance(issue);
  return Flow::Continue;
}

CtaMachine::Flow CtaMachine::stepClusterWait(const Issue &issue, const Inst &in) {
  // Every active lane must have arrived; the strand goes on once the phase
  // its lanes arrived in has completed.
  for (uint32_t lanes = issue.active; lanes; lanes &= lanes - 1) {
    Thread &th = threads[issue.warp * 32 + __builtin_ctz(lanes)];
    if (!th.clusterArrived) {
      error(th, "barrier.cluster.wait without a barrier.cluster.arrive "
                "before it");
      return Flow::Stop;
    }
    if (th.clusterPhase >= clusterBarrier.phase) {
      // Under the lockstep schedule a warp's other lanes wait at the
      // branch's reconvergence point behind this one: the side not yet run
      // goes first (it may arrive, or exit), as independent thread
      // scheduling would let it; the wait runs again when it is back on top.
      Strand &strand = strands[issue.strand];
      const size_t n = strand.stack.size();
      if (!config.independentThreads && !(in.flags & kAlignedCluster) && n >= 2 &&
          strand.stack[n - 2].reconverge == issue.top.reconverge &&
          strand.stack[n - 2].pc != strand.stack[n - 2].reconverge) {
        std::swap(strand.stack[n - 1], strand.stack[n - 2]);
        return Flow::Continue;
      }
      block(issue.strand, State::ClusterBarrier);
      return Flow::Stop;
    }
  }
  if (issue.active) {
    // .acquire: what the arrivals released.
    acquire(issue.warp, clusterBarrier.released);
    for (uint32_t lanes = issue.active; lanes; lanes &= lanes - 1)
      threads[issue.warp * 32 + __builtin_ctz(lanes)].clusterArrived = false;
  }
  advance(issue);
  return Flow::Continue;
}

//===----------------------------------------------------------------------===//
// ALU
//===----------------------------------------------------------------------===//

/// An ALU instruction's operands as one lane reads and writes them, in the
/// instruction's type; `f` reads and `outF` writes an f32 under .ftz and
/// .sat.
struct CtaMachine::AluLane {
  CtaMachine &machine;
  Thread &th;
  const Inst &in;

  uint64_t src(int i) const { return machine.read(th, in.operands[i], in.type); }
  void out(uint64_t v) const { machine.write(th, in.operands[0], v, in.type); }
  bool ftz() const { return in.flags & kFtz; }
  bool sat() const { return in.flags & kSat; }
  float f(int i) const {
    float x = asF32(src(i));
    return ftz() ? flush(x) : x;
  }
  void outF(float x) const {
    if (sat())
      x = saturate(x);
    out(fromF32(ftz() ? flush(x) : x));
  }
  /// selp's choice: a when the predicate operand holds, else b.
  bool predicate() const {
    return machine.read(th, in.operands[3], Ty::Pred) & 1;
  }
  float add(float a, float b) const { return addRounded(a, b, in.round); }
  float mul(float a, float b) const { return mulRounded(a, b, in.round); }
  float fma(float a, float b, float c) const {
    return fmaRounded(a, b, c, in.round);
  }
  void unsupported() const {
    machine.error(th, "this instruction/type combination is not modelled by fa4-emu");
  }
};

void CtaMachine::execAlu(Thread &th, const Inst &in) {
  const Ty ty = in.type;
  const AluLane lane{*this, th, in};
  // Directed rounding (.rz/.rm/.rp) of f32 arithmetic: exact for add, sub
  // and mul; refused elsewhere rather than silently rounded to nearest.
  const bool directedRound =
      in.round == Round::Rz || in.round == Round::Rm || in.round == Round::Rp;
  if (directedRound && (ty == Ty::F32 || ty == Ty::F32x2) &&
      (in.op == Op::Div || in.op == Op::Sqrt || in.op == Op::Rcp)) {
    error(th, "directed rounding of this f32 operation is not modelled by fa4-emu");
    return;
  }
  const Operand *o = in.operands;
  if (in.op == Op::Mov &&
      (o[0].kind == Operand::Kind::Vec || o[1].kind == Operand::Kind::Vec))
    return execMovParts(lane);
  // Mixed precision: a (and b) of the 16-bit type2, exact in f32, then the
  // f32 operation and its rounding.
  if (ty == Ty::F32 && (in.type2 == Ty::F16 || in.type2 == Ty::BF16) &&
      (in.op == Op::Add || in.op == Op::Sub || in.op == Op::Fma)) {
    auto half = [&](int i) {
      uint16_t bits = static_cast<uint16_t>(read(th, o[i], in.type2));
      return in.type2 == Ty::BF16 ? bfloat16BitsToFloat(bits)
                                  : halfBitsToFloat(bits);
    };
    if (in.op == Op::Fma)
      return lane.outF(lane.fma(half(1), half(2), lane.f(3)));
    float c = lane.f(2);
    return lane.outF(lane.add(half(1), in.op == Op::Sub ? -c : c));
  }
  if (in.op == Op::Testp) {
    // The class of an f32 as an f32 (its own normal range), of an f64 as
    // an f64.
    int kind = ty == Ty::F64 ? std::fpclassify(asF64(lane.src(1)))
                             : std::fpclassify(lane.f(1));
    bool r = false;
    switch (in.count) {
    case 1: r = kind != FP_INFINITE && kind != FP_NAN; break;
    case 2: r = kind == FP_INFINITE; break;
    case 3: r = kind != FP_NAN; break;
    case 4: r = kind == FP_NAN; break;
    case 5: r = kind == FP_NORMAL; break;
    case 6: r = kind == FP_SUBNORMAL; break;
    }
    write(lane.th, in.operands[0], r, Ty::Pred);
    return;
  }
  // setp on f32 and f64 compares below with the other types; f32x2 has none.
  if (ty == Ty::F32 && in.op != Op::Setp)
    return execF32(lane);
  if (ty == Ty::F32x2)
    return execF32x2(lane);
  if (ty == Ty::F64 && in.op != Op::Setp)
    return execF64(lane);
  if ((ty == Ty::F16 || ty == Ty::BF16) && in.op != Op::Setp)
    return execHalf(lane);
  if (in.op == Op::Setp)
    return execSetp(lane);
  if (isFloat(ty))
    return lane.unsupported();
  execInteger(lane);
}

/// mov between a register and a vector of its parts, first part lowest.
void CtaMachine::execMovParts(const AluLane &lane) {
  Thread &th = lane.th;
  const Operand *o = lane.in.operands;
  const unsigned bits = bitsOf(lane.in.type);
  bool pack = o[1].kind == Operand::Kind::Vec;
  const Operand &parts = pack ? o[1] : o[0];
  unsigned width = parts.vecCount ? bits / parts.vecCount : 0;
  if (!width || width * parts.vecCount != bits)
    return lane.unsupported();
  Ty partType = width == 8 ? Ty::B8 : width == 16 ? Ty::B16 : Ty::B32;
  if (pack) {
    uint64_t value = 0;
    for (uint32_t i = 0; i < parts.vecCount; ++i)
      value |= maskTo(read(th, program.vectors[parts.vecBegin + i], partType), width)
               << (i * width);
    lane.out(value);
  } else {
    uint64_t value = lane.src(1);
    for (uint32_t i = 0; i < parts.vecCount; ++i)
      write(th, program.vectors[parts.vecBegin + i], value >> (i * width), partType);
  }
}

void CtaMachine::execF32(const AluLane &lane) {
  const Inst &in = lane.in;
  auto f = [&](int i) { return lane.f(i); };
  switch (in.op) {
  case Op::Mov: lane.out(lane.src(1)); return;
  case Op::Add: lane.outF(lane.add(f(1), f(2))); return;
  case Op::Sub: lane.outF(lane.add(f(1), -f(2))); return;
  case Op::Mul: lane.outF(lane.mul(f(1), f(2))); return;
  case Op::Fma: case Op::Mad: lane.outF(lane.fma(f(1), f(2), f(3))); return;
  case Op::Div: lane.outF(f(1) / f(2)); return;
  case Op::Neg: lane.outF(-f(1)); return;
  case Op::Abs: lane.outF(std::fabs(f(1))); return;
  // copysign d, a, b: b's magnitude with a's sign.
  case Op::CopySign: lane.outF(std::copysign(f(2), f(1))); return;
  case Op::Min: case Op::Max: {
    bool nan = in.flags & kNaN;
    float r = f(1);
    for (int i = 2; i < in.numOperands; ++i)
      r = in.op == Op::Min ? fmin2(r, f(i), nan) : fmax2(r, f(i), nan);
    lane.outF(r);
    return;
  }
  // Approximate functions: the host's correctly rounded (or 1-ulp) results,
  // inside the PTX ISA's stated error bounds.
  case Op::Ex2: lane.outF(std::exp2(f(1))); return;
  case Op::Lg2: lane.outF(std::log2(f(1))); return;
  case Op::Rcp: lane.outF(1.0f / f(1)); return;
  case Op::Sqrt: lane.outF(std::sqrt(f(1))); return;
  case Op::Rsqrt: lane.outF(1.0f / std::sqrt(f(1))); return;
  case Op::Selp: lane.out(lane.predicate() ? lane.src(1) : lane.src(2)); return;
  default: lane.unsupported(); return;
  }
}

void CtaMachine::execF32x2(const AluLane &lane) {
  const bool ftz = lane.ftz(), sat = lane.sat();
  auto lo = [&](int i) {
    float x = asF32(lane.src(i));
    return ftz ? flush(x) : x;
  };
  auto hi = [&](int i) {
    float x = asF32(lane.src(i) >> 32);
    return ftz ? flush(x) : x;
  };
  auto pack = [&](float a, float b) {
    if (sat) {
      a = saturate(a);
      b = saturate(b);
    }
    if (ftz) {
      a = flush(a);
      b = flush(b);
    }
    lane.out(fromF32(a) | (fromF32(b) << 32));
  };
  switch (lane.in.op) {
  case Op::Mov: lane.out(lane.src(1)); return;
  case Op::Add: pack(lane.add(lo(1), lo(2)), lane.add(hi(1), hi(2))); return;
  case Op::Sub: pack(lane.add(lo(1), -lo(2)), lane.add(hi(1), -hi(2))); return;
  case Op::Mul: pack(lane.mul(lo(1), lo(2)), lane.mul(hi(1), hi(2))); return;
  case Op::Fma: case Op::Mad:
    pack(lane.fma(lo(1), lo(2), lo(3)), lane.fma(hi(1), hi(2), hi(3)));
    return;
  default: lane.unsupported(); return;
  }
}

void CtaMachine::execF64(const AluLane &lane) {
  auto d = [&](int i) { return asF64(lane.src(i)); };
  auto out = [&](double x) { lane.out(fromF64(x)); };
  switch (lane.in.op) {
  case Op::Mov: lane.out(lane.src(1)); return;
  case Op::Add: out(d(1) + d(2)); return;
  case Op::Sub: out(d(1) - d(2)); return;
  case Op::Mul: out(d(1) * d(2)); return;
  case Op::Fma: case Op::Mad: out(std::fma(d(1), d(2), d(3))); return;
  case Op::Div: out(d(1) / d(2)); return;
  case Op::Neg: out(-d(1)); return;
  case Op::Abs: out(std::fabs(d(1))); return;
  case Op::CopySign: out(std::copysign(d(2), d(1))); return;
  case Op::Selp: lane.out(lane.predicate() ? lane.src(1) : lane.src(2)); return;
  default: lane.unsupported(); return;
  }
}

/// `x` rounded to nearest even with `mantissa` explicit bits and the
/// smallest exponent `minExponent` (subnormals below it), as f16 (10,
/// -14) and bf16 (7, -126) round; exact in double, so each result is
/// rounded once (an fma whose exact result needs more than 53 bits, its
/// addends 40 binades apart, is rounded twice). Overflow is left to the
/// bit conversion (to infinity).
static double roundToHalfPrecision(double x, int mantissa, int minExponent) {
  if (x == 0.0 || !std::isfinite(x))
    return x;
  int exponent = std::max(std::ilogb(x), minExponent);
  double quantum = std::ldexp(1.0, exponent - mantissa);
  return std::nearbyint(x / quantum) * quantum;
}

void CtaMachine::execHalf(const AluLane &lane) {
  const Inst &in = lane.in;
  const bool bf16 = in.type == Ty::BF16;
  // (.rn is the only rounding PTX gives these; .ftz flushes f16
  // subnormals, .sat clamps to [0, 1].)
  if (in.round == Round::Rz || in.round == Round::Rm || in.round == Round::Rp)
    return lane.unsupported();
  auto value = [&](int i) -> double {
    uint16_t bits = static_cast<uint16_t>(lane.src(i));
    double x = bf16 ? bfloat16BitsToFloat(bits) : halfBitsToFloat(bits);
    if (lane.ftz() && !bf16 && std::fabs(x) < std::ldexp(1.0, -14))
      x = std::copysign(0.0, x);
    return x;
  };
  auto out = [&](double x) {
    x = roundToHalfPrecision(x, bf16 ? 7 : 10, bf16 ? -126 : -14);
    if (lane.ftz() && !bf16 && std::fabs(x) < std::ldexp(1.0, -14))
      x = std::copysign(0.0, x);
    if (lane.sat())
      x = std::isnan(x) ? 0.0 : std::clamp(x, 0.0, 1.0);
    float f = static_cast<float>(x); // exact: x has at most 11 bits
    lane.out(bf16 ? floatToBFloat16Bits(f) : floatToHalfBits(f));
  };
  switch (in.op) {
  case Op::Mov: lane.out(lane.src(1)); return;
  case Op::Add: out(value(1) + value(2)); return;
  case Op::Sub: out(value(1) - value(2)); return;
  case Op::Mul: out(value(1) * value(2)); return;
  case Op::Fma: case Op::Mad: out(std::fma(value(1), value(2), value(3))); return;
  case Op::Neg: lane.out(lane.src(1) ^ 0x8000); return;
  case Op::Abs: lane.out(lane.src(1) & 0x7fff); return;
  case Op::Selp: lane.out(lane.predicate() ? lane.src(1) : lane.src(2)); return;
  default: lane.unsupported(); return;
  }
}

/// A float comparison of setp; unordered when either side is NaN.
static bool compareFloats(Cmp cmp, double a, double b, bool &known) {
  bool unordered = std::isnan(a) || std::isnan(b);
  switch (cmp) {
  case Cmp::Eq: return !unordered && a == b;
  case Cmp::Ne: return !unordered && a != b;
  case Cmp::Lt: return !unordered && a < b;
  case Cmp::Le: return !unordered && a <= b;
  case Cmp::Gt: return !unordered && a > b;
  case Cmp::Ge: return !unordered && a >= b;
  case Cmp::Equ: return unordered || a == b;
  case Cmp::Neu: return unordered || a != b;
  case Cmp::Ltu: return unordered || a < b;
  case Cmp::Leu: return unordered || a <= b;
  case Cmp::Gtu: return unordered || a > b;
  case Cmp::Geu: return unordered || a >= b;
  case Cmp::Num: return !unordered;
  case Cmp::Nan: return unordered;
  default: known = false; return false;
  }
}

/// An integer comparison of setp on `bits`-bit values, signed or not.
static bool compareIntegers(Cmp cmp, uint64_t a, uint64_t b, unsigned bits,
                            bool isSignedType, bool &known) {
  uint64_t ua = maskTo(a, bits), ub = maskTo(b, bits);
  int64_t sa = signExtend(ua, bits), sb = signExtend(ub, bits);
  bool s = isSignedType;
  switch (cmp) {
  case Cmp::Eq: return ua == ub;
  case Cmp::Ne: return ua != ub;
  case Cmp::Lt: return s ? sa < sb : ua < ub;
  case Cmp::Le: return s ? sa <= sb : ua <= ub;
  case Cmp::Gt: return s ? sa > sb : ua > ub;
  case Cmp::Ge: return s ? sa >= sb : ua >= ub;
  case Cmp::Lo: return ua < ub;
  case Cmp::Ls: return ua <= ub;
  case Cmp::Hi: return ua > ub;
  case Cmp::Hs: return ua >= ub;
  default: known = false; return false;
  }
}

void CtaMachine::execSetp(const AluLane &lane) {
  Thread &th = lane.th;
  const Inst &in = lane.in;
  const Ty ty = in.type;
  const Operand *o = in.operands;
  bool known = true;
  bool r;
  if (isFloat(ty)) {
    double a = ty == Ty::F64 ? asF64(lane.src(1)) : double(lane.f(1));
    double b = ty == Ty::F64 ? asF64(lane.src(2)) : double(lane.f(2));
    r = compareFloats(in.cmp, a, b, known);
  } else {
    uint64_t a = lane.src(1);
    r = compareIntegers(in.cmp, a, lane.src(2), bitsOf(ty), isSigned(ty), known);
  }
  if (!known)
    return lane.unsupported();
  bool q = !r;
  if (in.boolOp != BoolOp::None) {
    bool c = read(th, o[3], Ty::Pred) & 1;
    auto combine = [&](bool x) {
      return in.boolOp == BoolOp::And ? (x && c)
             : in.boolOp == BoolOp::Or ? (x || c)
                                       : (x != c);
    };
    r = combine(r);
    q = combine(q);
  }
  write(th, o[0], r, Ty::Pred);
  if (o[0].reg2 != kNoReg)
    th.regs[o[0].reg2] = q;
}

/// Integers, bit strings and predicates.
void CtaMachine::execInteger(const AluLane &lane) {
  const Inst &in = lane.in;
  const Ty ty = in.type;
  const unsigned bits = bitsOf(ty);
  uint64_t a = in.numOperands > 1 ? maskTo(lane.src(1), bits) : 0;
  const bool s = isSigned(ty);
  auto out = [&](uint64_t v) { lane.out(v); };
  auto src = [&](int i) { return lane.src(i); };
  switch (in.op) {
  case Op::Mov: out(a); return;
  case Op::Add: out(a + src(2)); return;
  case Op::Sub: out(a - src(2)); return;
  case Op::Mul: case Op::Mad: return execIntegerMultiply(lane, a);
  case Op::Div: case Op::Rem: return execIntegerDivide(lane, a);
  case Op::Min: case Op::Max: {
    uint64_t r = a;
    for (int i = 2; i < in.numOperands; ++i) {
      uint64_t b = maskTo(src(i), bits);
      bool less = s ? signExtend(b, bits) < signExtend(r, bits) : b < r;
      if ((in.op == Op::Min) == less)
        r = b;
    }
    if ((in.flags & kRelu) && signExtend(r, bits) < 0)
      r = 0;
    out(r);
    return;
  }
  case Op::Neg: out(static_cast<uint64_t>(-signExtend(a, bits))); return;
  case Op::Abs: {
    int64_t x = signExtend(a, bits);
    out(static_cast<uint64_t>(x < 0 ? -x : x));
    return;
  }
  case Op::And: out(a & src(2)); return;
  case Op::Or: out(a | src(2)); return;
  case Op::Xor: out(a ^ src(2)); return;
  case Op::Not: out(ty == Ty::Pred ? !(a & 1) : ~a); return;
  case Op::Shl: case Op::Shr: return execShift(lane, a);
  case Op::Selp: out(lane.predicate() ? a : src(2)); return;
  case Op::Bfe: return execBitFieldExtract(lane, a);
  case Op::Bfi: return execBitFieldInsert(lane, a);
  case Op::Prmt: return execPermute(lane, a);
  case Op::Popc: write(lane.th, in.operands[0], __builtin_popcountll(a), Ty::U32); return;
  case Op::Clz:
    write(lane.th, in.operands[0], a == 0 ? bits : __builtin_clzll(a) - (64 - bits),
          Ty::U32);
    return;
  case Op::Cvta: {
    uint64_t x = src(1);
    uint64_t window = in.space == Space::Param    ? kGenericParam
                      : in.space == Space::Shared ? kGenericShared
                                                  : 0;
    out((in.flags & kToSpace) ? x - window : x + window);
    return;
  }
  default:
    lane.unsupported();
    return;
  }
}

/// mul and mad: .lo, .hi or .wide (twice the width), then mad's addend.
void CtaMachine::execIntegerMultiply(const AluLane &lane, uint64_t a) {
  const Inst &in = lane.in;
  const Ty ty = in.type;
  const unsigned bits = bitsOf(ty);
  const bool s = isSigned(ty);
  uint64_t b = maskTo(lane.src(2), bits);
  uint64_t product;
  Ty outType = ty;
  if (in.flags & (kHi | kWide)) {
    __int128 p = s ? static_cast<__int128>(signExtend(a, bits)) * signExtend(b, bits)
                   : static_cast<__int128>(static_cast<unsigned __int128>(a) * b);
    if (in.flags & kHi) {
      product = static_cast<uint64_t>(p >> bits);
    } else {
      product = static_cast<uint64_t>(p);
      outType = bits == 32 ? (s ? Ty::S64 : Ty::U64) : bits == 16 ? Ty::B32 : ty;
    }
  } else {
    product = a * b;
  }
  if (in.op == Op::Mad)
    product += read(lane.th, in.operands[3], outType);
  write(lane.th, in.operands[0], product, outType);
}

/// div and rem; a zero divisor gives all ones (div) or the dividend (rem),
/// as the hardware does.
void CtaMachine::execIntegerDivide(const AluLane &lane, uint64_t a) {
  const Inst &in = lane.in;
  const unsigned bits = bitsOf(in.type);
  uint64_t b = maskTo(lane.src(2), bits);
  if (b == 0) {
    lane.out(in.op == Op::Div ? ~uint64_t(0) : a);
    return;
  }
  if (isSigned(in.type)) {
    int64_t x = signExtend(a, bits), y = signExtend(b, bits);
    if (y == -1) {
      lane.out(in.op == Op::Div ? static_cast<uint64_t>(-x) : 0);
      return;
    }
    lane.out(static_cast<uint64_t>(in.op == Op::Div ? x / y : x % y));
  } else {
    lane.out(in.op == Op::Div ? a / b : a % b);
  }
}

/// shl and shr: shifts of the width or more give 0 (or the sign, shr of a
/// signed type).
void CtaMachine::execShift(const AluLane &lane, uint64_t a) {
  const Inst &in = lane.in;
  const unsigned bits = bitsOf(in.type);
  uint64_t n = read(lane.th, in.operands[2], Ty::U32) & 0xffffffff;
  if (in.op == Op::Shl) {
    lane.out(n >= bits ? 0 : a << n);
  } else if (isSigned(in.type)) {
    int64_t x = signExtend(a, bits);
    lane.out(static_cast<uint64_t>(n >= bits ? (x < 0 ? -1 : 0) : x >> n));
  } else {
    lane.out(n >= bits ? 0 : a >> n);
  }
}

/// bfe: `len` bits from `pos`, sign-extended from the field's top bit for a
/// signed type.
void CtaMachine::execBitFieldExtract(const AluLane &lane, uint64_t a) {
  const Inst &in = lane.in;
  const unsigned bits = bitsOf(in.type);
  uint32_t pos = read(lane.th, in.operands[2], Ty::U32) & 0xff;
  uint32_t len = read(lane.th, in.operands[3], Ty::U32) & 0xff;
  uint64_t field = pos >= bits ? 0 : a >> pos;
  uint64_t r = len >= 64 ? field : field & ((uint64_t(1) << len) - 1);
  if (isSigned(in.type) && len > 0) {
    uint32_t msb = std::min<uint32_t>(pos + len - 1, bits - 1);
    bool sign = (a >> msb) & 1;
    if (len < bits && sign)
      r |= ~uint64_t(0) << len;
    if (pos >= bits)
      r = sign ? ~uint64_t(0) : 0;
  }
  lane.out(len == 0 ? 0 : r);
}

/// bfi: b with `len` bits from `pos` replaced by a's lowest bits; a field
/// reaching past the top is cut there, and pos or len of 0 past the width
/// (or len 0) leaves b as it is (PTX ISA, bfi).
void CtaMachine::execBitFieldInsert(const AluLane &lane, uint64_t a) {
  const Inst &in = lane.in;
  const unsigned bits = bitsOf(in.type);
  uint64_t b = maskTo(lane.src(2), bits);
  uint32_t pos = read(lane.th, in.operands[3], Ty::U32) & 0xff;
  uint32_t len = read(lane.th, in.operands[4], Ty::U32) & 0xff;
  if (len == 0 || pos >= bits) {
    lane.out(b);
    return;
  }
  len = std::min(len, bits - pos);
  uint64_t field = (len >= 64 ? ~uint64_t(0) : (uint64_t(1) << len) - 1) << pos;
  lane.out((b & ~field) | ((a << pos) & field));
}

/// prmt.b32 d, a, b, c (the default mode): byte i of d is byte c[4i+2:4i]
/// of the eight-byte value {b, a} (a's bytes 0-3, b's 4-7), or, when
/// c[4i+3] is set, that byte's sign bit repeated eight times.
void CtaMachine::execPermute(const AluLane &lane, uint64_t a) {
  uint64_t bytes = (maskTo(lane.src(2), 32) << 32) | maskTo(a, 32);
  uint32_t selector = static_cast<uint32_t>(lane.src(3));
  uint32_t result = 0;
  for (uint32_t i = 0; i < 4; ++i) {
    uint32_t nibble = (selector >> (4 * i)) & 0xf;
    uint32_t byte = (bytes >> (8 * (nibble & 7))) & 0xff;
    if (nibble & 8)
      byte = (byte & 0x80) ? 0xff : 0;
    result |= byte << (8 * i);
  }
  lane.out(result);
}

/// The 8-bit float conversions (fa4/Support/Float8.h; their byte order and
/// special values as an H200 converts them):
///   cvt.rn.satfinite[.relu].{e4m3x2,e5m2x2}.f32   d, a, b: a to d[15:8],
///     b to d[7:0];
///   cvt.rn.satfinite[.relu].{e4m3x2,e5m2x2}.f16x2 d, a: a[31:16] to
///     d[15:8], a[15:0] to d[7:0];
///   cvt.rn[.relu].f16x2.{e4m3x2,e5m2x2} d, a: a[15:8] to d[31:16], a[7:0]
///     to d[15:0], exactly; a NaN becomes 0x7fff, .relu makes a negative
///     value (-0 too) +0.
void CtaMachine::execCvtFloat8(Thread &th, const Inst &in) {
  const Operand *o = in.operands;
  const bool relu = in.flags & kRelu;
  if (in.type == Ty::F16x2) {
    Float8 format = in.type2 == Ty::E4M3x2 ? Float8::E4M3 : Float8::E5M2;
    uint32_t pair = static_cast<uint32_t>(read(th, o[1], Ty::B16));
    auto half = [&](uint8_t bits) -> uint32_t {
      float value = float8ToFloat(format, bits);
      if (std::isnan(value))
        return 0x7fff;
      if (relu && std::signbit(value))
        value = 0;
      return floatToHalfBits(value); // exact: e4m3 and e5m2 fit f16
    };
    write(th, o[0], (half(pair >> 8) << 16) | half(pair & 0xff), Ty::B32);
    return;
  }
  Float8 format = in.type == Ty::E4M3x2 ? Float8::E4M3 : Float8::E5M2;
  double hi, lo;
  if (in.type2 == Ty::F32) {
    hi = asF32(read(th, o[1], Ty::F32));
    lo = asF32(read(th, o[2], Ty::F32));
  } else {
    uint32_t halves = static_cast<uint32_t>(read(th, o[1], Ty::B32));
    hi = halfBitsToFloat(static_cast<uint16_t>(halves >> 16));
    lo = halfBitsToFloat(static_cast<uint16_t>(halves));
  }
  uint32_t pair = (uint32_t(float8FromDouble(format, hi, relu)) << 8) |
                  float8FromDouble(format, lo, relu);
  write(th, o[0], pair, Ty::B16);
}

void CtaMachine::execCvt(Thread &th, const Inst &in) {
  const Operand *o = in.operands;
  Ty to = in.type, from = in.type2;
  if (to == Ty::E4M3x2 || to == Ty::E5M2x2 || from == Ty::E4M3x2 ||
      from == Ty::E5M2x2)
    return execCvtFloat8(th, in);
  auto round = [&](double x) {
    switch (in.round) {
    case Round::Rzi: case Round::Rz: return std::trunc(x);
    case Round::Rmi: case Round::Rm: return std::floor(x);
    case Round::Rpi: case Round::Rp: return std::ceil(x);
    default: return std::nearbyint(x);
    }
  };
  auto toHalfBits = [&](float x, bool bf16) -> uint64_t {
    if (in.flags & kRelu)
      x = std::isnan(x) ? x : std::max(x, 0.0f);
    return bf16 ? floatToBFloat16Bits(x) : floatToHalfBits(x);
  };
  if (to == Ty::F16x2 || to == Ty::BF16x2) {
    if (from != Ty::F32 || in.round != Round::Rn) {
      error(th, "packed cvt other than .rn from f32 is not modelled");
      return;
    }
    bool bf16 = to == Ty::BF16x2;
    // The first source goes to the upper half (PTX ISA, cvt).
    uint64_t hi = toHalfBits(asF32(read(th, o[1], Ty::F32)), bf16);
    uint64_t lo = toHalfBits(asF32(read(th, o[2], Ty::F32)), bf16);
    write(th, o[0], (hi << 16) | lo, Ty::B32);
    return;
  }
  uint64_t x = read(th, o[1], from);
  unsigned fromBits = bitsOf(from), toBits = bitsOf(to);
  double value;
  bool fromFloat = isFloat(from);
  if (from == Ty::F32)
    value = (in.flags & kFtz) ? flush(asF32(x)) : asF32(x);
  else if (from == Ty::F64)
    value = asF64(x);
  else if (from == Ty::F16)
    value = halfBitsToFloat(static_cast<uint16_t>(x));
  else if (from == Ty::BF16)
    value = bfloat16BitsToFloat(static_cast<uint16_t>(x));
  else
    value = isSigned(from) ? double(signExtend(x, fromBits)) : double(maskTo(x, fromBits));

  if (!isFloat(to)) {
    if (!fromFloat) {
      uint64_t r = isSigned(from) ? static_cast<uint64_t>(signExtend(x, fromBits))
                                  : maskTo(x, fromBits);
      if (in.flags & kSat) {
        double lo = isSigned(to) ? -std::ldexp(1.0, toBits - 1) : 0;
        double hi = isSigned(to) ? std::ldexp(1.0, toBits - 1) - 1 : std::ldexp(1.0, toBits) - 1;
        double v = isSigned(from) ? double(signExtend(x, fromBits)) : double(maskTo(x, fromBits));
        if (v < lo || v > hi)
          r = static_cast<uint64_t>(static_cast<int64_t>(v < lo ? lo : hi));
      }
      write(th, o[0], r, to);
      return;
    }
    // Float to integer saturates; NaN becomes 0.
    if (std::isnan(value)) {
      write(th, o[0], 0, to);
      return;
    }
    double r = round(value);
    double lo = isSigned(to) ? -std::ldexp(1.0, toBits - 1) : 0;
    double hi = isSigned(to) ? std::ldexp(1.0, toBits - 1) - 1 : std::ldexp(1.0, toBits) - 1;
    r = std::min(std::max(r, lo), hi);
    write(th, o[0],
          isSigned(to) ? static_cast<uint64_t>(static_cast<int64_t>(r))
                       : static_cast<uint64_t>(r),
          to);
    return;
  }
  // To a float type.
  if (fromFloat && (in.round == Round::Rni || in.round == Round::Rzi ||
                    in.round == Round::Rmi || in.round == Round::Rpi))
    value = round(value);
  switch (to) {
  case Ty::F32: {
    float r = static_cast<float>(value);
    if (in.flags & kFtz)
      r = flush(r);
    if (in.flags & kSat)
      r = std::isnan(r) ? 0.0f : std::min(std::max(r, 0.0f), 1.0f);
    write(th, o[0], fromF32(r), to);
    return;
  }
  case Ty::F64: write(th, o[0], fromF64(value), to); return;
  case Ty::F16: write(th, o[0], toHalfBits(static_cast<float>(value), false), to); return;
  case Ty::BF16: write(th, o[0], toHalfBits(static_cast<float>(value), true), to); return;
  default: error(th, "this cvt is not modelled by fa4-emu"); return;
  }
}

//===----------------------------------------------------------------------===//
// Loads and stores
//===----------------------------------------------------------------------===//

void CtaMachine::execMemory(Thread &th, const Inst &in) {
  bool store = in.op == Op::St;
  const Operand &addrOp = in.operands[store ? 0 : 1];
  const Operand &value = in.operands[store ? 1 : 0];
  unsigned bytes = std::max(1u, bitsOf(in.type) / 8);
  unsigned total = bytes * in.vec;
  uint32_t smemAddr;
  uint8_t *p = memory(th, in.space, address(th, addrOp), total, store, smemAddr,
                      in.flags & kClusterSpace);
  if (!p)
    return;
  if (smemAddr)
    onSharedAccess(th, {smemAddr, smemAddr + total}, store);
  auto element = [&](uint32_t i) -> const Operand & {
    return value.kind == Operand::Kind::Vec ? program.vectors[value.vecBegin + i] : value;
  };
  if (in.vec > 1 && (value.kind != Operand::Kind::Vec || value.vecCount != in.vec)) {
    error(th, "vector access needs " + std::to_string(in.vec) + " registers");
    return;
  }
  for (uint32_t i = 0; i < in.vec; ++i) {
    if (store) {
      uint64_t v = read(th, element(i), in.type);
      std::memcpy(p + i * bytes, &v, bytes);
    } else {
      uint64_t v = 0;
      std::memcpy(&v, p + i * bytes, bytes);
      if (isSigned(in.type))
        v = static_cast<uint64_t>(signExtend(v, bytes * 8));
      write(th, element(i), v, bitsOf(in.type) < 32 && element(i).kind == Operand::Kind::Reg
                                   ? (isSigned(in.type) ? Ty::S64 : Ty::U64)
                                   : in.type);
    }
  }
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

template <typename Body>
void CtaMachine::forEachMember(uint32_t w, uint32_t members, Body &&body) {
  for (uint32_t l = 0; l < 32 && !stopped; ++l)
    if (members & (1u << l))
      body(threads[w * 32 + l]);
}

void CtaMachine::execCollective(uint32_t w, uint32_t members, const Inst &in,
                                bool &waitForRegisters) {
  Thread &first = threads[w * 32 + __builtin_ctz(members)];
  switch (in.op) {
  case Op::BarWarpSync:
    // Every lane of the member mask is here: the rendezvous is complete
    // (and the memory ordering it also gives is the emulator's sequential
    // consistency).
    return;
  case Op::Elect:
    return execElect(w, members, in);
  case Op::Vote:
    return execVote(w, members, in);
  case Op::Shfl:
    return execShfl(w, members, in);
  case Op::StMatrix:
    return execStMatrix(w, members, in);
  case Op::SetMaxNReg:
    return execSetMaxNReg(w, first, in, waitForRegisters);
  // tcgen05 collectives: one lane acts for the warp (alloc, dealloc,
  // relinquish) or every lane acts on its own TMEM lane (ld, st, waits).
  case Op::TcAlloc: case Op::TcDealloc: case Op::TcRelinquish:
    if (in.flags & kCtaGroup2)
      return execPairCollective(w, first, in);
    if (in.op == Op::TcAlloc)
      return execTmemAlloc(first, in);
    if (in.op == Op::TcDealloc)
      return execTmemDealloc(w, first, in);
    tmemRelinquished[first.cta] = true;
    return;
  case Op::TcWaitLd:
    forEachMember(w, members, [&](Thread &th) { th.pendingLd.clear(); });
    return;
  case Op::TcWaitSt:
    forEachMember(w, members, [&](Thread &th) {
      releaseTmemStores(w, th.pendingSt);
      th.pendingSt.clear();
    });
    return;
  case Op::TcLd: case Op::TcSt:
    return execTmemCopy(w, members, in);
  default:
    error(first, "unexpected collective");
    return;
  }
}

void CtaMachine::execElect(uint32_t w, uint32_t members, const Inst &in) {
  uint32_t leader = __builtin_ctz(members);
  forEachMember(w, members, [&](Thread &th) {
    write(th, in.operands[0], leader, Ty::B32);
    if (in.operands[0].reg2 != kNoReg)
      th.regs[in.operands[0].reg2] = th.lane == leader;
  });
}

void CtaMachine::execVote(uint32_t w, uint32_t members, const Inst &in) {
  uint32_t ballot = 0;
  forEachMember(w, members, [&](Thread &th) {
    if (read(th, in.operands[1], Ty::Pred) & 1)
      ballot |= 1u << th.lane;
  });
  uint64_t result;
  if (in.flags & kVoteBallot)
    result = ballot;
  else if (in.flags & kVoteAny)
    result = ballot != 0;
  else if (in.flags & kVoteAll)
    result = ballot == members;
  else
    result = ballot == 0 || ballot == members;
  forEachMember(w, members, [&](Thread &th) {
    write(th, in.operands[0], result, (in.flags & kVoteBallot) ? Ty::B32 : Ty::Pred);
  });
}

/// stmatrix (PTX ISA, "Warp-level matrix store"): matrix i's rows at the
/// addresses lanes 8i to 8i + 7 give; lane l's register i holds its
/// elements (l / 4, 2·(l mod 4)) and (l / 4, 2·(l mod 4) + 1), which .trans
/// writes to rows 2·(l mod 4) and 2·(l mod 4) + 1, column l / 4.
void CtaMachine::execStMatrix(uint32_t w, uint32_t members, const Inst &in) {
  if (members != 0xffffffffu) {
    error(threads[w * 32 + __builtin_ctz(members)],
          "stmatrix needs every lane of the warp (.aligned)");
    return;
  }
  uint32_t rows[32];
  forEachMember(w, members, [&](Thread &th) {
    rows[th.lane] = static_cast<uint32_t>(address(th, in.operands[0]));
  });
  const Operand &data = in.operands[1];
  bool transpose = in.flags & kTransA;
  forEachMember(w, members, [&](Thread &th) {
    for (uint32_t i = 0; i < in.vec; ++i) {
      const Operand &reg =
          data.kind == Operand::Kind::Vec ? program.vectors[data.vecBegin + i]
                                          : data;
      uint32_t value = static_cast<uint32_t>(read(th, reg, Ty::B32));
      uint32_t row = th.lane / 4, column = 2 * (th.lane % 4);
      for (uint32_t e = 0; e < 2; ++e) {
        uint64_t target =
            transpose ? uint64_t(rows[8 * i + column + e]) + 2 * row
                      : uint64_t(rows[8 * i + row]) + 2 * (column + e);
        uint32_t smemAddr;
        uint8_t *p = memory(th, Space::Shared, target, 2, true, smemAddr);
        if (!p)
          return;
        if (smemAddr)
          onSharedAccess(th, {smemAddr, smemAddr + 2}, true);
        uint16_t half = static_cast<uint16_t>(value >> (16 * e));
        std::memcpy(p, &half, 2);
      }
    }
  });
}

void CtaMachine::execShfl(uint32_t w, uint32_t members, const Inst &in) {
  uint32_t values[32] = {};
  forEachMember(w, members,
                [&](Thread &th) { values[th.lane] = read(th, in.operands[1], Ty::B32); });
  forEachMember(w, members, [&](Thread &th) {
    uint32_t b = read(th, in.operands[2], Ty::B32);
    uint32_t c = read(th, in.operands[3], Ty::B32);
    uint32_t clamp = c & 0x1f, segMask = (c >> 8) & 0x1f;
    uint32_t maxLane = (th.lane & segMask) | (clamp & ~segMask);
    uint32_t minLane = th.lane & segMask;
    uint32_t j;
    bool valid;
    if (in.flags & kShflUp) {
      j = th.lane - b;
      valid = int32_t(j) >= int32_t(maxLane);
    } else if (in.flags & kShflDown) {
      j = th.lane + b;
      valid = j <= maxLane;
    } else if (in.flags & kShflBfly) {
      j = th.lane ^ b;
      valid = j <= maxLane;
    } else {
      j = minLane | (b & ~segMask);
      valid = j <= maxLane;
    }
    if (!valid)
      j = th.lane;
    if (!(members & (1u << j))) {
      error(th, "shfl.sync reads lane " + std::to_string(j) +
                    ", which is not in the member mask");
      return;
    }
    write(th, in.operands[0], values[j], Ty::B32);
    if (in.operands[0].reg2 != kNoReg)
      th.regs[in.operands[0].reg2] = valid;
  });
}

void CtaMachine::execSetMaxNReg(uint32_t w, Thread &first, const Inst &in,
                                bool &waitForRegisters) {
  Warp &warp = warps[w];
  uint32_t value = read(first, in.operands[0], Ty::U32);
  bool inc = in.flags & kInc;
  if (value < 24 || value > 256 || value % 8) {
    error(first, "setmaxnreg " + std::to_string(value) +
                     " (the count must be a multiple of 8 in 24..256)");
    return;
  }
  if (inc ? value < warp.registers : value > warp.registers) {
    error(first, std::string("setmaxnreg.") + (inc ? "inc" : "dec") + " to " +
                     std::to_string(value) + " from " +
                     std::to_string(warp.registers) + " registers");
    return;
  }
  // Warpgroup agreement: the k-th request of every warp of a warpgroup is
  // the same.
  size_t k = warp.setmaxnregValues.size();
  for (uint32_t o = w / 4 * 4; o < std::min<size_t>(w / 4 * 4 + 4, warps.size()); ++o)
    if (o != w && warps[o].setmaxnregValues.size() > k &&
        warps[o].setmaxnregValues[k] != value) {
      error(first, "warp " + std::to_string(w) + " sets " + std::to_string(value) +
                       " registers but warp " + std::to_string(o) +
                       " of its warpgroup set " +
                       std::to_string(warps[o].setmaxnregValues[k]) +
                       " (setmaxnreg is warpgroup-collective)");
      return;
    }
  int64_t delta = (int64_t(value) - warp.registers) * 32;
  // An increase waits until other warps have given back enough of the CTA's
  // 64K registers.
  int64_t &pool = registerPool[w / warpsPerCta];
  if (delta > pool) {
    waitForRegisters = true;
    return;
  }
  pool -= delta;
  warp.registers = value;
  warp.setmaxnregValues.push_back(value);
}

void CtaMachine::execTmemAlloc(Thread &first, const Inst &in) {
  uint32_t smemAddr;
  uint32_t columns = read(first, in.operands[1], Ty::U32);
  if (columns < 32 || columns > kTmemColumns || (columns & (columns - 1))) {
    error(first, "tcgen05.alloc of " + std::to_string(columns) +
                     " columns (a power of 2 from 32 to 512)");
    return;
  }
  if (tmemRelinquished[first.cta]) {
    error(first, "tcgen05.alloc after tcgen05.relinquish_alloc_permit");
    return;
  }
  std::vector<std::pair<uint32_t, uint32_t>> &allocations = tmemAllocations[first.cta];
  uint32_t column = 0;
  for (; column < kTmemColumns; column += columns) {
    bool free = true;
    for (auto [c, n] : allocations)
      if (c < column + columns && column < c + n)
        free = false;
    if (free)
      break;
  }
  if (column >= kTmemColumns) {
    error(first, "tcgen05.alloc of " + std::to_string(columns) +
                     " columns does not fit beside the columns already "
                     "allocated: it would wait forever");
    return;
  }
  allocations.push_back({column, columns});
  uint8_t *p = memory(first, Space::Shared, address(first, in.operands[0]), 4, true, smemAddr);
  if (!p)
    return;
  // The address it writes is shared memory another warp reads after a
  // synchronization (a missing one is a race).
  orderShared(first, {smemAddr, smemAddr + 4}, true);
  std::memcpy(p, &column, 4);
}

void CtaMachine::execTmemDealloc(uint32_t w, Thread &first, const Inst &in) {
  uint32_t taddr = read(first, in.operands[0], Ty::U32);
  uint32_t columns = read(first, in.operands[1], Ty::U32);
  std::vector<std::pair<uint32_t, uint32_t>> &allocations = tmemAllocations[first.cta];
  const uint32_t lane0 = first.cta * kTmemLanes;
  for (auto it = allocations.begin(); it != allocations.end(); ++it)
    if (it->first == (taddr & 0xffff) && it->second == columns && (taddr >> 16) == 0) {
      TmemRect freed{lane0, lane0 + kTmemLanes, it->first, it->first + columns};
      for (const TensorOp &op : tensorPipe)
        if (!op.commit && op.dRect.overlaps(freed))
          hazard(at(first) + ": frees TMEM that an in-flight MMA is writing");
      orderTmem(w, first.pc, freed, true);
      allocations.erase(it);
      return;
    }
  error(first, "tcgen05.dealloc of " + std::to_string(columns) + " columns at " +
                   hex(taddr) + " matches no allocation");
}

void CtaMachine::execPairCollective(uint32_t w, Thread &first, const Inst &in) {
  const char *name = in.op == Op::TcAlloc     ? "tcgen05.alloc.cta_group::2"
                     : in.op == Op::TcDealloc ? "tcgen05.dealloc.cta_group::2"
                                              : "tcgen05.relinquish_alloc_permit.cta_group::2";
  const uint32_t cta = first.cta, peer = cta ^ 1;
  if (peer >= clusterSize) {
    error(first, std::string(name) + " needs the peer CTA of rank " +
                     std::to_string(peer) + ", which a " +
                     std::to_string(clusterSize) + "-CTA cluster does not have");
    return;
  }
  PairRendezvous mine;
  mine.waiting = true;
  mine.op = in.op;
  mine.strand = collectiveStrand;
  mine.warp = w;
  mine.thread = first.tid;
  if (in.op == Op::TcAlloc) {
    mine.columns = static_cast<uint32_t>(read(first, in.operands[1], Ty::U32));
    if (mine.columns < 32 || mine.columns > kTmemColumns ||
        (mine.columns & (mine.columns - 1))) {
      error(first, std::string(name) + " of " + std::to_string(mine.columns) +
                       " columns (a power of 2 from 32 to 512)");
      return;
    }
    if (!sharedAddress(first, address(first, in.operands[0]), 4, false,
                       "tcgen05.alloc's destination", mine.dst))
      return;
    if (tmemRelinquished[cta]) {
      error(first, std::string(name) + " after tcgen05.relinquish_alloc_permit");
      return;
    }
  } else if (in.op == Op::TcDealloc) {
    mine.taddr = static_cast<uint32_t>(read(first, in.operands[0], Ty::U32));
    mine.columns = static_cast<uint32_t>(read(first, in.operands[1], Ty::U32));
  }
  PairRendezvous &r = pairRendezvous[cta / 2];
  if (!r.waiting) {
    r = mine;
    waitForPeer = true;
    return;
  }
  const Thread &other = threads[r.thread];
  if (other.cta == cta) {
    error(first, std::string("a second warp of one CTA issues ") + name +
                     " while warp " + std::to_string(r.warp % warpsPerCta) +
                     " waits for the peer CTA's (one warp of each CTA of the "
                     "pair issues it)");
    return;
  }
  if (r.op != in.op || r.columns != mine.columns || r.taddr != mine.taddr) {
    error(first, std::string(name) + " meets the peer CTA's " +
                     program.sources[program.code[other.pc].source] +
                     ": the pair's warps must issue the same instruction with "
                     "the same operands");
    return;
  }
  const uint32_t even = cta & ~1u;
  if (in.op == Op::TcAlloc) {
    // The same columns in both CTAs' TMEM, owned jointly.
    uint32_t column = 0;
    for (; column < kTmemColumns; column += mine.columns) {
      bool free = true;
      for (uint32_t c : {even, even + 1})
        for (auto [at, n] : tmemAllocations[c])
          if (at < column + mine.columns && column < at + n)
            free = false;
      if (free)
        break;
    }
    if (column >= kTmemColumns) {
      error(first, std::string(name) + " of " + std::to_string(mine.columns) +
                       " columns does not fit beside the columns already "
                       "allocated in both CTAs: it would wait forever");
      return;
    }
    for (uint32_t c : {even, even + 1})
      tmemAllocations[c].push_back({column, mine.columns});
    orderShared(other, {r.dst, r.dst + 4}, true);
    orderShared(first, {mine.dst, mine.dst + 4}, true);
    for (uint32_t dst : {r.dst, mine.dst})
      std::memcpy(smem.data() + dst, &column, 4);
  } else if (in.op == Op::TcDealloc) {
    const uint32_t column = mine.taddr & 0xffff;
    auto match = [&](uint32_t c) {
      auto &allocations = tmemAllocations[c];
      return std::find(allocations.begin(), allocations.end(),
                       std::make_pair(column, mine.columns));
    };
    if ((mine.taddr >> 16) != 0 || match(even) == tmemAllocations[even].end() ||
        match(even + 1) == tmemAllocations[even + 1].end()) {
      error(first, std::string(name) + " of " + std::to_string(mine.columns) +
                       " columns at " + hex(mine.taddr) +
                       " matches no allocation of the pair");
      return;
    }
    TmemRect freed{even * kTmemLanes, (even + 2) * kTmemLanes, column,
                   column + mine.columns};
    for (const TensorOp &op : tensorPipe)
      if (!op.commit && op.dRect.overlaps(freed))
        hazard(at(first) + ": frees TMEM that an in-flight MMA is writing");
    // Each warp frees its own CTA's lanes: what other warps did there must
    // be ordered before (PTX ISA: the pair synchronizes its TMEM accesses
    // before the dealloc).
    for (uint32_t c : {even, even + 1}) {
      uint32_t by = threads[r.thread].cta == c ? r.warp : w;
      orderTmem(by, by == w ? first.pc : other.pc,
                {c * kTmemLanes, (c + 1) * kTmemLanes, column, column + mine.columns},
                true);
      tmemAllocations[c].erase(match(c));
    }
  } else {
    tmemRelinquished[even] = tmemRelinquished[even + 1] = true;
  }
  // The waiting warp goes on past its instruction.
  Strand &waiting = strands[r.strand];
  r.waiting = false;
  if (waiting.state == State::PairWait) {
    ++waiting.stack.back().pc;
    makeRunnable(r.strand);
  }
}

void CtaMachine::execTmemCopy(uint32_t w, uint32_t members, const Inst &in) {
  Thread &first = threads[w * 32 + __builtin_ctz(members)];
  bool load = in.op == Op::TcLd;
  const Operand &addrOp = in.operands[load ? 1 : 0];
  const Operand &values = in.operands[load ? 0 : 1];
  bool pack = in.flags & kPack16;
  uint32_t columns = pack ? in.count / 2 * 1 : in.count;
  // 32x32b: lane i of the warp reaches TMEM lane (address lane + i); a warp
  // may touch only its quadrant, lanes 32*(warp%4) .. +31.
  uint32_t taddr = static_cast<uint32_t>(address(first, addrOp));
  uint32_t laneBase = taddr >> 16, column = taddr & 0xffff;
  uint32_t quadrant = (w % 4) * 32;
  if (laneBase != quadrant) {
    error(first, std::string("tcgen05.") + (load ? "ld" : "st") +
                     " of TMEM lanes " + std::to_string(laneBase) + ".." +
                     std::to_string(laneBase + 31) + " by warp " +
                     std::to_string(w) + ", which may access only lanes " +
                     std::to_string(quadrant) + ".." + std::to_string(quadrant + 31));
    return;
  }
  forEachMember(w, members, [&](Thread &th) {
    uint32_t laneAddr = static_cast<uint32_t>(address(th, addrOp));
    if (laneAddr != taddr)
      error(th, "lanes of one tcgen05 access name different TMEM addresses");
  });
  if (stopped)
    return;
  // The CTA's lanes in the cluster's numbering.
  const uint32_t flatBase = first.cta * kTmemLanes + laneBase;
  TmemRect rect{flatBase, flatBase + 32, column, column + (pack ? in.count : columns)};
  if (!tmemCheck(&first, rect, load ? "tcgen05.ld" : "tcgen05.st"))
    return;
  checkTmemCopyAgainstMmas(first, rect, load);
  orderTmem(w, first.pc, rect, !load, /*awaited=*/load);
  uint32_t words = pack ? in.count / 2 : in.count;
  forEachMember(w, members, [&](Thread &th) {
    uint32_t *row = tmem.data() + size_t(flatBase + th.lane) * kTmemColumns + column;
    for (uint32_t j = 0; j < words; ++j) {
      const Operand &v = values.kind == Operand::Kind::Vec
                             ? program.vectors[values.vecBegin + j]
                             : values;
      if (load) {
        uint32_t word = pack ? ((row[2 * j] & 0xffff) | (row[2 * j + 1] << 16)) : row[j];
        write(th, v, word, Ty::B32);
        if (v.kind == Operand::Kind::Reg)
          th.pendingLd.push_back(v.reg);
      } else {
        uint32_t word = static_cast<uint32_t>(read(th, v, Ty::B32));
        if (pack) {
          row[2 * j] = word & 0xffff;
          row[2 * j + 1] = word >> 16;
        } else {
          row[j] = word;
        }
      }
    }
    if (!load)
      th.pendingSt.push_back({flatBase + th.lane, flatBase + th.lane + 1, rect.col0, rect.col1});
  });
}

void CtaMachine::checkTmemCopyAgainstMmas(const Thread &first, const TmemRect &rect,
                                          bool load) {
  for (const TensorOp &op : tensorPipe) {
    if (op.commit)
      continue;
    if (op.dRect.overlaps(rect))
      hazard(at(first) + ": " + (load ? "reads" : "writes") +
             " TMEM columns " + std::to_string(rect.col0) + ".." +
             std::to_string(rect.col1 - 1) + " that an in-flight MMA (" +
             program.sources[op.source] + ") is writing");
    else if (!load && op.aInTmem && op.aRect.overlaps(rect))
      hazard(at(first) + ": writes TMEM columns " + std::to_string(rect.col0) +
             ".." + std::to_string(rect.col1 - 1) + " that an in-flight MMA (" +
             program.sources[op.source] + ") is still reading");
  }
}

} // namespace mlir::fa4::emu
