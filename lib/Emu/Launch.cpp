//===- Launch.cpp - global memory, tensor maps, a launch --------------------===//

#include "Machine.h"
#include "fa4/Support/Error.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

namespace mlir::fa4::emu {

//===----------------------------------------------------------------------===//
// Device
//===----------------------------------------------------------------------===//

Device::Device() : next(kGlobalBegin) {}
Device::~Device() = default;

uint64_t Device::allocate(uint64_t bytes) {
  uint64_t base = next;
  // The memory first: when it cannot be had, the device is left as it was.
  decltype(Allocation::bytes) zeroed(bytes, 0);
  Allocation &a = allocations[base];
  a.base = base;
  a.bytes = std::move(zeroed);
  // A gap after every allocation, so that running off its end is caught
  // rather than landing in a neighbour.
  next += (bytes + 4096 + 255) / 256 * 256;
  return base;
}

uint8_t *Device::host(uint64_t address, uint64_t bytes) {
  auto it = allocations.upper_bound(address);
  if (it == allocations.begin())
    return nullptr;
  --it;
  Allocation &a = it->second;
  if (address < a.base || address + bytes > a.base + a.bytes.size() ||
      address + bytes < address)
    return nullptr;
  return a.bytes.data() + (address - a.base);
}

//===----------------------------------------------------------------------===//
// Tensor maps
//===----------------------------------------------------------------------===//

namespace {
// The emulator's 128-byte encoding: a magic word, then the fields.
constexpr uint32_t kMagic = 0x4d543446; // "F4TM"
struct Encoded {
  uint32_t magic;
  uint8_t dataType, rank, swizzle, oobFill;
  uint64_t globalAddress;
  uint64_t globalDims[5];
  uint64_t globalStrides[4];
  uint32_t boxDims[5];
  uint8_t elementStrides[5];
};
static_assert(sizeof(Encoded) <= 128, "a tensor map is 128 bytes");
} // namespace

llvm::Error encodeTensorMap(const runtime::TensorMapSpec &spec,
                            uint8_t out[128]) {
  using runtime::TensorMapDataType;
  auto fail = [](const std::string &message) { return makeError(message); };
  if (spec.rank < 1 || spec.rank > 5)
    return fail("rank " + std::to_string(spec.rank) + " (1 to 5)");
  if (static_cast<uint32_t>(spec.dataType) > 9)
    return fail("unknown data type");
  uint32_t eb = runtime::elementBytes(spec.dataType);
  if (spec.globalAddress % 16)
    return fail("global address is not 16-byte aligned");
  for (uint32_t d = 0; d < spec.rank; ++d) {
    if (spec.globalDims[d] == 0 || spec.globalDims[d] > (uint64_t(1) << 32))
      return fail("dimension " + std::to_string(d) + " has size " +
                  std::to_string(spec.globalDims[d]) + " (1 to 2^32)");
    if (spec.boxDims[d] == 0 || spec.boxDims[d] > 256)
      return fail("box dimension " + std::to_string(d) + " is " +
                  std::to_string(spec.boxDims[d]) + " (1 to 256)");
    if (spec.elementStrides[d] == 0 || spec.elementStrides[d] > 8)
      return fail("element stride " + std::to_string(d) + " is " +
                  std::to_string(spec.elementStrides[d]) + " (1 to 8)");
  }
  for (uint32_t d = 0; d + 1 < spec.rank; ++d)
    if (spec.globalStrides[d] % 16 || spec.globalStrides[d] >= (uint64_t(1) << 40))
      return fail("stride " + std::to_string(d + 1) + " is " +
                  std::to_string(spec.globalStrides[d]) +
                  " bytes (a multiple of 16 below 2^40)");
  uint32_t innerBytes = spec.boxDims[0] * eb;
  if (innerBytes % 16)
    return fail("the box's inner dimension is " + std::to_string(innerBytes) +
                " bytes (a multiple of 16)");
  if (spec.swizzle != runtime::TensorMapSwizzle::None) {
    uint32_t span = 16u << static_cast<uint32_t>(spec.swizzle);
    if (innerBytes > span)
      return fail("the box's inner dimension is " + std::to_string(innerBytes) +
                  " bytes, more than the " + std::to_string(span) +
                  "-byte swizzle span");
  }
  if (spec.oobFill == runtime::TensorMapOobFill::NanRequestZeroFma &&
      spec.dataType != TensorMapDataType::Float16 &&
      spec.dataType != TensorMapDataType::BFloat16 &&
      spec.dataType != TensorMapDataType::Float32 &&
      spec.dataType != TensorMapDataType::Float64)
    return fail("NaN fill needs a floating-point type");
  Encoded e;
  std::memset(&e, 0, sizeof(e));
  e.magic = kMagic;
  e.dataType = static_cast<uint8_t>(spec.dataType);
  e.rank = static_cast<uint8_t>(spec.rank);
  e.swizzle = static_cast<uint8_t>(spec.swizzle);
  e.oobFill = static_cast<uint8_t>(spec.oobFill);
  e.globalAddress = spec.globalAddress;
  for (int d = 0; d < 5; ++d) {
    e.globalDims[d] = spec.globalDims[d];
    e.boxDims[d] = spec.boxDims[d];
    e.elementStrides[d] = static_cast<uint8_t>(spec.elementStrides[d]);
  }
  for (int d = 0; d < 4; ++d)
    e.globalStrides[d] = spec.globalStrides[d];
  std::memset(out, 0, 128);
  std::memcpy(out, &e, sizeof(e));
  return llvm::Error::success();
}

llvm::Expected<runtime::TensorMapSpec> decodeTensorMap(const uint8_t in[128]) {
  Encoded e;
  std::memcpy(&e, in, sizeof(e));
  if (e.magic != kMagic)
    return makeError("no tensor map encoding (bad magic)");
  runtime::TensorMapSpec spec;
  spec.dataType = static_cast<runtime::TensorMapDataType>(e.dataType);
  spec.rank = e.rank;
  spec.swizzle = static_cast<runtime::TensorMapSwizzle>(e.swizzle);
  spec.oobFill = static_cast<runtime::TensorMapOobFill>(e.oobFill);
  spec.globalAddress = e.globalAddress;
  for (int d = 0; d < 5; ++d) {
    spec.globalDims[d] = e.globalDims[d];
    spec.boxDims[d] = e.boxDims[d];
    spec.elementStrides[d] = e.elementStrides[d];
  }
  for (int d = 0; d < 4; ++d)
    spec.globalStrides[d] = e.globalStrides[d];
  // What the encoder accepted is what the kernel gets; check again so that
  // a corrupted map is named, not executed.
  uint8_t again[128];
  if (llvm::Error corrupted = encodeTensorMap(spec, again))
    return std::move(corrupted);
  return spec;
}

//===----------------------------------------------------------------------===//
// Launch
//===----------------------------------------------------------------------===//

void LaunchReport::add(const LaunchReport &other) {
  auto append = [](std::vector<std::string> &to, const std::vector<std::string> &from) {
    for (const std::string &s : from)
      if (to.size() < 16)
        to.push_back(s);
  };
  append(errors, other.errors);
  append(hazards, other.hazards);
  append(barrierMisuse, other.barrierMisuse);
  if (deadlock.empty())
    deadlock = other.deadlock;
  errorCount += other.errorCount;
  hazardCount += other.hazardCount;
  barrierMisuseCount += other.barrierMisuseCount;
  instructions += other.instructions;
  mmas += other.mmas;
  tmaLoadBytes += other.tmaLoadBytes;
  tmaStoreBytes += other.tmaStoreBytes;
  if (instructionsPerWarp.size() < other.instructionsPerWarp.size())
    instructionsPerWarp.resize(other.instructionsPerWarp.size());
  for (size_t w = 0; w < other.instructionsPerWarp.size(); ++w)
    instructionsPerWarp[w] += other.instructionsPerWarp[w];
}

llvm::Expected<LaunchReport> launch(const Program &program, Device &device,
                                    const LaunchConfig &config) {
  const Kernel *kernel = program.findKernel(config.kernel);
  if (!kernel)
    return makeError("the PTX has no entry named '" + config.kernel + "'");
  if (config.arguments.size() != kernel->params.size())
    return makeError(config.kernel + " takes " +
                     std::to_string(kernel->params.size()) +
                     " parameters, the launch gives " +
                     std::to_string(config.arguments.size()));
  std::vector<uint8_t> params(kernel->paramBytes, 0);
  for (size_t i = 0; i < kernel->params.size(); ++i) {
    if (config.arguments[i].size() != kernel->params[i].bytes)
      return makeError("parameter " + kernel->params[i].name + " is " +
                       std::to_string(kernel->params[i].bytes) +
                       " bytes, the launch gives " +
                       std::to_string(config.arguments[i].size()));
    std::memcpy(params.data() + kernel->paramOffsets[i], config.arguments[i].data(),
                config.arguments[i].size());
  }
  uint64_t blockThreads = uint64_t(config.block[0]) * config.block[1] * config.block[2];
  if (blockThreads == 0 || blockThreads > 1024)
    return makeError("a block of " + std::to_string(blockThreads) +
                     " threads (1 to 1024)");
  if (kernel->reqntid && blockThreads != kernel->reqntid)
    return makeError(config.kernel + " requires .reqntid " +
                     std::to_string(kernel->reqntid) + ", the launch gives " +
                     std::to_string(blockThreads) + " threads");
  if (kernel->maxntid && blockThreads > kernel->maxntid)
    return makeError(config.kernel + " allows at most .maxntid " +
                     std::to_string(kernel->maxntid) +
                     " threads, the launch gives " +
                     std::to_string(blockThreads));
  uint64_t smemBytes = uint64_t(program.staticSmemBytes) + config.dynamicSmemBytes;
  if (smemBytes > kSharedWindow - kSharedBase)
    return makeError("the launch asks for " + std::to_string(smemBytes) +
                     " bytes of shared memory; a CTA of " +
                     (program.target.empty() ? std::string("the emulator")
                                             : program.target) +
                     " has " + std::to_string(kSharedWindow - kSharedBase));
  uint64_t ctas = uint64_t(config.grid[0]) * config.grid[1] * config.grid[2];
  if (ctas == 0)
    return makeError("an empty grid");

  // Clusters: the launch's, or the kernel's .reqnctapercluster.
  uint32_t cluster[3] = {config.cluster[0], config.cluster[1], config.cluster[2]};
  bool launchHasCluster = cluster[0] * cluster[1] * cluster[2] != 1;
  if (kernel->reqCluster[0]) {
    if (launchHasCluster &&
        (cluster[0] != kernel->reqCluster[0] || cluster[1] != kernel->reqCluster[1] ||
         cluster[2] != kernel->reqCluster[2]))
      return makeError(config.kernel + " requires .reqnctapercluster " +
                       std::to_string(kernel->reqCluster[0]) + "," +
                       std::to_string(kernel->reqCluster[1]) + "," +
                       std::to_string(kernel->reqCluster[2]) +
                       ", the launch gives clusters of " + std::to_string(cluster[0]) +
                       "," + std::to_string(cluster[1]) + "," +
                       std::to_string(cluster[2]));
    for (int d = 0; d < 3; ++d)
      cluster[d] = kernel->reqCluster[d];
  }
  uint64_t clusterSize = uint64_t(cluster[0]) * cluster[1] * cluster[2];
  if (clusterSize == 0 || clusterSize > kMaxClusterSize)
    return makeError("a cluster of " + std::to_string(clusterSize) + " CTAs (1 to " +
                     std::to_string(kMaxClusterSize) + ")");
  if (kernel->maxClusterRank && clusterSize > kernel->maxClusterRank)
    return makeError(config.kernel + " allows clusters of at most .maxclusterrank " +
                     std::to_string(kernel->maxClusterRank) + " CTAs, the launch gives " +
                     std::to_string(clusterSize));
  for (int d = 0; d < 3; ++d)
    if (config.grid[d] % cluster[d])
      return makeError("the grid's dimension " + std::string(1, "xyz"[d]) + " (" +
                       std::to_string(config.grid[d]) +
                       ") is not a multiple of the cluster's (" +
                       std::to_string(cluster[d]) + ")");
  if (clusterSize > 1 && blockThreads % 128)
    return makeError("a cluster launch with blocks of " + std::to_string(blockThreads) +
                     " threads: fa4-emu runs clusters of whole warpgroups (a "
                     "multiple of 128 threads)");
  if (clusterSize * ((blockThreads + 31) / 32) > 255)
    return makeError("a cluster of " + std::to_string(clusterSize) + " CTAs of " +
                     std::to_string(blockThreads) + " threads: fa4-emu runs at most "
                     "255 warps a cluster");
  LaunchConfig clustered = config;
  for (int d = 0; d < 3; ++d)
    clustered.cluster[d] = cluster[d];
  // Each cluster's CTAs by rank (x fastest within the cluster), as linear
  // indices of the grid.
  const uint32_t clusterGrid[3] = {config.grid[0] / cluster[0],
                                   config.grid[1] / cluster[1],
                                   config.grid[2] / cluster[2]};
  const uint64_t clusters = ctas / clusterSize;
  auto ctasOf = [&](uint64_t c) {
    uint32_t coord[3] = {static_cast<uint32_t>(c % clusterGrid[0]),
                         static_cast<uint32_t>(c / clusterGrid[0] % clusterGrid[1]),
                         static_cast<uint32_t>(c / (uint64_t(clusterGrid[0]) * clusterGrid[1]))};
    std::vector<uint32_t> linear;
    for (uint32_t z = 0; z < cluster[2]; ++z)
      for (uint32_t y = 0; y < cluster[1]; ++y)
        for (uint32_t x = 0; x < cluster[0]; ++x) {
          uint64_t gx = uint64_t(coord[0]) * cluster[0] + x;
          uint64_t gy = uint64_t(coord[1]) * cluster[1] + y;
          uint64_t gz = uint64_t(coord[2]) * cluster[2] + z;
          linear.push_back(static_cast<uint32_t>(
              gx + gy * config.grid[0] + gz * uint64_t(config.grid[0]) * config.grid[1]));
        }
    return linear;
  };

  LaunchReport report;
  std::mutex merge;
  std::atomic<uint64_t> nextCta{0};
  std::atomic<bool> failed{false};
  auto mergeReport = [&](CtaReport &cta) {
    std::lock_guard<std::mutex> lock(merge);
    LaunchReport one;
    one.errors = cta.errors;
    one.hazards = cta.hazards;
    one.barrierMisuse = cta.misuse;
    one.deadlock = cta.deadlock;
    one.errorCount = cta.errorCount;
    one.hazardCount = cta.hazardCount;
    one.barrierMisuseCount = cta.misuseCount;
    one.instructions = cta.instructions;
    one.mmas = cta.mmas;
    one.tmaLoadBytes = cta.tmaLoadBytes;
    one.tmaStoreBytes = cta.tmaStoreBytes;
    one.instructionsPerWarp = cta.perWarp;
    report.add(one);
    report.ctas += clusterSize;
    if (cta.errorCount || !cta.deadlock.empty())
      failed = true;
  };
  auto worker = [&]() {
    while (!failed) {
      uint64_t c = nextCta++;
      if (c >= clusters)
        return;
      CtaReport local;
      CtaMachine machine(program, *kernel, device, clustered, params, ctasOf(c),
                         local);
      machine.run();
      mergeReport(local);
    }
  };
  unsigned workers = std::max(1u, std::min<unsigned>(config.workers, clusters));
  std::vector<std::thread> pool;
  for (unsigned i = 1; i < workers; ++i)
    pool.emplace_back(worker);
  worker();
  for (std::thread &t : pool)
    t.join();
  return std::move(report);
}

} // namespace mlir::fa4::emu
