//===- Machine.h - one CTA of a launch --------------------------*- C++ -*-===//
//
// A CTA is a set of warps of threads, each thread with its own registers,
// plus the units that work beside them: shared memory with its mbarriers,
// the tensor memory, and the asynchronous engines (TMA, the tensor core
// pipe, bulk stores). A warp executes its lanes in lockstep under a SIMT
// stack whose reconvergence points are the branches' immediate
// post-dominators; the scheduler runs one runnable warp at a time for a
// seeded random number of instructions, and a warp stops early when it
// blocks (an mbarrier phase that has not completed, the CTA barrier, a bulk
// group still in flight, registers setmaxnreg must wait for). Asynchronous
// operations complete at seeded random later points, or at once when every
// warp waits, so that a missing wait is seen as a hazard or a wrong result.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_LIB_EMU_MACHINE_H
#define FA4_LIB_EMU_MACHINE_H

#include "Program.h"

#include "fa4/Emu/Layouts.h"
#include "llvm/ADT/STLFunctionalExtras.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <random>
#include <unordered_map>

namespace mlir::fa4::emu {

/// Adds `addend` to the f32 at `word` as one host atomic (compare and
/// swap): the launch's CTAs share global memory from host threads, and a
/// GPU's reductions add each element atomically.
inline void atomicAddF32(uint32_t *word, float addend) {
  uint32_t old = __atomic_load_n(word, __ATOMIC_SEQ_CST), sum;
  do {
    float current;
    std::memcpy(&current, &old, 4);
    float total = current + addend;
    std::memcpy(&sum, &total, 4);
  } while (!__atomic_compare_exchange_n(word, &old, sum, false,
                                        __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
}

/// A byte range [begin, end) of shared memory.
struct Interval {
  uint32_t begin = 0, end = 0;
  bool overlaps(const Interval &o) const { return begin < o.end && o.begin < end; }
};
/// A rectangle of tensor memory: lanes [lane0, lane1) x columns [col0, col1).
struct TmemRect {
  uint32_t lane0 = 0, lane1 = 0, col0 = 0, col1 = 0;
  bool overlaps(const TmemRect &o) const {
    return lane0 < o.lane1 && o.lane0 < lane1 && col0 < o.col1 && o.col0 < col1;
  }
};

/// What one CTA reports, merged into the launch's report.
struct CtaReport {
  std::vector<std::string> errors, hazards, misuse, deadlock;
  int64_t errorCount = 0, hazardCount = 0, misuseCount = 0;
  int64_t instructions = 0, mmas = 0, tmaLoadBytes = 0, tmaStoreBytes = 0;
  std::vector<int64_t> perWarp;
};

/// The CTAs of one cluster (one CTA where the launch has no clusters), run
/// together: their warps share one scheduler, so that a CTA waiting on its
/// peer (a cluster barrier, a remote mbarrier arrive, a multicast) is a
/// schedule like any other, and the ordering checks span the cluster.
/// Internally a thread, a warp, a shared-memory byte and a TMEM lane are
/// numbered across the cluster: CTA r's threads follow r's predecessors',
/// its shared memory is the r-th `smemStride` bytes (a multiple of 1024,
/// so that swizzles, which read address bits 4-9, are the same), its TMEM
/// lanes are r * 128 on. What a kernel sees is its own CTA's numbers
/// (`%tid`, `%warpid`, shared::cta addresses, TMEM addresses).
class CtaMachine {
public:
  /// `ctaLinear`: the linear index of each CTA of the cluster, by rank.
  CtaMachine(const Program &program, const Kernel &kernel, Device &device,
             const LaunchConfig &config, const std::vector<uint8_t> &params,
             const std::vector<uint32_t> &ctaLinear, CtaReport &report);
  void run();

private:
  enum class State : uint8_t {
    Ready, CtaBarrier, Mbarrier, BulkWait, Registers, WgmmaWait, Converge,
    ClusterBarrier, PairWait, Exited, Merged,
  };
  struct Thread {
    /// The instruction this lane executes (kept for reports).
    uint32_t pc = 0;
    /// `tid` and `warp` count across the cluster; `cta` is the rank.
    uint32_t tid = 0, warp = 0, lane = 0, cta = 0;
    /// barrier.cluster: arrived and not yet waited, in phase `clusterPhase`.
    bool clusterArrived = false;
    uint64_t clusterPhase = 0;
    uint64_t *regs = nullptr;
    int64_t executed = 0;
    // tcgen05.ld destinations not yet covered by tcgen05.wait::ld.
    std::vector<uint32_t> pendingLd;
    // tcgen05.st regions not yet covered by tcgen05.wait::st.
    std::vector<TmemRect> pendingSt;
    // Shared-memory bytes written through the generic proxy since the last
    // fence.proxy.async.
    std::vector<Interval> unfenced;
    // Bulk async-groups: groups committed, stores in flight per group, and
    // the stores whose reads no wait_group has waited for: (group, token).
    uint32_t committedGroups = 0;
    std::unordered_map<uint32_t, uint32_t> storesInFlight;
    std::vector<std::pair<uint32_t, uint32_t>> storeTokens;
  };
  /// A SIMT stack entry: the lanes of `mask` run from `pc` until they reach
  /// `reconverge`, where the entry below takes them back.
  struct StackEntry {
    uint32_t pc, reconverge, mask;
  };
  /// A warp of the CTA: which of its lanes live, its registers, its wgmma
  /// groups.
  struct Warp {
    uint32_t exited = 0;
    uint32_t absent = 0; // lanes past the block's last thread
    uint32_t registers = 0;
    std::vector<uint32_t> setmaxnregValues;
    // wgmma: groups committed, operations issued and in flight;
    // wgmma.fence's epoch (a register written in the current epoch was
    // written after the last fence).
    uint32_t wgCommitted = 0, wgInFlight = 0;
    uint64_t wgIssued = 0;
    uint32_t wgFenceEpoch = 1;
    // Ordering across thread synchronization (see `Order` below): the
    // warp's tcgen05.fence::before_thread_sync and fence.proxy.async counts
    // (a tcgen05.commit counts as the first: its arrive fences what the
    // warp issued before it), what it has acquired of every warp's counts
    // through synchronization, and the tcgen05 part of that at its last
    // tcgen05.fence::after_thread_sync.
    uint32_t tcFences = 0, proxyFences = 0;
    uint32_t lastGenericTag = 0;
    std::vector<uint32_t> knownTc, knownProxy, tcVisible;
    // Releases made (the epoch its accesses belong to: one ahead of the
    // releases made), and what it has acquired of every warp's.
    uint32_t syncEpoch = 1;
    std::vector<uint32_t> knownSync;
    // The same for its mbarrier inits, which fence.mbarrier_init releases
    // alone: releases of them made (one ahead) and acquired.
    uint32_t initEpoch = 1;
    std::vector<uint32_t> knownInit;
    // The asynchronous proxy's completions it has acquired: per mbarrier
    // (by id), the phases completed; per warp, the tcgen05.commits whose
    // arrive it has seen (a commit's arrive says every tcgen05 operation
    // its thread issued before it is done). The commits it has issued.
    std::vector<uint64_t> knownPhase;
    std::vector<uint32_t> knownCommit;
    uint32_t commits = 0;
    // Its wgmmas whose shared-memory reads a wgmma.wait_group has not yet
    // waited for: (group, token).
    std::vector<std::pair<uint32_t, uint32_t>> wgTokens;
    // Whether it has executed a fence.acq_rel / fence.sc /
    // fence.mbarrier_init (what it ordered is in `fenceOrders`).
    bool fenced = false;
    uint32_t live() const { return ~(exited | absent); }
  };
  /// What a release carries (an mbarrier phase, a named barrier's use, a
  /// commit's arrive, a fence): per warp, the fence counts that happen
  /// before it.
  struct Order {
    std::vector<uint32_t> tc, proxy, sync, init;
    std::vector<uint64_t> phase;  // per mbarrier id
    std::vector<uint32_t> commit; // per warp
    /// Takes in what `other` carries (each count its maximum).
    void join(const Order &other) {
      auto joinOne = [](auto &into, const auto &from) {
        if (into.size() < from.size())
          into.resize(from.size(), 0);
        for (size_t i = 0; i < from.size(); ++i)
          into[i] = std::max(into[i], from[i]);
      };
      joinOne(tc, other.tc);
      joinOne(proxy, other.proxy);
      joinOne(sync, other.sync);
      joinOne(init, other.init);
      joinOne(phase, other.phase);
      joinOne(commit, other.commit);
    }
  };
  /// When an asynchronous-proxy access of shared memory (a TMA load's
  /// write; an MMA's, a wgmma's or a TMA store's read) is ordered before a
  /// warp's later access: `Phase` once the warp has acquired phase `value`
  /// of mbarrier `who` (a TMA load completes on it), `Commit` once it has
  /// acquired commit number `value` of warp `who` (tcgen05.commit), `Epoch`
  /// once warp `who` has waited for it (wgmma.wait_group,
  /// cp.async.bulk.wait_group) and the warp has acquired a release `who`
  /// made since, its epoch `value`. kPendingToken until then.
  enum class TokenKind : uint8_t { Phase, Commit, Epoch };
  struct AsyncToken {
    TokenKind kind;
    uint32_t who;
    uint64_t value;
  };
  static constexpr uint64_t kPendingToken = ~0ull;
  struct AsyncAccess {
    uint32_t token = ~0u, pc = 0;
  };
  /// Per 128-byte line of shared memory (TMA boxes and MMA operand tiles
  /// are whole lines): the async proxy's last write and its reads since,
  /// one per (kind, who) — a later read of the same warp needs a later
  /// wait, so it stands for the earlier.
  struct AsyncLine {
    AsyncAccess write;
    std::vector<AsyncAccess> reads;
  };
  /// Per 4-byte word of shared memory: its last generic write and reads
  /// since (two warps), for the data-race check.
  struct SmemAccess {
    uint32_t epoch = 0, pc = 0;
    uint16_t warp = 0xffff;
    /// An mbarrier.init's write: its epoch counts the warp's init releases
    /// (fence.mbarrier_init releases inits only).
    bool init = false;
  };
  struct SmemWord {
    SmemAccess write, reads[2];
  };
  /// The last tcgen05 accesses of 32 TMEM lanes of one column: the write,
  /// and reads since by up to three other warps.
  struct TmemAccess {
    uint32_t tag = 0, pc = 0;
    uint16_t warp = 0xffff;
  };
  struct TmemCell {
    TmemAccess write;
    TmemAccess reads[3];
  };
  /// What the scheduler runs: lanes of one warp that execute together. A
  /// warp starts as one strand. In lockstep (the default) it stays one, a
  /// SIMT stack reconverging its diverged lanes at branches' immediate
  /// post-dominators. Under independent thread scheduling (the PTX ISA's
  /// model since sm_70, which promises no reconvergence) a divergent branch
  /// splits a strand in two that run apart, and only a warp-synchronous
  /// instruction (elect/vote/shfl .sync, bar.warp.sync, the .aligned ones)
  /// joins the strands it names again.
  struct Strand {
    uint32_t warp = 0;
    uint32_t lanes = 0; // its lanes that have not exited
    State state = State::Ready;
    uint32_t runnableIndex = ~0u;
    std::vector<StackEntry> stack;
    // With skewed speeds, the chance out of 512 that it runs when drawn.
    uint32_t speed = 512;
    // An mbarrier wait: the barrier, and the phases it had completed when
    // the wait began.
    uint32_t waitBarrier = 0;
    uint64_t waitSnapshot = 0;
    bool waiting = false;
    // The named barrier (bar.sync a) it waits at; the wait_group count it
    // waits for; the lanes a warp-synchronous instruction waits for.
    uint32_t namedBarrier = 0;
    uint32_t wgWaitAllowed = 0;
    uint32_t convergeMembers = 0;
  };
  /// What a warp-synchronous instruction found: all its member lanes in the
  /// strand, the strand now waiting for the others, the strand just joined
  /// by them (run the instruction again), or an error.
  enum class Gather : uint8_t { Here, Waiting, Joined, Failed };
  /// A named barrier (bar.sync / bar.arrive a, b): the thread count it was
  /// given (0: every thread of the CTA), the warps that arrived, and those
  /// that wait.
  struct NamedBarrier {
    uint32_t expected = 0;
    uint32_t arrivedWarps = 0;
    std::vector<uint32_t> waiters;
    Order order;
  };
  struct Mbarrier {
    uint32_t expected = 0;
    int64_t pending = 0;
    int64_t tx = 0;
    uint64_t phase = 0; // phases completed
    std::vector<uint32_t> waiters;
    // Who initialized it, and whether a fence.mbarrier_init has made the
    // initialization visible to the async proxy since.
    uint32_t initThread = 0;
    bool fenced = false, unfencedReported = false;
    // Its id for the ordering of TMA loads (a re-initialized barrier's
    // phases count again from 0, so it gets a new one).
    uint32_t id = 0;
    // The arrivals of the current phase, and of the completed ones (what a
    // wait that returns acquires).
    Order releasing, released;
  };
  struct TmaOp {
    bool load = true;
    /// A store that adds its f32 elements into the tensor (cp.reduce).
    bool reduceAdd = false;
    runtime::TensorMapSpec map;
    int64_t coords[5] = {};
    uint32_t smem = 0;
    uint32_t bytes = 0;
    uint32_t barrier = 0;
    uint32_t thread = 0;
    uint32_t group = 0;
    uint64_t due = 0;
    uint32_t source = 0;
    uint32_t token = ~0u; // the load's write, the store's read
  };
  struct TensorOp {
    bool commit = false;
    uint32_t barrier = 0;
    // MMA operands.
    uint32_t d = 0, aTmem = 0;
    uint64_t aDesc = 0, bDesc = 0;
    bool aInTmem = false, accumulate = false;
    SmemDescriptor a, b;
    InstrDescriptor instr;
    Interval aSmem, bSmem;
    TmemRect dRect, aRect;
    uint64_t due = 0;
    uint32_t source = 0;
    uint32_t thread = 0;
    Order order; // a commit's: what its arrive releases
    uint32_t commitIndex = 0; // a commit's number among its warp's
    // A commit with .multicast::cluster: the CTAs whose mbarrier at the
    // same offset as `barrier`'s it arrives on.
    uint16_t multicast = 0;
    // A CTA pair's MMA (.cta_group::2, M = 256): the even CTA, whose rows
    // 0-127 of A, first N/2 rows of B and TMEM lanes it has, the odd CTA
    // the rest at the same shared-memory offsets; `aSmem`/`bSmem` are the
    // even CTA's bytes, `aSmemPeer`/`bSmemPeer` the odd one's; `dRect` and
    // `aRect` span both CTAs' lanes.
    bool pair = false;
    uint32_t pairCta = 0;
    Interval aSmemPeer, bSmemPeer;
    /// Whether the MMA reads shared memory `range`.
    bool readsShared(const Interval &range) const {
      return !commit && (aSmem.overlaps(range) || bSmem.overlaps(range) ||
                         aSmemPeer.overlaps(range) || bSmemPeer.overlaps(range));
    }
  };

  /// One warp's part of a wgmma.mma_async: the 16 rows of the 64 its
  /// lanes hold. A (from shared memory or the lanes' registers), B and, when
  /// it accumulates, D are read when it completes, which is as late as the
  /// hardware may read them; the threads may not touch its registers nor
  /// overwrite its shared memory before wgmma.wait_group says it is done.
  struct WgmmaOp {
    uint32_t warp = 0, group = 0, pc = 0;
    bool accumulate = false;
    SmemDescriptor a, b;
    Interval aSmem, bSmem;
    uint64_t due = 0;
  };

  // Scheduling.
  void makeRunnable(uint32_t strand);
  void block(uint32_t strand, State state);
  void step(uint32_t strand, uint64_t budget);
  /// One instruction as `step` issues it: the strand and its warp, the top
  /// of its SIMT stack, the lanes there and those whose guard lets them
  /// execute.
  struct Issue {
    uint32_t strand, warp;
    StackEntry top;
    uint32_t mask, active;
  };
  /// Whether `step` goes on to the strand's next instruction, or ends (the
  /// strand blocked, exited, failed or yields its turn).
  enum class Flow : uint8_t { Continue, Stop };
  Flow stepBranch(const Issue &issue, const Inst &in);
  /// mbarrier.try_wait / test_wait: a strand whose lanes all still wait
  /// sleeps on the barrier.
  Flow stepMbarrierWait(const Issue &issue, const Inst &in);
  Flow stepBulkWait(const Issue &issue, const Inst &in);
  /// barrier.cluster.wait: a strand whose lanes' phase has not completed
  /// sleeps until it does.
  Flow stepClusterWait(const Issue &issue, const Inst &in);
  /// barrier.cluster.arrive / .wait, the .aligned forms for the whole warp.
  Flow stepCluster(const Issue &issue, const Inst &in);
  /// The .aligned instructions of the whole warp: bar.sync/arrive, wgmma.
  Flow stepAligned(const Issue &issue, const Inst &in);
  /// The warp-collective instructions with a member mask, and tcgen05's.
  Flow stepCollective(const Issue &issue, const Inst &in);
  /// Every other instruction: each active lane on its own.
  Flow stepLanes(const Issue &issue, const Inst &in);
  /// The first active lane (the first lane when none is).
  Thread &firstLane(const Issue &issue);
  /// The strand moves past the issued instruction.
  void advance(const Issue &issue);
  /// Independent thread scheduling: `lanes` of strand `s` leave it for a
  /// strand of their own at `pc`.
  void split(uint32_t s, uint32_t lanes, uint32_t pc);
  /// Brings the `members` lanes of strand `s`'s warp together at its
  /// instruction `pc`.
  Gather gather(uint32_t s, uint32_t members, uint32_t pc);
  /// Strands of `warp` in `state` become runnable (they retry).
  void wake(uint32_t warp, State state);
  bool completeAsync(bool force);

  // Ordering across thread synchronization (PTX ISA, memory consistency of
  // tcgen05 and of the async proxy). Per warp, vector clocks of fence
  // counts: a release joins what its warp knows (and its own counts) into
  // the synchronization object; a wait that returns, or a bar.sync, joins
  // the object's into what the warp knows.
  void release(uint32_t warp, Order &into);
  /// A relaxed arrive releases what the warp's last fence ordered before
  /// it, and nothing without one (PTX ISA memory model: a fence then a
  /// relaxed write is a release pattern).
  void releaseRelaxed(uint32_t warp, Order &into);
  /// Per warp: what its fences (fence.acq_rel / fence.sc: everything before
  /// them; fence.mbarrier_init: its inits) released, and what its relaxed
  /// mbarrier waits saw released, which its next fence acquires.
  std::vector<Order> fenceOrders, relaxedAcquires;
  /// A CTA of the cluster whose warps have all exited: its shared memory is
  /// gone, and a peer's earlier accesses of it must be ordered before.
  void checkExitOfCta(uint32_t cta);
  void acquire(uint32_t warp, const Order &from);
  /// A tcgen05 access by `warp` (instruction `pc`) of `rect`: every earlier
  /// conflicting access by another warp must be ordered before it by
  /// before_thread_sync there, a synchronization, and after_thread_sync
  /// here; a hazard otherwise, naming both instructions.
  /// `awaited` false: a tcgen05.st, whose write is released to other warps
  /// only by a tcgen05.fence::before_thread_sync after the warp's
  /// tcgen05.wait::st (releaseTmemStores), not by one between the two.
  void orderTmem(uint32_t warp, uint32_t pc, const TmemRect &rect, bool write,
                 bool awaited = true);
  /// tcgen05.wait::st of warp `w`: its stores in `rects` become released by
  /// the warp's next tcgen05.fence::before_thread_sync.
  void releaseTmemStores(uint32_t w, const std::vector<TmemRect> &rects);
  /// The tag of a tcgen05.st not yet waited for: no fence releases it.
  static constexpr uint32_t kUnwaitedStore = 0xffffffffu;
  /// An async-proxy read (TMA store, MMA, wgmma) issued by `warp` of shared
  /// memory `range`: another warp's generic writes there must be fenced
  /// (fence.proxy.async) before a release this warp acquired.
  /// `what` names the reader in a report; it is built only for one (the
  /// check runs on every TMA store and MMA).
  void orderProxy(uint32_t warp, const Interval &range,
                  llvm::function_ref<std::string()> what);
  std::vector<TmemCell> tmemOrder;
  /// Generic accesses of shared memory by two warps, at least one a write,
  /// must be ordered by a synchronization (a release the second acquired):
  /// a hazard otherwise, naming both instructions.
  void orderShared(const Thread &th, Interval range, bool store, bool record = true,
                   bool init = false);
  std::vector<SmemWord> smemOrder;
  std::vector<uint32_t> genericTag; // per shared byte: (warp + 1) << 24 | tag
  /// The asynchronous proxy's accesses of shared memory, in happens-before
  /// terms (so that a missing wait is seen whatever the timing): an access
  /// of `range` by `warp` (instruction `pc`) conflicting with an async one
  /// (a write and anything; a read of what a TMA load wrote) must be
  /// ordered after it by its token; a hazard otherwise, naming both.
  bool asyncOrdered(uint32_t warp, uint32_t token) const;
  void orderAsync(uint32_t warp, uint32_t pc, Interval range, bool write,
                  llvm::function_ref<std::string()> what);
  uint32_t newToken(TokenKind kind, uint32_t who, uint64_t value);
  void recordAsyncRead(Interval range, uint32_t token, uint32_t pc);
  /// Tokens of `pending` whose group is below `done` take the warp's epoch.
  void finishTokens(uint32_t warp, std::vector<std::pair<uint32_t, uint32_t>> &pending,
                    uint32_t done);
  std::vector<AsyncToken> asyncTokens;
  std::vector<AsyncLine> asyncLines;
  uint32_t nextBarrierId = 0;
  std::vector<std::pair<uint32_t, uint32_t>> orderReported;
  void reportDeadlock();
  void finish();

  // Reports.
  std::string threadName(const Thread &th) const;
  std::string at(const Thread &th) const;
  void error(const Thread &th, const std::string &message);
  void hazard(const std::string &message);
  void misuse(const std::string &message);
  bool stopped = false;

  // Operands and memory.
  uint64_t read(const Thread &th, const Operand &o, Ty type);
  void write(Thread &th, const Operand &o, uint64_t value, Ty type);
  uint64_t special(const Thread &th, Special s) const;
  uint64_t address(const Thread &th, const Operand &o) const;
  /// `cluster`: a .shared::cluster access, which may reach a peer CTA's
  /// shared memory (generic addresses may always).
  uint8_t *memory(Thread &th, Space space, uint64_t addr, uint32_t bytes,
                  bool store, uint32_t &smemAddr, bool cluster = false);
  /// Whether [flat, flat + bytes) lies in one CTA's shared memory.
  bool checkShared(uint32_t flat, uint32_t bytes) const {
    uint32_t rank = flat / smemStride, offset = flat - rank * smemStride;
    return rank < clusterSize && offset >= kSharedBase &&
           offset + uint64_t(bytes) <= smemEnd;
  }
  /// The flat shared-memory address of a kernel's shared address `addr`
  /// (a shared::cta address of the thread's CTA, or with `cluster` a
  /// shared::cluster address of any CTA of the cluster); false, with an
  /// error naming `what`, for an address outside them.
  /// `access`: the address is accessed (a peer CTA that has exited is an
  /// error), not only computed with (mapa, getctarank).
  bool sharedAddress(Thread &th, uint64_t addr, uint32_t bytes, bool cluster,
                     const char *what, uint32_t &flat, bool access = true);
  /// sharedAddress without the error: false for an address outside them.
  bool flatShared(uint32_t cta, uint64_t addr, uint32_t bytes, bool cluster,
                  uint32_t &flat) const {
    uint64_t rank = addr >> kClusterRankShift, offset = addr & (kClusterStride - 1);
    if (rank != cta && (!cluster || rank >= clusterSize))
      return false;
    if (offset < kSharedBase || offset + bytes > smemEnd)
      return false;
    flat = static_cast<uint32_t>(rank * smemStride + offset);
    return true;
  }
  /// A flat shared address as the kernel names it: its offset in its CTA,
  /// with the CTA's rank in a cluster.
  std::string smemName(uint32_t flat, bool end = false) const;
  /// "warp W" (of its CTA, with its rank in a cluster).
  std::string warpName(uint32_t w) const;
  /// The CTA whose shared memory holds flat address `flat`, and its base.
  uint32_t ctaOfShared(uint32_t flat) const { return flat / smemStride; }
  uint32_t sharedBase(uint32_t cta) const { return cta * smemStride; }
  void onSharedAccess(Thread &th, Interval range, bool store);
  void checkPendingLd(Thread &th, const Inst &in);

  // Instruction families, per lane unless they say otherwise.
  void execLane(Thread &th, const Inst &in);
  void execAlu(Thread &th, const Inst &in);
  /// An ALU instruction's operands as one lane reads and writes them.
  struct AluLane;
  void execMovParts(const AluLane &lane);
  void execF32(const AluLane &lane);
  void execF32x2(const AluLane &lane);
  void execF64(const AluLane &lane);
  /// Scalar .f16 and .bf16 arithmetic (the regions' arithmetic on 16-bit
  /// floats), each result rounded once to the type.
  void execHalf(const AluLane &lane);
  void execSetp(const AluLane &lane);
  void execInteger(const AluLane &lane);
  // `a`: the first source, masked to the type's width.
  void execIntegerMultiply(const AluLane &lane, uint64_t a);
  void execIntegerDivide(const AluLane &lane, uint64_t a);
  void execShift(const AluLane &lane, uint64_t a);
  void execBitFieldExtract(const AluLane &lane, uint64_t a);
  void execBitFieldInsert(const AluLane &lane, uint64_t a);
  void execPermute(const AluLane &lane, uint64_t a);
  void execCvt(Thread &th, const Inst &in);
  void execCvtFloat8(Thread &th, const Inst &in);
  void execMemory(Thread &th, const Inst &in);
  /// For a wait, whether the awaited phase has completed.
  bool execMbarrier(Thread &th, const Inst &in);
  void execTma(Thread &th, const Inst &in);
  /// The checks and bookkeeping of one TMA copy whose shared memory and
  /// mbarrier (flat addresses) are known; a multicast issues one a CTA.
  void issueTma(Thread &th, TmaOp op);
  void execMapa(Thread &th, const Inst &in);
  void arriveCluster(Thread &th, const Inst &in);
  /// The cluster barrier's phase completes once every thread has arrived
  /// or exited.
  void completeClusterPhaseIfDone();
  bool bulkGroupsDone(const Thread &th, const Inst &in) const;
  void execMma(Thread &th, const Inst &in);
  void execCommit(Thread &th, const Inst &in);
  /// Warp-level: lanes leaving, collectives, the CTA barrier.
  void exitLanes(uint32_t strand, uint32_t lanes);
  void execCollective(uint32_t warp, uint32_t members, const Inst &in,
                      bool &waitForRegisters);
  /// Runs `body` on each lane of `members` of `warp` until an error stops
  /// the CTA.
  template <typename Body>
  void forEachMember(uint32_t warp, uint32_t members, Body &&body);
  void execElect(uint32_t warp, uint32_t members, const Inst &in);
  void execVote(uint32_t warp, uint32_t members, const Inst &in);
  void execShfl(uint32_t warp, uint32_t members, const Inst &in);
  void execStMatrix(uint32_t warp, uint32_t members, const Inst &in);
  /// `first`: the lane that acts for the warp.
  void execSetMaxNReg(uint32_t warp, Thread &first, const Inst &in,
                      bool &waitForRegisters);
  void execTmemAlloc(Thread &first, const Inst &in);
  /// tcgen05.alloc / dealloc / relinquish_alloc_permit with .cta_group::2:
  /// one warp of each CTA of the pair issues it; the first waits for the
  /// other (PairWait), whose issue does the pair's operation.
  void execPairCollective(uint32_t w, Thread &first, const Inst &in);
  struct PairRendezvous {
    bool waiting = false;
    Op op = Op::Nop;
    uint32_t strand = 0, warp = 0, thread = 0;
    uint32_t columns = 0, taddr = 0, dst = 0;
  };
  /// Per CTA pair (ranks 2p, 2p + 1).
  std::vector<PairRendezvous> pairRendezvous;
  /// stepCollective's strand, and whether its instruction waits for the
  /// peer CTA.
  uint32_t collectiveStrand = 0;
  bool waitForPeer = false;
  void execTmemDealloc(uint32_t warp, Thread &first, const Inst &in);
  /// tcgen05.ld / tcgen05.st (32x32b): each lane its own TMEM lane.
  void execTmemCopy(uint32_t warp, uint32_t members, const Inst &in);
  /// A tcgen05.ld or st of `rect` while an MMA that writes it (or, for a
  /// store, reads A from it) is in flight: a hazard.
  void checkTmemCopyAgainstMmas(const Thread &first, const TmemRect &rect,
                                bool load);
  /// bar.sync / bar.arrive on named barrier `id`; false when the warp
  /// blocks.
  bool arriveNamedBarrier(uint32_t strand, const Inst &in, bool wait);
  void releaseNamedBarrier(uint32_t id);
  bool namedBarrierComplete(const NamedBarrier &bar, uint32_t cta) const;
  // wgmma (sm_90a).
  void execWgmma(uint32_t warp, uint32_t members, const Inst &in);
  /// The descriptors (`aDesc` 0 with A in registers), uniform across the
  /// warp, decoded into `op` with the shared memory they span.
  bool readWgmmaOperands(const Thread &first, const Inst &in, WgmmaOp &op,
                         uint64_t &aDesc, uint64_t &bDesc);
  /// The warp's k-th wgmma is the one the other warps of its warpgroup
  /// issued k-th.
  bool agreeOnWgmmaIssue(const Thread &first, const WgmmaOp &op,
                         uint64_t aDesc, uint64_t bDesc);
  /// A register the wgmma uses touched by the thread since the last
  /// wgmma.fence: a hazard.
  void checkWgmmaFence(const Thread &first, const Inst &in);
  /// The wgmma's shared-memory reads against in-flight TMA loads, the
  /// generic proxy's writes and the async proxy's order.
  void orderWgmmaReads(const Thread &first, const WgmmaOp &op);
  void runWgmma(const WgmmaOp &op);
  bool wgmmaGroupsDone(const Warp &warp, uint32_t allowed) const;
  /// Registers of in-flight wgmmas the warp's instruction touches.
  void checkWgmmaRegisters(uint32_t warp, const Inst &in);
  void markWgmmaRegisters(const WgmmaOp &op, int delta);

  // Units.
  /// `addr`: a flat address.
  Mbarrier *barrierAt(Thread &th, uint32_t addr);
  /// The flat address of the mbarrier a kernel names at `addr` (of the
  /// cluster with `cluster`); false, with an error, for none.
  bool barrierAddress(Thread &th, uint64_t addr, bool cluster, uint32_t &flat);
  /// An mbarrier the async proxy (TMA, tcgen05.commit) is given.
  Mbarrier *asyncBarrierAt(Thread &th, uint32_t addr, const char *unit);
  void arrive(uint32_t addr, Mbarrier &bar, int64_t count,
              llvm::function_ref<std::string()> who);
  void completeTx(uint32_t addr, Mbarrier &bar, int64_t bytes);
  void completePhase(Mbarrier &bar);
  void runTma(TmaOp &op);
  void runTensorOp(TensorOp &op);
  void runMma(TensorOp &op);
  /// A commit's arrive on the mbarrier at flat address `target`.
  void arriveFromCommit(TensorOp &op, uint32_t target);
  bool tmemCheck(const Thread *th, const TmemRect &rect, const std::string &what);
  bool decodeMap(Thread &th, uint64_t generic, runtime::TensorMapSpec &map);

  const Program &program;
  const Kernel &kernel;
  Device &device;
  const LaunchConfig &config;
  const std::vector<uint8_t> &params;
  CtaReport &report;
  /// The cluster: its CTAs' coordinates in the grid (by rank), the
  /// cluster's own, and the per-CTA strides of the flat numbering.
  uint32_t clusterSize = 1;
  std::vector<std::array<uint32_t, 3>> ctaIds;
  uint32_t clusterCoord[3] = {0, 0, 0};
  uint32_t clusterDims[3] = {1, 1, 1};
  uint32_t warpsPerCta = 0;
  uint32_t smemStride = 0;
  /// Threads per CTA.
  uint32_t numThreads = 0;
  /// barrier.cluster: phases completed, threads arrived in the current
  /// one, exited threads not counted among them, and what the arrivals
  /// release.
  struct ClusterBarrier {
    uint64_t phase = 0;
    uint32_t arrived = 0, exitedIdle = 0;
    Order releasing, released;
  } clusterBarrier;
  std::vector<Thread> threads;
  std::vector<Warp> warps;
  std::vector<Strand> strands;
  std::vector<uint64_t> registerFile;
  /// Warps that can run.
  std::vector<uint32_t> runnable;
  uint32_t exitedWarps = 0;
  /// Per CTA: its warps that have exited.
  std::vector<uint32_t> exitedInCta;
  static constexpr uint32_t kNamedBarriers = 16;
  /// Per CTA, its 16 (CTA r's barrier i is r * 16 + i).
  std::vector<NamedBarrier> namedBarriers;
  uint64_t now = 0;
  std::mt19937_64 rng;

  std::vector<uint8_t> smem;
  uint32_t smemEnd = 0;
  /// Per shared byte: 1 + the thread whose generic write is not yet fenced.
  std::vector<uint16_t> unfencedOwner;
  uint32_t unfencedBytes = 0;
  std::unordered_map<uint32_t, Mbarrier> barriers;
  /// The mbarrier whose 8 bytes overlap [begin, end), or ~0u: an mbarrier
  /// object may be changed by mbarrier instructions only (PTX ISA), and a
  /// store or TMA load over a live one corrupts its phase on hardware.
  uint32_t barrierIn(Interval range) const;

  static constexpr uint32_t kTmemLanes = 128, kTmemColumns = 512;
  /// Per CTA (lanes r * 128 on): its TMEM, allocations and permit.
  std::vector<uint32_t> tmem;
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> tmemAllocations; // column, count
  std::vector<bool> tmemRelinquished;

  std::vector<TmaOp> tmaInFlight;
  std::deque<TensorOp> tensorPipe;
  std::vector<WgmmaOp> wgmmaInFlight;
  /// Per warp and register slot: in-flight wgmmas that write it (low byte,
  /// the accumulator) and that read it (high byte, A's fragment); and the
  /// wgmma.fence epochs of the thread's last write and last read. Empty
  /// unless the program uses wgmma.
  std::vector<uint16_t> wgmmaRegisters;
  std::vector<uint32_t> registerEpochs, registerReads;
  /// Warpgroup agreement: the k-th wgmma.mma_async of each warp of a
  /// warpgroup is the same instruction with the same descriptors.
  struct WgmmaIssue {
    uint32_t pc = 0, seen = 0;
    uint64_t aDesc = 0, bDesc = 0;
  };
  std::vector<std::unordered_map<uint64_t, WgmmaIssue>> wgmmaIssues;
  /// Per CTA: registers setmaxnreg.dec gave back.
  std::vector<int64_t> registerPool;
  std::vector<uint32_t> registerWaiters;
  /// A seeded speed for a strand under skewed schedules (512, 64, 8 or 1).
  uint32_t drawSpeed() { return 512u >> (3 * (rng() % 4)); }
  /// A seeded completion delay in [0, maxAsyncDelay]; any maxAsyncDelay
  /// (UINT64_MAX would make the modulus 0), and far from overflowing the
  /// instruction count it is added to.
  uint64_t randomDelay() {
    uint64_t bound = std::min<uint64_t>(config.maxAsyncDelay, uint64_t(1) << 62);
    return rng() % (bound + 1);
  }
  /// Starved roles: the warps starved now [first, first + count), and
  /// until which instruction count.
  uint32_t starvedFirst = 0, starvedCount = 0;
  int64_t starvedUntil = 0;
  uint32_t speedOf(uint32_t strand) const {
    const Strand &st = strands[strand];
    return st.warp - starvedFirst < starvedCount ? 0 : st.speed;
  }
  /// Lazy completion: whether a thread waits for what `barrier` will be
  /// told.
  bool awaited(uint32_t barrier) const;
};

} // namespace mlir::fa4::emu

#endif // FA4_LIB_EMU_MACHINE_H
