//===- fa4-emu-gemm.cpp - run a GEMM kernel's PTX in fa4-emu and check it ---===//
//
// A test-only driver for test/Emu/cute-gemm*.test: reads PTX that nvcc
// compiled from test/Emu/Inputs/cute-gemm.cu (sm_100a, M = 128),
// cute-gemm-2cta.cu (sm_100a, a CTA pair's M = 256, `--pair`) or
// cute-gemm-sm90.cu (sm_90a, M = 64), launches one of its GEMM entries in
// the emulator on one CTA of 128 threads (a cluster of two with `--pair`)
// — once per interleaving, each with its own schedule — and compares C
// with a GEMM on the host.
//
// The entry computes C[M x N] (f32, row-major) = A[M x K] * B[N x K]^T with
// A and B f16, bf16, e4m3 or e5m2 (B's type may differ from A's only among
// the 8-bit ones), A K-major, B K-major (stored N x K) or MN-major (stored
// K x N), and takes (A's tensor map, B's tensor map, C's address). The maps
// are encoded by the emulator's encoder, as the driver's
// cuTensorMapEncodeTiled would encode them for a GPU: 2-d, boxes of one
// 128-byte swizzle row of the contiguous dimension (64 16-bit or 128 8-bit
// elements, the 8-bit ones as UINT8, as CuTe maps them) by every row, 128B
// swizzle. The inputs are seeded values in [-1, 1), rounded to their type
// (so that the 8-bit ones are exactly representable ones, subnormals
// included), and the reference is their product in double.
//
// Prints each failing interleaving with its report, then
//   gemm MxNxK: max error E, I interleavings, ok
// (E the largest |C - reference| / max(1, |reference|)) and the reports'
// counts summed over the interleavings. Exits 0 when every launch is clean
// and within tolerance, 1 otherwise, 2 when it cannot launch.
//
//===----------------------------------------------------------------------===//

#include "fa4/Emu/Emulator.h"
#include "fa4/Support/Float8.h"
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
enum class Element { F16, BF16, E4M3, E5M2 };
static auto elementValues() {
  return cl::values(
      clEnumValN(Element::F16, "f16", "IEEE half precision"),
      clEnumValN(Element::BF16, "bf16", "bfloat16"),
      clEnumValN(Element::E4M3, "e4m3", "8-bit float, 4 exponent bits"),
      clEnumValN(Element::E5M2, "e5m2", "8-bit float, 5 exponent bits"));
}
static cl::opt<Element> element("element", cl::desc("The type of A (and of B)"),
                                elementValues(), cl::init(Element::F16),
                                cl::cat(gemmCategory));
static cl::opt<Element> bElement(
    "b-element", cl::desc("The type of B, when it is not A's (8-bit types)"),
    elementValues(), cl::init(Element::F16), cl::cat(gemmCategory));
enum class Major { K, MN };
static cl::opt<Major> bMajor(
    "b-major", cl::desc("Which dimension of B is contiguous"),
    cl::values(clEnumValN(Major::K, "k", "B stored N x K, as K in Q·K^T"),
               clEnumValN(Major::MN, "mn", "B stored K x N, as V in P·V")),
    cl::init(Major::K), cl::cat(gemmCategory));
static cl::opt<bool> pair(
    "pair",
    cl::desc("A CTA pair's kernel (tcgen05 .cta_group::2, cute-gemm-2cta.cu): "
             "M = 256 over a cluster of 2 CTAs, each loading 128 rows of A "
             "and N/2 rows of B (boxes of that many rows)"),
    cl::init(false), cl::cat(gemmCategory));
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
/// The inner extent of one TMA box in bytes: one 128-byte swizzle row.
constexpr uint32_t kBoxInnerBytes = 128;
/// The most rows a TMA box may have.
constexpr uint32_t kMaxBoxOuter = 256;

int fail(const Twine &message) {
  errs() << "fa4-emu-gemm: " << message << "\n";
  return 2;
}

uint32_t bytesOf(Element type) {
  return type == Element::F16 || type == Element::BF16 ? 2 : 1;
}

/// Seeded values in [-1, 1) rounded to `type`, as their bits.
std::vector<uint16_t> randomElements(Element type, size_t count,
                                     std::mt19937_64 &rng) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<uint16_t> bits(count);
  for (uint16_t &b : bits) {
    float x = uniform(rng);
    switch (type) {
    case Element::F16: b = floatToHalfBits(x); break;
    case Element::BF16: b = floatToBFloat16Bits(x); break;
    case Element::E4M3: b = mlir::fa4::float8FromDouble(mlir::fa4::Float8::E4M3, x); break;
    case Element::E5M2: b = mlir::fa4::float8FromDouble(mlir::fa4::Float8::E5M2, x); break;
    }
  }
  return bits;
}

double elementValue(Element type, uint16_t bits) {
  switch (type) {
  case Element::F16: return halfBitsToFloat(bits);
  case Element::BF16: return bfloat16BitsToFloat(bits);
  case Element::E4M3:
    return mlir::fa4::float8ToFloat(mlir::fa4::Float8::E4M3, static_cast<uint8_t>(bits));
  case Element::E5M2:
    return mlir::fa4::float8ToFloat(mlir::fa4::Float8::E5M2, static_cast<uint8_t>(bits));
  }
  return 0;
}

/// The elements' bytes as they lie in memory (little-endian).
std::vector<uint8_t> elementBytes(Element type,
                                  const std::vector<uint16_t> &bits) {
  uint32_t eb = bytesOf(type);
  std::vector<uint8_t> bytes(bits.size() * eb);
  for (size_t i = 0; i < bits.size(); ++i)
    std::memcpy(bytes.data() + i * eb, &bits[i], eb);
  return bytes;
}

/// The map of an operand of `type` at `address` stored as `rows` rows of
/// `columns` contiguous elements: one box is 128 bytes of columns of every
/// row.
runtime::TensorMapSpec operandMap(Element type, uint64_t address,
                                  uint32_t columns, uint32_t rows,
                                  uint32_t boxRows = 0) {
  runtime::TensorMapSpec spec;
  using runtime::TensorMapDataType;
  spec.dataType = type == Element::F16    ? TensorMapDataType::Float16
                  : type == Element::BF16 ? TensorMapDataType::BFloat16
                                          : TensorMapDataType::UInt8;
  spec.rank = 2;
  spec.globalAddress = address;
  spec.globalDims[0] = columns;
  spec.globalDims[1] = rows;
  spec.globalStrides[0] = uint64_t(columns) * bytesOf(type);
  spec.boxDims[0] = kBoxInnerBytes / bytesOf(type);
  spec.boxDims[1] = boxRows ? boxRows : rows;
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
  const Element aType = element;
  const Element bType = bElement.getNumOccurrences() ? bElement : element;
  const uint32_t eb = bytesOf(aType), boxInner = kBoxInnerBytes / eb;
  if (bytesOf(bType) != eb)
    return fail("--b-element must be as wide as --element");
  if (pair ? m != 256 : (m != 64 && m != 128))
    return fail(pair ? "--pair needs --m 256" : "--m must be 64 or 128");
  if (pair && (bMajor != Major::K || n % 32))
    return fail("--pair needs a K-major B and --n a multiple of 32");
  if (n == 0 || n % 16 || n > 256 || k == 0 || k % boxInner)
    return fail("--n must be a multiple of 16 up to 256 and --k a multiple "
                "of " + Twine(boxInner));
  // An MN-major B is loaded in boxes of 128 bytes of N by all K rows.
  if (bMajor == Major::MN && (n % boxInner || k > kMaxBoxOuter))
    return fail("--b-major mn needs --n a multiple of " + Twine(boxInner) +
                " and --k at most 256");
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
  std::vector<uint16_t> a = randomElements(aType, size_t(m) * k, rng);
  std::vector<uint16_t> b = randomElements(bType, size_t(n) * k, rng);
  // B(j, x): stored N x K or K x N.
  auto bAt = [&](uint32_t j, uint32_t x) {
    return bMajor == Major::K ? b[size_t(j) * k + x] : b[size_t(x) * n + j];
  };
  // The reference in double: the products of 16- and 8-bit values and their
  // sums of up to a few hundred terms are exact or nearly so.
  std::vector<double> reference(size_t(m) * n);
  for (uint32_t i = 0; i < m; ++i)
    for (uint32_t j = 0; j < n; ++j) {
      double sum = 0;
      for (uint32_t x = 0; x < k; ++x)
        sum += elementValue(aType, a[size_t(i) * k + x]) *
               elementValue(bType, bAt(j, x));
      reference[size_t(i) * n + j] = sum;
    }

  double maxError = 0;
  emu::LaunchReport total;
  bool allOk = true;
  for (int64_t run = 0; run < interleavings; ++run) {
    emu::Device device;
    std::vector<uint8_t> aBytes = elementBytes(aType, a);
    std::vector<uint8_t> bBytes = elementBytes(bType, b);
    uint64_t aAddress = device.allocate(aBytes.size());
    uint64_t bAddress = device.allocate(bBytes.size());
    uint64_t cAddress = device.allocate(reference.size() * 4);
    std::memcpy(device.host(aAddress, aBytes.size()), aBytes.data(),
                aBytes.size());
    std::memcpy(device.host(bAddress, bBytes.size()), bBytes.data(),
                bBytes.size());
    // C starts as NaN: an element the kernel never writes fails.
    float *c = reinterpret_cast<float *>(device.host(cAddress, reference.size() * 4));
    std::fill(c, c + reference.size(), std::nanf(""));

    emu::LaunchConfig config;
    config.kernel = kernelName;
    config.block[0] = kThreads;
    // A pair: two CTAs of a cluster, each with half of A's rows and of B's.
    const uint32_t ctas = pair ? 2 : 1;
    config.grid[0] = ctas;
    config.cluster[0] = ctas;
    // The tiles, then the mbarriers (and, on sm_100a, the TMEM address).
    config.dynamicSmemBytes = eb * (m + n) / ctas * k + 20;
    config.seed = seed + run;
    config.maxAsyncDelay = maxAsyncDelay;
    config.arguments.assign(3, {});
    config.arguments[0].resize(128);
    config.arguments[1].resize(128);
    runtime::TensorMapSpec mapB = bMajor == Major::K
                                      ? operandMap(bType, bAddress, k, n, n / ctas)
                                      : operandMap(bType, bAddress, n, k);
    for (auto [map, bytes] :
         {std::pair{operandMap(aType, aAddress, k, m, m / ctas),
                    config.arguments[0].data()},
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
