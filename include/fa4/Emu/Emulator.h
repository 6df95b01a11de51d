//===- Emulator.h - fa4-emu: run Blackwell and Hopper PTX on the CPU -*- C++ -*-===//
//
// The front door of the emulator. A Program is PTX text as ptxas would read
// it, parsed once; a Device holds global memory; launch() runs a grid of CTAs
// of the program's kernel over them, every thread with its own registers and
// program counter, and reports what the PTX ISA says went wrong: bad
// addresses, divergent collectives, barrier misuse, hazards between the
// asynchronous units (TMA, tensor core) and the threads, deadlocks.
//
// What is modelled and what is not is written down in docs/Emulator.md.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_EMU_EMULATOR_H
#define FA4_EMU_EMULATOR_H

#include "fa4/Runtime/TensorMapSpec.h"
#include "fa4/Target/Target.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mlir::fa4::emu {

struct Program;

/// The chips whose PTX the emulator executes (fa4/Target/Target.h: the
/// Blackwell chip's tcgen05 and TMEM, the Hopper chip's wgmma and named
/// barriers; TMA and mbarriers are shared).
inline bool emulatesTarget(const std::string &name) {
  const target::ChipInfo *chip = target::lookup(name);
  return chip && chip->emulated;
}

/// Parses PTX text; an error (line and reason) when the text is not PTX
/// the emulator understands, naming an unknown instruction.
llvm::Expected<std::shared_ptr<const Program>>
parsePtx(const std::string &text);

/// The module's `.target` (a chip's name), empty when it names none.
const std::string &targetOf(const Program &program);

/// One .param of a kernel entry.
struct KernelParam {
  std::string name;
  uint32_t bytes = 0;
  uint32_t align = 1;
};
/// The entry's parameters in order; empty when `kernel` is not an entry.
std::vector<KernelParam> kernelParams(const Program &program,
                                      const std::string &kernel);

/// Global memory: allocations at addresses that look like device pointers,
/// each bounds-checked on every access.
class Device {
public:
  Device();
  ~Device();
  /// A zeroed allocation of `bytes`, 256-byte aligned.
  uint64_t allocate(uint64_t bytes);
  /// Host view of [address, address + bytes); null if it is not inside one
  /// allocation.
  uint8_t *host(uint64_t address, uint64_t bytes);

  struct Allocation {
    uint64_t base;
    std::vector<uint8_t> bytes;
  };

private:
  friend class CtaMachine;
  std::map<uint64_t, Allocation> allocations;
  uint64_t next;
};

/// Encodes a tensor map into the 128 bytes a kernel receives by value,
/// checking the rules of cuTensorMapEncodeTiled; an error naming the rule
/// broken. The byte layout is the emulator's own (the driver's is not
/// public).
llvm::Error encodeTensorMap(const runtime::TensorMapSpec &spec,
                            uint8_t out[128]);
/// The map encodeTensorMap wrote into `in`, checked again by its rules; an
/// error for bytes that are no such map.
llvm::Expected<runtime::TensorMapSpec> decodeTensorMap(const uint8_t in[128]);

struct LaunchConfig {
  std::string kernel;
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  /// Thread-block clusters: CTAs per cluster in each dimension. {1, 1, 1}
  /// takes the kernel's .reqnctapercluster, or none; the grid must be whole
  /// clusters. A cluster's CTAs run together (docs/Emulator.md, "Clusters").
  uint32_t cluster[3] = {1, 1, 1};
  uint32_t dynamicSmemBytes = 0;
  /// One byte string per kernel parameter, in order.
  std::vector<std::vector<uint8_t>> arguments;
  /// Seeds the schedule: which thread runs next, for how long, and when each
  /// asynchronous operation completes.
  uint64_t seed = 0;
  /// Asynchronous operations complete within this many executed
  /// instructions of their issue (or earlier, when every thread waits).
  uint64_t maxAsyncDelay = 4096;
  /// CTAs run in parallel on this many host threads.
  unsigned workers = 1;
  /// Skewed schedules: each warpgroup of a CTA runs at its own seeded speed
  /// (1 to 1/512 of the fastest), so that one role races ahead of another
  /// by whole rings and tasks, as a stalled SM or a slow memory path makes
  /// it on hardware.
  bool skewedSpeeds = false;
  /// Independent thread scheduling: a warp's diverged lanes run apart, in
  /// either order and at their own (skewed) speeds, until a
  /// warp-synchronous instruction joins them; the default runs them in
  /// lockstep, reconverging at immediate post-dominators.
  bool independentThreads = false;
  /// Starved warpgroups: for stretches of a few thousand to a few hundred
  /// thousand instructions one warpgroup (a role), drawn anew each stretch,
  /// runs only when nothing else can, as a warp the hardware keeps waiting
  /// behind others would.
  bool starveRoles = false;
  /// Lazy completion: an asynchronous operation completes only once a
  /// thread waits for it (on the mbarrier it signals, its bulk group, its
  /// wgmma group) or when every thread waits, so that its producer and
  /// every other role run on meanwhile.
  bool lazyCompletion = false;
  /// A strand yields after every arrive and commit, so that completions and
  /// other warps come between a warp's arrivals (a phase that completes in
  /// the middle of another warp's arrive sequence).
  bool yieldAtArrives = false;
  /// A TMA store completes only once its thread waits for its bulk group
  /// (or when nothing else is left to run): its shared memory stays in use
  /// as long as the hardware may keep reading it.
  bool lateStores = false;
  /// Stop a CTA past this many instructions (a livelock guard).
  uint64_t instructionLimit = uint64_t(1) << 34;
};

struct LaunchReport {
  /// Faults: bad addresses, unknown encodings, divergent collectives,
  /// register budget violations, leaks. The first few, then a count.
  std::vector<std::string> errors;
  int64_t errorCount = 0;
  std::vector<std::string> hazards;
  int64_t hazardCount = 0;
  std::vector<std::string> barrierMisuse;
  int64_t barrierMisuseCount = 0;
  /// One line per blocked warp when a CTA deadlocked.
  std::vector<std::string> deadlock;

  int64_t ctas = 0;
  int64_t instructions = 0;
  /// Instructions executed by the threads of each warp index.
  std::vector<int64_t> instructionsPerWarp;
  int64_t mmas = 0;
  int64_t tmaLoadBytes = 0;
  int64_t tmaStoreBytes = 0;

  /// Folds another launch's (or CTA's) report into this one: counts add up,
  /// the first messages are kept, the first deadlock is kept.
  void add(const LaunchReport &other);

  bool clean() const {
    return errorCount == 0 && hazardCount == 0 && barrierMisuseCount == 0 &&
           deadlock.empty();
  }
};

/// Runs one launch to completion and reports what happened once it ran; an
/// error when it cannot start (no such kernel, wrong arguments).
llvm::Expected<LaunchReport> launch(const Program &program, Device &device,
                                    const LaunchConfig &config);

} // namespace mlir::fa4::emu

#endif // FA4_EMU_EMULATOR_H
