//===- Async.cpp - mbarriers, TMA, the tensor core --------------------------===//
//
// The units that work beside the threads. mbarriers follow the PTX ISA's
// phase model: a phase completes when its pending arrivals reach zero and its
// transaction count is zero, and `try_wait.parity p` succeeds once the phase
// of parity p has completed. TMA copies and tensor-core operations are
// queued at issue and take effect at a seeded random later point: a TMA copy
// on its own, the tensor-core operations of a CTA in issue order (one pipe),
// a commit once everything issued before it has completed. Issue-time checks
// catch the hazards between the asynchronous proxy and the threads.
//
//===----------------------------------------------------------------------===//

#include "Machine.h"

#include "fa4/Support/Float8.h"
#include "fa4/Support/AttentionMath.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <type_traits>

namespace mlir::fa4::emu {

namespace {
std::string hex(uint64_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

/// The values of an MMA element type's bit patterns, tabulated once: 65536
/// of f16 and bf16, 256 of e4m3 and e5m2. Every one is exact in f32.
const float *elementTable(MmaElement type) {
  static const std::vector<float> f16 = [] {
    std::vector<float> t(65536);
    for (uint32_t i = 0; i < 65536; ++i)
      t[i] = halfBitsToFloat(static_cast<uint16_t>(i));
    return t;
  }();
  static const std::vector<float> b16 = [] {
    std::vector<float> t(65536);
    for (uint32_t i = 0; i < 65536; ++i)
      t[i] = bfloat16BitsToFloat(static_cast<uint16_t>(i));
    return t;
  }();
  auto bytes = [](Float8 format) {
    std::vector<float> t(256);
    for (uint32_t i = 0; i < 256; ++i)
      t[i] = float8ToFloat(format, static_cast<uint8_t>(i));
    return t;
  };
  static const std::vector<float> e4m3 = bytes(Float8::E4M3);
  static const std::vector<float> e5m2 = bytes(Float8::E5M2);
  switch (type) {
  case MmaElement::F16: return f16.data();
  case MmaElement::BF16: return b16.data();
  case MmaElement::E4M3: return e4m3.data();
  case MmaElement::E5M2: return e5m2.data();
  }
  return f16.data();
}

/// wgmma's operand types in the emulator's terms.
MmaElement mmaElementOf(Ty type) {
  switch (type) {
  case Ty::BF16: return MmaElement::BF16;
  case Ty::E4M3: return MmaElement::E4M3;
  case Ty::E5M2: return MmaElement::E5M2;
  default: return MmaElement::F16;
  }
}

/// The element of `bytes` (1 or 2) bytes at shared-memory byte `address`.
uint32_t loadElement(const std::vector<uint8_t> &smem, uint32_t address,
                     uint32_t bytes) {
  uint16_t bits = 0;
  std::memcpy(&bits, smem.data() + address, bytes);
  return bits;
}

/// The smallest byte range holding elements (mn, k) of an MMA operand, mn in
/// [mnBegin, mnEnd) and k below one instruction's K.
Interval operandSpan(const SmemDescriptor &desc, Major major, uint32_t mnBegin,
                     uint32_t mnEnd, uint32_t elementBytes) {
  Interval range{~0u, 0};
  for (uint32_t mn = mnBegin; mn < mnEnd; ++mn)
    for (uint32_t k = 0; k < mmaK(elementBytes); ++k) {
      uint32_t a = operandAddress(desc, major, mn, k, elementBytes);
      range.begin = std::min(range.begin, a);
      range.end = std::max(range.end, a + elementBytes);
    }
  return range;
}
} // namespace

//===----------------------------------------------------------------------===//
// mbarriers
//===----------------------------------------------------------------------===//

uint32_t CtaMachine::barrierIn(Interval range) const {
  for (const auto &entry : barriers)
    if (range.overlaps({entry.first, entry.first + 8}))
      return entry.first;
  return ~0u;
}

CtaMachine::Mbarrier *CtaMachine::barrierAt(Thread &th, uint32_t addr) {
  if (addr % 8 || !checkShared(addr, 8)) {
    error(th, "mbarrier address " + hex(addr) +
                  " is not an 8-byte aligned address of the CTA's shared memory");
    return nullptr;
  }
  auto it = barriers.find(addr);
  if (it == barriers.end()) {
    error(th, "uses the mbarrier at smem " + smemName(addr) + " before mbarrier.init");
    return nullptr;
  }
  return &it->second;
}

bool CtaMachine::barrierAddress(Thread &th, uint64_t addr, bool cluster,
                                uint32_t &flat) {
  if (flatShared(th.cta, addr, 8, cluster, flat) && addr % 8 == 0) {
    const uint32_t owner = ctaOfShared(flat);
    if (owner != th.cta && exitedInCta[owner] == warpsPerCta) {
      error(th, "the mbarrier at " + hex(addr) + " is in CTA rank " +
                    std::to_string(owner) + ", which has exited");
      return false;
    }
    return true;
  }
  error(th, "mbarrier address " + hex(addr) + " is not an 8-byte aligned address of " +
                (cluster ? "the cluster's" : "the CTA's") + " shared memory" +
                (!cluster && (addr >> kClusterRankShift) != th.cta
                     ? " (a shared::cluster address given to a .shared::cta "
                       "mbarrier operation)"
                     : ""));
  return false;
}

CtaMachine::Mbarrier *CtaMachine::asyncBarrierAt(Thread &th, uint32_t addr,
                                                 const char *unit) {
  Mbarrier *bar = barrierAt(th, addr);
  // The issuing thread names the barrier: ordered after its init (the unit's
  // own access of it is the completion its waiters see).
  if (bar)
    orderShared(th, {addr, addr + 8}, false, /*record=*/false);
  if (bar && !bar->fenced && !bar->unfencedReported) {
    bar->unfencedReported = true;
    hazard(at(th) + ": " + unit + " is given the mbarrier at smem " + smemName(addr) +
           ", whose mbarrier.init no fence.mbarrier_init has made visible to "
           "the async proxy");
  }
  return bar;
}

//===----------------------------------------------------------------------===//
// Ordering across thread synchronization
//===----------------------------------------------------------------------===//

template <typename T>
static void join(std::vector<T> &into, const std::vector<T> &from) {
  if (into.size() < from.size())
    into.resize(from.size(), 0);
  for (size_t i = 0; i < from.size(); ++i)
    into[i] = std::max(into[i], from[i]);
}

void CtaMachine::release(uint32_t w, Order &into) {
  Warp &warp = warps[w];
  join(into.tc, warp.knownTc);
  join(into.proxy, warp.knownProxy);
  join(into.sync, warp.knownSync);
  join(into.init, warp.knownInit);
  join(into.phase, warp.knownPhase);
  join(into.commit, warp.knownCommit);
  into.tc[w] = std::max(into.tc[w], warp.tcFences);
  into.proxy[w] = std::max(into.proxy[w], warp.proxyFences);
  into.sync[w] = std::max(into.sync[w], warp.syncEpoch);
  if (into.init.size() <= w)
    into.init.resize(w + 1, 0);
  into.init[w] = std::max(into.init[w], warp.initEpoch);
  // What the warp does next is not covered by this release.
  ++warp.syncEpoch;
  ++warp.initEpoch;
}

void CtaMachine::releaseRelaxed(uint32_t w, Order &into) {
  if (!warps[w].fenced)
    return;
  into.join(fenceOrders[w]);
}

void CtaMachine::acquire(uint32_t w, const Order &from) {
  Warp &warp = warps[w];
  join(warp.knownTc, from.tc);
  join(warp.knownProxy, from.proxy);
  join(warp.knownSync, from.sync);
  join(warp.knownInit, from.init);
  join(warp.knownPhase, from.phase);
  join(warp.knownCommit, from.commit);
}

//===----------------------------------------------------------------------===//
// Ordering of the asynchronous proxy's shared-memory accesses
//===----------------------------------------------------------------------===//

uint32_t CtaMachine::newToken(TokenKind kind, uint32_t who, uint64_t value) {
  asyncTokens.push_back({kind, who, value});
  return static_cast<uint32_t>(asyncTokens.size() - 1);
}

bool CtaMachine::asyncOrdered(uint32_t w, uint32_t token) const {
  const AsyncToken &t = asyncTokens[token];
  const Warp &warp = warps[w];
  switch (t.kind) {
  case TokenKind::Phase:
    return t.value != kPendingToken && t.who < warp.knownPhase.size() &&
           warp.knownPhase[t.who] >= t.value;
  case TokenKind::Commit:
    return t.who < warp.knownCommit.size() && warp.knownCommit[t.who] >= t.value;
  case TokenKind::Epoch:
    return t.value != kPendingToken && (t.who == w || warp.knownSync[t.who] >= t.value);
  }
  return true;
}

void CtaMachine::orderAsync(uint32_t w, uint32_t pc, Interval range, bool write,
                            llvm::function_ref<std::string()> what) {
  auto check = [&](const AsyncAccess &prior, bool priorWrites, uint32_t line) {
    if (prior.token == ~0u || asyncOrdered(w, prior.token))
      return;
    std::pair<uint32_t, uint32_t> key{prior.pc, pc};
    if (std::find(orderReported.begin(), orderReported.end(), key) != orderReported.end())
      return;
    orderReported.push_back(key);
    const AsyncToken &t = asyncTokens[prior.token];
    std::string prior_ = program.sources[program.code[prior.pc].source];
    std::string why;
    switch (t.kind) {
    case TokenKind::Phase:
      why = warpName(w) + " has not acquired the mbarrier phase that "
            "load completes (a wait on it, or a release of a warp that waited)";
      break;
    case TokenKind::Commit:
      why = warpName(w) + " has not acquired the arrive of a "
            "tcgen05.commit issued after it (the only sign the MMA is done)";
      break;
    case TokenKind::Epoch:
      why = t.value == kPendingToken
                ? warpName(t.who) + " has not waited for it yet"
                : warpName(w) + " has not acquired a release " + warpName(t.who) + " made after waiting for it";
      break;
    }
    hazard(what() + " " + (write ? "writes" : "reads") + " shared memory " +
           smemName(line * 128) + " that the asynchronous proxy " +
           (priorWrites ? "wrote" : "read") + " for " + prior_ +
           ", unordered (PTX ISA: an asynchronous operation's accesses are "
           "ordered only through the completion mechanism it names): " + why);
  };
  for (uint32_t line = range.begin / 128; line < (range.end + 127) / 128 &&
                                          line < asyncLines.size();
       ++line) {
    AsyncLine &cell = asyncLines[line];
    check(cell.write, true, line);
    if (write)
      for (const AsyncAccess &r : cell.reads)
        check(r, false, line);
  }
}

void CtaMachine::recordAsyncRead(Interval range, uint32_t token, uint32_t pc) {
  const AsyncToken &t = asyncTokens[token];
  for (uint32_t line = range.begin / 128; line < (range.end + 127) / 128 &&
                                          line < asyncLines.size();
       ++line) {
    std::vector<AsyncAccess> &reads = asyncLines[line].reads;
    auto same = std::find_if(reads.begin(), reads.end(), [&](const AsyncAccess &r) {
      const AsyncToken &u = asyncTokens[r.token];
      return u.kind == t.kind && u.who == t.who;
    });
    if (same != reads.end())
      *same = {token, pc};
    else
      reads.push_back({token, pc});
  }
}

void CtaMachine::finishTokens(uint32_t w,
                              std::vector<std::pair<uint32_t, uint32_t>> &pending,
                              uint32_t done) {
  auto end = std::remove_if(pending.begin(), pending.end(), [&](const auto &entry) {
    if (entry.first >= done)
      return false;
    asyncTokens[entry.second].value = warps[w].syncEpoch;
    return true;
  });
  pending.erase(end, pending.end());
}

void CtaMachine::orderShared(const Thread &th, Interval range, bool store, bool record,
                             bool init) {
  const uint32_t w = th.warp;
  const Warp &warp = warps[w];
  auto check = [&](const SmemAccess &prior, bool priorWrites, uint32_t addr) {
    if (prior.warp == 0xffff || prior.warp == w)
      return;
    const std::vector<uint32_t> &known = prior.init ? warp.knownInit : warp.knownSync;
    if (known.size() > prior.warp && known[prior.warp] >= prior.epoch)
      return;
    std::pair<uint32_t, uint32_t> key{prior.pc, th.pc};
    if (std::find(orderReported.begin(), orderReported.end(), key) != orderReported.end())
      return;
    orderReported.push_back(key);
    hazard(at(th) + ": " + (store ? "writes" : "reads") + " shared memory " + smemName(addr) +
           " that " + warpName(prior.warp) + " " +
           (priorWrites ? "wrote" : "read") + " at " +
           program.sources[program.code[prior.pc].source] +
           ", with no synchronization between them (a data race: no release of " +
           warpName(prior.warp) + " after that access was acquired by " + warpName(w) + ")");
  };
  for (uint32_t word = range.begin / 4; word < (range.end + 3) / 4 && word < smemOrder.size();
       ++word) {
    SmemWord &cell = smemOrder[word];
    check(cell.write, true, word * 4);
    if (store)
      for (const SmemAccess &r : cell.reads)
        check(r, false, word * 4);
    if (!record)
      continue;
    SmemAccess access{init ? warp.initEpoch : warp.syncEpoch, th.pc,
                      static_cast<uint16_t>(w), init};
    if (store) {
      cell.write = access;
      cell.reads[0] = cell.reads[1] = SmemAccess();
      continue;
    }
    SmemAccess *slot = cell.reads[0].warp == w || cell.reads[0].warp == 0xffff ? &cell.reads[0]
                       : cell.reads[1].warp == w || cell.reads[1].warp == 0xffff
                           ? &cell.reads[1]
                           : (cell.reads[0].epoch < cell.reads[1].epoch ? &cell.reads[0]
                                                                        : &cell.reads[1]);
    *slot = access;
  }
}

void CtaMachine::releaseTmemStores(uint32_t w, const std::vector<TmemRect> &rects) {
  const uint32_t tag = warps[w].tcFences + 1;
  for (const TmemRect &rect : rects)
    for (uint32_t q = rect.lane0 / 32; q < (rect.lane1 + 31) / 32 && q < kTmemLanes * clusterSize / 32; ++q)
      for (uint32_t c = rect.col0; c < rect.col1 && c < kTmemColumns; ++c) {
        TmemAccess &write = tmemOrder[size_t(q) * kTmemColumns + c].write;
        if (write.warp == w && write.tag == kUnwaitedStore)
          write.tag = tag;
      }
}

void CtaMachine::orderTmem(uint32_t w, uint32_t pc, const TmemRect &rect, bool write,
                           bool awaited) {
  const Warp &warp = warps[w];
  // A tcgen05.st is asynchronous: another thread's tcgen05 operation sees
  // it only after the storing warp's tcgen05.wait::st, then a
  // tcgen05.fence::before_thread_sync and a synchronization (CUTLASS's and
  // FA4's TMEM stores are waited for before the arrive that hands them on).
  // Until the wait its tag is one no fence reaches.
  const uint32_t tag = awaited ? warp.tcFences + 1 : kUnwaitedStore;
  auto check = [&](const TmemAccess &prior, bool priorWrites, uint32_t column) {
    if (prior.warp == 0xffff || prior.warp == w || warp.tcVisible[prior.warp] >= prior.tag)
      return;
    std::pair<uint32_t, uint32_t> key{prior.pc, pc};
    if (std::find(orderReported.begin(), orderReported.end(), key) != orderReported.end())
      return;
    orderReported.push_back(key);
    const Inst &mine = program.code[pc];
    std::string why =
        prior.tag == kUnwaitedStore
            ? warpName(prior.warp) +
                  " has not waited for that tcgen05.st (tcgen05.wait::st) "
                  "before the tcgen05.fence::before_thread_sync and the "
                  "synchronization that hand it on"
        : warp.knownTc[prior.warp] >= prior.tag
            ? warpName(w) +
                  " synchronized with " + warpName(prior.warp) +
                  " but has no tcgen05.fence::after_thread_sync between that "
                  "synchronization and this instruction"
            : warpName(prior.warp) +
                  " has no tcgen05.fence::before_thread_sync between that "
                  "instruction and a synchronization that " + warpName(w) + " waited for" +
                  (program.code[prior.pc].op == Op::TcSt
                       ? " (a tcgen05.st is handed on by a fence after its "
                         "tcgen05.wait::st)"
                       : "");
    hazard("cta (" + std::to_string(ctaIds[w / warpsPerCta][0]) + ") warp " +
           std::to_string(w % warpsPerCta) + " at " +
           program.sources[mine.source] + ": " + (write ? "writes" : "reads") +
           " TMEM lanes " + std::to_string(rect.lane0 % kTmemLanes) + ".." +
           std::to_string((rect.lane1 - 1) % kTmemLanes) + " column " + std::to_string(column) +
           " that " + warpName(prior.warp) + " " +
           (priorWrites ? "wrote" : "read") + " at " +
           program.sources[program.code[prior.pc].source] +
           ", unordered (PTX ISA: tcgen05 operations of two threads are ordered "
           "only by tcgen05.fence::before_thread_sync, a synchronization and "
           "tcgen05.fence::after_thread_sync): " + why);
  };
  for (uint32_t q = rect.lane0 / 32; q < (rect.lane1 + 31) / 32 && q < kTmemLanes * clusterSize / 32; ++q)
    for (uint32_t c = rect.col0; c < rect.col1 && c < kTmemColumns; ++c) {
      TmemCell &cell = tmemOrder[size_t(q) * kTmemColumns + c];
      check(cell.write, true, c);
      if (write)
        for (const TmemAccess &r : cell.reads)
          check(r, false, c);
      TmemAccess access{tag, pc, static_cast<uint16_t>(w)};
      if (write) {
        cell.write = access;
        for (TmemAccess &r : cell.reads)
          r = TmemAccess();
        continue;
      }
      // One read record per warp: its latest; a fourth warp replaces the
      // oldest.
      TmemAccess *slot = nullptr;
      for (TmemAccess &r : cell.reads)
        if (r.warp == w || r.warp == 0xffff) {
          slot = &r;
          break;
        }
      if (!slot) {
        slot = &cell.reads[0];
        for (TmemAccess &r : cell.reads)
          if (r.tag < slot->tag)
            slot = &r;
      }
      *slot = access;
    }
}

void CtaMachine::orderProxy(uint32_t w, const Interval &range,
                            llvm::function_ref<std::string()> what) {
  // A write not yet fenced by its own thread.
  if (unfencedBytes)
    for (uint32_t a = range.begin; a < range.end; ++a)
      if (unfencedOwner[a]) {
        const Thread &writer = threads[unfencedOwner[a] - 1];
        hazard(what() + " reads shared memory " + smemName(a) + " that thread " +
               std::to_string(writer.tid - writer.cta * numThreads) +
               (clusterSize > 1 ? " of CTA rank " + std::to_string(writer.cta) : "") +
               " wrote through the generic proxy with no fence.proxy.async since");
        return;
      }
  // Another warp's write, fenced after the release this warp acquired, or
  // not released to it at all.
  const Warp &warp = warps[w];
  bool possible = false;
  for (uint32_t u = 0; u < warps.size() && !possible; ++u)
    possible = u != w && warps[u].lastGenericTag > warp.knownProxy[u];
  if (!possible)
    return;
  for (uint32_t a = range.begin; a < range.end && a < genericTag.size(); ++a) {
    uint32_t tag = genericTag[a];
    if (!tag)
      continue;
    uint32_t u = (tag >> 24) - 1, t = tag & 0xffffff;
    if (u == w || warp.knownProxy[u] >= t)
      continue;
    hazard(what() + " reads shared memory " + smemName(a) + " that " + warpName(u) +
           " wrote through the generic proxy, with no fence.proxy.async in " + warpName(u) + " between that write and a synchronization " + warpName(w) + " waited for (a fence after the release does not "
           "order it)");
    return;
  }
}

void CtaMachine::completePhase(Mbarrier &bar) {
  ++bar.phase;
  // A wait that sees this completion acquires this phase's arrivals (not
  // earlier phases': a consumer lapped by its producer gains nothing).
  bar.released = std::move(bar.releasing);
  bar.releasing = Order();
  bar.pending = bar.expected;
  bar.tx = 0;
  for (uint32_t waiter : bar.waiters)
    if (strands[waiter].state == State::Mbarrier)
      makeRunnable(waiter);
  bar.waiters.clear();
}

void CtaMachine::arrive(uint32_t addr, Mbarrier &bar, int64_t count,
                        llvm::function_ref<std::string()> who) {
  if (bar.pending - count < 0) {
    misuse(who() + ": arrives on the mbarrier at smem " + smemName(addr) +
           " past its expected count (" + std::to_string(bar.expected) +
           " arrivals, " + std::to_string(bar.pending) +
           " pending, a transaction count of " + std::to_string(bar.tx) +
           " still outstanding)");
    return;
  }
  bar.pending -= count;
  if (bar.pending == 0 && bar.tx == 0)
    completePhase(bar);
}

void CtaMachine::completeTx(uint32_t addr, Mbarrier &bar, int64_t bytes) {
  bar.tx -= bytes;
  if (bar.pending == 0 && bar.tx < 0)
    misuse("the mbarrier at smem " + smemName(addr) + " received " +
           std::to_string(-bar.tx) +
           " more transaction bytes than its arrivals expected (a missing or "
           "short expect_tx)");
  if (bar.pending == 0 && bar.tx == 0)
    completePhase(bar);
}

bool CtaMachine::execMbarrier(Thread &th, const Inst &in) {
  const Operand *o = in.operands;
  const Operand &addrOp = in.op == Op::MbarArrive || in.op == Op::MbarTryWait ? o[1] : o[0];
  const uint64_t raw = address(th, addrOp);
  uint32_t addr = 0;
  if (in.op == Op::MbarInit) {
    if (raw % 8 || !flatShared(th.cta, raw, 8, false, addr)) {
      error(th, "mbarrier.init at " + hex(raw) + ", which is " +
                    (raw % 8 ? std::string("not 8-byte aligned")
                             : std::string("outside the CTA's shared memory "
                                           "(the launch's dynamic shared "
                                           "memory is too small?)")));
      return true;
    }
    uint64_t count = read(th, o[1], Ty::U32);
    if (count == 0 || count >= (1u << 20)) {
      error(th, "mbarrier.init with count " + std::to_string(count) +
                    " (1 to 2^20 - 1)");
      return true;
    }
    auto it = barriers.find(addr);
    if (it != barriers.end() && !it->second.waiters.empty())
      misuse(at(th) + ": re-initializes the mbarrier at smem " + smemName(addr) +
             " while threads wait on it");
    // The init writes the barrier: every other warp's use of it must be
    // ordered after the init by a synchronization (the generic data-race
    // check on its 8 bytes; an arrive or expect_tx reads them).
    orderShared(th, {addr, addr + 8}, true, true, /*init=*/true);
    Mbarrier &bar = barriers[addr];
    bar = Mbarrier();
    bar.expected = static_cast<uint32_t>(count);
    bar.pending = count;
    bar.initThread = th.tid;
    bar.id = nextBarrierId++;
    return true;
  }
  if (!barrierAddress(th, raw, in.flags & kClusterSpace, addr))
    return true;
  Mbarrier *bar = barrierAt(th, addr);
  if (!bar)
    return true;
  // Every use is ordered after the init. A release arrive (and an inval)
  // is also recorded, so that a re-init, or the exit of the barrier's CTA,
  // that it is not ordered before is seen; a wait, an expect_tx or a
  // relaxed arrive is seen by the barrier's waiters through the barrier
  // itself and is checked only.
  const bool recorded = in.op == Op::MbarInval ||
                        (in.op == Op::MbarArrive && !(in.flags & kRelaxed));
  orderShared(th, {addr, addr + 8}, in.op == Op::MbarInval, recorded);
  switch (in.op) {
  case Op::MbarInval:
    barriers.erase(addr);
    return true;
  case Op::MbarExpectTx:
    bar->tx += static_cast<int64_t>(read(th, o[1], Ty::U32));
    return true;
  case Op::MbarArrive: {
    // .release (the default) releases what the thread did before; .relaxed
    // only what a fence before it ordered.
    if (in.flags & kRelaxed)
      releaseRelaxed(th.warp, bar->releasing);
    else
      release(th.warp, bar->releasing);
    int64_t count = 1;
    if (in.flags & kExpectTx)
      bar->tx += static_cast<int64_t>(read(th, o[2], Ty::U32));
    else if (in.numOperands == 3)
      count = static_cast<int64_t>(read(th, o[2], Ty::U32));
    // The state token: the phase this arrival belongs to.
    write(th, o[0], bar->phase, Ty::B64);
    arrive(addr, *bar, count, [&] { return at(th); });
    return true;
  }
  case Op::MbarTryWait: {
    bool done;
    uint64_t parity = 0;
    if (in.flags & kParity) {
      parity = read(th, o[2], Ty::U32) & 1;
      done = (bar->phase & 1) != parity;
    } else {
      done = bar->phase > read(th, o[2], Ty::B64);
    }
    write(th, o[0], done, Ty::Pred);
    return done;
  }
  default:
    return true;
  }
}

//===----------------------------------------------------------------------===//
// Tensor memory
//===----------------------------------------------------------------------===//

bool CtaMachine::tmemCheck(const Thread *th, const TmemRect &rect,
                           const std::string &what) {
  // The rectangle is in the cluster's numbering: one CTA's lanes, or a
  // pair's; each CTA's part must be inside one of its allocations.
  const uint32_t cta = rect.lane0 / kTmemLanes;
  bool inside = rect.lane1 <= clusterSize * kTmemLanes;
  for (uint32_t c = cta; inside && c * kTmemLanes < rect.lane1; ++c) {
    bool here = false;
    for (auto [column, count] : tmemAllocations[c])
      if (rect.col0 >= column && rect.col1 <= column + count)
        here = true;
    inside = here;
  }
  if (inside)
    return true;
  std::string message = what + " reaches TMEM lanes " +
                        std::to_string(rect.lane0 - cta * kTmemLanes) + ".." +
                        std::to_string(rect.lane1 - 1 - cta * kTmemLanes) + ", columns " +
                        std::to_string(rect.col0) + ".." +
                        std::to_string(rect.col1 - 1) +
                        ", outside every tcgen05.alloc allocation";
  error(th ? *th : threads[0], message);
  return false;
}

//===----------------------------------------------------------------------===//
// TMA
//===----------------------------------------------------------------------===//

bool CtaMachine::decodeMap(Thread &th, uint64_t generic,
                           runtime::TensorMapSpec &map) {
  if (generic % 64) {
    error(th, "the tensor map at " + hex(generic) +
                  " is not 64-byte aligned (TMA descriptors must be)");
    return false;
  }
  // A descriptor passed as a kernel parameter is 64-byte aligned only if the
  // parameter is declared so: where the driver places it is otherwise free.
  if (generic >= kGenericParam && generic < kGenericParam + params.size())
    for (size_t i = 0; i < kernel.params.size(); ++i) {
      uint64_t begin = kGenericParam + kernel.paramOffsets[i];
      if (generic >= begin && generic < begin + kernel.params[i].bytes &&
          kernel.params[i].align < 64) {
        error(th, "the tensor map is the kernel parameter " + kernel.params[i].name +
                      ", declared .align " + std::to_string(kernel.params[i].align) +
                      ": TMA descriptors must be 64-byte aligned (.align 64)");
        return false;
      }
    }
  uint32_t smemAddr;
  uint8_t *bytes = memory(th, Space::Generic, generic, 128, false, smemAddr);
  if (!bytes)
    return false;
  llvm::Expected<runtime::TensorMapSpec> decoded = decodeTensorMap(bytes);
  if (!decoded) {
    error(th, "the operand at " + hex(generic) + " is not a tensor map: " +
                  llvm::toString(decoded.takeError()));
    return false;
  }
  map = *decoded;
  return true;
}

void CtaMachine::execTma(Thread &th, const Inst &in) {
  bool load = in.op == Op::TmaLoad;
  const Operand &mapOp = in.operands[load ? 1 : 0];
  const Operand &smemOp = in.operands[load ? 0 : 1];
  TmaOp op;
  op.load = load;
  op.reduceAdd = !load && in.type2 == Ty::F32;
  op.thread = th.tid;
  op.source = in.source;
  if (!decodeMap(th, address(th, mapOp), op.map))
    return;
  if (op.map.rank != in.count || mapOp.vecCount != in.count) {
    error(th, "a " + std::to_string(in.count) + "d copy with a rank-" +
                  std::to_string(op.map.rank) + " tensor map and " +
                  std::to_string(mapOp.vecCount) + " coordinates");
    return;
  }
  for (uint32_t d = 0; d < op.map.rank; ++d) {
    op.coords[d] = static_cast<int32_t>(
        read(th, program.vectors[mapOp.vecBegin + d], Ty::S32));
    if (op.map.elementStrides[d] != 1) {
      error(th, "tensor maps with element strides other than 1 are not modelled");
      return;
    }
  }
  // A load may start before the tensor (what lies outside is filled); a
  // store may run past its end (clipped) but not start before it: an H200
  // faults with an illegal instruction on a TMA store at a negative
  // coordinate (fa4-tma-check, docs/Runtime.md), so the emulator refuses it.
  for (uint32_t d = 0; !load && d < op.map.rank; ++d)
    if (op.coords[d] < 0) {
      error(th, "a TMA store at the negative coordinate " +
                    std::to_string(op.coords[d]) + " of dimension " + std::to_string(d) +
                    " (the hardware faults on it)");
      return;
    }
  if (op.reduceAdd && op.map.dataType != runtime::TensorMapDataType::Float32) {
    error(th, "a TMA reduction (.add) through a tensor map of another "
              "element type than f32 (only f32 additions are modelled)");
    return;
  }
  uint64_t bytes = runtime::elementBytes(op.map.dataType);
  for (uint32_t d = 0; d < op.map.rank; ++d)
    bytes *= op.map.boxDims[d];
  op.bytes = static_cast<uint32_t>(bytes);
  // A load's destination and mbarrier may be a peer CTA's
  // (.shared::cluster); a store reads the issuing CTA's shared memory.
  const bool cluster = load && (in.flags & kClusterSpace);
  const uint64_t smemRaw = address(th, smemOp);
  if (smemRaw % 128 || !flatShared(th.cta, smemRaw, op.bytes, cluster, op.smem)) {
    const uint64_t rank = smemRaw >> kClusterRankShift;
    error(th, std::string("TMA ") + (load ? "destination" : "source") + " [" +
                  hex(smemRaw) + ", " + hex(smemRaw + op.bytes) + ") is " +
                  (smemRaw % 128 ? "not 128-byte aligned"
                   : rank != th.cta && !cluster
                       ? "CTA rank " + std::to_string(rank) +
                             "'s shared memory, which a " +
                             (load ? ".shared::cta destination" : "TMA store") +
                             " cannot reach"
                   : rank >= clusterSize
                       ? "in CTA rank " + std::to_string(rank) + ", outside the " +
                             std::to_string(clusterSize) + "-CTA cluster"
                       : std::string("not inside the shared memory of CTA rank ") +
                             std::to_string(rank)));
    return;
  }
  // A swizzle moves 16-byte chunks within their 128-byte line, so a box
  // whose rows are narrower than the swizzle span reaches past its own
  // bytes: the whole lines it touches must be shared memory.
  if (op.map.swizzle != runtime::TensorMapSwizzle::None) {
    const uint32_t offset = op.smem % smemStride;
    uint64_t lineEnd = (uint64_t(offset) + op.bytes + 127) / 128 * 128;
    if (lineEnd > smemEnd) {
      error(th, std::string("the swizzled TMA ") + (load ? "destination" : "source") +
                    " [" + hex(offset) + ", " + hex(uint64_t(offset) + op.bytes) +
                    ") reaches " + hex(lineEnd) +
                    " through its swizzle (16-byte chunks move within their "
                    "128-byte line), past the CTA's shared memory at " +
                    hex(smemEnd));
      return;
    }
  }
  if (!load) {
    issueTma(th, op);
    return;
  }
  uint32_t barrier;
  if (!barrierAddress(th, address(th, in.operands[2]), cluster, barrier))
    return;
  // With .cta_group::2 the mbarrier may be the destination CTA's peer's
  // (PTX ISA): a pair's loads complete on one CTA's barrier.
  const bool pair = in.flags & kCtaGroup2;
  if (!(in.flags & kMulticast)) {
    // Without a multicast the box and the mbarrier are one CTA's (or a
    // pair's).
    uint32_t boxCta = ctaOfShared(op.smem), barCta = ctaOfShared(barrier);
    if (barCta != boxCta && !(pair && barCta == (boxCta ^ 1))) {
      error(th, "a TMA load into " + smemName(op.smem) +
                    " completing on the mbarrier at " + smemName(barrier) +
                    ", another CTA's (the destination and its mbarrier must "
                    "be in one CTA" + (pair ? ", or a pair's)" : ")"));
      return;
    }
    op.barrier = barrier;
    issueTma(th, op);
    return;
  }
  // .multicast::cluster: the same box at the same offset of each CTA of the
  // mask, each completing on its mbarrier at the same offset.
  uint32_t mask = static_cast<uint32_t>(read(th, in.operands[3], Ty::B16)) & 0xffff;
  if (mask == 0 || (clusterSize < 16 && (mask >> clusterSize))) {
    error(th, "a multicast TMA load with the CTA mask " + hex(mask) + " (a " +
                  std::to_string(clusterSize) + "-CTA cluster has ranks 0.." +
                  std::to_string(clusterSize - 1) + ")");
    return;
  }
  // With .cta_group::2 each destination's mbarrier is in the CTA of its
  // pair that the given one is in (the even CTA's, where CUTLASS's 2-SM
  // multicast names the even CTA's barrier): the emulator's reading of the
  // ISA's "either the same CTA as dstMem or its peer".
  const uint32_t boxOffset = op.smem % smemStride, barOffset = barrier % smemStride;
  const uint32_t barParity = ctaOfShared(barrier) & 1;
  for (uint32_t rank = 0; rank < clusterSize && !stopped; ++rank)
    if (mask >> rank & 1) {
      TmaOp one = op;
      uint32_t barCta = pair ? ((rank & ~1u) | barParity) : rank;
      if (barCta >= clusterSize) {
        error(th, "a multicast TMA load to CTA rank " + std::to_string(rank) +
                      " completes on the mbarrier of rank " + std::to_string(barCta) +
                      ", past the cluster");
        return;
      }
      one.smem = sharedBase(rank) + boxOffset;
      one.barrier = sharedBase(barCta) + barOffset;
      issueTma(th, one);
    }
}

void CtaMachine::issueTma(Thread &th, TmaOp op) {
  const bool load = op.load;
  Interval region{op.smem, op.smem + op.bytes};
  for (const TmaOp &other : tmaInFlight) {
    Interval theirs{other.smem, other.smem + other.bytes};
    if (!theirs.overlaps(region) || (!load && !other.load))
      continue;
    hazard(at(th) + ": " + (load ? "writes" : "reads") + " shared memory [" +
           smemName(region.begin) + ", " + smemName(region.end, true) + ") that an in-flight TMA " +
           (other.load ? "load" : "store") + " (" + program.sources[other.source] +
           ") is " + (other.load ? "writing" : "reading"));
  }
  if (load) {
    for (const TensorOp &mma : tensorPipe)
      if (mma.readsShared(region))
        hazard(at(th) + ": overwrites shared memory [" + smemName(region.begin) + ", " +
               smemName(region.end, true) + ") that an in-flight MMA (" +
               program.sources[mma.source] + ") is still reading");
    for (const WgmmaOp &mma : wgmmaInFlight)
      if (mma.aSmem.overlaps(region) || mma.bSmem.overlaps(region)) {
        hazard(at(th) + ": overwrites shared memory [" + smemName(region.begin) +
               ", " + smemName(region.end, true) + ") that an in-flight wgmma (" +
               program.sources[program.code[mma.pc].source] +
               ") is still reading");
        break;
      }
    if (!asyncBarrierAt(th, op.barrier, "a TMA load"))
      return;
    // A swizzle moves 16-byte chunks within their 128-byte line only.
    Interval landing{region.begin & ~127u, (region.end + 127) & ~127u};
    if (uint32_t bar = barrierIn(landing); bar != ~0u) {
      error(th, "the TMA load's box [" + smemName(region.begin) + ", " +
                    smemName(region.end, true) + ") covers the live mbarrier at smem " +
                    smemName(bar) + " (a write there corrupts its phase)");
      return;
    }
    report.tmaLoadBytes += op.bytes;
    // The load overwrites what the generic proxy and the async proxy did
    // there: both must be ordered before it.
    orderShared(th, landing, true, /*record=*/false);
    orderAsync(th.warp, th.pc, landing, true, [&] { return at(th) + ": the TMA load"; });
    // What the async proxy writes supersedes the generic accesses there
    // (its ordering is the mbarrier's complete_tx).
    std::fill(genericTag.begin() + landing.begin,
              genericTag.begin() + std::min<size_t>(landing.end, genericTag.size()), 0);
    for (uint32_t word = landing.begin / 4; word < landing.end / 4 && word < smemOrder.size();
         ++word)
      smemOrder[word] = SmemWord();
    op.token = newToken(TokenKind::Phase, barriers[op.barrier].id, kPendingToken);
    for (uint32_t line = landing.begin / 128; line < landing.end / 128 && line < asyncLines.size();
         ++line)
      asyncLines[line] = AsyncLine{{op.token, th.pc}, {}};
  } else {
    orderProxy(th.warp, region, [&] { return at(th) + ": the TMA store"; });
    Interval lines{region.begin & ~127u, (region.end + 127) & ~127u};
    orderAsync(th.warp, th.pc, lines, false, [&] { return at(th) + ": the TMA store"; });
    op.group = th.committedGroups;
    op.token = newToken(TokenKind::Epoch, th.warp, kPendingToken);
    recordAsyncRead(lines, op.token, th.pc);
    th.storeTokens.push_back({op.group, op.token});
    ++th.storesInFlight[op.group];
    report.tmaStoreBytes += op.bytes;
  }
  op.due = now + randomDelay();
  tmaInFlight.push_back(op);
}

/// Moves one TMA box between global and shared memory, a box row at a time:
/// rows are the innermost dimension, laid densely in shared memory and
/// swizzled in 16-byte chunks.
void CtaMachine::runTma(TmaOp &op) {
  const runtime::TensorMapSpec &map = op.map;
  Thread &th = threads[op.thread];
  uint32_t eb = runtime::elementBytes(map.dataType);
  uint32_t rowBytes = map.boxDims[0] * eb;
  Swizzle swizzle = static_cast<Swizzle>(map.swizzle);
  uint32_t rows = 1;
  for (uint32_t d = 1; d < map.rank; ++d)
    rows *= map.boxDims[d];
  std::vector<uint8_t> row(rowBytes);
  uint64_t fill = 0;
  if (map.oobFill == runtime::TensorMapOobFill::NanRequestZeroFma)
    fill = eb == 2 ? 0x7fff : eb == 4 ? 0x7fffffff : ~0ull >> 1;
  for (uint32_t r = 0; r < rows && !stopped; ++r) {
    // The outer coordinates of this row.
    bool inBounds = true;
    uint64_t rowAddress = map.globalAddress;
    uint32_t rest = r;
    for (uint32_t d = 1; d < map.rank; ++d) {
      int64_t c = op.coords[d] + rest % map.boxDims[d];
      rest /= map.boxDims[d];
      if (c < 0 || uint64_t(c) >= map.globalDims[d])
        inBounds = false;
      rowAddress += uint64_t(c) * map.globalStrides[d - 1];
    }
    // The in-bounds span of the row: [first, last).
    int64_t first = std::max<int64_t>(0, -op.coords[0]);
    int64_t last = std::min<int64_t>(map.boxDims[0],
                                     int64_t(map.globalDims[0]) - op.coords[0]);
    if (!inBounds)
      last = first;
    uint8_t *global = nullptr;
    if (last > first) {
      uint64_t begin = rowAddress + uint64_t(op.coords[0] + first) * eb;
      global = device.host(begin, uint64_t(last - first) * eb);
      if (!global) {
        error(th, std::string("the TMA ") + (op.load ? "load" : "store") + " (" +
                      program.sources[op.source] + ") reaches global address " +
                      hex(begin) +
                      ", outside every allocation: the tensor map's dims or "
                      "strides exceed its tensor");
        return;
      }
    }
    uint32_t rowBase = op.smem + r * rowBytes;
    if (op.load) {
      for (uint32_t i = 0; i < map.boxDims[0]; ++i)
        std::memcpy(row.data() + i * eb, &fill, eb);
      if (global)
        std::memcpy(row.data() + first * eb, global, (last - first) * eb);
      for (uint32_t chunk = 0; chunk < rowBytes; chunk += 16)
        std::memcpy(smem.data() + tmaBoxAddress(swizzle, rowBase, chunk),
                    row.data() + chunk, std::min(16u, rowBytes - chunk));
    } else {
      for (uint32_t chunk = 0; chunk < rowBytes; chunk += 16)
        std::memcpy(row.data() + chunk,
                    smem.data() + tmaBoxAddress(swizzle, rowBase, chunk),
                    std::min(16u, rowBytes - chunk));
      if (global && op.reduceAdd) {
        // The tensor's elements gain the box's (f32), each add atomic on
        // the GPU: here a host atomic, as red.global's (the launch's CTAs
        // share global memory from host threads), at the reduction's one
        // moment of completion.
        if (reinterpret_cast<uintptr_t>(global) % 4) {
          error(th, "a TMA reduction (" + program.sources[op.source] +
                        ") into f32 elements not aligned to 4 bytes");
          return;
        }
        for (int64_t i = 0; i < last - first; ++i) {
          float addend;
          std::memcpy(&addend, row.data() + (first + i) * 4, 4);
          atomicAddF32(reinterpret_cast<uint32_t *>(global + i * 4), addend);
        }
      } else if (global) {
        std::memcpy(global, row.data() + first * eb, (last - first) * eb);
      }
    }
  }
  if (op.load) {
    auto it = barriers.find(op.barrier);
    if (it == barriers.end())
      misuse("a TMA load (" + program.sources[op.source] +
             ") completed on the mbarrier at smem " + smemName(op.barrier) +
             ", which is no longer initialized");
    else {
      // Its write is seen by whoever acquires the phase this completes.
      if (it->second.id == asyncTokens[op.token].who)
        asyncTokens[op.token].value = it->second.phase + 1;
      completeTx(op.barrier, it->second, op.bytes);
    }
  } else {
    auto it = th.storesInFlight.find(op.group);
    if (it != th.storesInFlight.end() && --it->second == 0)
      th.storesInFlight.erase(it);
    wake(th.warp, State::BulkWait);
  }
}

bool CtaMachine::bulkGroupsDone(const Thread &th, const Inst &in) const {
  uint64_t allowed = static_cast<uint64_t>(in.operands[0].imm);
  uint64_t pendingGroups = 0;
  for (auto [group, count] : th.storesInFlight)
    if (group < th.committedGroups && count)
      ++pendingGroups;
  return pendingGroups <= allowed;
}

//===----------------------------------------------------------------------===//
// The tensor core
//===----------------------------------------------------------------------===//

void CtaMachine::execMma(Thread &th, const Inst &in) {
  TensorOp op;
  op.source = in.source;
  op.thread = th.tid;
  std::string why;
  uint32_t idesc = static_cast<uint32_t>(read(th, in.operands[3], Ty::B32));
  op.pair = in.flags & kCtaGroup2;
  const unsigned group = op.pair ? 2 : 1;
  bool decoded = in.kind == MmaKind::F8F6F4
                     ? decodeInstrDescriptorF8F6F4(idesc, op.instr, why, group)
                     : decodeInstrDescriptorF16(idesc, op.instr, why, group);
  if (!decoded) {
    error(th, "tcgen05.mma: " + why);
    return;
  }
  const uint32_t modelledM = op.pair ? 256 : 128;
  if (op.instr.m != modelledM || !op.instr.dF32) {
    error(th, std::string("tcgen05.mma") + (op.pair ? ".cta_group::2" : "") +
                  " with M = " + std::to_string(op.instr.m) +
                  (op.instr.dF32 ? "" : " and an f16 accumulator") +
                  " is not modelled (M = " + std::to_string(modelledM) +
                  ", f32 D are)");
    return;
  }
  if (in.numOperands == 6) {
    // The disable-output-lane mask: every lane writes unless a bit says.
    const Operand &mask = in.operands[5];
    for (uint32_t i = 0; i < mask.vecCount; ++i)
      if (read(th, program.vectors[mask.vecBegin + i], Ty::B32) != 0) {
        error(th, "tcgen05.mma with a non-zero disable-output-lane mask (not "
                  "modelled)");
        return;
      }
  }
  // A pair's MMA: the even CTA of the issuer's pair and its peer.
  op.pairCta = op.pair ? th.cta & ~1u : th.cta;
  if (op.pair && op.pairCta + 1 >= clusterSize) {
    error(th, "tcgen05.mma.cta_group::2 needs the peer CTA of rank " +
                  std::to_string(th.cta ^ 1) + ", which a " +
                  std::to_string(clusterSize) + "-CTA cluster does not have");
    return;
  }
  op.d = static_cast<uint32_t>(address(th, in.operands[0]));
  op.aInTmem = in.flags & kTmemA;
  op.accumulate = read(th, in.operands[4], Ty::Pred) & 1;
  // A descriptor written `%rd+imm` (a Mem operand) is that sum.
  auto descriptor = [&](const Operand &operand) -> uint64_t {
    return operand.kind == Operand::Kind::Mem ? address(th, operand)
                                              : read(th, operand, Ty::B64);
  };
  op.bDesc = descriptor(in.operands[2]);
  if (!decodeSmemDescriptor(op.bDesc, op.b, why)) {
    error(th, "tcgen05.mma operand B: " + why);
    return;
  }
  if (op.aInTmem) {
    op.aTmem = static_cast<uint32_t>(address(th, in.operands[1]));
    if (op.instr.aMajor != Major::K) {
      error(th, "tcgen05.mma with A in TMEM must have a K-major A");
      return;
    }
  } else {
    op.aDesc = descriptor(in.operands[1]);
    if (!decodeSmemDescriptor(op.aDesc, op.a, why)) {
      error(th, "tcgen05.mma operand A: " + why);
      return;
    }
  }
  // The descriptors' addresses are the issuing CTA's (shared::cta); in
  // the cluster's numbering its bytes start at its base (a multiple of
  // 1024, so the swizzle is the same).
  // A pair's descriptors name the same offsets in both CTAs: the even
  // CTA's bytes here, the odd one's one stride on.
  op.a.startAddress += sharedBase(op.pairCta);
  op.b.startAddress += sharedBase(op.pairCta);
  // What the MMA will touch, for the hazard checks. A kind's operands are
  // of one width (kind::f8f6f4's e4m3 and e5m2 both bytes). A pair's CTAs
  // each hold 128 rows of A and N/2 of B.
  uint32_t eb = mmaElementBytes(op.instr.aType);
  const uint32_t aRows = op.pair ? op.instr.m / 2 : op.instr.m;
  const uint32_t bRows = op.pair ? op.instr.n / 2 : op.instr.n;
  if (!op.aInTmem)
    op.aSmem = operandSpan(op.a, op.instr.aMajor, 0, aRows, eb);
  op.bSmem = operandSpan(op.b, op.instr.bMajor, 0, bRows, eb);
  auto shifted = [&](const Interval &range) {
    return range.end > range.begin
               ? Interval{range.begin + smemStride, range.end + smemStride}
               : range;
  };
  if (op.pair) {
    op.aSmemPeer = shifted(op.aSmem);
    op.bSmemPeer = shifted(op.bSmem);
  }
  for (const Interval &range : {op.aSmem, op.bSmem, op.aSmemPeer, op.bSmemPeer})
    if (range.end > range.begin &&
        (!checkShared(range.begin, range.end - range.begin) ||
         ctaOfShared(range.begin) != ctaOfShared(range.end - 1) ||
         ctaOfShared(range.begin) - op.pairCta > 1)) {
      error(th, "tcgen05.mma reads shared memory [" + smemName(range.begin) + ", " +
                    smemName(range.end, true) + "), outside the CTA's shared memory "
                    "(check the descriptor's start address, LBO and SBO)");
      return;
    }
  uint32_t dLane = op.d >> 16, dCol = op.d & 0xffff;
  // A pair's D: each CTA's lanes 0-127 (contiguous in the cluster's
  // numbering).
  const uint32_t lane0 = op.pairCta * kTmemLanes;
  op.dRect = {lane0 + dLane, lane0 + dLane + op.instr.m, dCol, dCol + op.instr.n};
  if (dLane != 0) {
    error(th, "tcgen05.mma with M = " + std::to_string(op.instr.m) +
                  " must write TMEM from lane 0, not lane " + std::to_string(dLane));
    return;
  }
  if (!tmemCheck(&th, op.dRect, "the MMA's accumulator"))
    return;
  if (op.aInTmem) {
    // A's K elements of a row fill 32 bytes: 8 columns of either width.
    uint32_t aLane = op.aTmem >> 16, aCol = op.aTmem & 0xffff;
    op.aRect = {lane0 + aLane, lane0 + aLane + op.instr.m, aCol, aCol + 8};
    if (aLane != 0) {
      error(th, "tcgen05.mma reads A from TMEM lane " + std::to_string(aLane) +
                    " (its A is lanes 0..127" + (op.pair ? " of each CTA)" : ")"));
      return;
    }
    if (!tmemCheck(&th, op.aRect, "the MMA's A operand"))
      return;
  }
  // Hazards against the threads and the other asynchronous units.
  for (const TmaOp &tma : tmaInFlight) {
    Interval region{tma.smem, tma.smem + tma.bytes};
    if (tma.load && op.readsShared(region))
      hazard(at(th) + ": the MMA reads shared memory [" + smemName(region.begin) +
             ", " + smemName(region.end, true) + ") that an in-flight TMA load (" +
             program.sources[tma.source] + ") is still writing");
  }
  for (const Interval &range : {op.aSmem, op.bSmem, op.aSmemPeer, op.bSmemPeer})
    if (range.end > range.begin)
      orderProxy(th.warp, range, [&] { return at(th) + ": the MMA"; });
  // Its reads are done when a later tcgen05.commit of this warp arrives.
  uint32_t token = newToken(TokenKind::Commit, th.warp, warps[th.warp].commits + 1);
  for (const Interval &range : {op.aSmem, op.bSmem, op.aSmemPeer, op.bSmemPeer})
    if (range.end > range.begin) {
      orderAsync(th.warp, th.pc, range, false, [&] { return at(th) + ": the MMA"; });
      recordAsyncRead(range, token, th.pc);
    }
  orderTmem(th.warp, th.pc, op.dRect, true);
  if (op.aInTmem)
    orderTmem(th.warp, th.pc, op.aRect, false);
  for (const Thread &other : threads)
    for (const TmemRect &rect : other.pendingSt)
      if ((op.aInTmem && rect.overlaps(op.aRect)) || rect.overlaps(op.dRect)) {
        hazard(at(th) + ": the MMA " +
               (op.aInTmem && rect.overlaps(op.aRect) ? "reads" : "writes") +
               " TMEM lane " + std::to_string(rect.lane0 % kTmemLanes) + " columns " +
               std::to_string(rect.col0) + ".." + std::to_string(rect.col1 - 1) +
               " that " + threadName(other) +
               " stored with tcgen05.st and has not waited for (tcgen05.wait::st)");
        break;
      }
  uint64_t due = now + randomDelay();
  if (!tensorPipe.empty())
    due = std::max(due, tensorPipe.back().due);
  op.due = due;
  tensorPipe.push_back(op);
  ++report.mmas;
}

void CtaMachine::execCommit(Thread &th, const Inst &in) {
  TensorOp op;
  op.commit = true;
  op.source = in.source;
  op.thread = th.tid;
  if (!barrierAddress(th, address(th, in.operands[0]), in.flags & kClusterSpace,
                      op.barrier))
    return;
  if (in.flags & kMulticast) {
    // The arrive reaches the mbarrier at the same offset in each CTA of the
    // mask.
    uint32_t mask = static_cast<uint32_t>(read(th, in.operands[1], Ty::B16)) & 0xffff;
    if (mask == 0 || (clusterSize < 16 && (mask >> clusterSize))) {
      error(th, "tcgen05.commit multicast to the CTA mask " + hex(mask) + " (a " +
                    std::to_string(clusterSize) + "-CTA cluster has ranks 0.." +
                    std::to_string(clusterSize - 1) + ")");
      return;
    }
    op.multicast = static_cast<uint16_t>(mask);
    op.barrier %= smemStride;
    for (uint32_t rank = 0; rank < clusterSize; ++rank)
      if ((mask >> rank & 1) &&
          !asyncBarrierAt(th, sharedBase(rank) + op.barrier, "tcgen05.commit"))
        return;
  } else if (!asyncBarrierAt(th, op.barrier, "tcgen05.commit")) {
    return;
  }
  // The commit's arrive fences what the warp issued before it, as
  // tcgen05.fence::before_thread_sync would (PTX ISA, tcgen05.commit).
  ++warps[th.warp].tcFences;
  release(th.warp, op.order);
  op.commitIndex = ++warps[th.warp].commits;
  op.due = tensorPipe.empty() ? now : tensorPipe.back().due;
  tensorPipe.push_back(op);
}

/// One MMA: D[m][n] (+)= sum over k < K of A[m][k] * B[n][k], K = 16 for
/// kind::f16 and 32 for kind::f8f6f4; the products exact in f32 (at most 22
/// significant bits for f16, 8 for e4m3), summed in f32 in k order onto D.
/// The PTX ISA leaves the accumulation's order and internal precision to
/// the hardware; this is one order, in full f32.
void CtaMachine::runTensorOp(TensorOp &op) {
  if (op.commit) {
    // One arrive, or one on each CTA of a multicast's mask (`barrier` then
    // the offset in each).
    for (uint32_t rank = 0; rank < clusterSize; ++rank) {
      uint32_t target = op.barrier;
      if (op.multicast) {
        if (!(op.multicast >> rank & 1))
          continue;
        target = sharedBase(rank) + op.barrier;
      } else if (rank > 0) {
        break;
      }
      arriveFromCommit(op, target);
    }
    return;
  }
  runMma(op);
}

void CtaMachine::arriveFromCommit(TensorOp &op, uint32_t target) {
  auto it = barriers.find(target);
  if (it == barriers.end())
    misuse("tcgen05.commit (" + program.sources[op.source] +
           ") arrives on the mbarrier at smem " + smemName(target) +
           ", which is no longer initialized");
  else {
    it->second.releasing.join(op.order);
    // The arrive says the warp's earlier tcgen05 operations are done.
    std::vector<uint32_t> &commits = it->second.releasing.commit;
    uint32_t issuer = threads[op.thread].warp;
    if (commits.size() <= issuer)
      commits.resize(issuer + 1, 0);
    commits[issuer] = std::max(commits[issuer], op.commitIndex);
    arrive(target, it->second, 1, [&] { return program.sources[op.source]; });
  }
}

void CtaMachine::runMma(TensorOp &op) {
  const uint32_t M = op.instr.m, N = op.instr.n;
  const uint32_t eb = mmaElementBytes(op.instr.aType), K = mmaK(eb);
  const float *aTable = elementTable(op.instr.aType);
  const float *bTable = elementTable(op.instr.bType);
  // A pair's rows and columns are split between its CTAs: A's row m is row
  // m % 128 of CTA m / 128's operand, B's row n row n % (N / 2) of CTA
  // n / (N / 2)'s, each at the descriptor's offset in its CTA.
  const uint32_t aRows = op.pair ? M / 2 : M, bRows = op.pair ? N / 2 : N;
  auto partOf = [&](const SmemDescriptor &desc, uint32_t part) {
    SmemDescriptor shifted = desc;
    shifted.startAddress += part * smemStride;
    return shifted;
  };
  const SmemDescriptor aParts[2] = {op.a, partOf(op.a, 1)};
  const SmemDescriptor bParts[2] = {op.b, partOf(op.b, 1)};
  float a[256][32];
  std::vector<float> bt(K * N);
  for (uint32_t m = 0; m < M; ++m)
    for (uint32_t k = 0; k < K; ++k) {
      uint32_t bits;
      if (op.aInTmem) {
        // A row's elements packed into 32-bit columns, the lowest k in the
        // lowest bits.
        uint32_t perColumn = 4 / eb;
        uint32_t word = tmem[size_t(op.aRect.lane0 + m) * kTmemColumns +
                             (op.aTmem & 0xffff) + k / perColumn];
        bits = (word >> (8 * eb * (k % perColumn))) & ((1u << (8 * eb)) - 1);
      } else {
        bits = loadElement(smem,
                           operandAddress(aParts[m / aRows], op.instr.aMajor,
                                          m % aRows, k, eb),
                           eb);
      }
      a[m][k] = op.instr.negateA ? -aTable[bits] : aTable[bits];
    }
  for (uint32_t n = 0; n < N; ++n)
    for (uint32_t k = 0; k < K; ++k) {
      float b = bTable[loadElement(
          smem, operandAddress(bParts[n / bRows], op.instr.bMajor, n % bRows, k, eb),
          eb)];
      bt[k * N + n] = op.instr.negateB ? -b : b;
    }
  uint32_t dCol = op.d & 0xffff;
  std::vector<float> acc(N);
  for (uint32_t m = 0; m < M; ++m) {
    uint32_t *row = tmem.data() + size_t(op.dRect.lane0 + m) * kTmemColumns + dCol;
    if (op.accumulate)
      std::memcpy(acc.data(), row, N * 4);
    else
      std::fill(acc.begin(), acc.end(), 0.0f);
    for (uint32_t k = 0; k < K; ++k) {
      float x = a[m][k];
      const float *b = bt.data() + k * N;
      for (uint32_t n = 0; n < N; ++n)
        acc[n] += x * b[n];
    }
    std::memcpy(row, acc.data(), N * 4);
  }
}

//===----------------------------------------------------------------------===//
// wgmma (sm_90a)
//===----------------------------------------------------------------------===//

/// Calls `body(slot, written)` for every register `in` names: its guard,
/// operands, vector elements and address bases; `written` for its
/// destination.
template <typename Body>
static void forEachRegister(const Program &program, const Inst &in, Body body) {
  if (in.guard != kNoReg)
    body(in.guard, false);
  bool writesFirst =
      !(in.op == Op::St || in.op == Op::TcSt || in.op == Op::TcMma ||
        in.op == Op::TmaLoad || in.op == Op::TmaStore || in.op == Op::MbarInit ||
        in.op == Op::Bra || in.op == Op::BarSync || in.op == Op::BarArrive ||
        in.op == Op::MbarExpectTx || in.op == Op::MbarInval ||
        in.op == Op::BulkWait || in.op == Op::SetMaxNReg ||
        in.op == Op::BarWarpSync || in.op == Op::TcDealloc ||
        in.op == Op::TcAlloc || in.op == Op::TcCommit);
  for (uint32_t i = 0; i < in.numOperands; ++i) {
    const Operand &o = in.operands[i];
    bool written = i == 0 && writesFirst;
    switch (o.kind) {
    case Operand::Kind::Reg:
      body(o.reg, written);
      if (o.reg2 != kNoReg)
        body(o.reg2, written);
      break;
    case Operand::Kind::Mem:
      if (o.reg != kNoReg)
        body(o.reg, false);
      for (uint32_t e = 0; e < o.vecCount; ++e)
        if (program.vectors[o.vecBegin + e].kind == Operand::Kind::Reg)
          body(program.vectors[o.vecBegin + e].reg, false);
      break;
    case Operand::Kind::Vec:
      for (uint32_t e = 0; e < o.vecCount; ++e)
        if (program.vectors[o.vecBegin + e].kind == Operand::Kind::Reg)
          body(program.vectors[o.vecBegin + e].reg, written);
      break;
    default:
      break;
    }
  }
}

void CtaMachine::markWgmmaRegisters(const WgmmaOp &op, int delta) {
  const Inst &in = program.code[op.pc];
  uint16_t *slots = wgmmaRegisters.data() + size_t(op.warp) * program.numRegs;
  const Operand &d = in.operands[0];
  for (uint32_t e = 0; e < d.vecCount; ++e)
    slots[program.vectors[d.vecBegin + e].reg] += delta;
  if (in.flags & kRegA) {
    const Operand &a = in.operands[1];
    for (uint32_t e = 0; e < a.vecCount; ++e)
      if (program.vectors[a.vecBegin + e].kind == Operand::Kind::Reg)
        slots[program.vectors[a.vecBegin + e].reg] += delta * 0x100;
  }
}

void CtaMachine::checkWgmmaRegisters(uint32_t w, const Inst &in) {
  const uint16_t *slots = wgmmaRegisters.data() + size_t(w) * program.numRegs;
  bool reported = false;
  forEachRegister(program, in, [&](uint32_t slot, bool written) {
    uint16_t busy = slots[slot];
    if (reported || !busy)
      return;
    const char *what = nullptr;
    if (busy & 0xff)
      what = written ? "writes a register that an in-flight wgmma writes (its "
                       "accumulator)"
                     : "reads a register that an in-flight wgmma writes (its "
                       "accumulator)";
    else if (written)
      what = "overwrites a register that an in-flight wgmma reads (its A "
             "fragment)";
    if (!what)
      return;
    reported = true;
    const Thread &th = threads[w * 32 + __builtin_ctz(warps[w].live())];
    hazard(at(th) + ": " + what + " before wgmma.wait_group has waited for it");
  });
}

bool CtaMachine::wgmmaGroupsDone(const Warp &warp, uint32_t allowed) const {
  uint32_t self = static_cast<uint32_t>(&warp - warps.data());
  // Groups complete in order, so the pending ones are those with an
  // operation in flight.
  uint32_t pending = 0, last = ~0u;
  for (const WgmmaOp &op : wgmmaInFlight)
    if (op.warp == self && op.group < warp.wgCommitted && op.group != last) {
      ++pending;
      last = op.group;
    }
  return pending <= allowed;
}

/// One warp's share of a warpgroup's wgmma.mma_async (M = 64, K = 16): the
/// checks at issue, the registers and shared memory it holds until it
/// completes.
void CtaMachine::execWgmma(uint32_t w, uint32_t members, const Inst &in) {
  Warp &warp = warps[w];
  Thread &first = threads[w * 32 + __builtin_ctz(members)];
  if (members != ~0u) {
    error(first, "wgmma.mma_async needs all 32 lanes of each warp of the "
                 "warpgroup (lanes " + hex(~members) + " have exited)");
    return;
  }
  WgmmaOp op;
  op.warp = w;
  op.pc = first.pc;
  op.group = warp.wgCommitted;
  uint64_t aDesc = 0, bDesc = 0;
  if (!readWgmmaOperands(first, in, op, aDesc, bDesc) ||
      !agreeOnWgmmaIssue(first, op, aDesc, bDesc))
    return;
  checkWgmmaFence(first, in);
  orderWgmmaReads(first, op);
  // The warp's wgmmas complete in issue order.
  uint64_t due = now + randomDelay();
  for (const WgmmaOp &other : wgmmaInFlight)
    if (other.warp == w)
      due = std::max(due, other.due);
  op.due = due;
  markWgmmaRegisters(op, +1);
  ++warp.wgInFlight;
  wgmmaInFlight.push_back(op);
}

bool CtaMachine::readWgmmaOperands(const Thread &first, const Inst &in,
                                   WgmmaOp &op, uint64_t &aDesc,
                                   uint64_t &bDesc) {
  const uint32_t w = op.warp;
  bool regA = in.flags & kRegA;
  // Operands the hardware takes once for the warpgroup must agree across
  // its threads.
  aDesc = regA ? 0 : read(first, in.operands[1], Ty::B64);
  bDesc = read(first, in.operands[2], Ty::B64);
  uint64_t scaleD = read(first, in.operands[3], Ty::Pred) & 1;
  for (uint32_t l = 0; l < 32; ++l) {
    const Thread &th = threads[w * 32 + l];
    if ((!regA && read(th, in.operands[1], Ty::B64) != aDesc) ||
        read(th, in.operands[2], Ty::B64) != bDesc ||
        (read(th, in.operands[3], Ty::Pred) & 1) != scaleD) {
      error(th, "wgmma.mma_async with a descriptor or scale-d that differs "
                "from lane " + std::to_string(first.lane) + "'s");
      return false;
    }
  }
  op.accumulate = scaleD;
  std::string why;
  if (!decodeWgmmaDescriptor(bDesc, op.b, why) ||
      (!regA && !decodeWgmmaDescriptor(aDesc, op.a, why))) {
    error(first, "wgmma.mma_async: " + why);
    return false;
  }
  // The issuing CTA's shared memory, in the cluster's numbering.
  op.b.startAddress += sharedBase(first.cta);
  if (!regA)
    op.a.startAddress += sharedBase(first.cta);
  Major aMajor = (in.flags & kTransA) ? Major::MN : Major::K;
  Major bMajor = (in.flags & kTransB) ? Major::MN : Major::K;
  uint32_t eb = mmaElementBytes(mmaElementOf(in.type2));
  uint32_t rowBegin = 16 * (w % 4);
  if (!regA)
    op.aSmem = operandSpan(op.a, aMajor, rowBegin, rowBegin + 16, eb);
  op.bSmem = operandSpan(op.b, bMajor, 0, in.shapeN, eb);
  for (const Interval &range : {op.aSmem, op.bSmem})
    if (range.end > range.begin &&
        (!checkShared(range.begin, range.end - range.begin) ||
         ctaOfShared(range.begin) != first.cta)) {
      error(first, "wgmma.mma_async reads shared memory [" + smemName(range.begin) +
                       ", " + smemName(range.end, true) + "), outside the CTA's shared "
                       "memory (check the descriptor's start address, LBO "
                       "and SBO)");
      return false;
    }
  return true;
}

bool CtaMachine::agreeOnWgmmaIssue(const Thread &first, const WgmmaOp &op,
                                   uint64_t aDesc, uint64_t bDesc) {
  const uint32_t w = op.warp;
  Warp &warp = warps[w];
  // Every warp of the warpgroup issues the same wgmma, in the same order.
  std::unordered_map<uint64_t, WgmmaIssue> &issues = wgmmaIssues[w / 4];
  uint32_t groupWarps = std::min<uint32_t>(4, warps.size() - (w / 4) * 4);
  WgmmaIssue &issue = issues[warp.wgIssued];
  if (issue.seen == 0) {
    issue.pc = op.pc;
    issue.aDesc = aDesc;
    issue.bDesc = bDesc;
    ++report.mmas;
  } else if (issue.pc != op.pc || issue.aDesc != aDesc || issue.bDesc != bDesc) {
    error(first, "wgmma.mma_async number " + std::to_string(warp.wgIssued) +
                     " of " + warpName(w) +
                     " is not the one another warp of its warpgroup issued (" +
                     program.sources[program.code[issue.pc].source] +
                     (issue.pc == op.pc ? ", with other descriptors" : "") +
                     "); wgmma is warpgroup-collective");
    return false;
  }
  if (++issue.seen == groupWarps)
    issues.erase(warp.wgIssued);
  ++warp.wgIssued;
  return true;
}

void CtaMachine::checkWgmmaFence(const Thread &first, const Inst &in) {
  const uint32_t w = first.warp;
  const Warp &warp = warps[w];
  bool regA = in.flags & kRegA;
  // The registers it uses may not have been accessed by the thread since
  // the last wgmma.fence (PTX ISA, wgmma.fence: "between a register access
  // by a thread ... and any wgmma.mma_async that accesses the same
  // registers"), except by an earlier wgmma. A read counts: the wgmma may
  // overwrite an accumulator before the thread's read of it has happened.
  const uint32_t *epochs = registerEpochs.data() + size_t(w) * program.numRegs;
  const uint32_t *reads = registerReads.data() + size_t(w) * program.numRegs;
  auto unfenced = [&](const Operand &vec, const uint32_t *when) {
    for (uint32_t e = 0; e < vec.vecCount; ++e) {
      const Operand &r = program.vectors[vec.vecBegin + e];
      if (r.kind == Operand::Kind::Reg && when[r.reg] == warp.wgFenceEpoch)
        return true;
    }
    return false;
  };
  bool writtenD = unfenced(in.operands[0], epochs), readD = unfenced(in.operands[0], reads);
  bool writtenA = regA && unfenced(in.operands[1], epochs);
  bool readA = regA && unfenced(in.operands[1], reads);
  if (warp.wgFenceEpoch == 1)
    hazard(at(first) + ": the warp's first wgmma.mma_async has no wgmma.fence "
                       "before it (PTX ISA: wgmma.fence comes before the first "
                       "wgmma.mma_async of a warpgroup)");
  else if (writtenD || readD || writtenA || readA)
    hazard(at(first) + ": a register of the wgmma's " +
           (writtenD || readD ? "accumulator" : "A fragment") + " was " +
           ((writtenD || (!readD && writtenA)) ? "written" : "read") +
           " by the thread after the last wgmma.fence");
}

void CtaMachine::orderWgmmaReads(const Thread &first, const WgmmaOp &op) {
  const uint32_t w = op.warp;
  // Hazards against the asynchronous units and the generic proxy.
  for (const TmaOp &tma : tmaInFlight) {
    Interval region{tma.smem, tma.smem + tma.bytes};
    if (tma.load && (region.overlaps(op.aSmem) || region.overlaps(op.bSmem)))
      hazard(at(first) + ": the wgmma reads shared memory [" +
             smemName(region.begin) + ", " + smemName(region.end, true) +
             ") that an in-flight TMA load (" + program.sources[tma.source] +
             ") is still writing");
  }
  for (const Interval &range : {op.aSmem, op.bSmem})
    orderProxy(w, range, [&] { return at(first) + ": the wgmma"; });
  // Its reads are done for the warp at the wgmma.wait_group that covers it.
  uint32_t token = newToken(TokenKind::Epoch, w, kPendingToken);
  for (const Interval &range : {op.aSmem, op.bSmem})
    if (range.end > range.begin) {
      orderAsync(w, op.pc, range, false, [&] { return at(first) + ": the wgmma"; });
      recordAsyncRead(range, token, op.pc);
    }
  warps[w].wgTokens.push_back({op.group, token});
}

/// D[r][n] (+)= sum over k < K of A[r][k] * B[n][k] for the warp's rows
/// r = 16·(warp mod 4) + 0..15, K = 16 for 16-bit inputs and 32 for 8-bit
/// ones, in the fragment layouts of the PTX ISA ("Register fragments" of
/// wgmma .m64nNk16 and .m64nNk32): D's lane l, element i is row
/// l/4 + 8·((i/2) mod 2), column 8·(i/4) + 2·(l mod 4) + i mod 2 at either
/// K; A in registers as wgmmaFragmentSlotA says. Products are exact in f32
/// (an f16 product has at most 22 significant bits, an e4m3 one 8), summed
/// in f32 in k order onto D. The ISA promises "at least single precision"
/// and leaves the order and rounding of the accumulation unspecified; an
/// H200's FP8 wgmma keeps less (it drops what lies 14 or more binades below
/// the largest of its products and D: docs/Emulator.md, "FP8
/// accumulation"), so an FP8 kernel's accuracy here is an upper bound of
/// the hardware's.
void CtaMachine::runWgmma(const WgmmaOp &op) {
  const Inst &in = program.code[op.pc];
  const uint32_t N = in.shapeN;
  const MmaElement aType = mmaElementOf(in.type2);
  const MmaElement bType = mmaElementOf(in.type3);
  const uint32_t eb = mmaElementBytes(aType), K = mmaK(eb);
  const float *aTable = elementTable(aType), *bTable = elementTable(bType);
  const bool regA = in.flags & kRegA;
  const Major aMajor = (in.flags & kTransA) ? Major::MN : Major::K;
  const Major bMajor = (in.flags & kTransB) ? Major::MN : Major::K;
  const float signA = (in.flags & kNegA) ? -1.0f : 1.0f;
  const float signB = (in.flags & kNegB) ? -1.0f : 1.0f;
  Thread *lanes = &threads[op.warp * 32];
  float a[16][32];
  for (uint32_t r = 0; r < 16; ++r)
    for (uint32_t k = 0; k < K; ++k) {
      uint32_t bits;
      if (regA) {
        FragmentSlot slot = wgmmaFragmentSlotA(r, k, eb);
        const Operand &reg =
            program.vectors[in.operands[1].vecBegin + slot.reg];
        // The wgmma's own read, not the thread's (no access epoch).
        uint32_t word = static_cast<uint32_t>(lanes[slot.lane].regs[reg.reg]);
        bits = (word >> (8 * eb * slot.element)) & ((1u << (8 * eb)) - 1);
      } else {
        uint32_t row = 16 * (op.warp % 4) + r;
        bits = loadElement(smem, operandAddress(op.a, aMajor, row, k, eb), eb);
      }
      a[r][k] = signA * aTable[bits];
    }
  std::vector<float> b(size_t(N) * K);
  for (uint32_t n = 0; n < N; ++n)
    for (uint32_t k = 0; k < K; ++k)
      b[n * K + k] = signB * bTable[loadElement(
                                 smem, operandAddress(op.b, bMajor, n, k, eb),
                                 eb)];
  const Operand &d = in.operands[0];
  for (uint32_t l = 0; l < 32; ++l) {
    Thread &th = lanes[l];
    for (uint32_t i = 0; i < N / 2; ++i) {
      uint32_t r = l / 4 + 8 * ((i / 2) % 2);
      uint32_t n = 8 * (i / 4) + 2 * (l % 4) + i % 2;
      uint32_t slot = program.vectors[d.vecBegin + i].reg;
      float acc = 0.0f;
      if (op.accumulate)
        std::memcpy(&acc, &th.regs[slot], 4);
      for (uint32_t k = 0; k < K; ++k)
        acc += a[r][k] * b[n * K + k];
      uint32_t bits;
      std::memcpy(&bits, &acc, 4);
      th.regs[slot] = bits;
    }
  }
  markWgmmaRegisters(op, -1);
  Warp &warp = warps[op.warp];
  --warp.wgInFlight;
  wake(op.warp, State::WgmmaWait);
}

bool CtaMachine::awaited(uint32_t barrier) const {
  auto it = barriers.find(barrier);
  return it != barriers.end() && !it->second.waiters.empty();
}

bool CtaMachine::completeAsync(bool force) {
  // Which kinds of wait some strand is blocked in.
  bool anyBulkWait = false, anyWgmmaWait = false;
  for (const Strand &strand : strands) {
    anyBulkWait |= strand.state == State::BulkWait;
    anyWgmmaWait |= strand.state == State::WgmmaWait;
  }
  // When every thread waits (force), work comes due first, then a TMA store
  // no thread waits for: completing one frees nobody, and holding it shows
  // a release of its shared memory before cp.async.bulk.wait_group.read.
  for (int stage = force ? 1 : 0; stage <= (force ? 2 : 0); ++stage) {
    auto held = [&](const auto &op) {
      using Op = std::decay_t<decltype(op)>;
      if constexpr (std::is_same_v<Op, TmaOp>) {
        if (!op.load && stage < 2 && !anyBulkWait)
          return stage == 1 || config.lazyCompletion || config.lateStores;
        return stage == 0 && config.lazyCompletion && op.load && !awaited(op.barrier);
      } else {
        return stage == 0 && config.lazyCompletion && !anyWgmmaWait;
      }
    };
    // The tensor pipe completes in order; lazily, up to a commit a thread
    // waits on.
    auto pipeAwaited = [&]() {
      if (stage > 0 || !config.lazyCompletion)
        return true;
      for (const TensorOp &op : tensorPipe)
        if (op.commit) {
          if (!op.multicast)
            return awaited(op.barrier);
          for (uint32_t rank = 0; rank < clusterSize; ++rank)
            if ((op.multicast >> rank & 1) && awaited(sharedBase(rank) + op.barrier))
              return true;
          return false;
        }
      return false;
    };
    for (int attempt = 0; attempt < 2; ++attempt) {
      bool any = false;
      // Runs the due operations of `queue` in its order (a warp's wgmmas
      // are due in issue order, and the vector keeps it).
      auto runDue = [&](auto &queue, auto run) {
        for (size_t i = 0; i < queue.size() && !stopped;) {
          if (queue[i].due > now || held(queue[i])) {
            ++i;
            continue;
          }
          auto op = queue[i];
          queue.erase(queue.begin() + i);
          run(op);
          any = true;
        }
      };
      runDue(tmaInFlight, [&](TmaOp &op) { runTma(op); });
      bool awaitedPipe = pipeAwaited();
      while (!tensorPipe.empty() && tensorPipe.front().due <= now && awaitedPipe &&
             !stopped) {
        TensorOp op = tensorPipe.front();
        tensorPipe.pop_front();
        runTensorOp(op);
        any = true;
        if (op.commit)
          awaitedPipe = pipeAwaited(); // past the awaited commit, the next decides
      }
      runDue(wgmmaInFlight, [&](WgmmaOp &op) { runWgmma(op); });
      if (any || stage == 0 || stopped)
        return any;
      if (attempt == 1)
        break;
      // Every thread waits: time jumps to the earliest completion this
      // stage allows.
      uint64_t next = ~0ull;
      for (const TmaOp &op : tmaInFlight)
        if (!held(op))
          next = std::min(next, op.due);
      if (!tensorPipe.empty())
        next = std::min(next, tensorPipe.front().due);
      for (const WgmmaOp &op : wgmmaInFlight)
        next = std::min(next, op.due);
      if (next == ~0ull)
        break;
      now = std::max(now, next);
    }
  }
  return false;
}

} // namespace mlir::fa4::emu
