//===- Protocol.cpp - level C on the CPU ----------------------------------===//
//
// One CTA at a time. Every role runs on its own std::thread, but only the one
// the scheduler hands the turn to makes progress, so a run is a deterministic
// function of the seed. The scheduler draws, at every step, either a role
// that can run or an asynchronous operation that can complete; a schedule of
// late completions completes them only when no role can run.
//
// Ordering is tracked with vector clocks, one component per role: an access
// carries its role's clock; a barrier phase carries the join of the clocks of
// everything that completed it; a wait that passes joins that into the
// waiter. Two accesses to the same SMEM stage or TMEM column, one a write,
// neither ordered before the other, are a hazard.
//
//===----------------------------------------------------------------------===//

#include "Protocol.h"

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Support/AttentionMath.h"
#include "fa4/Support/Float8.h"
#include "fa4/Target/Blackwell/Chip.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <functional>
#include <mutex>
#include <random>
#include <thread>

using namespace mlir;
using namespace mlir::fa4;
using namespace mlir::fa4::sim;

/// Reports keep the first few of each list; the counts say how many there were.
static constexpr size_t kMaxReported = 8;

void ProtocolReport::addHazard(std::string text) {
  ++hazardCount;
  if (hazards.size() < kMaxReported &&
      std::find(hazards.begin(), hazards.end(), text) == hazards.end())
    hazards.push_back(std::move(text));
}

void ProtocolReport::addMisuse(std::string text) {
  if (misuse.size() < kMaxReported &&
      std::find(misuse.begin(), misuse.end(), text) == misuse.end())
    misuse.push_back(std::move(text));
}

namespace {

using Clock = std::vector<uint32_t>;

void join(Clock &into, const Clock &other) {
  for (size_t i = 0; i < into.size(); ++i)
    into[i] = std::max(into[i], other[i]);
}

struct Access {
  int thread = -1;
  uint32_t epoch = 0;
  std::string what;
};

/// The accesses a later one must be ordered after: the last write and the
/// reads since.
struct Region {
  Access write;
  std::vector<Access> reads;
};

struct SmemState {
  SmemType type;
  std::string name;
  std::vector<float> data;
  std::vector<Region> stages;
};

struct BarrierSlot {
  int64_t pending = 0;
  int64_t tx = 0;
  int64_t completed = 0;
  bool expectTx = false;
  Clock accumulated, last;
};

struct BarrierState {
  MBarrierType type;
  std::string name;
  int64_t count = 1;
  std::vector<BarrierSlot> slots;
};

/// A TMEM buffer or view as the columns it occupies.
struct TmemPlace {
  int64_t firstColumn = 0;
  int64_t cols = 0;
  Type element;
  std::string name;
};

struct AsyncOp {
  enum Kind { TmaLoad, TmaStore, Mma, Commit } kind;
  int thread;
  Clock clock;
  Operation *op;
  /// Operand values, resolved when the op was issued.
  std::vector<int64_t> indices;
  Buffer *global = nullptr;
  /// A paged K/V load's block table.
  const ModBuffer *table = nullptr;
};

struct RoleThread {
  std::string name;
  RoleOp role;
  Interpreter interpreter;
  std::thread thread;
  Clock clock;
  bool done = false;
  bool failed = false;
  std::string error;
  std::function<bool()> blockedOn;
  std::string blockedWhat;
  /// While blocked: the barrier slot waited on, or null for the role's own
  /// TMA stores.
  const BarrierSlot *waitsOn = nullptr;
  std::deque<AsyncOp> tensorCoreQueue;
  int64_t pendingStores = 0;
  /// Hopper's async warpgroup MMAs issued and not yet waited for, oldest
  /// first: the value each computes and the shared-memory stages it reads
  /// until then.
  struct WarpgroupMma {
    Value result;
    SmallVector<std::pair<Operation *, int64_t>, 2> reads;
  };
  std::deque<WarpgroupMma> warpgroupMmas;
};

class Cta : public OpHook {
public:
  Cta(Interpreter &parent, WarpSpecializeOp op, uint64_t seed,
      bool lateCompletions, ProtocolReport &report)
      : parent(parent), specialize(op), rng(seed),
        lateCompletions(lateCompletions), report(report) {}

  bool run(InterpreterStats &stats, std::string &error);
  bool execute(Interpreter &interpreter, Operation *op,
               std::string &error) override;

private:
  bool setUp(std::string &error);

  /// An op of role thread `self` being run: its interpreter, the thread,
  /// the op, its name in reports, and where a failure says why.
  struct RoleStep {
    Interpreter &interpreter;
    int self;
    RoleThread &thread;
    Operation *op;
    std::string what;
    std::string &error;
  };
  /// Hands the asynchronous part of the step's op to the TMA unit or the
  /// thread's tensor-core queue, with `indices` resolved now.
  void issue(const RoleStep &step, AsyncOp::Kind kind,
             std::vector<int64_t> indices, Buffer *global = nullptr,
             const ModBuffer *table = nullptr);
  /// The step ends because the run is being torn down.
  bool aborted(const RoleStep &step);
  // One per op of more than a few lines; false with `step.error` set when
  // it cannot run.
  bool run(const RoleStep &step, MBarrierWaitOp wait);
  bool run(const RoleStep &step, MBarrierArriveOp arriveOp);
  bool run(const RoleStep &step, NamedBarrierSyncOp sync);
  bool run(const RoleStep &step, MBarrierExpectTxOp expect);
  bool run(const RoleStep &step, TmaLoadOp load);
  bool run(const RoleStep &step, TmaStoreOp store);
  bool run(const RoleStep &step, WarpgroupScoreMmaOp mma);
  bool run(const RoleStep &step, WarpgroupValueMmaOp mma);
  bool run(const RoleStep &step, WarpgroupTransposedMmaOp mma);
  bool run(const RoleStep &step, WarpgroupWaitOp wait);
  bool run(const RoleStep &step, TmemLoadOp load);
  bool run(const RoleStep &step, TmemStoreOp store);
  bool run(const RoleStep &step, SmemStoreOp store);
  bool run(const RoleStep &step, SmemLoadOp load);
  bool run(const RoleStep &step, TmemAllocColumnsOp alloc);
  bool run(const RoleStep &step, TmemDeallocOp dealloc);
  /// Records the shared-memory reads of a warpgroup MMA by thread `self`.
  void readWarpgroupOperands(const RoleThread::WarpgroupMma &mma, int self,
                             const Clock &clock, const std::string &what);
  int threadOf(Interpreter &interpreter) {
    return interpreterThreads.at(&interpreter);
  }
  /// Hands the turn back; false once the run is being torn down.
  bool yieldTurn(int thread);
  /// Blocks until `condition` holds; `slot` is the barrier slot it waits on,
  /// null for the role's TMA stores.
  bool waitUntil(int thread, std::function<bool()> condition, std::string what,
                 const BarrierSlot *slot);
  /// Whether a blocked role waits for what `async` completes.
  bool unblocksARole(const AsyncOp &async);

  SmemState &smem(Value buffer) {
    return smemStates.at(buffer.getDefiningOp());
  }
  BarrierState &barrier(Value value) {
    return barriers.at(value.getDefiningOp());
  }
  bool tmemPlace(Value buffer, TmemPlace &place, std::string &error);

  void access(Region &region, const std::string &regionName, int thread,
              const Clock &clock, bool write, const std::string &what);
  void accessTmem(const TmemPlace &place, int64_t firstCol, int64_t numCols,
                  int thread, const Clock &clock, bool write,
                  const std::string &what);
  bool checkTmemLive(const std::string &what, std::string &error);

  void arrive(BarrierState &state, int64_t stage, int64_t arrivals,
              const Clock &clock);
  void completeTx(BarrierState &state, int64_t stage, int64_t bytes,
                  const Clock &clock);
  void maybeComplete(BarrierState &state, BarrierSlot &slot);

  bool complete(AsyncOp &async, std::string &error);

  Interpreter &parent;
  WarpSpecializeOp specialize;
  std::mt19937_64 rng;
  /// Complete asynchronous work only when no role can run.
  bool lateCompletions;
  ProtocolReport &report;

  std::vector<std::unique_ptr<RoleThread>> threads;
  llvm::DenseMap<Interpreter *, int> interpreterThreads;
  llvm::DenseMap<Operation *, SmemState> smemStates;
  llvm::DenseMap<Operation *, BarrierState> barriers;
  /// Hardware named barriers by id, made at their first use.
  std::map<int64_t, BarrierState> namedBarriers;
  BarrierState &namedBarrier(int64_t id, int64_t count) {
    auto [it, fresh] = namedBarriers.try_emplace(id);
    BarrierState &state = it->second;
    if (fresh) {
      state.type = MBarrierType::get(specialize.getContext(),
                                     BarrierKind::threads, 1);
      state.name = "named barrier " + std::to_string(id);
      state.count = count;
      state.slots.resize(1);
      state.slots[0].pending = count;
      for (BarrierSlot &slot : state.slots) {
        slot.accumulated.assign(threads.size(), 0);
        slot.last.assign(threads.size(), 0);
      }
    } else if (state.count != count) {
      report.addMisuse(state.name + " counts " + std::to_string(count) +
                       " threads here and " + std::to_string(state.count) +
                       " elsewhere");
    }
    return state;
  }
  std::vector<uint32_t> tmem;
  std::vector<Region> tmemColumns;
  bool tmemAllocated = false, tmemFreed = false;
  /// Columns tmem_alloc_columns took, and who took them.
  int64_t tmemAllocatedColumns = 0;
  std::string tmemAllocator;
  /// The TMEM buffers of the kernel, named in a report about the allocation.
  std::string tmemBuffers;
  std::vector<AsyncOp> tmaInFlight;

  std::mutex mutex;
  std::condition_variable turnChanged;
  int turn = -1;
  bool aborting = false;
};

} // namespace

static std::string describe(const RoleThread &thread, Operation *op) {
  return thread.name + " (" + op->getName().stripDialect().str() + ")";
}

/// Whether elements [first, first + count) lie inside the TMEM buffer or
/// view `place` (the column is a runtime index the verifier cannot see).
static bool checkColumns(Operation *op, int64_t first, int64_t count,
                         const TmemPlace &place, std::string &error) {
  if (first + count <= place.cols)
    return true;
  error = "'" + op->getName().getStringRef().str() + "' touches columns [" +
          std::to_string(first) + ", " + std::to_string(first + count) +
          ") of " + place.name + ", which has " + std::to_string(place.cols);
  return false;
}

/// An mbarrier is 8 bytes of shared memory; its pending transaction count
/// holds at most 2^20 - 1 bytes (PTX ISA, mbarrier's tx-count range).
static constexpr uint64_t kMBarrierBytes = 8;
static constexpr int64_t kMaxTxCount = (int64_t(1) << 20) - 1;

bool Cta::setUp(std::string &error) {
  // The buffers and barriers are defined beside the warp-specialize op.
  // First what they take of shared memory, as the hardware lays them out
  // (rows padded to whole 128-byte lines), in saturating arithmetic: the
  // types' sizes are unbounded 64-bit numbers, and a sum past what a CTA may
  // use must be refused before anything is allocated.
  uint64_t smemBytes = 0;
  specialize->getParentOp()->walk([&](Operation *op) {
    uint64_t bytes = 0;
    if (auto alloc = dyn_cast<SmemAllocOp>(op)) {
      SmemType type = alloc.getBuffer().getType();
      uint64_t rowBytes = llvm::SaturatingMultiply<uint64_t>(
                              type.getCols(),
                              type.getElementType().getIntOrFloatBitWidth()) /
                          8;
      rowBytes = llvm::SaturatingAdd<uint64_t>(rowBytes, 127) / 128 * 128;
      bytes = llvm::SaturatingMultiply<uint64_t>(
          llvm::SaturatingMultiply<uint64_t>(type.getRows(), rowBytes),
          type.getStages());
      // Each CTA of a pair holds half of a split ring's items.
      if (alloc.getPairHalf())
        bytes /= 2;
    } else if (auto alloc = dyn_cast<MBarrierAllocOp>(op)) {
      bytes = llvm::SaturatingMultiply<uint64_t>(
          alloc.getBarrier().getType().getStages(), kMBarrierBytes);
    }
    smemBytes = llvm::SaturatingAdd(smemBytes, bytes);
  });
  if (smemBytes > static_cast<uint64_t>(blackwell::kSmemBytesPerCta)) {
    error = "the SMEM buffers and mbarriers need " +
            (smemBytes == std::numeric_limits<uint64_t>::max()
                 ? std::string("more than 2^64")
                 : std::to_string(smemBytes)) +
            " bytes, more than the " +
            std::to_string(blackwell::kSmemBytesPerCta) + " a CTA may use";
    return false;
  }
  specialize->getParentOp()->walk([&](Operation *op) {
    if (auto alloc = dyn_cast<TmemAllocOp>(op))
      tmemBuffers += (tmemBuffers.empty() ? "" : ", ") + alloc.getName().str();
    if (auto alloc = dyn_cast<SmemAllocOp>(op)) {
      SmemState state;
      state.type = alloc.getBuffer().getType();
      state.name = alloc.getName().str();
      state.data.assign(state.type.getStages() * state.type.getRows() *
                            state.type.getCols(),
                        std::nanf(""));
      state.stages.resize(state.type.getStages());
      smemStates[op] = std::move(state);
    } else if (auto alloc = dyn_cast<MBarrierAllocOp>(op)) {
      BarrierState state;
      state.type = alloc.getBarrier().getType();
      state.name = alloc.getName().str();
      state.count = alloc.getCount();
      state.slots.resize(state.type.getStages());
      barriers[op] = std::move(state);
    }
  });
  // Unwritten TMEM reads as NaN, so a missed write poisons the result.
  uint32_t nan;
  float nanValue = std::nanf("");
  std::memcpy(&nan, &nanValue, 4);
  tmem.assign(blackwell::kTmemLanes * blackwell::kTmemColumns, nan);
  tmemColumns.resize(blackwell::kTmemColumns);

  for (RoleOp role : specialize.getRoles().front().getOps<RoleOp>()) {
    if (role.getBody().front().empty())
      continue;
    auto thread = std::make_unique<RoleThread>();
    thread->name = role.getName().str();
    thread->role = role;
    thread->interpreter = parent;
    thread->interpreter.setHook(this);
    // The loader's view of the tasks is the one counted (Blackwell's load
    // warp, Hopper's producer).
    thread->interpreter.setCountsBlocks(thread->name == "load" ||
                                        thread->name == "producer");
    threads.push_back(std::move(thread));
  }
  Clock zero(threads.size(), 0);
  for (size_t i = 0; i < threads.size(); ++i) {
    threads[i]->clock = zero;
    threads[i]->clock[i] = 1;
    interpreterThreads[&threads[i]->interpreter] = i;
  }
  for (auto &[op, state] : barriers)
    for (BarrierSlot &slot : state.slots) {
      slot.pending = state.count;
      slot.accumulated = zero;
      slot.last = zero;
    }
  return true;
}

bool Cta::yieldTurn(int thread) {
  std::unique_lock<std::mutex> lock(mutex);
  turn = -1;
  turnChanged.notify_all();
  turnChanged.wait(lock, [&] { return turn == thread; });
  return !aborting;
}

bool Cta::waitUntil(int thread, std::function<bool()> condition,
                    std::string what, const BarrierSlot *slot) {
  RoleThread &role = *threads[thread];
  while (!condition()) {
    role.blockedOn = condition;
    role.blockedWhat = std::move(what);
    role.waitsOn = slot;
    if (!yieldTurn(thread))
      return false;
  }
  role.blockedOn = nullptr;
  return true;
}

bool Cta::unblocksARole(const AsyncOp &async) {
  auto waited = [&](Value barrierValue, int64_t count) {
    BarrierState &state = barrier(barrierValue);
    const BarrierSlot *slot = &state.slots[count % state.type.getStages()];
    return llvm::any_of(threads, [&](const std::unique_ptr<RoleThread> &role) {
      return role->blockedOn && role->waitsOn == slot;
    });
  };
  if (auto load = dyn_cast<TmaLoadOp>(async.op))
    return waited(load.getBarrier(), async.indices[4]);
  if (isa<TmaStoreOp>(async.op)) {
    const RoleThread &issuer = *threads[async.thread];
    return issuer.blockedOn && !issuer.waitsOn;
  }
  // A tensor-core op is waited for through the commit behind it.
  if (auto commit = dyn_cast<MmaCommitOp>(async.op))
    return waited(commit.getBarrier(), async.indices[0]);
  return false;
}

bool Cta::tmemPlace(Value buffer, TmemPlace &place, std::string &error) {
  auto type = cast<TmemType>(buffer.getType());
  place.cols = type.getCols();
  place.element = type.getElementType();
  Operation *def = buffer.getDefiningOp();
  if (auto view = dyn_cast_or_null<TmemViewOp>(def)) {
    place.name = view.getName().str();
    def = view.getSource().getDefiningOp();
  }
  auto alloc = dyn_cast_or_null<TmemAllocOp>(def);
  if (!alloc || !alloc.getColumnOffset()) {
    error = "TMEM buffer has no column offset (run fa4-allocate-tmem first)";
    return false;
  }
  if (place.name.empty())
    place.name = alloc.getName().str();
  place.firstColumn = *alloc.getColumnOffset();
  // The verifiers keep an allocation inside TMEM and a view inside its
  // buffer; checked again because every TMEM access indexes with these
  // columns unchecked.
  if (place.firstColumn < 0 ||
      place.firstColumn + type.getColumns() > blackwell::kTmemColumns) {
    error = "TMEM buffer " + place.name + " spans columns [" +
            std::to_string(place.firstColumn) + ", " +
            std::to_string(place.firstColumn + type.getColumns()) +
            "), outside TMEM's " + std::to_string(blackwell::kTmemColumns);
    return false;
  }
  return true;
}

void Cta::access(Region &region, const std::string &regionName, int thread,
                 const Clock &clock, bool write, const std::string &what) {
  auto ordered = [&](const Access &before) {
    return before.thread < 0 || before.thread == thread ||
           before.epoch <= clock[before.thread];
  };
  auto hazard = [&](const Access &before, bool beforeWrites) {
    report.addHazard(regionName + ": " + (write ? "write" : "read") + " by " +
                     what + " is not ordered after the " +
                     (beforeWrites ? "write" : "read") + " by " + before.what);
  };
  if (!ordered(region.write))
    hazard(region.write, true);
  Access self{thread, clock[thread], what};
  if (write) {
    for (const Access &read : region.reads)
      if (!ordered(read))
        hazard(read, false);
    region.write = self;
    region.reads.clear();
    return;
  }
  for (Access &read : region.reads)
    if (read.thread == thread) {
      read = self;
      return;
    }
  region.reads.push_back(self);
}

void Cta::accessTmem(const TmemPlace &place, int64_t firstCol, int64_t numCols,
                     int thread, const Clock &clock, bool write,
                     const std::string &what) {
  int64_t bits = place.element.getIntOrFloatBitWidth();
  int64_t begin = place.firstColumn + firstCol * bits / 32;
  int64_t end = place.firstColumn + (firstCol + numCols) * bits / 32;
  std::string name = "TMEM columns [" + std::to_string(begin) + ", " +
                     std::to_string(end) + ") of " + place.name;
  int64_t before = report.hazardCount;
  for (int64_t column = begin; column < end; ++column) {
    access(tmemColumns[column], name, thread, clock, write, what);
    // One report per access, not one per column.
    if (report.hazardCount > before) {
      for (int64_t rest = column + 1; rest < end; ++rest) {
        Region &region = tmemColumns[rest];
        if (write) {
          region.write = {thread, clock[thread], what};
          region.reads.clear();
        }
      }
      return;
    }
  }
}

bool Cta::checkTmemLive(const std::string &what, std::string &error) {
  if (!tmemAllocated)
    report.addMisuse(what + " touches TMEM before tmem_alloc_columns");
  if (tmemFreed)
    report.addMisuse(what + " touches TMEM after tmem_dealloc");
  return true;
}

void Cta::maybeComplete(BarrierState &state, BarrierSlot &slot) {
  while (slot.pending <= 0 && slot.tx == 0) {
    if (state.type.getKind() == BarrierKind::tma && !slot.expectTx)
      report.addMisuse("phase " + std::to_string(slot.completed) + " of " +
                       state.name + " (a TMA barrier) completed without "
                       "expect_tx");
    ++slot.completed;
    slot.last = slot.accumulated;
    std::fill(slot.accumulated.begin(), slot.accumulated.end(), 0);
    slot.expectTx = false;
    slot.pending += state.count;
  }
}

void Cta::arrive(BarrierState &state, int64_t stage, int64_t arrivals,
                 const Clock &clock) {
  BarrierSlot &slot = state.slots[stage];
  if (arrivals > slot.pending)
    report.addMisuse(std::to_string(arrivals) + " arrivals on " + state.name +
                     "[" + std::to_string(stage) + "] with " +
                     std::to_string(slot.pending) +
                     " pending: arrivals past the count");
  join(slot.accumulated, clock);
  slot.pending -= arrivals;
  maybeComplete(state, slot);
}

void Cta::completeTx(BarrierState &state, int64_t stage, int64_t bytes,
                     const Clock &clock) {
  if (state.type.getKind() != BarrierKind::tma)
    report.addMisuse("TMA bytes delivered to " + state.name + ", a '" +
                     stringifyBarrierKind(state.type.getKind()).str() +
                     "' barrier (expected kind 'tma')");
  BarrierSlot &slot = state.slots[stage];
  join(slot.accumulated, clock);
  slot.tx -= bytes;
  maybeComplete(state, slot);
}

/// Element `column` of a TMEM lane seen as `element`: an f32 is a 32-bit
/// column, an f16/bf16 half of one (the even element in the low half), an
/// e4m3 a byte of one (from the low byte up).
static float readTmem(const uint32_t *lane, int64_t column, Type element) {
  if (element.isF32()) {
    float value;
    std::memcpy(&value, &lane[column], 4);
    return value;
  }
  if (isa<Float8E4M3FNType>(element))
    return float8ToFloat(Float8::E4M3,
                         (lane[column / 4] >> (8 * (column % 4))) & 0xff);
  uint16_t half = column % 2 ? lane[column / 2] >> 16 : lane[column / 2] & 0xffff;
  return element.isBF16() ? bfloat16BitsToFloat(half) : halfBitsToFloat(half);
}

static void writeTmem(uint32_t *lane, int64_t column, Type element, float value) {
  if (element.isF32()) {
    std::memcpy(&lane[column], &value, 4);
    return;
  }
  if (isa<Float8E4M3FNType>(element)) {
    // Rounded to nearest and saturated at 448, as cvt.rn.satfinite does.
    uint32_t shift = 8 * (column % 4);
    uint32_t &word = lane[column / 4];
    word = (word & ~(0xffu << shift)) |
           (uint32_t(float8FromDouble(Float8::E4M3, value)) << shift);
    return;
  }
  uint32_t half =
      element.isBF16() ? floatToBFloat16Bits(value) : floatToHalfBits(value);
  uint32_t &word = lane[column / 2];
  word = column % 2 ? (word & 0xffff) | (half << 16)
                    : (word & 0xffff0000u) | half;
}

/// Where a [rows, cols] tile of a GQA-packed tensor lives: row r of the tile
/// is position (row + r) / ratio of head head * ratio + (row + r) % ratio.
static float *globalRow(Buffer &tensor, int64_t batch, int64_t head,
                        int64_t row, int64_t ratio) {
  PackedRow packed = unpackRow(row, ratio);
  if (packed.seqPos >= tensor.shape[1])
    return nullptr;
  int64_t tensorHead = head * ratio + packed.headInGroup;
  return &tensor.data[((batch * tensor.shape[1] + packed.seqPos) *
                           tensor.shape[2] +
                       tensorHead) *
                      tensor.shape[3]];
}

bool Cta::complete(AsyncOp &async, std::string &error) {
  RoleThread &issuer = *threads[async.thread];
  std::string what = describe(issuer, async.op);
  return llvm::TypeSwitch<Operation *, bool>(async.op)
      .Case([&](TmaLoadOp load) {
        SmemState &state = smem(load.getBuffer());
        int64_t batch = async.indices[0], head = async.indices[1],
                row = async.indices[2], item = async.indices[3],
                barrierItem = async.indices[4], clearFrom = async.indices[5];
        int64_t stage = item % state.type.getStages();
        access(state.stages[stage],
               "SMEM " + state.name + "[" + std::to_string(stage) + "]",
               async.thread, async.clock, true, what);
        // The tile fills the first `width` columns of each row (all of
        // them unless the tensor is narrower than the ring).
        SmemType tileType = load.getTileType();
        int64_t rows = state.type.getRows(), cols = state.type.getCols();
        int64_t width = tileType.getCols();
        float *tile = &state.data[stage * rows * cols];
        if (load.getTransposed()) {
          // V transposed: key c of the tile is column c of every row (the
          // runtime's copy of V, whose keys past the sequence are zero).
          for (int64_t c = 0; c < cols; ++c) {
            const float *source =
                globalRow(*async.global, batch, head, row + c, 1);
            for (int64_t r = 0; r < rows; ++r)
              tile[r * cols + c] = source ? source[r] : 0.0f;
          }
        }
        for (int64_t r = 0; r < rows && !load.getTransposed(); ++r) {
          const float *source =
              async.table ? pagedRow(*async.global, *async.table, batch, head,
                                     row + r)
                          : globalRow(*async.global, batch, head, row + r,
                                      load.getGqaRatio());
          if (source && r < clearFrom)
            std::copy(source, source + width, tile + r * cols);
          else
            std::fill(tile + r * cols, tile + r * cols + width, 0.0f);
        }
        BarrierState &bar = barrier(load.getBarrier());
        completeTx(bar, barrierItem % bar.type.getStages(),
                   tileType.getStageBytes(), async.clock);
        return true;
      })
      .Case([&](TmaStoreOp store) {
        SmemState &state = smem(store.getBuffer());
        int64_t item = async.indices[0], batch = async.indices[1],
                head = async.indices[2], row = async.indices[3];
        int64_t stage = item % state.type.getStages();
        access(state.stages[stage],
               "SMEM " + state.name + "[" + std::to_string(stage) + "]",
               async.thread, async.clock, false, what);
        int64_t rows = state.type.getRows(), cols = state.type.getCols();
        int64_t column = static_cast<int64_t>(store.getColumn());
        const float *tile = &state.data[stage * rows * cols];
        for (int64_t r = 0; r < rows; ++r) {
          float *dest = globalRow(*async.global, batch, head, row + r,
                                  store.getGqaRatio());
          if (!dest)
            continue;
          if (store.getReduce()) {
            for (int64_t c = 0; c < cols; ++c)
              dest[column + c] += tile[r * cols + c];
          } else {
            std::copy(tile + r * cols, tile + (r + 1) * cols, dest);
          }
        }
        --issuer.pendingStores;
        return true;
      })
      .Case([&](ScoreMmaAsyncOp mma) {
        SmemState &q = smem(mma.getQuery()), &k = smem(mma.getKey());
        int64_t qStage = async.indices[0] % q.type.getStages();
        int64_t kStage = async.indices[1] % k.type.getStages();
        TmemPlace scores;
        if (!tmemPlace(mma.getScores(), scores, error) ||
            !checkTmemLive(what, error))
          return false;
        access(q.stages[qStage], "SMEM " + q.name + "[" + std::to_string(qStage) + "]",
               async.thread, async.clock, false, what);
        access(k.stages[kStage], "SMEM " + k.name + "[" + std::to_string(kStage) + "]",
               async.thread, async.clock, false, what);
        accessTmem(scores, 0, scores.cols, async.thread, async.clock, true, what);
        int64_t m = q.type.getRows(), d = q.type.getCols(), n = k.type.getRows();
        std::vector<float> s(m * n, 0.0f);
        scoreProduct(&q.data[qStage * m * d], &k.data[kStage * n * d], s.data(),
                     m, n, d);
        for (int64_t r = 0; r < m; ++r)
          std::memcpy(&tmem[r * blackwell::kTmemColumns + scores.firstColumn],
                      &s[r * n], n * 4);
        return true;
      })
      .Case([&](ValueMmaAsyncOp mma) {
        SmemState &v = smem(mma.getValue());
        int64_t vStage = async.indices[0] % v.type.getStages();
        bool accumulate = async.indices[1];
        TmemPlace probs, acc;
        if (!tmemPlace(mma.getProbs(), probs, error) ||
            !tmemPlace(mma.getAcc(), acc, error) || !checkTmemLive(what, error))
          return false;
        access(v.stages[vStage], "SMEM " + v.name + "[" + std::to_string(vStage) + "]",
               async.thread, async.clock, false, what);
        accessTmem(probs, 0, probs.cols, async.thread, async.clock, false, what);
        accessTmem(acc, 0, acc.cols, async.thread, async.clock, true, what);
        int64_t m = blackwell::kTmemLanes, n = probs.cols, d = acc.cols;
        // V is the first d columns of each row of its item (a K/V ring
        // sized for a wider K holds it so).
        int64_t vCols = v.type.getCols();
        std::vector<float> vTile(n * d);
        for (int64_t r = 0; r < n; ++r)
          std::copy_n(&v.data[(vStage * n + r) * vCols], d, &vTile[r * d]);
        std::vector<float> p(m * n), o(m * d, 0.0f);
        for (int64_t r = 0; r < m; ++r)
          for (int64_t c = 0; c < n; ++c)
            p[r * n + c] = readTmem(
                &tmem[r * blackwell::kTmemColumns + probs.firstColumn], c,
                probs.element);
        float *accRow;
        for (int64_t r = 0; r < m && accumulate; ++r) {
          accRow = reinterpret_cast<float *>(
              &tmem[r * blackwell::kTmemColumns + acc.firstColumn]);
          std::copy(accRow, accRow + d, &o[r * d]);
        }
        valueProduct(p.data(), vTile.data(), o.data(), m, n, d);
        for (int64_t r = 0; r < m; ++r)
          std::memcpy(&tmem[r * blackwell::kTmemColumns + acc.firstColumn],
                      &o[r * d], d * 4);
        return true;
      })
      .Case([&](TransposedMmaAsyncOp mma) {
        // acc[m][x] = Σ_k lhs[k][m] · rhs[k][x], in f32: lhs read as the
        // M-major A operand, rhs as the MN-major B operand.
        SmemState &a = smem(mma.getLhs()), &bState = smem(mma.getRhs());
        int64_t aStage = async.indices[0] % a.type.getStages();
        int64_t bStage = async.indices[1] % bState.type.getStages();
        TmemPlace acc;
        if (!tmemPlace(mma.getAcc(), acc, error) || !checkTmemLive(what, error))
          return false;
        access(a.stages[aStage],
               "SMEM " + a.name + "[" + std::to_string(aStage) + "]",
               async.thread, async.clock, false, what);
        access(bState.stages[bStage],
               "SMEM " + bState.name + "[" + std::to_string(bStage) + "]",
               async.thread, async.clock, false, what);
        accessTmem(acc, 0, acc.cols, async.thread, async.clock, true, what);
        int64_t k = a.type.getRows(), m = a.type.getCols(),
                n = bState.type.getCols();
        const float *lhs = &a.data[aStage * k * m];
        const float *rhs = &bState.data[bStage * k * n];
        std::vector<float> d(m * n, 0.0f);
        for (int64_t i = 0; i < k; ++i)
          for (int64_t r = 0; r < m; ++r) {
            float weight = lhs[i * m + r];
            for (int64_t x = 0; x < n; ++x)
              d[r * n + x] += weight * rhs[i * n + x];
          }
        for (int64_t r = 0; r < m; ++r)
          std::memcpy(&tmem[r * blackwell::kTmemColumns + acc.firstColumn],
                      &d[r * n], n * 4);
        return true;
      })
      .Case([&](MmaCommitOp commit) {
        BarrierState &bar = barrier(commit.getBarrier());
        if (bar.type.getKind() != BarrierKind::tcgen05)
          report.addMisuse("tcgen05.commit arrives on " + bar.name + ", a '" +
                           stringifyBarrierKind(bar.type.getKind()).str() +
                           "' barrier (expected kind 'tcgen05')");
        arrive(bar, async.indices[0] % bar.type.getStages(), 1, async.clock);
        return true;
      })
      .Default([&](Operation *op) {
        error = "cannot complete '" + op->getName().getStringRef().str() + "'";
        return false;
      });
}

void Cta::issue(const RoleStep &step, AsyncOp::Kind kind,
                std::vector<int64_t> indices, Buffer *global,
                const ModBuffer *table) {
  Clock &clock = step.thread.clock;
  AsyncOp async{kind, step.self, clock, step.op, std::move(indices), global,
                table};
  if (kind == AsyncOp::TmaLoad || kind == AsyncOp::TmaStore)
    tmaInFlight.push_back(std::move(async));
  else
    step.thread.tensorCoreQueue.push_back(std::move(async));
  ++clock[step.self];
}

bool Cta::aborted(const RoleStep &step) {
  step.error = "aborted";
  return false;
}

bool Cta::execute(Interpreter &interpreter, Operation *op, std::string &error) {
  int self = threadOf(interpreter);
  RoleThread &thread = *threads[self];
  RoleStep step{interpreter, self, thread, op, describe(thread, op), error};
  // Shared memory and barriers are the ones set up for this CTA; every use
  // below looks them up by their allocation.
  for (OpOperand &operand : op->getOpOperands()) {
    Type type = operand.get().getType();
    Operation *def = operand.get().getDefiningOp();
    if ((isa<SmemType>(type) && !smemStates.count(def)) ||
        (isa<MBarrierType>(type) && !barriers.count(def))) {
      error = "operand #" + std::to_string(operand.getOperandNumber()) +
              " of '" + op->getName().getStringRef().str() +
              "' is not a buffer or barrier allocated beside the "
              "warp-specialize op";
      return false;
    }
  }
  // Synchronization and asynchronous issue are where another role or an
  // outstanding copy may run first; plain memory accesses are ordered by
  // the barriers around them and need no turn of their own.
  if (isa<MBarrierWaitOp, MBarrierArriveOp, MBarrierExpectTxOp, MmaCommitOp,
          TmaLoadOp, TmaStoreOp, TmaStoreWaitOp, ScoreMmaAsyncOp,
          ValueMmaAsyncOp, TransposedMmaAsyncOp, NamedBarrierSyncOp,
          NamedBarrierArriveOp>(op) &&
      !yieldTurn(self))
    return aborted(step);

  return llvm::TypeSwitch<Operation *, bool>(op)
      .Case([&](MBarrierWaitOp wait) { return run(step, wait); })
      .Case([&](MBarrierArriveOp arriveOp) { return run(step, arriveOp); })
      .Case([&](NamedBarrierArriveOp arriveOp) {
        BarrierState &bar = namedBarrier(arriveOp.getId(), arriveOp.getCount());
        arrive(bar, 0, thread.role.getNumThreads(), thread.clock);
        ++thread.clock[self];
        return true;
      })
      .Case([&](NamedBarrierSyncOp sync) { return run(step, sync); })
      .Case([&](MBarrierExpectTxOp expect) { return run(step, expect); })
      .Case([&](MmaCommitOp commit) {
        issue(step, AsyncOp::Commit, {interpreter.index(commit.getCount())});
        return true;
      })
      .Case([&](TmaLoadOp load) { return run(step, load); })
      .Case([&](TmaStoreOp store) { return run(step, store); })
      .Case([&](TmaStoreWaitOp) {
        if (!waitUntil(self, [&] { return thread.pendingStores == 0; },
                       thread.name + " waits for its TMA stores", nullptr))
          return aborted(step);
        return true;
      })
      .Case([&](ScoreMmaAsyncOp mma) {
        ++report.mmasIssued[thread.name];
        issue(step, AsyncOp::Mma, {interpreter.index(mma.getQueryCount()),
                                   interpreter.index(mma.getKeyCount())});
        return true;
      })
      .Case([&](ValueMmaAsyncOp mma) {
        ++report.mmasIssued[thread.name];
        issue(step, AsyncOp::Mma, {interpreter.index(mma.getValueCount()),
                                   interpreter.index(mma.getAccumulate())});
        return true;
      })
      .Case([&](TransposedMmaAsyncOp mma) {
        ++report.mmasIssued[thread.name];
        issue(step, AsyncOp::Mma, {interpreter.index(mma.getLhsCount()),
                                   interpreter.index(mma.getRhsCount())});
        return true;
      })
      .Case([&](WarpgroupScoreMmaOp mma) { return run(step, mma); })
      .Case([&](WarpgroupValueMmaOp mma) { return run(step, mma); })
      .Case([&](WarpgroupTransposedMmaOp mma) { return run(step, mma); })
      .Case([&](WarpgroupWaitOp wait) { return run(step, wait); })
      .Case([&](TmemLoadOp load) { return run(step, load); })
      .Case([&](TmemStoreOp store) { return run(step, store); })
      .Case([&](SmemStoreOp store) { return run(step, store); })
      .Case([&](SmemLoadOp load) { return run(step, load); })
      .Case([&](TmemAllocColumnsOp alloc) { return run(step, alloc); })
      .Case([&](TmemRelinquishOp) { return true; })
      .Case([&](TmemDeallocOp dealloc) { return run(step, dealloc); })
      .Case<ProducerAcquireOp, ProducerCommitOp, ConsumerWaitOp,
            ConsumerReleaseOp>([&](Operation *) {
        error = "'" + op->getName().getStringRef().str() +
                "' has no barrier yet (run fa4-insert-barriers first)";
        return false;
      })
      .Case<RescaleOOp, FinalizeOOp, FinalizePartialOOp, FinalizeORowsOp>([&](Operation *) {
        error = "'" + op->getName().getStringRef().str() +
                "' is expanded into TMEM accesses by fa4-correction (run it "
                "first)";
        return false;
      })
      .Default([&](Operation *) {
        error = "cannot run '" + op->getName().getStringRef().str() +
                "' inside a role";
        return false;
      });
}

bool Cta::run(const RoleStep &step, MBarrierWaitOp wait) {
  RoleThread &thread = step.thread;
  BarrierState &bar = barrier(wait.getBarrier());
  int64_t count = step.interpreter.index(wait.getCount());
  int64_t stages = bar.type.getStages();
  int64_t stage = count % stages;
  int64_t intended = count / stages - (wait.getPrior() ? 1 : 0);
  int64_t parity = intended & 1;
  BarrierSlot &slot = bar.slots[stage];
  std::string waiting = thread.name + " waits on " + bar.name + "[" +
                        std::to_string(stage) + "] for phase " +
                        std::to_string(intended) + " (parity " +
                        std::to_string(parity) + ")";
  if (!waitUntil(step.self, [&] { return (slot.completed & 1) != parity; },
                 waiting, &slot))
    return aborted(step);
  int64_t observed = slot.completed - 1;
  if (observed != intended)
    report.addMisuse(
        thread.name + " waited on " + bar.name + "[" + std::to_string(stage) +
        "] for phase " + std::to_string(intended) + " and passed on phase " +
        std::to_string(observed) +
        (observed < intended ? ": wrong phase (parity of an older one)"
                             : ": a phase was skipped"));
  if (observed >= 0)
    join(thread.clock, slot.last);
  return true;
}

bool Cta::run(const RoleStep &step, MBarrierArriveOp arriveOp) {
  RoleThread &thread = step.thread;
  BarrierState &bar = barrier(arriveOp.getBarrier());
  if (bar.type.getKind() != BarrierKind::threads)
    report.addMisuse(thread.name + " arrives on " + bar.name + ", a '" +
                     stringifyBarrierKind(bar.type.getKind()).str() +
                     "' barrier (thread arrivals need kind 'threads')");
  int64_t count = step.interpreter.index(arriveOp.getCount());
  arrive(bar, count % bar.type.getStages(), thread.role.getNumThreads(),
         thread.clock);
  ++thread.clock[step.self];
  return true;
}

bool Cta::run(const RoleStep &step, NamedBarrierSyncOp sync) {
  RoleThread &thread = step.thread;
  BarrierState &bar = namedBarrier(sync.getId(), sync.getCount());
  BarrierSlot &slot = bar.slots[0];
  int64_t phase = slot.completed;
  arrive(bar, 0, thread.role.getNumThreads(), thread.clock);
  ++thread.clock[step.self];
  if (!waitUntil(step.self, [&] { return slot.completed > phase; },
                 thread.name + " waits at " + bar.name, &slot))
    return aborted(step);
  join(thread.clock, slot.last);
  return true;
}

bool Cta::run(const RoleStep &step, MBarrierExpectTxOp expect) {
  RoleThread &thread = step.thread;
  BarrierState &bar = barrier(expect.getBarrier());
  if (bar.type.getKind() != BarrierKind::tma)
    report.addMisuse(thread.name + " announces transaction bytes on " +
                     bar.name + ", a '" +
                     stringifyBarrierKind(bar.type.getKind()).str() +
                     "' barrier (expect_tx needs kind 'tma')");
  int64_t stage =
      step.interpreter.index(expect.getCount()) % bar.type.getStages();
  BarrierSlot &slot = bar.slots[stage];
  slot.tx += expect.getBytes();
  if (slot.tx > kMaxTxCount)
    report.addMisuse(thread.name + " raises the transaction count of " +
                     bar.name + "[" + std::to_string(stage) + "] to " +
                     std::to_string(slot.tx) +
                     " bytes, past the mbarrier's limit of 2^20 - 1");
  slot.expectTx = true;
  arrive(bar, stage, 1, thread.clock);
  ++thread.clock[step.self];
  return true;
}

bool Cta::run(const RoleStep &step, TmaLoadOp load) {
  Interpreter &interpreter = step.interpreter;
  if (!load.getBarrier()) {
    step.error = "a TMA load signals no barrier (run fa4-insert-barriers)";
    return false;
  }
  Buffer &source = interpreter.buffer(load.getSource());
  int64_t batch = interpreter.index(load.getBatch());
  int64_t head = interpreter.index(load.getHead());
  const ModBuffer *table = nullptr;
  if (Value blockTable = load.getBlockTable()) {
    // A paged cache: the batch is the table's row, the cache's first
    // dimension its blocks.
    table = interpreter.extra(blockTable);
    if (!table || table->shape.size() != 2 || batch < 0 ||
        batch >= table->shape[0] || source.shape.size() != 4 || head < 0 ||
        head >= source.shape[2] ||
        source.shape[3] != load.getTileType().getCols()) {
      step.error = step.what + " gathers a paged cache through a block table "
                               "that is not a bound [batch, max_blocks] "
                               "extra covering its batch and head";
      return false;
    }
  } else if (!checkTensorAccess(step.op, source, batch, head,
                                load.getGqaRatio(),
                                load.getTransposed()
                                    ? load.getTileType().getRows()
                                    : load.getTileType().getCols(),
                                step.error)) {
    return false;
  }
  // Rows from clear_from on land as zero (no clear: every row is copied).
  int64_t clearFrom = load.getClearFrom()
                          ? interpreter.index(load.getClearFrom())
                          : std::numeric_limits<int64_t>::max();
  issue(step, AsyncOp::TmaLoad,
        {batch, head, interpreter.index(load.getRow()),
         interpreter.index(load.getCount()),
         interpreter.index(load.getBarrierCount()), clearFrom},
        &source, table);
  return true;
}

bool Cta::run(const RoleStep &step, TmaStoreOp store) {
  Interpreter &interpreter = step.interpreter;
  Buffer &dest = interpreter.buffer(store.getDest());
  int64_t batch = interpreter.index(store.getBatch());
  int64_t head = interpreter.index(store.getHead());
  int64_t cols = smem(store.getBuffer()).type.getCols();
  int64_t column = static_cast<int64_t>(store.getColumn());
  // A reduction adds part of the columns: its rows are the tensor's.
  int64_t dim = store.getReduce() && dest.shape.size() == 4 ? dest.shape[3]
                                                             : cols;
  if (!checkTensorAccess(step.op, dest, batch, head, store.getGqaRatio(), dim,
                         step.error))
    return false;
  if (column + cols > dim) {
    step.error = "'fa4.tma_store' writes columns [" +
                 std::to_string(column) + ", " +
                 std::to_string(column + cols) + ") of rows of " +
                 std::to_string(dim);
    return false;
  }
  ++step.thread.pendingStores;
  issue(step, AsyncOp::TmaStore,
        {interpreter.index(store.getCount()), batch, head,
         interpreter.index(store.getRow())},
        &dest);
  return true;
}

// Hopper's warpgroup MMAs. The values are computed at issue; the
// shared-memory reads are checked at issue and again when the MMA is known
// complete (its wait, or at once when it is not async), so a stage released
// before its MMA's wait shows as a hazard.

bool Cta::run(const RoleStep &step, WarpgroupScoreMmaOp mma) {
  Interpreter &interpreter = step.interpreter;
  SmemState &q = smem(mma.getQuery()), &k = smem(mma.getKey());
  int64_t qStage = interpreter.index(mma.getQueryCount()) % q.type.getStages();
  int64_t kStage = interpreter.index(mma.getKeyCount()) % k.type.getStages();
  RoleThread::WarpgroupMma issued{mma.getScores(),
                                  {{mma.getQuery().getDefiningOp(), qStage},
                                   {mma.getKey().getDefiningOp(), kStage}}};
  readWarpgroupOperands(issued, step.self, step.thread.clock, step.what);
  ++report.mmasIssued[step.thread.name];
  auto scores = makeTile(mma.getScores());
  int64_t m = scores->shape[0], n = k.type.getRows(), d = q.type.getCols();
  int64_t first = mma.getRowOffset();
  scoreProduct(&q.data[(qStage * q.type.getRows() + first) * d],
               &k.data[kStage * n * d], scores->data.data(), m, n, d);
  interpreter.setTile(mma.getScores(), scores);
  if (mma.getAsync())
    step.thread.warpgroupMmas.push_back(issued);
  return true;
}

bool Cta::run(const RoleStep &step, WarpgroupValueMmaOp mma) {
  Interpreter &interpreter = step.interpreter;
  SmemState &v = smem(mma.getValue());
  int64_t vStage = interpreter.index(mma.getValueCount()) % v.type.getStages();
  RoleThread::WarpgroupMma issued{mma.getResult(),
                                  {{mma.getValue().getDefiningOp(), vStage}}};
  readWarpgroupOperands(issued, step.self, step.thread.clock, step.what);
  ++report.mmasIssued[step.thread.name];
  const Tile &p = interpreter.tile(mma.getProbs());
  auto result = std::make_shared<Tile>(interpreter.tile(mma.getAcc()));
  int64_t m = p.shape[0], n = p.shape[1];
  const float *stage = &v.data[vStage * v.type.getRows() * v.type.getCols()];
  // An 8-bit V stage is V transposed, [head_dim, keys].
  std::vector<float> untransposed;
  if (v.type.getElementType().getIntOrFloatBitWidth() == 8) {
    int64_t d = v.type.getRows();
    untransposed.resize(n * d);
    for (int64_t r = 0; r < d; ++r)
      for (int64_t c = 0; c < n; ++c)
        untransposed[c * d + r] = stage[r * n + c];
    stage = untransposed.data();
  }
  int64_t d = result->shape[1];
  valueProduct(p.data.data(), stage, result->data.data(), m, n, d);
  interpreter.setTile(mma.getResult(), result);
  if (mma.getAsync())
    step.thread.warpgroupMmas.push_back(issued);
  return true;
}

bool Cta::run(const RoleStep &step, WarpgroupTransposedMmaOp mma) {
  Interpreter &interpreter = step.interpreter;
  SmemState &a = smem(mma.getLhs()), &b = smem(mma.getRhs());
  int64_t aStage = interpreter.index(mma.getLhsCount()) % a.type.getStages();
  int64_t bStage = interpreter.index(mma.getRhsCount()) % b.type.getStages();
  RoleThread::WarpgroupMma issued{mma.getResult(),
                                  {{mma.getLhs().getDefiningOp(), aStage},
                                   {mma.getRhs().getDefiningOp(), bStage}}};
  // The lhs's stages along K: the first, then `then`'s.
  struct Part {
    const SmemState *state;
    int64_t stage;
  };
  SmallVector<Part, 2> parts{{&a, aStage}};
  if (Value next = mma.getLhsNext()) {
    SmemState &c = smem(next);
    int64_t cStage =
        interpreter.index(mma.getLhsNextCount()) % c.type.getStages();
    issued.reads.push_back({next.getDefiningOp(), cStage});
    parts.push_back({&c, cStage});
  }
  readWarpgroupOperands(issued, step.self, step.thread.clock, step.what);
  ++report.mmasIssued[step.thread.name];
  auto result = makeTile(mma.getResult());
  // result[m][x] = Σ_k lhs[k][m] · b[offset + k][column + x], in f32, k
  // through the parts in order.
  int64_t m = a.type.getCols(), n = b.type.getCols();
  int64_t width = result->shape[1], column = mma.getColumnOffset();
  const float *rhs =
      &b.data[(bStage * b.type.getRows() + mma.getRowOffset()) * n + column];
  for (int64_t row = 0; row < m; ++row)
    for (int64_t x = 0; x < width; ++x) {
      float sum = 0.0f;
      int64_t key = 0;
      for (const Part &part : parts) {
        int64_t k = part.state->type.getRows();
        const float *lhs = &part.state->data[part.stage * k * m];
        for (int64_t i = 0; i < k; ++i, ++key)
          sum += lhs[i * m + row] * rhs[key * n + x];
      }
      result->data[row * width + x] = sum;
    }
  interpreter.setTile(mma.getResult(), result);
  if (mma.getAsync())
    step.thread.warpgroupMmas.push_back(issued);
  return true;
}

bool Cta::run(const RoleStep &step, WarpgroupWaitOp wait) {
  auto &pending = step.thread.warpgroupMmas;
  while (pending.size() > wait.getPending()) {
    readWarpgroupOperands(pending.front(), step.self, step.thread.clock,
                          step.what);
    pending.pop_front();
  }
  for (const RoleThread::WarpgroupMma &running : pending)
    if (running.result == wait.getPendingValue()) {
      step.error = "'fa4.wgmma_wait' with pending = " +
                   std::to_string(wait.getPending()) +
                   " leaves the MMA it waits for running";
      return false;
    }
  step.interpreter.setTile(
      wait.getResult(),
      std::make_shared<Tile>(step.interpreter.tile(wait.getPendingValue())));
  return true;
}

bool Cta::run(const RoleStep &step, TmemLoadOp load) {
  Interpreter &interpreter = step.interpreter;
  TmemPlace place;
  if (!tmemPlace(load.getBuffer(), place, step.error) ||
      !checkTmemLive(step.what, step.error))
    return false;
  auto tile = makeTile(load.getResult());
  int64_t first = interpreter.index(load.getColumn());
  int64_t cols = tile->shape[1];
  if (!checkColumns(step.op, first, cols, place, step.error))
    return false;
  accessTmem(place, first, cols, step.self, step.thread.clock, false, step.what);
  for (int64_t r = 0; r < tile->shape[0]; ++r)
    for (int64_t c = 0; c < cols; ++c)
      tile->data[r * cols + c] =
          readTmem(&tmem[r * blackwell::kTmemColumns + place.firstColumn],
                   first + c, place.element);
  interpreter.setTile(load.getResult(), tile);
  return true;
}

bool Cta::run(const RoleStep &step, TmemStoreOp store) {
  Interpreter &interpreter = step.interpreter;
  TmemPlace place;
  if (!tmemPlace(store.getBuffer(), place, step.error) ||
      !checkTmemLive(step.what, step.error))
    return false;
  const Tile &tile = interpreter.tile(store.getTile());
  int64_t first = interpreter.index(store.getColumn());
  int64_t cols = tile.shape[1];
  if (!checkColumns(step.op, first, cols, place, step.error))
    return false;
  accessTmem(place, first, cols, step.self, step.thread.clock, true, step.what);
  for (int64_t r = 0; r < tile.shape[0]; ++r)
    for (int64_t c = 0; c < cols; ++c)
      writeTmem(&tmem[r * blackwell::kTmemColumns + place.firstColumn],
                first + c, place.element, tile.data[r * cols + c]);
  return true;
}

bool Cta::run(const RoleStep &step, SmemStoreOp store) {
  Interpreter &interpreter = step.interpreter;
  SmemState &state = smem(store.getBuffer());
  int64_t stage = interpreter.index(store.getCount()) % state.type.getStages();
  // A TMA store reads its stage asynchronously until its issuer's
  // fa4.tma_store_wait: writing the stage before that races with the read
  // (program order does not order the two).
  for (const AsyncOp &async : tmaInFlight)
    if (async.kind == AsyncOp::TmaStore) {
      auto pending = cast<TmaStoreOp>(async.op);
      if (pending.getBuffer() == store.getBuffer() &&
          async.indices[0] % state.type.getStages() == stage)
        report.addHazard("SMEM " + state.name + "[" + std::to_string(stage) +
                         "]: write by " + step.thread.name +
                         " while a TMA store issued by " +
                         threads[async.thread]->name +
                         " still reads it (no fa4.tma_store_wait between)");
    }
  access(state.stages[stage],
         "SMEM " + state.name + "[" + std::to_string(stage) + "]", step.self,
         step.thread.clock, true, step.what);
  const Tile &tile = interpreter.tile(store.getTile());
  int64_t rows = state.type.getRows(), cols = state.type.getCols();
  float *dest = &state.data[stage * rows * cols];
  if (std::optional<int64_t> row = store.getRow()) {
    std::copy(tile.data.begin(), tile.data.end(), dest + *row * cols);
    return true;
  }
  int64_t first = store.getColumn() ? interpreter.index(store.getColumn()) : 0;
  int64_t width = tile.shape[1];
  if (first + width > cols) {
    step.error = "'fa4.smem_store' writes columns [" + std::to_string(first) +
                 ", " + std::to_string(first + width) + ") of " + state.name +
                 ", which has " + std::to_string(cols);
    return false;
  }
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(&tile.data[r * width], width, dest + r * cols + first);
  return true;
}

bool Cta::run(const RoleStep &step, SmemLoadOp load) {
  Interpreter &interpreter = step.interpreter;
  SmemState &state = smem(load.getBuffer());
  int64_t stage = interpreter.index(load.getCount()) % state.type.getStages();
  access(state.stages[stage],
         "SMEM " + state.name + "[" + std::to_string(stage) + "]", step.self,
         step.thread.clock, false, step.what);
  auto tile = makeTile(load.getResult());
  int64_t rows = state.type.getRows(), cols = state.type.getCols();
  const float *source = &state.data[stage * rows * cols];
  if (std::optional<int64_t> row = load.getRow())
    source += *row * cols + load.getColumn().value_or(0);
  std::copy(source, source + tile->data.size(), tile->data.begin());
  interpreter.setTile(load.getResult(), tile);
  return true;
}

bool Cta::run(const RoleStep &step, TmemAllocColumnsOp alloc) {
  if (tmemAllocated)
    report.addMisuse(step.what + " allocates TMEM again; " + tmemAllocator +
                     " already holds " + std::to_string(tmemAllocatedColumns) +
                     " columns");
  tmemAllocated = true;
  tmemAllocatedColumns = alloc.getColumns();
  tmemAllocator = step.thread.name;
  return true;
}

bool Cta::run(const RoleStep &step, TmemDeallocOp dealloc) {
  if (!tmemAllocated || tmemFreed)
    report.addMisuse(step.what + " frees TMEM that is not allocated");
  else if (static_cast<int64_t>(dealloc.getColumns()) != tmemAllocatedColumns)
    report.addMisuse(step.what + " frees " + std::to_string(dealloc.getColumns()) +
                     " TMEM columns; " + tmemAllocator + " allocated " +
                     std::to_string(tmemAllocatedColumns));
  tmemFreed = true;
  return true;
}

void Cta::readWarpgroupOperands(const RoleThread::WarpgroupMma &mma,
                                int self, const Clock &clock,
                                const std::string &what) {
  for (auto [alloc, stage] : mma.reads) {
    SmemState &state = smemStates.at(alloc);
    access(state.stages[stage],
           "SMEM " + state.name + "[" + std::to_string(stage) + "]", self,
           clock, false, what);
  }
}

bool Cta::run(InterpreterStats &stats, std::string &error) {
  if (!setUp(error))
    return false;
  for (size_t i = 0; i < threads.size(); ++i) {
    RoleThread *role = threads[i].get();
    role->thread = std::thread([this, role, i] {
      {
        std::unique_lock<std::mutex> lock(mutex);
        turnChanged.wait(lock, [&] { return turn == static_cast<int>(i); });
      }
      if (!aborting &&
          !role->interpreter.run(role->role.getBody().front(), role->error))
        role->failed = true;
      std::unique_lock<std::mutex> lock(mutex);
      role->done = true;
      turn = -1;
      turnChanged.notify_all();
    });
  }
  auto resume = [&](int thread) {
    std::unique_lock<std::mutex> lock(mutex);
    turn = thread;
    turnChanged.notify_all();
    turnChanged.wait(lock, [&] { return turn == -1; });
  };

  bool ok = true;
  while (true) {
    std::vector<int> runnable;
    for (size_t i = 0; i < threads.size(); ++i) {
      RoleThread &role = *threads[i];
      if (!role.done && (!role.blockedOn || role.blockedOn()))
        runnable.push_back(i);
    }
    std::vector<int> queues;
    for (size_t i = 0; i < threads.size(); ++i)
      if (!threads[i]->tensorCoreQueue.empty())
        queues.push_back(i);
    size_t ready = tmaInFlight.size() + queues.size();
    if (runnable.empty() && ready == 0)
      break;
    if (ready > 0 &&
        (runnable.empty() || (!lateCompletions && rng() % 3 == 0))) {
      // Late completions hold back, for as long as anything else can
      // happen, the work no blocked role waits for: a TMA store whose wait
      // is missing stays in flight while the next writer of its stage runs.
      std::vector<size_t> choices;
      for (size_t i = 0; i < ready && lateCompletions; ++i) {
        bool wanted =
            i < tmaInFlight.size()
                ? unblocksARole(tmaInFlight[i])
                : llvm::any_of(
                      threads[queues[i - tmaInFlight.size()]]->tensorCoreQueue,
                      [&](const AsyncOp &queued) {
                        return unblocksARole(queued);
                      });
        if (wanted)
          choices.push_back(i);
      }
      size_t pick = choices.empty() ? rng() % ready
                                    : choices[rng() % choices.size()];
      AsyncOp async;
      if (pick < tmaInFlight.size()) {
        async = std::move(tmaInFlight[pick]);
        tmaInFlight.erase(tmaInFlight.begin() + pick);
      } else {
        std::deque<AsyncOp> &queue =
            threads[queues[pick - tmaInFlight.size()]]->tensorCoreQueue;
        async = std::move(queue.front());
        queue.pop_front();
      }
      if (!complete(async, error)) {
        ok = false;
        break;
      }
      continue;
    }
    int pick = runnable[rng() % runnable.size()];
    resume(pick);
    if (threads[pick]->failed) {
      error = threads[pick]->name + ": " + threads[pick]->error;
      ok = false;
      break;
    }
  }

  for (auto &thread : threads)
    if (ok && !thread->done)
      report.deadlock.push_back(thread->blockedWhat);
  // The PTX ISA requires the TMEM a CTA allocates to be deallocated before
  // it exits: what is left allocated is lost to the next CTA on the SM.
  if (ok && report.deadlock.empty() && tmemAllocated && !tmemFreed)
    report.addMisuse("the CTA exits with TMEM allocated: " + tmemAllocator +
                     "'s " + std::to_string(tmemAllocatedColumns) +
                     " columns (" + tmemBuffers +
                     ") are never freed by tmem_dealloc");
  // Tear down: every role still waiting returns from its wait and unwinds.
  {
    std::unique_lock<std::mutex> lock(mutex);
    aborting = true;
  }
  for (size_t i = 0; i < threads.size(); ++i)
    if (!threads[i]->done)
      resume(i);
  for (auto &thread : threads) {
    thread->thread.join();
    const InterpreterStats &own = thread->interpreter.getStats();
    stats.rescalesDone += own.rescalesDone;
    stats.rescalesSkipped += own.rescalesSkipped;
    stats.blocksVisited += own.blocksVisited;
    stats.blocksSkipped += own.blocksSkipped;
  }
  return ok;
}

bool mlir::fa4::sim::runCta(Interpreter &parent, WarpSpecializeOp op,
                            uint64_t scheduleSeed, bool lateCompletions,
                            ProtocolReport &report, InterpreterStats &stats,
                            std::string &error) {
  Cta cta(parent, op, scheduleSeed, lateCompletions, report);
  return cta.run(stats, error);
}

bool mlir::fa4::sim::LaunchHook::execute(Interpreter &interpreter,
                                         Operation *op, std::string &error) {
  if (isa<SmemAllocOp, TmemAllocOp, TmemViewOp, MBarrierAllocOp>(op))
    return true;
  if (auto grid = dyn_cast<GridSizeOp>(op)) {
    // The tasks the roles' loops walk (split-KV's parts included: the
    // task loop's bound), else fa4.task_count's.
    std::optional<int64_t> walked;
    if (auto func = op->getParentOfType<func::FuncOp>())
      func.walk([&](scf::ForOp loop) {
        if (!walked && loop->hasAttr("fa4.task_loop"))
          walked = interpreter.knownIndex(loop.getUpperBound());
      });
    int64_t tasks = numTasks ? *numTasks
                    : walked ? *walked
                             : interpreter.numTasks;
    gridSize = std::min<int64_t>(grid.getSmCount(), std::max<int64_t>(tasks, 1));
    interpreter.setIndex(grid.getResult(), gridSize);
    return true;
  }
  if (auto specialize = dyn_cast<WarpSpecializeOp>(op))
    return runCta(interpreter, specialize, seed * 7919u + ctaId,
                  lateCompletions, report, stats, error);
  if (isa<PrepareBackwardOp>(op))
    return ctaId != 0 || interpreter.runGridStep(op, error);
  if (isa<FinishDqOp>(op))
    return ctaId != gridSize - 1 || interpreter.runGridStep(op, error);
  error = "cannot run '" + op->getName().getStringRef().str() +
          "' outside a role";
  return false;
}
