//===- fa4-emu-gemm.cpp - run a GEMM kernel's PTX in fa4-emu and check it ---===//
//
// A test-only driver for test/Emu/cute-gemm.test and cute-gemm-sm90.test:
// reads PTX that nvcc compiled from test/Emu/Inputs/cute-gemm.cu (sm_100a,
// M = 128) or cute-gemm-sm90.cu (sm_90a, M = 64), launches one of its GEMM
// entries in the emulator on one CTA of 128 threads — once per interleaving,
// each with its own schedule — and compares C with a GEMM on the host.
//
// The entry computes C[M x N] (f32, row-major) = A[M x K] * B[N x K]^T with
// A and B f16 or bf16, A K-major, B K-major (stored N x K) or MN-major
// (stored K x N), and takes (A's tensor map, B's tensor map, C's address).
// The maps are encoded by the emulator's encoder, as the driver's
// cuTensorMapEncodeTiled would encode them for a GPU: 2-d, boxes of 64
// elements of the contiguous dimension (one 128-byte swizzle row) by every
// row, 128B swizzle.
//
// Prints each failing interleaving with its report, then
//   gemm MxNxK: max error E, I interleavings, ok
// (E the largest |C - reference| / max(1, |reference|)) and the reports'
// counts summed over the interleavings. Exits 0 when every launch is clean
// and within tolerance, 1 otherwise, 2 when it cannot launch.
//
//===----------------------------------------------------------------------===//

#include "fa4/Emu/Emulator.h"
#include "fa4/Support/AttentionMath.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstring>
#include <random>

using namespace llvm;
using namespace mlir::fa4;

static cl::OptionCategory gemmCategory("fa4-emu-gemm");
static cl::opt<std::string> ptxFile(cl::Positional, cl::Required,
                                    cl::desc("<kernel.ptx>"), cl::cat(gemmCategory));
static cl::opt<std::string> kernelName("kernel", cl::Required,
                                       cl::desc("The GEMM entry to launch"),
                                       cl::cat(gemmCategory));
static cl::opt<uint32_t> m("m", cl::desc("Rows of C and A: 128 (tcgen05) or 64 "
                                     "(one warpgroup's wgmma)"),
                           cl::init(128), cl::cat(gemmCategory));
static cl::opt<uint32_t> n("n", cl::Required, cl::desc("Columns of C (rows of B)"),
                           cl::cat(gemmCategory));
static cl::opt<uint32_t> k("k", cl::Required, cl::desc("The reduction extent"),
                           cl::cat(gemmCategory));
enum class Element { F16, BF16 };
static cl::opt<Element> element(
    "element", cl::desc("The type of A and B"),
    cl::values(clEnumValN(Element::F16, "f16", "IEEE half precision"),
               clEnumValN(Element::BF16, "bf16", "bfloat16")),
    cl::init(Element::F16), cl::cat(gemmCategory));
enum class Major { K, MN };
static cl::opt<Major> bMajor(
    "b-major", cl::desc("Which dimension of B is contiguous"),
    cl::values(clEnumValN(Major::K, "k", "B stored N x K, as K in Q·K^T"),
               clEnumValN(Major::MN, "mn", "B stored K x N, as V in P·V")),
    cl::init(Major::K), cl::cat(gemmCategory));
static cl::opt<uint64_t> seed("seed",
                              cl::desc("Seed of the inputs and of the first schedule"),
                              cl::init(0), cl::cat(gemmCategory));
static cl::opt<int64_t> interleavings(
    "interleavings",
    cl::desc("Launches, each with its own schedule of threads and asynchronous "
             "completions"),
    cl::init(1), cl::cat(gemmCategory));
static cl::opt<uint64_t> maxAsyncDelay(
    "max-async-delay",
    cl::desc("TMA and tensor-core operations complete within this many "
             "executed instructions of their issue"),
    cl::init(4096), cl::cat(gemmCategory));
static cl::opt<double> tolerance(
    "rtol", cl::desc("Largest |C - reference| / max(1, |reference|)"),
    cl::init(1e-3), cl::cat(gemmCategory));

namespace {

constexpr uint32_t kThreads = 128;
/// The inner extent of one TMA box: 64 16-bit elements, one 128-byte
/// swizzle row.
constexpr uint32_t kBoxInner = 64;
/// The most rows a TMA box may have.
constexpr uint32_t kMaxBoxOuter = 256;

int fail(const Twine &message) {
  errs() << "fa4-emu-gemm: " << message << "\n";
  return 2;
}

/// Seeded values in [-1, 1) of the element type, as their bits.
std::vector<uint16_t> randomElements(size_t count, std::mt19937_64 &rng) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<uint16_t> bits(count);
  for (uint16_t &b : bits)
    b = element == Element::BF16 ? floatToBFloat16Bits(uniform(rng))
                                 : floatToHalfBits(uniform(rng));
  return bits;
}

double elementValue(uint16_t bits) {
  return element == Element::BF16 ? bfloat16BitsToFloat(bits)
                                  : halfBitsToFloat(bits);
}

/// The map of an operand at `address` stored as `rows` rows of `columns`
/// contiguous elements: one box is 64 columns of every row.
runtime::TensorMapSpec operandMap(uint64_t address, uint32_t columns,
                                  uint32_t rows) {
  runtime::TensorMapSpec spec;
  spec.dataType = element == Element::BF16
                      ? runtime::TensorMapDataType::BFloat16
                      : runtime::TensorMapDataType::Float16;
  spec.rank = 2;
  spec.globalAddress = address;
  spec.globalDims[0] = columns;
  spec.globalDims[1] = rows;
  spec.globalStrides[0] = uint64_t(columns) * 2;
  spec.boxDims[0] = kBoxInner;
  spec.boxDims[1] = rows;
  spec.swizzle = runtime::TensorMapSwizzle::Bytes128;
  return spec;
}

void printMessages(const char *what, const std::vector<std::string> &messages,
                   int64_t count) {
  for (const std::string &m : messages)
    outs() << "  " << what << ": " << m << "\n";
  if (count > int64_t(messages.size()))
    outs() << "  ... " << count - int64_t(messages.size()) << " more " << what << "\n";
}

} // namespace

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(gemmCategory);
  cl::ParseCommandLineOptions(argc, argv,
                              "fa4-emu-gemm: run a GEMM kernel's PTX in fa4-emu "
                              "and check C against the host\n");
  if (m != 64 && m != 128)
    return fail("--m must be 64 or 128");
  if (n == 0 || n % 16 || n > 256 || k == 0 || k % kBoxInner)
    return fail("--n must be a multiple of 16 up to 256 and --k a multiple of 64");
  // An MN-major B is loaded in boxes of 64 columns of N by all K rows.
  if (bMajor == Major::MN && (n % kBoxInner || k > kMaxBoxOuter))
    return fail("--b-major mn needs --n a multiple of 64 and --k at most 256");
  if (interleavings <= 0)
    return fail("--interleavings must be positive");

  auto buffer = MemoryBuffer::getFile(ptxFile);
  if (!buffer)
    return fail("cannot read " + ptxFile + ": " + buffer.getError().message());
  llvm::Expected<std::shared_ptr<const emu::Program>> parsed =
      emu::parsePtx((*buffer)->getBuffer().str());
  if (!parsed)
    return fail(ptxFile + ": " + toString(parsed.takeError()));
  const emu::Program &program = **parsed;
  std::vector<emu::KernelParam> params = emu::kernelParams(program, kernelName);
  if (params.size() != 3 || params[0].bytes != 128 || params[1].bytes != 128 ||
      params[2].bytes != 8)
    return fail(kernelName + " is not an entry taking (CUtensorMap, CUtensorMap, "
                             "float *)");

  std::mt19937_64 rng(seed);
  std::vector<uint16_t> a = randomElements(size_t(m) * k, rng);
  std::vector<uint16_t> b = randomElements(size_t(n) * k, rng);
  // B(j, x): stored N x K or K x N.
  auto bAt = [&](uint32_t j, uint32_t x) {
    return bMajor == Major::K ? b[size_t(j) * k + x] : b[size_t(x) * n + j];
  };
  // The reference in double: the products of 16-bit values and their sums of
  // up to a few hundred terms are exact or nearly so.
  std::vector<double> reference(size_t(m) * n);
  for (uint32_t i = 0; i < m; ++i)
    for (uint32_t j = 0; j < n; ++j) {
      double sum = 0;
      for (uint32_t x = 0; x < k; ++x)
        sum += elementValue(a[size_t(i) * k + x]) * elementValue(bAt(j, x));
      reference[size_t(i) * n + j] = sum;
    }

  double maxError = 0;
  emu::LaunchReport total;
  bool allOk = true;
  for (int64_t run = 0; run < interleavings; ++run) {
    emu::Device device;
    uint64_t aAddress = device.allocate(a.size() * 2);
    uint64_t bAddress = device.allocate(b.size() * 2);
    uint64_t cAddress = device.allocate(reference.size() * 4);
    std::memcpy(device.host(aAddress, a.size() * 2), a.data(), a.size() * 2);
    std::memcpy(device.host(bAddress, b.size() * 2), b.data(), b.size() * 2);
    // C starts as NaN: an element the kernel never writes fails.
    float *c = reinterpret_cast<float *>(device.host(cAddress, reference.size() * 4));
    std::fill(c, c + reference.size(), std::nanf(""));

    emu::LaunchConfig config;
    config.kernel = kernelName;
    config.block[0] = kThreads;
    // The tiles, then the mbarriers (and, on sm_100a, the TMEM address).
    config.dynamicSmemBytes = 2 * (m + n) * k + 20;
    config.seed = seed + run;
    config.maxAsyncDelay = maxAsyncDelay;
    config.arguments.assign(3, {});
    config.arguments[0].resize(128);
    config.arguments[1].resize(128);
    runtime::TensorMapSpec mapB = bMajor == Major::K
                                      ? operandMap(bAddress, k, n)
                                      : operandMap(bAddress, n, k);
    for (auto [map, bytes] :
         {std::pair{operandMap(aAddress, k, m), config.arguments[0].data()},
          {mapB, config.arguments[1].data()}})
      if (llvm::Error refused = emu::encodeTensorMap(map, bytes))
        return fail("cannot encode a tensor map: " +
                    toString(std::move(refused)));
    config.arguments[2].resize(8);
    std::memcpy(config.arguments[2].data(), &cAddress, 8);

    llvm::Expected<emu::LaunchReport> launched =
        emu::launch(program, device, config);
    if (!launched)
      return fail(toString(launched.takeError()));
    const emu::LaunchReport &report = *launched;

    double runError = 0;
    for (size_t i = 0; i < reference.size(); ++i) {
      double e = std::fabs(double(c[i]) - reference[i]) /
                 std::max(1.0, std::fabs(reference[i]));
      runError = std::isnan(e) ? INFINITY : std::max(runError, e);
    }
    maxError = std::max(maxError, runError);
    if (!report.clean() || runError > tolerance) {
      allOk = false;
      outs() << "interleaving " << run << " (seed " << config.seed
             << "): max error " << format("%.3g", runError) << "\n";
      printMessages("error", report.errors, report.errorCount);
      printMessages("hazard", report.hazards, report.hazardCount);
      printMessages("barrier misuse", report.barrierMisuse,
                    report.barrierMisuseCount);
      for (const std::string &line : report.deadlock)
        outs() << "  deadlock: " << line << "\n";
    }
    total.add(report);
  }

  outs() << "gemm " << m << "x" << n << "x" << k << ": max error "
         << format("%.3g", maxError) << ", " << interleavings << " interleavings, "
         << (allOk ? "ok" : "FAILED") << "\n";
  outs() << "report: errors " << total.errorCount << ", hazards "
         << total.hazardCount << ", barrier misuse " << total.barrierMisuseCount
         << ", deadlock " << (total.deadlock.empty() ? "none" : "yes")
         << ", mmas " << total.mmas << ", tma load bytes " << total.tmaLoadBytes
         << ", instructions " << total.instructions << "\n";
  return allOk ? 0 : 1;
}
