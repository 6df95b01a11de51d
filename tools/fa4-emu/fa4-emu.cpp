//===- fa4-emu.cpp - run an fa4 kernel's PTX on the CPU and check it --------===//
//
// Reads a launch manifest and the PTX beside it, makes seeded inputs,
// launches the manifest's grid in the emulator — once per interleaving, each
// with its own schedule — and judges O and the LSE as fa4-sim does, against
// its float64 reference with a low-precision one as the yardstick. Prints one
// JSON object; exits 0 within tolerance with a clean run, 1 otherwise, 2 when
// the launch cannot be made.
//
//===----------------------------------------------------------------------===//

#include "fa4/Support/NumberOption.h"
#include "fa4/Emu/Emulator.h"
#include "fa4/InitFA4.h"
#include "fa4/Runtime/Backward.h"
#include "fa4/Runtime/Contract.h"
#include "fa4/Runtime/Fp8Value.h"
#include "fa4/Runtime/Launch.h"
#include "fa4/Runtime/Runtime.h"
#include "fa4/Sim/Mods.h"
#include "fa4/Sim/Reference.h"
#include "fa4/Support/AttentionMath.h"
#include "fa4/Support/Error.h"
#include "fa4/Support/Float8.h"
#include "fa4/Support/InputLimits.h"
#include "fa4/Support/IrInput.h"
#include "fa4/Support/OutputFile.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Parser/Parser.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <tuple>
#include <random>
#include <thread>

using namespace llvm;
using namespace mlir::fa4;

static cl::OptionCategory emuCategory("fa4-emu");
static cl::opt<std::string> manifestFile(cl::Positional, cl::Required,
                                         cl::desc("<manifest: attn.cubin.json>"),
                                         cl::cat(emuCategory));
static cl::opt<std::string> ptxFile(
    "ptx", cl::desc("The kernel's PTX (default: the manifest's \"ptx\", beside it)"),
    cl::cat(emuCategory));
static cl::opt<int64_t> batch("batch", cl::desc("Batch size (varlen: the number of sequences, their lengths drawn from the seed)"), cl::init(1),
                              cl::cat(emuCategory));
static cl::opt<int64_t> seqQ("seq-q", cl::desc("Query sequence length (varlen: the longest a sequence may draw)"),
                             cl::init(128), cl::cat(emuCategory));
static cl::opt<int64_t> seqK("seq-k", cl::desc("Key/value sequence length (varlen: the longest a sequence may draw)"),
                             cl::init(128), cl::cat(emuCategory));
static cl::opt<uint64_t> seed("seed", cl::desc("Seed of the inputs and of the first schedule"),
                              cl::init(0), cl::cat(emuCategory));
static cl::opt<sim::InputDistribution> distribution(
    "dist", cl::desc("Input distribution"), cl::init(sim::InputDistribution::Normal),
    cl::values(clEnumValN(sim::InputDistribution::Normal, "normal",
                          "standard normal Q, K, V"),
               clEnumValN(sim::InputDistribution::Growing, "growing",
                          "scores that grow block by block, forcing rescales"),
               clEnumValN(sim::InputDistribution::Outliers, "outliers",
                          "rare large-magnitude entries"),
        clEnumValN(sim::InputDistribution::Spikes, "spikes",
                   "N(0, 1) plus rare N(0, 100) outliers (the FlashAttention-3 "
                   "paper's FP8 accuracy inputs)"),
               clEnumValN(sim::InputDistribution::NonFinite, "nonfinite",
                          "NaN and +inf entries in a few rows of Q and K")),
    cl::cat(emuCategory));
static cl::opt<int64_t> interleavings(
    "interleavings",
    cl::desc("Launches, each with its own schedule of threads and asynchronous "
             "completions. Schedule seed s (the first is --seed) is of kind "
             "s mod 4: 0 lockstep warps (diverged lanes reconverge, either "
             "side first), completions at seeded random points; 1 independent "
             "thread scheduling (diverged lanes part, one side starved), "
             "warpgroups at speeds up to 512 times apart, each completion "
             "held back until every warp waits; 2 independent thread "
             "scheduling with one warpgroup at a time starved for long "
             "stretches (often the warp that has just arrived on an mbarrier), "
             "TMA stores held until their thread waits; 3 lockstep at skewed "
             "speeds with starved warps as in 2, each completion held until a "
             "thread waits for it. The default runs one of each"),
    cl::init(4), cl::cat(emuCategory));
static cl::opt<uint64_t> maxAsyncDelay(
    "max-async-delay",
    cl::desc("TMA and tensor-core operations complete within this many "
             "executed instructions of their issue"),
    cl::init(4096), cl::cat(emuCategory));
static cl::opt<unsigned> workers(
    "workers", cl::desc("Host threads running CTAs (default: all cores)"),
    cl::init(0), cl::cat(emuCategory));
static mlir::fa4::NumberOption absTolerance("atol", cl::desc("Absolute tolerance"),
                                    cl::init(1e-2), cl::cat(emuCategory));
static mlir::fa4::NumberOption relTolerance("rtol", cl::desc("Relative tolerance of the per-element test, used only where the low-precision reference overflows"),
                                    cl::init(1e-2), cl::cat(emuCategory));
static cl::opt<int64_t> smCount(
    "sm-count", cl::desc("Grid size cap, in CTAs (in clusters for a kernel of CTA\n"
                         "pairs, two CTAs each; default: the manifest's sm_count)"),
    cl::init(0), cl::cat(emuCategory));

static cl::opt<std::string> entryFile(
    "entry",
    cl::desc("The entry IR the kernel was compiled from: needed when it has "
             "a score_mod or mask_mod (the reference runs the regions, and "
             "the extras are drawn from their types)"),
    cl::init(""), cl::cat(emuCategory));

/// A delay no run reaches: completions happen only when every warp waits.
static constexpr uint64_t kLatestCompletion = uint64_t(1) << 50;

static int fail(const Twine &message) {
  errs() << "fa4-emu: " << message << "\n";
  return 2;
}

static void jsonNumber(raw_ostream &os, double value) {
  if (std::isnan(value))
    os << "\"nan\"";
  else if (std::isinf(value))
    os << (value > 0 ? "\"inf\"" : "\"-inf\"");
  else
    os << format("%.6g", value);
}

static void jsonStrings(raw_ostream &os, const std::vector<std::string> &list) {
  os << "[";
  for (size_t i = 0; i < list.size(); ++i) {
    os << (i ? "," : "") << "\"";
    os.write_escaped(list[i]);
    os << "\"";
  }
  os << "]";
}

static int emulate(std::unique_ptr<MemoryBuffer> entryBuffer);

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(emuCategory);
  // A bad flag is exit code 2, as --help says (LLVM would exit 1).
  if (!cl::ParseCommandLineOptions(
      argc, argv,
      "fa4-emu: run an fa4 kernel's PTX (" + target::emulatedChips() +
      ") on the CPU and check it\n\n"
      "  fa4c --head-dim 128 --q-heads 32 --kv-heads 8 --mask causal --lse -o a.cubin\n"
      "  fa4-emu a.cubin.json --batch 1 --seq-q 1024 --seq-k 1024\n\n"
      "The manifest gives the launch (grid, block, shared memory, tensor maps, "
      "parameters) and the PTX beside it the kernel. Every thread runs the PTX "
      "with its own registers; mbarriers, TMA, TMEM and tcgen05 MMAs follow the "
      "PTX ISA, the asynchronous ones completing at seeded random points. The "
      "report adds errors (bad addresses, divergent collectives, bad "
      "encodings), hazards, barrier misuse and deadlocks to the numerics.\n"
      "Prints one JSON object; exits 0 within tolerance and clean, 1 otherwise, "
      "2 on bad flags or a launch that cannot be made.\n", &llvm::errs()))
    return 2;
  if (batch <= 0 || seqQ <= 0 || seqK <= 0)
    return fail("--batch, --seq-q and --seq-k must be positive");
  if (interleavings <= 0)
    return fail("--interleavings must be positive");
  if (smCount < 0 || smCount >= (int64_t(1) << 31))
    return fail("--sm-count must be 0 (the manifest's) to 2^31 - 1");
  if (!(absTolerance >= 0) || !(relTolerance >= 0))
    return fail("--atol and --rtol must be non-negative");
  if (maxAsyncDelay > kLatestCompletion)
    return fail("--max-async-delay must be at most 2^50 (" +
                Twine(kLatestCompletion) +
                "), a delay no run reaches; got " + Twine(maxAsyncDelay));
  // The entry IR, when given, is read first: the rest runs on a stack sized
  // to it (fa4/Support/IrInput.h), since the reference walks its regions.
  return runToolOnInput("fa4-emu", entryFile, emulate);
}

/// fa4-emu's error: the message after the tool's name, exit code 2.
static int fail(llvm::Error error) { return fail(toString(std::move(error))); }

namespace {
/// What fa4-emu runs: the manifest (its sm_count as --sm-count sets it) and
/// the PTX beside it, parsed.
struct LoadedKernel {
  runtime::Manifest manifest;
  std::shared_ptr<const emu::Program> program;
};
} // namespace

/// The contract binds the files of one fa4c run: the PTX fa4-emu runs must
/// be the manifest's and, when the manifest names a cubin that is there,
/// the cubin's.
static llvm::Error checkKernelFiles(const runtime::Manifest &manifest,
                                    const std::string &ptxText) {
  if (llvm::Error refused = runtime::checkInterface(manifest))
    return prefixError(manifestFile + ": ", std::move(refused));
  if (llvm::Error refused = runtime::checkPtxEntry(manifest, ptxText))
    return prefixError(manifestFile + ": ", std::move(refused));
  std::string cubinBytes;
  if (!manifest.cubin.empty()) {
    SmallString<256> cubinPath(manifestFile);
    sys::path::remove_filename(cubinPath);
    sys::path::append(cubinPath, manifest.cubin);
    bool missing = false;
    llvm::Expected<std::string> cubin =
        readRegularFile(std::string(cubinPath), kMaxKernelFileBytes, &missing);
    if (!cubin && !missing)
      return cubin.takeError();
    if (!cubin)
      llvm::consumeError(cubin.takeError()); // no cubin: the PTX decides
    else if (cubin->empty())
      return makeError("cannot read " + std::string(cubinPath) +
                       ": the file is empty");
    else
      cubinBytes = std::move(*cubin);
  }
  return prefixError(manifestFile + ": ",
                     runtime::checkContract(
                         manifest, ptxText,
                         ArrayRef<uint8_t>(reinterpret_cast<const uint8_t *>(
                                               cubinBytes.data()),
                                           cubinBytes.size())));
}

/// Reads the manifest and the PTX (beside it, or --ptx) and checks them
/// against each other and against the cubin.
static llvm::Expected<LoadedKernel> loadKernel() {
  llvm::Expected<std::string> manifestText =
      readRegularFile(manifestFile, kMaxManifestBytes);
  if (!manifestText)
    return manifestText.takeError();
  llvm::Expected<runtime::Manifest> manifest =
      runtime::parseManifest(*manifestText);
  if (!manifest)
    return prefixError(manifestFile + ": ", manifest.takeError());
  if (!emu::emulatesTarget(manifest->target))
    return makeError("the manifest is for " + manifest->target +
                     "; fa4-emu runs " + target::emulatedChips() + " kernels");
  if (smCount > 0)
    manifest->smCount = smCount;

  std::string ptxPath = ptxFile;
  if (ptxPath.empty()) {
    if (manifest->ptx.empty())
      return makeError("the manifest names no PTX; pass --ptx (fa4c "
                       "--emit=ptx writes it)");
    SmallString<256> beside(manifestFile);
    sys::path::remove_filename(beside);
    sys::path::append(beside, manifest->ptx);
    ptxPath = std::string(beside);
  }
  llvm::Expected<std::string> ptxText =
      readRegularFile(ptxPath, kMaxKernelFileBytes);
  if (!ptxText)
    return ptxText.takeError();
  // A contract too large or malformed is refused before the PTX is parsed
  // (reading it is linear in the file, the parse of a large PTX is not
  // cheap); the contract's other checks follow the parse, so that a
  // hand-written file that is no PTX gets the parser's error.
  if (llvm::Expected<std::optional<std::string>> contract =
          runtime::readPtxContract(*ptxText);
      !contract)
    return prefixError(ptxPath + ": ", contract.takeError());
  llvm::Expected<std::shared_ptr<const emu::Program>> program =
      emu::parsePtx(*ptxText);
  if (!program)
    return prefixError(ptxPath + ": ", program.takeError());
  if (emu::targetOf(**program) != manifest->target)
    return makeError("the manifest is for " + manifest->target +
                     " but its PTX " + ptxPath + " targets " +
                     emu::targetOf(**program));
  if (llvm::Error refused = checkKernelFiles(*manifest, *ptxText))
    return std::move(refused);
  return LoadedKernel{std::move(*manifest), std::move(*program)};
}

/// The entry IR (--entry) in `context`, refused before parsing where the
/// parser would crash on it.
static llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
parseEntry(mlir::MLIRContext &context,
           std::unique_ptr<MemoryBuffer> entryBuffer) {
  mlir::DialectRegistry registry;
  registerTileLevelDialects(registry);
  // A tensor-level entry hands its extras over with to_buffer.
  registry.insert<mlir::bufferization::BufferizationDialect>();
  context.appendDialectRegistry(registry);
  if (std::optional<IrRefusal> refusal =
          refuseBeforeParsing(entryBuffer->getBuffer())) {
    printRefusal(*entryBuffer, *refusal);
    return makeError("cannot parse the entry IR " + entryFile);
  }
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(std::move(entryBuffer), llvm::SMLoc());
  mlir::OwningOpRef<mlir::ModuleOp> entryModule =
      mlir::parseSourceFile<mlir::ModuleOp>(sourceMgr, &context);
  if (!entryModule)
    return makeError("cannot parse the entry IR " + entryFile);
  return std::move(entryModule);
}

/// The entry's regions and extras against what the manifest says the
/// kernel inlines (`extras` in its order): a region the kernel has and the
/// entry lacks, or an extra of another element type (its values would be
/// drawn and uploaded as that type), would judge the kernel against other
/// code. (An entry region the manifest does not name may have been raised
/// into an attribute, as a softcap written as a score_mod is.)
static llvm::Error
checkEntryMods(const sim::Mods &mods, const std::string &kernel, bool scoreMod,
               bool maskMod,
               const std::vector<runtime::Manifest::Extra> &extras) {
  for (auto [has, kind, entryHas] :
       {std::tuple{scoreMod, "score_mod", mods.hasScoreMod()},
        std::tuple{maskMod, "mask_mod", mods.hasMaskMod()}})
    if (has && !entryHas)
      return makeError(entryFile + ": @" + kernel + " has no " + kind +
                       ", but the kernel inlines one (--entry takes the IR "
                       "the kernel was compiled from)");
  for (size_t i = 0; i < extras.size() && i < mods.buffers().size(); ++i)
    if (mods.buffers()[i].dtype != extras[i].dtype)
      return makeError(entryFile + ": @" + kernel + "'s extra #" +
                       std::to_string(i) + " is " + mods.buffers()[i].dtype +
                       ", the manifest's " + extras[i].dtype +
                       " (--entry takes the IR the kernel was compiled from)");
  return llvm::Error::success();
}

/// The score_mod and mask_mod of the entry's function the kernel was
/// compiled from, their extras drawn for `problem` and attached to it.
static llvm::Expected<std::unique_ptr<sim::Mods>>
entryMods(mlir::ModuleOp entryModule, const runtime::Manifest &manifest,
          sim::Problem &problem) {
  mlir::func::FuncOp entry;
  entryModule->walk([&](mlir::func::FuncOp func) {
    if (!entry && func.getName() == manifest.kernel)
      entry = func;
  });
  if (!entry)
    return makeError(entryFile + " has no function @" + manifest.kernel);
  // The entry must be the kernel's: its Q and V head dims the manifest's
  // (another variant's regions would run on this one's reference). Heads
  // are not compared: a raised entry's fa4.attention may view them folded
  // with the batch.
  // fa4.attention's first operands are Q, K and V, whatever the order of
  // the function's arguments.
  mlir::Operation *attention = nullptr;
  entry.walk([&](mlir::Operation *op) {
    if (!attention && op->getName().getStringRef() == "fa4.attention")
      attention = op;
  });
  auto dim = [&](unsigned operand, unsigned axis) -> int64_t {
    if (!attention || attention->getNumOperands() <= operand)
      return mlir::ShapedType::kDynamic;
    auto type = llvm::dyn_cast<mlir::ShapedType>(
        attention->getOperand(operand).getType());
    return type && type.hasRank() && type.getRank() == 4
               ? type.getDimSize(axis)
               : mlir::ShapedType::kDynamic;
  };
  struct Expected {
    const char *what;
    int64_t entry, kernel;
  } checks[] = {{"q's head dim", dim(0, 3), manifest.headDim},
                {"v's head dim", dim(2, 3), manifest.vHeadDim()}};
  for (const Expected &check : checks)
    if (check.entry != mlir::ShapedType::kDynamic && check.kernel > 0 &&
        check.entry != check.kernel)
      return makeError(entryFile + ": @" + manifest.kernel + "'s " +
                       check.what + " is " + std::to_string(check.entry) +
                       ", the manifest's kernel's " +
                       std::to_string(check.kernel) +
                       " (--entry takes the IR the kernel was compiled from)");
  llvm::Expected<std::unique_ptr<sim::Mods>> mods =
      sim::Mods::fromFunction(entry);
  if (!mods)
    return prefixError(entryFile + ": ", mods.takeError());
  if (llvm::Error refused = (*mods)->fillExtras(problem, seed))
    return prefixError(entryFile + ": ", std::move(refused));
  if ((*mods)->buffers().size() != manifest.extras.size())
    return makeError(entryFile + ": @" + manifest.kernel + " has " +
                     std::to_string((*mods)->buffers().size()) +
                     " extras, the manifest " +
                     std::to_string(manifest.extras.size()));
  if (llvm::Error refused =
          checkEntryMods(**mods, manifest.kernel, manifest.scoreMod,
                         manifest.maskMod, manifest.extras))
    return std::move(refused);
  (*mods)->attach(problem);
  return mods;
}

/// An extra's elements in `device`, each in the extra's own type.
static uint64_t uploadExtra(emu::Device &device, const sim::ModBuffer &extra,
                            size_t bytes) {
  uint64_t address =
      device.allocate(std::max<size_t>(1, extra.data.size() * bytes));
  uint8_t *host = device.host(address, extra.data.size() * bytes);
  for (size_t i = 0; i < extra.data.size(); ++i) {
    double value = extra.data[i];
    uint8_t *at = host + i * bytes;
    if (extra.dtype == "f32") {
      float f = static_cast<float>(value);
      std::memcpy(at, &f, 4);
    } else if (extra.dtype == "f64") {
      std::memcpy(at, &value, 8);
    } else if (extra.dtype == "f16" || extra.dtype == "bf16") {
      uint16_t half = extra.dtype == "f16"
                          ? floatToHalfBits(static_cast<float>(value))
                          : floatToBFloat16Bits(static_cast<float>(value));
      std::memcpy(at, &half, 2);
    } else {
      int64_t whole = static_cast<int64_t>(value);
      std::memcpy(at, &whole, bytes); // little-endian: the low bytes
    }
  }
  return address;
}

/// `mods`' extras in `device`, each element in its own type, appended to
/// `into` (address and shape) in order.
static llvm::Error uploadExtras(emu::Device &device, const sim::Mods &mods,
                                std::vector<runtime::Buffers::Extra> &into) {
  for (const sim::ModBuffer &extra : mods.buffers()) {
    size_t bytes = runtime::extraElementBytes(extra.dtype);
    if (!bytes)
      return makeError("an extra of element type " + extra.dtype +
                       " has no device layout");
    into.push_back(
        {uploadExtra(device, extra, bytes),
         std::vector<int64_t>(extra.shape.begin(), extra.shape.end())});
  }
  return llvm::Error::success();
}

/// The launch's tensors in `device`: Q, K and V in the kernel's dtype (an
/// FP8 kernel's e4m3 bytes, V prepared as the runtime prepares it for a vt
/// map), O and the LSE allocated for the reference's sizes, the extras
/// (with `mods`) element by element in their own types. `shapes` are the
/// tensors' (a varlen batch's packed ones).
static llvm::Expected<runtime::Buffers>
uploadTensors(emu::Device &device, const runtime::Manifest &manifest,
              const runtime::Shapes &shapes, const std::vector<float> &q,
              const std::vector<float> &k, const std::vector<float> &v,
              const sim::Reference &reference, const sim::Mods *mods) {
  bool fp8 = manifest.dtype == "e4m3";
  bool bf16 = manifest.dtype == "bf16";
  auto upload = [&](const std::vector<float> &values) {
    if (fp8) {
      uint64_t address = device.allocate(std::max<size_t>(1, values.size()));
      uint8_t *bytes = device.host(address, values.size());
      for (size_t i = 0; i < values.size(); ++i)
        bytes[i] = float8FromDouble(Float8::E4M3, values[i]);
      return address;
    }
    uint64_t address = device.allocate(values.size() * 2);
    uint16_t *bits = reinterpret_cast<uint16_t *>(device.host(address, values.size() * 2));
    for (size_t i = 0; i < values.size(); ++i)
      bits[i] = bf16 ? floatToBFloat16Bits(values[i]) : floatToHalfBits(values[i]);
    return address;
  };
  runtime::Buffers buffers;
  buffers.q = upload(q);
  buffers.k = upload(k);
  if (manifest.valueTransposed()) {
    std::vector<uint8_t> bytes(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      bytes[i] = float8FromDouble(Float8::E4M3, v[i]);
    std::vector<int64_t> sizes = {shapes.batch, shapes.seqK, manifest.kvHeads,
                                  manifest.vHeadDim()};
    std::vector<int64_t> strides = {sizes[1] * sizes[2] * sizes[3],
                                    sizes[2] * sizes[3], sizes[3], 1};
    std::vector<int64_t> vt = runtime::vtSizes(sizes);
    size_t vtBytes = static_cast<size_t>(vt[0] * vt[1] * vt[2] * vt[3]);
    buffers.v = device.allocate(vtBytes);
    if (llvm::Error refused = runtime::prepareFp8Value(
            bytes.data(), bytes.size(), sizes, strides,
            device.host(buffers.v, vtBytes), vtBytes))
      return std::move(refused);
  } else {
    buffers.v = upload(v);
  }
  buffers.o = device.allocate(reference.out.size() * 2);
  if (manifest.lse)
    buffers.lse = device.allocate(reference.lse.size() * 4);
  if (mods)
    if (llvm::Error refused = uploadExtras(device, *mods, buffers.extras))
      return std::move(refused);
  return std::move(buffers);
}

/// Sets the schedule's kind by `config.seed` (see --interleavings): where a
/// missing wait, a missing hand-off or a lane that only waits shows.
static void setScheduleKind(emu::LaunchConfig &config) {
  switch (config.seed % 4) {
  case 0: // lockstep, completions at random points
    config.maxAsyncDelay = maxAsyncDelay;
    config.skewedSpeeds = config.independentThreads = false;
    config.starveRoles = config.lazyCompletion = config.yieldAtArrives = false;
    config.lateStores = false;
    break;
  case 1: // the latest completions, skewed speeds, lanes apart
    config.maxAsyncDelay = kLatestCompletion;
    config.skewedSpeeds = config.independentThreads = config.lateStores = true;
    config.starveRoles = config.lazyCompletion = config.yieldAtArrives = false;
    break;
  case 2: // lanes apart, one role starved at a time
    config.maxAsyncDelay = maxAsyncDelay;
    config.skewedSpeeds = false;
    config.independentThreads = config.starveRoles = config.yieldAtArrives =
        true;
    config.lateStores = true;
    config.lazyCompletion = false;
    break;
  default: // lockstep, skewed, completions when awaited
    config.maxAsyncDelay = 0;
    config.skewedSpeeds = config.lazyCompletion = config.yieldAtArrives = true;
    config.lateStores = config.starveRoles = true;
    config.independentThreads = false;
    break;
  }
}

namespace {
/// What the interleavings came to.
struct Runs {
  sim::Errors errors;
  /// The first interleaving that failed, -1 without one.
  int64_t failing = -1;
  emu::LaunchReport total;
  double seconds = 0;
};
} // namespace

/// Launches `plan` once per interleaving, each with its own schedule, and
/// judges O and the LSE against `reference` each time.
static llvm::Expected<Runs> runInterleavings(const emu::Program &program,
                                             emu::Device &device,
                                             const runtime::Manifest &manifest,
                                             const runtime::LaunchPlan &plan,
                                             const runtime::Buffers &buffers,
                                             const sim::Reference &reference) {
  emu::LaunchConfig config;
  config.kernel = manifest.kernel;
  std::memcpy(config.grid, plan.grid, sizeof(config.grid));
  std::memcpy(config.block, plan.block, sizeof(config.block));
  config.dynamicSmemBytes = plan.dynamicSmemBytes;
  config.arguments = plan.arguments;
  config.maxAsyncDelay = maxAsyncDelay;
  config.workers = workers ? workers : std::max(1u, std::thread::hardware_concurrency());

  const std::vector<double> &refOut = reference.out, &refLse = reference.lse;
  bool bf16 = manifest.oDtype() == "bf16";
  Runs runs;
  auto started = std::chrono::steady_clock::now();
  for (int64_t run = 0; run < interleavings; ++run) {
    // Unwritten outputs read as NaN.
    uint8_t *o = device.host(buffers.o, refOut.size() * 2);
    std::memset(o, 0xff, refOut.size() * 2);
    if (manifest.lse)
      std::memset(device.host(buffers.lse, refLse.size() * 4), 0xff, refLse.size() * 4);
    config.seed = seed + run;
    setScheduleKind(config);
    llvm::Expected<emu::LaunchReport> report =
        emu::launch(program, device, config);
    if (!report)
      return report.takeError();
    std::vector<float> gotOut(refOut.size()), gotLse;
    const uint16_t *bits = reinterpret_cast<const uint16_t *>(o);
    for (size_t i = 0; i < refOut.size(); ++i)
      gotOut[i] = bf16 ? bfloat16BitsToFloat(bits[i]) : halfBitsToFloat(bits[i]);
    if (manifest.lse) {
      const float *lse = reinterpret_cast<const float *>(
          device.host(buffers.lse, refLse.size() * 4));
      gotLse.assign(lse, lse + refLse.size());
    }
    bool ok = sim::compareWithReference(
                  reference, gotOut, manifest.lse ? &gotLse : nullptr,
                  absTolerance, relTolerance, runs.errors) &&
              report->clean();
    if (!ok && runs.failing < 0)
      runs.failing = run;
    runs.total.add(*report);
    runs.total.ctas = report->ctas; // per launch
    if (!report->errors.empty() || !report->deadlock.empty())
      break; // the next schedule would only say it again
  }
  runs.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
          .count();
  return std::move(runs);
}

/// What went wrong over the interleavings, the report's fields from
/// "errors" to "failing_interleaving".
static void writeFindings(raw_ostream &os, const emu::LaunchReport &total,
                          int64_t failing) {
  os << ",\"errors\":";
  jsonStrings(os, total.errors);
  os << ",\"error_count\":" << total.errorCount << ",\"hazards\":";
  jsonStrings(os, total.hazards);
  os << ",\"hazard_count\":" << total.hazardCount << ",\"barrier_misuse\":";
  jsonStrings(os, total.barrierMisuse);
  os << ",\"deadlock\":";
  if (total.deadlock.empty())
    os << "null";
  else
    jsonStrings(os, total.deadlock);
  os << ",\"failing_interleaving\":";
  if (failing < 0)
    os << "null";
  else
    os << failing;
}

/// The report: one JSON object on one line.
static std::string reportJson(const runtime::Manifest &manifest,
                              const runtime::LaunchPlan &plan,
                              const Runs &runs) {
  const sim::Errors &errors = runs.errors;
  const emu::LaunchReport &total = runs.total;
  std::string text;
  raw_string_ostream os(text);
  os << "{\"max_abs_err\":";
  jsonNumber(os, errors.maxAbsErr);
  os << ",\"max_rel_err\":";
  jsonNumber(os, errors.maxRelErr);
  os << ",\"lse_max_abs_err\":";
  if (errors.lseMaxAbsErr < 0)
    os << "null";
  else
    jsonNumber(os, errors.lseMaxAbsErr);
  os << ",\"ref_lowp_max_abs_err\":";
  jsonNumber(os, errors.refLowpMaxAbsErr);
  os << ",\"ref_lowp_lse_max_abs_err\":";
  if (errors.refLowpLseMaxAbsErr < 0)
    os << "null";
  else
    jsonNumber(os, errors.refLowpLseMaxAbsErr);
  os << ",\"level\":\"D\",\"interleavings\":" << interleavings
     << ",\"ctas\":" << total.ctas << ",\"grid\":" << plan.grid[0]
     << ",\"tasks\":" << plan.tasks << ",\"instructions\":" << total.instructions
     << ",\"instructions_per_role\":{";
  // Per role when the manifest names them, else per warp.
  bool first = true;
  if (!manifest.roles.empty()) {
    for (const runtime::Manifest::Role &role : manifest.roles) {
      int64_t count = 0;
      for (int64_t w = role.firstWarp; w < role.firstWarp + role.numWarps; ++w)
        if (w < int64_t(total.instructionsPerWarp.size()))
          count += total.instructionsPerWarp[w];
      os << (first ? "" : ",") << "\"" << role.name << "\":" << count;
      first = false;
    }
  } else {
    for (size_t w = 0; w < total.instructionsPerWarp.size(); ++w) {
      os << (first ? "" : ",") << "\"warp" << w << "\":" << total.instructionsPerWarp[w];
      first = false;
    }
  }
  os << "},\"mmas\":" << total.mmas << ",\"tma_load_bytes\":" << total.tmaLoadBytes
     << ",\"tma_store_bytes\":" << total.tmaStoreBytes;
  writeFindings(os, total, runs.failing);
  // FP8's measure (fa4-sim's): O's root-mean-square error, and the
  // low-precision reference's, whose max-norm error the rule above judges by.
  os << ",\"rms_err\":";
  jsonNumber(os, errors.rmsErr);
  os << ",\"ref_lowp_rms_err\":";
  jsonNumber(os, errors.refLowpRmsErr);
  os << ",\"wall_seconds\":" << format("%.3f", runs.seconds)
     << ",\"instructions_per_second\":"
     << format("%.4g",
               runs.seconds > 0 ? total.instructions / runs.seconds : 0.0)
     << ",\"ok\":" << (runs.failing < 0 ? "true" : "false") << "}";
  return text;
}

/// Refuses a problem whose tensors would not fit in memory, before any is
/// made: past 2^30 elements a tensor (4 GiB of floats, 8 of the reference's
/// doubles) no longer fits the machines this runs on (fa4-sim's bound).
static llvm::Error checkProblemSize(const sim::Problem &p) {
  constexpr int64_t kMaxElements = int64_t(1) << 30;
  struct Tensor {
    const char *name;
    int64_t sizes[4];
  } tensors[] = {{"Q and O", {p.batch, p.seqQ, p.qHeads, p.headDim}},
                 {"K and V", {p.batch, p.seqK, p.kvHeads, p.headDim}}};
  // (V and O's head dim is at most Q's: their counts are bounded too.)
  for (const Tensor &tensor : tensors) {
    int64_t count = 1;
    for (int64_t size : tensor.sizes) {
      if (size > kMaxElements / count)
        return makeError(std::string(tensor.name) +
                         " would need more than 2^30 elements at --batch " +
                         std::to_string(p.batch) + " --seq-q " +
                         std::to_string(p.seqQ) + " --seq-k " +
                         std::to_string(p.seqK) + "; use smaller sizes");
      count *= size;
    }
  }
  return llvm::Error::success();
}

/// The backward (a manifest of kind "backward"): its three kernels on drawn
/// Q, K, V and dO, O and the LSE from the float64 forward (what fa4-sim's
/// backward runs draw), judged by FlashAttention's rule against the
/// float64 gradients.
static int emulateBackward(const std::string &manifestText,
                           std::unique_ptr<MemoryBuffer> entryBuffer) {
  llvm::Expected<runtime::BackwardManifest> parsed =
      runtime::parseBackwardManifest(manifestText);
  if (!parsed)
    return fail(prefixError(manifestFile + ": ", parsed.takeError()));
  runtime::BackwardManifest &manifest = *parsed;
  if (!emu::emulatesTarget(manifest.target))
    return fail("the manifest is for " + manifest.target + "; fa4-emu runs " +
                target::emulatedChips() + " kernels");
  if ((manifest.scoreMod || manifest.maskMod) && entryFile.empty())
    return fail("the backward inlines a score_mod or mask_mod region: pass "
                "--entry with the IR it was compiled from (its "
                "fa4.attention_backward), so the reference can run the "
                "regions");
  if (smCount > 0)
    manifest.smCount = smCount;
  std::string ptxPath = ptxFile;
  if (ptxPath.empty()) {
    SmallString<256> beside(manifestFile);
    sys::path::remove_filename(beside);
    sys::path::append(beside, manifest.ptx);
    ptxPath = std::string(beside);
  }
  llvm::Expected<std::string> ptxText =
      readRegularFile(ptxPath, kMaxKernelFileBytes);
  if (!ptxText)
    return fail(ptxText.takeError());
  // The PTX (and the cubin beside the manifest, when it is there) must be
  // what fa4c compiled for this manifest: their embedded contract.
  std::string cubinBytes;
  if (!manifest.cubin.empty()) {
    SmallString<256> cubinPath(manifestFile);
    sys::path::remove_filename(cubinPath);
    sys::path::append(cubinPath, manifest.cubin);
    bool missing = false;
    llvm::Expected<std::string> cubin =
        readRegularFile(std::string(cubinPath), kMaxKernelFileBytes, &missing);
    if (!cubin && !missing)
      return fail(cubin.takeError());
    if (!cubin)
      llvm::consumeError(cubin.takeError());
    else
      cubinBytes = std::move(*cubin);
  }
  if (llvm::Error refused = runtime::checkContractText(
          runtime::backwardContract(manifest), *ptxText,
          ArrayRef<uint8_t>(reinterpret_cast<const uint8_t *>(cubinBytes.data()),
                            cubinBytes.size())))
    return fail(prefixError(manifestFile + ": ", std::move(refused)));
  llvm::Expected<std::shared_ptr<const emu::Program>> program =
      emu::parsePtx(*ptxText);
  if (!program)
    return fail(prefixError(ptxPath + ": ", program.takeError()));
  if (emu::targetOf(**program) != manifest.target)
    return fail("the manifest is for " + manifest.target + " but its PTX " +
                ptxPath + " targets " + emu::targetOf(**program));
  // Each kernel's entry takes the parameters its conventions lay out.
  for (int k = 0; k < 3; ++k) {
    std::vector<emu::KernelParam> params =
        emu::kernelParams(**program, manifest.kernels[k].name);
    std::vector<runtime::BackwardParameter> expected =
        runtime::backwardParameters(k, manifest);
    bool same = params.size() == expected.size();
    for (size_t i = 0; same && i < params.size(); ++i)
      same = params[i].bytes == expected[i].bytes;
    if (!same)
      return fail(ptxPath + ": the kernel " + manifest.kernels[k].name +
                  " does not take the backward's " +
                  std::to_string(expected.size()) +
                  " parameters (it is not this manifest's)");
  }

  runtime::Manifest variant;
  variant.mask = manifest.mask;
  variant.windowLeft = manifest.windowLeft;
  variant.windowRight = manifest.windowRight;
  variant.scale = manifest.scale;
  variant.softcap = manifest.softcap;
  variant.headDim = manifest.headDim;
  variant.qHeads = manifest.qHeads;
  variant.kvHeads = manifest.kvHeads;
  variant.dtype = manifest.dtype;
  sim::Problem problem = sim::problemOf(variant, batch, seqQ, seqK);
  runtime::Shapes shapes{batch, seqQ, seqK};
  if (llvm::Error refused = runtime::checkShapes(variant, shapes))
    return fail(std::move(refused));
  if (llvm::Error refused = checkProblemSize(problem))
    return fail(std::move(refused));
  if (distribution == sim::InputDistribution::NonFinite)
    return fail("--dist nonfinite has no reference gradients; the backward "
                "runs on finite inputs");
  // The regions, from the entry's fa4.attention_backward (its function the
  // main kernel's name): the reference's forward and gradients run them.
  mlir::MLIRContext context;
  context.disableMultithreading();
  mlir::OwningOpRef<mlir::ModuleOp> entryModule;
  std::unique_ptr<sim::Mods> mods;
  if (!entryFile.empty()) {
    llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>> parsed =
        parseEntry(context, std::move(entryBuffer));
    if (!parsed)
      return fail(parsed.takeError());
    entryModule = std::move(*parsed);
    mlir::func::FuncOp entry;
    (*entryModule)->walk([&](mlir::func::FuncOp func) {
      if (!entry && func.getName() == manifest.kernels[1].name)
        entry = func;
    });
    bool differentiates = false;
    if (entry)
      entry.walk([&](mlir::Operation *op) {
        differentiates |=
            op->getName().getStringRef() == "fa4.attention_backward";
      });
    if (!differentiates)
      return fail(entryFile + " has no function @" + manifest.kernels[1].name +
                  " holding an fa4.attention_backward (--entry takes the IR "
                  "the backward was compiled from)");
    llvm::Expected<std::unique_ptr<sim::Mods>> found =
        sim::Mods::fromFunction(entry);
    if (!found)
      return fail(prefixError(entryFile + ": ", found.takeError()));
    mods = std::move(*found);
    if (llvm::Error refused = mods->fillExtras(problem, seed))
      return fail(prefixError(entryFile + ": ", std::move(refused)));
    if (mods->buffers().size() != manifest.extras.size())
      return fail(entryFile + ": @" + manifest.kernels[1].name + " has " +
                  std::to_string(mods->buffers().size()) +
                  " extras, the manifest " +
                  std::to_string(manifest.extras.size()));
    if (llvm::Error refused =
            checkEntryMods(*mods, manifest.kernels[1].name, manifest.scoreMod,
                           manifest.maskMod, manifest.extras))
      return fail(std::move(refused));
    mods->attach(problem);
  }

  // Q, K, V as the forward's runs draw them; dO standard normal from its
  // own stream of the seed; O (rounded) and the LSE from the float64
  // forward.
  bool bf16 = manifest.dtype == "bf16";
  auto rounded = [&](float x) {
    return bf16 ? roundToBFloat16(x) : roundToHalf(x);
  };
  std::vector<float> q, k, v, dout;
  sim::fillInputs(problem, bf16, seed, distribution, q, k, v);
  std::mt19937_64 generator(seed * 0x9e3779b97f4a7c15ull + 17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  dout.resize(q.size());
  for (float &x : dout)
    x = rounded(normal(generator));
  std::vector<double> out64, lse64;
  sim::referenceAttention(problem, q, k, v, out64, lse64);
  std::vector<float> out(out64.size()), lse(lse64.size());
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = rounded(static_cast<float>(out64[i]));
  for (size_t i = 0; i < lse.size(); ++i)
    lse[i] = static_cast<float>(lse64[i]);
  sim::BackwardReference reference;
  sim::computeBackwardReference(problem, bf16, q, k, v, out, dout, lse,
                                reference);
  if (mods && !mods->error().empty())
    return fail("the reference's mod region: " + mods->error());

  emu::Device device;
  auto upload16 = [&](const std::vector<float> &values) {
    uint64_t address = device.allocate(values.size() * 2);
    uint16_t *bits = reinterpret_cast<uint16_t *>(
        device.host(address, values.size() * 2));
    for (size_t i = 0; i < values.size(); ++i)
      bits[i] = bf16 ? floatToBFloat16Bits(values[i])
                     : floatToHalfBits(values[i]);
    return address;
  };
  runtime::BackwardBuffers buffers;
  buffers.q = upload16(q);
  buffers.k = upload16(k);
  buffers.v = upload16(v);
  buffers.o = upload16(out);
  buffers.dout = upload16(dout);
  buffers.lse = device.allocate(lse.size() * 4);
  std::memcpy(device.host(buffers.lse, lse.size() * 4), lse.data(),
              lse.size() * 4);
  buffers.dq = device.allocate(q.size() * 2);
  buffers.dk = device.allocate(k.size() * 2);
  buffers.dv = device.allocate(v.size() * 2);
  buffers.delta = device.allocate(lse.size() * 4);
  buffers.dqAccum = device.allocate(q.size() * 4);
  if (mods)
    if (llvm::Error refused = uploadExtras(device, *mods, buffers.extras))
      return fail(std::move(refused));
  llvm::Expected<runtime::BackwardPlan> plan = runtime::planBackwardLaunch(
      manifest, shapes, buffers, emu::encodeTensorMap);
  if (!plan)
    return fail(plan.takeError());

  // Every output and workspace starts as NaN, each interleaving.
  struct Poisoned {
    uint64_t address;
    size_t bytes;
  } poisoned[] = {{buffers.dq, q.size() * 2},      {buffers.dk, k.size() * 2},
                  {buffers.dv, v.size() * 2},      {buffers.delta, lse.size() * 4},
                  {buffers.dqAccum, q.size() * 4}};
  auto read16 = [&](uint64_t address, size_t count) {
    const uint16_t *bits =
        reinterpret_cast<const uint16_t *>(device.host(address, count * 2));
    std::vector<float> values(count);
    for (size_t i = 0; i < count; ++i)
      values[i] = bf16 ? bfloat16BitsToFloat(bits[i]) : halfBitsToFloat(bits[i]);
    return values;
  };
  sim::GradientErrors errors;
  emu::LaunchReport total;
  int64_t failing = -1;
  auto started = std::chrono::steady_clock::now();
  for (int64_t run = 0; run < interleavings; ++run) {
    for (const Poisoned &p : poisoned)
      std::memset(device.host(p.address, p.bytes), 0xff, p.bytes);
    bool clean = true;
    for (int kernel = 0; kernel < 3; ++kernel) {
      const runtime::LaunchPlan &launch = plan->kernels[kernel];
      emu::LaunchConfig config;
      config.kernel = manifest.kernels[kernel].name;
      std::memcpy(config.grid, launch.grid, sizeof(config.grid));
      std::memcpy(config.block, launch.block, sizeof(config.block));
      config.dynamicSmemBytes = launch.dynamicSmemBytes;
      config.arguments = launch.arguments;
      config.workers = workers ? workers
                               : std::max(1u, std::thread::hardware_concurrency());
      config.seed = seed + run;
      setScheduleKind(config);
      llvm::Expected<emu::LaunchReport> report =
          emu::launch(**program, device, config);
      if (!report)
        return fail(report.takeError());
      if (kernel == 1)
        total.ctas = report->ctas;
      int64_t ctas = total.ctas;
      total.add(*report);
      total.ctas = ctas;
      clean = clean && report->clean();
      if (!report->clean())
        break; // the later kernels would read what this one left
    }
    bool ok = sim::compareGradients(reference, read16(buffers.dq, q.size()),
                                    read16(buffers.dk, k.size()),
                                    read16(buffers.dv, v.size()),
                                    absTolerance, errors) &&
              clean;
    if (!ok && failing < 0)
      failing = run;
    if (!total.errors.empty() || !total.deadlock.empty())
      break;
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
          .count();

  std::string text;
  raw_string_ostream os(text);
  os << "{\"level\":\"D\",\"backward\":true";
  for (auto [name, value] : {std::pair{"dq_max_abs_err", errors.dq},
                             {"dk_max_abs_err", errors.dk},
                             {"dv_max_abs_err", errors.dv},
                             {"ref_lowp_dq_max_abs_err", errors.refLowpDq},
                             {"ref_lowp_dk_max_abs_err", errors.refLowpDk},
                             {"ref_lowp_dv_max_abs_err", errors.refLowpDv}}) {
    os << ",\"" << name << "\":";
    jsonNumber(os, value);
  }
  os << ",\"interleavings\":" << interleavings << ",\"ctas\":" << total.ctas
     << ",\"grid\":" << plan->kernels[1].grid[0]
     << ",\"tasks\":" << plan->kernels[1].tasks
     << ",\"instructions\":" << total.instructions
     << ",\"mmas\":" << total.mmas
     << ",\"tma_load_bytes\":" << total.tmaLoadBytes;
  writeFindings(os, total, failing);
  os << ",\"wall_seconds\":" << format("%.3f", seconds)
     << ",\"ok\":" << (failing < 0 ? "true" : "false") << "}";
  outs() << text << "\n";
  if (llvm::Error unwritten = flushStdout())
    return fail(std::move(unwritten));
  return failing < 0 ? 0 : 1;
}

/// fa4-emu after its options: runs the kernel and prints the report; the
/// reference runs mod regions from `entryBuffer` (null without --entry).
static int emulate(std::unique_ptr<MemoryBuffer> entryBuffer) {
  {
    llvm::Expected<std::string> text =
        readRegularFile(manifestFile, kMaxManifestBytes);
    if (!text)
      return fail(text.takeError());
    if (runtime::isBackwardManifest(*text))
      return emulateBackward(*text, std::move(entryBuffer));
  }
  llvm::Expected<LoadedKernel> kernel = loadKernel();
  if (!kernel)
    return fail(kernel.takeError());
  const runtime::Manifest &manifest = kernel->manifest;

  // The problem, its inputs and the reference.
  sim::Problem problem = sim::problemOf(manifest, batch, seqQ, seqK);
  runtime::Shapes shapes{batch, seqQ, seqK};
  // Varlen: --batch sequences of at most --seq-q queries and --seq-k keys,
  // drawn as fa4-sim draws them, packed.
  if (manifest.cuSeqlensQ >= 0) {
    sim::drawVarlenBatch(problem, batch, seqQ, seqK, seed);
    shapes = {1, problem.seqQ, problem.seqK};
  }
  // A paged cache: seq_k is max_blocks whole pages, drawn into a cache of
  // sim::pagedCacheBlocks blocks.
  if (problem.pageSize) {
    if (seqK % problem.pageSize != 0)
      return fail("the kernel reads a paged K/V cache: give --seq-k a whole "
                  "number of pages (" + std::to_string(problem.pageSize) +
                  " keys each)");
    problem.numBlocks =
        sim::pagedCacheBlocks(batch, seqK / problem.pageSize);
    shapes.numBlocks = problem.numBlocks;
  }
  if (llvm::Error refused = runtime::checkShapes(manifest, shapes))
    return fail(std::move(refused));
  if (llvm::Error refused = checkProblemSize(problem))
    return fail(std::move(refused));
  // A kernel with mod regions: the reference runs them from the entry IR.
  mlir::MLIRContext context;
  // The entry is walked on this thread's stack, sized to it; never on the
  // context's workers with their default stacks.
  context.disableMultithreading();
  mlir::OwningOpRef<mlir::ModuleOp> entryModule;
  std::unique_ptr<sim::Mods> mods;
  // Tables as the only extras (seqused_k, a block table, the varlen and
  // split-KV ones, FP8's descales) need no entry IR: they are drawn here as
  // fa4-sim draws them.
  size_t tables = (manifest.seqUsedK >= 0) + (manifest.blockTable >= 0) +
                  (manifest.splitWorkspace >= 0) +
                  2 * (manifest.cuSeqlensQ >= 0) +
                  (manifest.qDescale >= 0) + (manifest.kDescale >= 0) +
                  (manifest.vDescale >= 0);
  bool onlyTables = tables > 0 && manifest.extras.size() == tables &&
                    !manifest.scoreMod && !manifest.maskMod;
  bool hasMods = (manifest.scoreMod || manifest.maskMod ||
                  !manifest.extras.empty()) &&
                 !onlyTables;
  if (hasMods && entryFile.empty())
    return fail("the kernel inlines a score_mod or mask_mod region: pass "
                "--entry with the IR it was compiled from, so the reference "
                "can run the regions");
  if (!entryFile.empty()) {
    llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>> parsed =
        parseEntry(context, std::move(entryBuffer));
    if (!parsed)
      return fail(parsed.takeError());
    entryModule = std::move(*parsed);
    llvm::Expected<std::unique_ptr<sim::Mods>> drawn =
        entryMods(*entryModule, manifest, problem);
    if (!drawn)
      return fail(drawn.takeError());
    mods = std::move(*drawn);
  }
  // The tables without an entry: drawn as fa4-sim draws them.
  sim::ModBuffer blockTable;
  if (onlyTables && !mods) {
    if (manifest.seqUsedK >= 0)
      problem.seqUsedK = sim::drawKeyCountsFor(problem, seed);
    for (auto [index, table] : {std::pair{manifest.qDescale, &problem.qDescale},
                                {manifest.kDescale, &problem.kDescale},
                                {manifest.vDescale, &problem.vDescale}})
      if (index >= 0)
        *table = sim::drawDescales(problem.sequences() * problem.kvHeads, seed,
                                   static_cast<size_t>(index));
    if (manifest.blockTable >= 0) {
      int64_t maxBlocks = seqK / problem.pageSize;
      blockTable.shape = {batch, maxBlocks};
      for (int64_t entry : sim::drawBlockTable(
               batch, maxBlocks, problem.pageSize,
               manifest.seqUsedK >= 0 ? &problem.seqUsedK : nullptr, seed))
        blockTable.data.push_back(static_cast<double>(entry));
    }
  } else if (mods && mods->blockTable()) {
    blockTable = mods->buffers()[*mods->blockTable()];
  }
  // The low-precision type: O's (an FP8 kernel's inputs are rounded to
  // e4m3 by the problem's fp8).
  bool bf16 = manifest.oDtype() == "bf16";
  std::vector<float> q, k, v;
  sim::fillInputs(problem, bf16, seed, distribution, q, k, v);
  sim::Reference reference;
  sim::computeReference(problem, bf16, q, k, v, reference);
  if (mods && !mods->error().empty())
    return fail("the reference's mod region: " + mods->error());

  // A paged cache holds the reference's K and V page by page.
  std::vector<float> kCache, vCache;
  if (problem.pageSize) {
    sim::scatterPages(k, blockTable, problem.pageSize, problem.kvHeads,
                      problem.headDim, problem.numBlocks, kCache);
    sim::scatterPages(v, blockTable, problem.pageSize, problem.kvHeads,
                      problem.vDim(), problem.numBlocks, vCache);
  }
  emu::Device device;
  llvm::Expected<runtime::Buffers> buffers =
      uploadTensors(device, manifest, shapes, q, problem.pageSize ? kCache : k,
                    problem.pageSize ? vCache : v, reference, mods.get());
  if (!buffers)
    return fail(buffers.takeError());
  if (onlyTables && !mods) {
    // In the manifest's order of extras.
    for (int64_t i = 0; i < static_cast<int64_t>(manifest.extras.size()); ++i) {
      std::vector<int64_t> values, shape;
      const std::vector<double> *descales =
          i == manifest.qDescale   ? &problem.qDescale
          : i == manifest.kDescale ? &problem.kDescale
          : i == manifest.vDescale ? &problem.vDescale
                                   : nullptr;
      if (descales) {
        // f32 [sequences, kv_heads].
        size_t bytes = std::max<size_t>(1, descales->size()) * 4;
        uint64_t address = device.allocate(bytes);
        float *table = reinterpret_cast<float *>(device.host(address, bytes));
        for (size_t e = 0; e < descales->size(); ++e)
          table[e] = static_cast<float>((*descales)[e]);
        buffers->extras.push_back(
            {address, {problem.sequences(), problem.kvHeads}});
        continue;
      }
      if (i == manifest.seqUsedK) {
        values = problem.seqUsedK;
        shape = {problem.sequences()};
      } else if (i == manifest.cuSeqlensQ || i == manifest.cuSeqlensK) {
        values = i == manifest.cuSeqlensQ ? problem.cuSeqlensQ
                                          : problem.cuSeqlensK;
        shape = {static_cast<int64_t>(values.size())};
      } else if (i == manifest.splitWorkspace) {
        // Zero: the arrival counters start there.
        int64_t packing = gqaPacking(manifest.qHeads / manifest.kvHeads);
        SplitWorkspaceLayout layout = splitWorkspaceLayout(
            batch, manifest.qHeads / packing, problem.seqQ, packing,
            manifest.numSplits, manifest.vHeadDim());
        // A static workspace has its own size; it must hold the layout.
        int64_t words = manifest.extras[i].shape[0] >= 0
                            ? manifest.extras[i].shape[0]
                            : layout.words();
        if (words < layout.words())
          return fail("the kernel's split-KV workspace holds " +
                      std::to_string(words) + " words; this problem needs " +
                      std::to_string(layout.words()));
        values.assign(words, 0);
        shape = {words};
      } else {
        for (double entry : blockTable.data)
          values.push_back(static_cast<int64_t>(entry));
        shape.assign(blockTable.shape.begin(), blockTable.shape.end());
      }
      size_t bytes = std::max<size_t>(1, values.size()) * 4;
      uint64_t address = device.allocate(bytes);
      int32_t *table =
          reinterpret_cast<int32_t *>(device.host(address, bytes));
      for (size_t e = 0; e < values.size(); ++e)
        table[e] = static_cast<int32_t>(values[e]);
      buffers->extras.push_back({address, shape});
    }
    // Held to the kernel's static sizes, as a launch is.
    std::vector<runtime::Tensor> tables;
    for (auto [extra, declared] : llvm::zip(buffers->extras, manifest.extras))
      tables.push_back({extra.address, declared.dtype, extra.shape, {}});
    if (llvm::Error refused =
            runtime::checkExtras(manifest, tables, {}, &shapes))
      return fail(prefixError("the drawn tables do not fit the kernel: ",
                              std::move(refused)));
  }
  if (mods) {
    // The entry's extras must be the ones the kernel was compiled for.
    std::vector<runtime::Tensor> extras;
    for (auto [extra, buffer] : llvm::zip(mods->buffers(), buffers->extras))
      extras.push_back({buffer.address, extra.dtype, buffer.shape, {}});
    if (llvm::Error refused =
            runtime::checkExtras(manifest, extras, {}, &shapes))
      return fail(prefixError(entryFile + " does not match the kernel: ",
                              std::move(refused)));
  }
  llvm::Expected<runtime::LaunchPlan> plan =
      runtime::planLaunch(manifest, shapes, *buffers, emu::encodeTensorMap);
  if (!plan)
    return fail(plan.takeError());

  llvm::Expected<Runs> runs = runInterleavings(
      *kernel->program, device, manifest, *plan, *buffers, reference);
  if (!runs)
    return fail(runs.takeError());
  outs() << reportJson(manifest, *plan, *runs) << "\n";
  // A report that cannot be written (stdout on a full disk) is an error, not
  // LLVM's fatal report at exit.
  if (llvm::Error unwritten = flushStdout())
    return fail(std::move(unwritten));
  return runs->failing < 0 ? 0 : 1;
}
