//===- fa4-tma-check.cpp - the driver's tensor maps against the emulator's -===//
//
// fa4-tma-check [--store-negative] [--layout bhsd] TMA-COPY.ptx KERNEL.cubin.json...
//
// For every tensor map a kernel's manifest asks for (bound by planLaunch at
// batch 2, seq_q 300, seq_k 257, so that boxes cross the tails), moves boxes
// through the map with the TMA round-trip kernel of tma-copy.cu (load a box
// into shared memory, copy its bytes out as they lie, store it back through
// the map into another buffer) at coordinates that start at the origin, end
// at the last element, straddle the end and start before 0 in every
// dimension, and compares three things byte for byte:
//   - a host model of the box: elements in box order, out-of-bounds ones
//     zero, placed at the swizzled shared-memory offset (the 16-byte chunk
//     XOR the row within each 8-row atom, as CUTLASS's Swizzle<B,4,3>);
//   - fa4-emu running the PTX, through maps the emulator encoded;
//   - the GPU running the same PTX (JIT-compiled by the driver), through
//     maps cuTensorMapEncodeTiled encoded (runtime::createCudaBackend), when
//     a driver and an sm_90+ GPU are there.
// and the stored buffer: the source where some stored box covered it, zero
// elsewhere (a box that starts at a negative coordinate is only loaded: a
// TMA store there faults on the hardware). One line per map; exit 1 on any difference.
//
// --store-negative also stores the boxes that start before the tensor,
// which the hardware faults on and the emulator must refuse. --layout bhsd
// binds the maps to [batch, heads, seq, head_dim] storage (the strides a
// launch of such tensors gives; not monotone in the map's dimensions).
//
// Links no MLIR: built here, it runs on a GPU machine with only a driver.
//
//===----------------------------------------------------------------------===//

#include "fa4/Emu/Emulator.h"
#include "fa4/Runtime/Runtime.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace mlir::fa4;
using namespace mlir::fa4::runtime;

namespace {

/// Whether the round trip also stores boxes at negative coordinates.
bool storeNegative = false;
/// Whether the maps are bound to [batch, heads, seq, head_dim] storage.
bool headsOuter = false;

/// The boxes of one check: 5 coordinates each (innermost first).
std::vector<int32_t> boxCoordinates(const TensorMapSpec &spec) {
  // Per dimension: at the origin, at the very end, straddling the end, from
  // before the start; then mixes of those.
  auto at = [&](uint32_t d, int kind) -> int32_t {
    int64_t dim = int64_t(spec.globalDims[d]), box = spec.boxDims[d];
    switch (kind) {
    case 0: return 0;
    case 1: return int32_t(std::max<int64_t>(0, dim - box));
    case 2: return int32_t(dim - box / 2);
    default: return int32_t(-box / 2);
    }
  };
  std::vector<int32_t> coords;
  for (int kind = 0; kind < 4; ++kind)
    for (uint32_t d = 0; d < 5; ++d)
      coords.push_back(d < spec.rank ? at(d, kind) : 0);
  for (int mix = 0; mix < 4; ++mix)
    for (uint32_t d = 0; d < 5; ++d)
      coords.push_back(d < spec.rank ? at(d, (mix + d) % 4) : 0);
  return coords;
}

uint64_t boxBytesOf(const TensorMapSpec &spec) {
  uint64_t bytes = elementBytes(spec.dataType);
  for (uint32_t d = 0; d < spec.rank; ++d)
    bytes *= spec.boxDims[d];
  return bytes;
}

uint64_t extentOf(const TensorMapSpec &spec) {
  uint64_t bytes = uint64_t(spec.globalDims[0]) * elementBytes(spec.dataType);
  for (uint32_t d = 1; d < spec.rank; ++d)
    bytes += (spec.globalDims[d] - 1) * spec.globalStrides[d - 1];
  return (bytes + 255) / 256 * 256;
}

/// The source's bytes: every byte distinct-ish and never zero, so that a
/// zero fill, a wrong element or a wrong byte order all show.
std::vector<uint8_t> sourceBytes(uint64_t size) {
  std::vector<uint8_t> bytes(size);
  for (uint64_t i = 0; i < size; ++i)
    bytes[i] = uint8_t(1 + (i * 2654435761u >> 7) % 255);
  return bytes;
}

/// Where byte `offset` of an unswizzled box lies in shared memory.
uint64_t swizzled(uint64_t offset, TensorMapSwizzle swizzle) {
  uint64_t bits = swizzle == TensorMapSwizzle::Bytes128  ? 3
                  : swizzle == TensorMapSwizzle::Bytes64 ? 2
                  : swizzle == TensorMapSwizzle::Bytes32 ? 1
                                                         : 0;
  uint64_t mask = ((uint64_t(1) << bits) - 1) << 4;
  return offset ^ ((offset >> 3) & mask);
}

/// The host model: the boxes' shared-memory bytes, and the stored buffer.
void model(const TensorMapSpec &spec, const std::vector<int32_t> &coords,
           const std::vector<uint8_t> &src, std::vector<uint8_t> &out,
           std::vector<uint8_t> &stored) {
  uint32_t element = elementBytes(spec.dataType);
  uint64_t boxBytes = boxBytesOf(spec), boxes = coords.size() / 5;
  out.assign(boxes * boxBytes, 0);
  stored.assign(src.size(), 0);
  uint64_t boxElements = boxBytes / element;
  for (uint64_t b = 0; b < boxes; ++b) {
    // Boxes at a negative coordinate are loaded, not stored (tma-copy.cu).
    bool stores = true;
    for (uint32_t d = 0; d < spec.rank; ++d)
      stores = stores && (coords[b * 5 + d] >= 0 || storeNegative);
    for (uint64_t e = 0; e < boxElements; ++e) {
      uint64_t rest = e, address = 0;
      bool inside = true;
      for (uint32_t d = 0; d < spec.rank; ++d) {
        int64_t index = coords[b * 5 + d] + int64_t(rest % spec.boxDims[d]);
        rest /= spec.boxDims[d];
        if (index < 0 || index >= int64_t(spec.globalDims[d]))
          inside = false;
        else
          address += d == 0 ? uint64_t(index) * element
                            : uint64_t(index) * spec.globalStrides[d - 1];
      }
      if (!inside)
        continue;
      uint64_t at = b * boxBytes + swizzled(e * element, spec.swizzle);
      std::memcpy(&out[at], &src[address], element);
      if (stores)
        std::memcpy(&stored[address], &src[address], element);
    }
  }
}

/// Whether `failure` is none; else false with `error` its message.
bool succeeded(llvm::Error failure, std::string &error) {
  if (!failure)
    return true;
  error = llvm::toString(std::move(failure));
  return false;
}

std::vector<uint8_t> argument(const void *data, size_t bytes) {
  const uint8_t *begin = static_cast<const uint8_t *>(data);
  return std::vector<uint8_t>(begin, begin + bytes);
}

/// The round trip in fa4-emu, through maps the emulator encoded.
bool runEmulator(const emu::Program &program, const TensorMapSpec &spec,
                 const std::vector<int32_t> &coords, const std::vector<uint8_t> &src,
                 std::vector<uint8_t> &out, std::vector<uint8_t> &stored,
                 std::string &error) {
  emu::Device device;
  uint64_t boxBytes = boxBytesOf(spec), boxes = coords.size() / 5;
  uint64_t srcAddress = device.allocate(src.size());
  uint64_t dstAddress = device.allocate(src.size());
  uint64_t outAddress = device.allocate(boxes * boxBytes);
  uint64_t coordsAddress = device.allocate(coords.size() * 4);
  std::memcpy(device.host(srcAddress, src.size()), src.data(), src.size());
  std::memcpy(device.host(coordsAddress, coords.size() * 4), coords.data(),
              coords.size() * 4);
  uint8_t srcMap[128], dstMap[128];
  TensorMapSpec bound = spec;
  bound.globalAddress = srcAddress;
  if (!succeeded(emu::encodeTensorMap(bound, srcMap), error))
    return false;
  bound.globalAddress = dstAddress;
  if (!succeeded(emu::encodeTensorMap(bound, dstMap), error))
    return false;
  emu::LaunchConfig config;
  config.kernel = "fa4_tma_copy";
  config.grid[0] = uint32_t(boxes);
  config.block[0] = 128;
  config.dynamicSmemBytes = uint32_t(boxBytes + 2048);
  int32_t rank = int32_t(spec.rank) | (storeNegative ? 0x100 : 0);
  uint32_t bytes = uint32_t(boxBytes);
  config.arguments = {argument(srcMap, 128),        argument(dstMap, 128),
                      argument(&coordsAddress, 8), argument(&rank, 4),
                      argument(&bytes, 4),          argument(&outAddress, 8)};
  config.workers = 2;
  llvm::Expected<emu::LaunchReport> report =
      emu::launch(program, device, config);
  if (!report)
    return succeeded(report.takeError(), error);
  if (!report->clean()) {
    error =
        "the emulator's run was not clean: " +
        (report->errors.empty() ? std::string("hazards, misuse or a deadlock")
                                : report->errors.front());
    return false;
  }
  const uint8_t *o = device.host(outAddress, boxes * boxBytes);
  const uint8_t *d = device.host(dstAddress, src.size());
  out.assign(o, o + boxes * boxBytes);
  stored.assign(d, d + src.size());
  return true;
}

/// The driver calls the GPU side needs beyond the runtime's (memory, a
/// module from PTX, a plain launch).
struct Driver {
  void *library = nullptr;
  int (*memAlloc)(uint64_t *, size_t) = nullptr;
  int (*memFree)(uint64_t) = nullptr;
  int (*copyIn)(uint64_t, const void *, size_t) = nullptr;
  int (*copyOut)(void *, uint64_t, size_t) = nullptr;
  int (*memset)(uint64_t, unsigned char, size_t) = nullptr;
  int (*loadData)(void **, const void *) = nullptr;
  int (*getFunction)(void **, void *, const char *) = nullptr;
  int (*setAttribute)(void *, int, int) = nullptr;
  int (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                unsigned, void *, void **, void **) = nullptr;
  int (*synchronize)() = nullptr;
  int (*errorName)(int, const char **) = nullptr;

  bool open() {
    library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!library)
      return false;
    auto get = [&](auto &function, const char *name) {
      function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(
          dlsym(library, name));
      return function != nullptr;
    };
    return get(memAlloc, "cuMemAlloc_v2") && get(memFree, "cuMemFree_v2") &&
           get(copyIn, "cuMemcpyHtoD_v2") && get(copyOut, "cuMemcpyDtoH_v2") &&
           get(memset, "cuMemsetD8_v2") && get(loadData, "cuModuleLoadData") &&
           get(getFunction, "cuModuleGetFunction") &&
           get(setAttribute, "cuFuncSetAttribute") && get(launch, "cuLaunchKernel") &&
           get(synchronize, "cuCtxSynchronize") && get(errorName, "cuGetErrorName");
  }

  bool check(int result, const char *call, std::string &error) {
    if (result == 0)
      return true;
    const char *name = "?";
    errorName(result, &name);
    error = std::string(call) + ": " + name;
    return false;
  }
};

/// The round trip on the GPU, through maps the driver encoded.
bool runGpu(Driver &driver, Backend &backend, void *function,
            const TensorMapSpec &spec, const std::vector<int32_t> &coords,
            const std::vector<uint8_t> &src, std::vector<uint8_t> &out,
            std::vector<uint8_t> &stored, std::string &error) {
  uint64_t boxBytes = boxBytesOf(spec), boxes = coords.size() / 5;
  uint64_t srcAddress = 0, dstAddress = 0, outAddress = 0, coordsAddress = 0;
  bool ok =
      driver.check(driver.memAlloc(&srcAddress, src.size()), "cuMemAlloc", error) &&
      driver.check(driver.memAlloc(&dstAddress, src.size()), "cuMemAlloc", error) &&
      driver.check(driver.memAlloc(&outAddress, boxes * boxBytes), "cuMemAlloc", error) &&
      driver.check(driver.memAlloc(&coordsAddress, coords.size() * 4), "cuMemAlloc",
                   error) &&
      driver.check(driver.copyIn(srcAddress, src.data(), src.size()), "cuMemcpyHtoD",
                   error) &&
      driver.check(driver.copyIn(coordsAddress, coords.data(), coords.size() * 4),
                   "cuMemcpyHtoD", error) &&
      driver.check(driver.memset(dstAddress, 0, src.size()), "cuMemsetD8", error) &&
      driver.check(driver.memset(outAddress, 0, boxes * boxBytes), "cuMemsetD8", error);
  alignas(64) uint8_t srcMap[128], dstMap[128];
  TensorMapSpec bound = spec;
  bound.globalAddress = srcAddress;
  ok = ok && succeeded(backend.encodeTensorMap(bound, srcMap), error);
  bound.globalAddress = dstAddress;
  ok = ok && succeeded(backend.encodeTensorMap(bound, dstMap), error);
  int32_t rank = int32_t(spec.rank) | (storeNegative ? 0x100 : 0);
  uint32_t bytes = uint32_t(boxBytes);
  void *parameters[] = {srcMap, dstMap, &coordsAddress, &rank, &bytes, &outAddress};
  unsigned smem = unsigned(boxBytes + 2048);
  ok = ok &&
       driver.check(driver.setAttribute(function, 8 /*MAX_DYNAMIC_SHARED_SIZE_BYTES*/,
                                        int(smem)),
                    "cuFuncSetAttribute", error) &&
       driver.check(driver.launch(function, unsigned(boxes), 1, 1, 128, 1, 1, smem,
                                  nullptr, parameters, nullptr),
                    "cuLaunchKernel", error) &&
       driver.check(driver.synchronize(), "cuCtxSynchronize", error);
  if (ok) {
    out.resize(boxes * boxBytes);
    stored.resize(src.size());
    ok = driver.check(driver.copyOut(out.data(), outAddress, out.size()), "cuMemcpyDtoH",
                      error) &&
         driver.check(driver.copyOut(stored.data(), dstAddress, stored.size()),
                      "cuMemcpyDtoH", error);
  }
  for (uint64_t address : {srcAddress, dstAddress, outAddress, coordsAddress})
    if (address)
      driver.memFree(address);
  return ok;
}

/// "ok", or where `got` first differs from `want`.
std::string compare(const std::vector<uint8_t> &got, const std::vector<uint8_t> &want) {
  if (got.size() != want.size())
    return "size " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
  uint64_t differing = 0, first = 0;
  for (uint64_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i] && differing++ == 0)
      first = i;
  if (!differing)
    return "ok";
  return std::to_string(differing) + " bytes differ, first at " + std::to_string(first);
}

} // namespace

int main(int argc, char **argv) {
  while (argc > 1 && std::string(argv[1]).rfind("--", 0) == 0) {
    std::string flag = argv[1];
    if (flag == "--store-negative") {
      storeNegative = true;
    } else if (flag == "--layout" && argc > 2 &&
               (std::string(argv[2]) == "bhsd" || std::string(argv[2]) == "bshd")) {
      headsOuter = std::string(argv[2]) == "bhsd";
      ++argv;
      --argc;
    } else {
      std::fprintf(stderr, "fa4-tma-check: unknown flag %s\n", flag.c_str());
      return 2;
    }
    ++argv;
    --argc;
  }
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: fa4-tma-check [--store-negative] [--layout bhsd] TMA-COPY.ptx "
                 "KERNEL.cubin.json...\n");
    return 2;
  }
  std::ifstream file(argv[1]);
  std::stringstream text;
  text << file.rdbuf();
  std::string error;
  llvm::Expected<std::shared_ptr<const emu::Program>> program =
      emu::parsePtx(text.str());
  if (!program) {
    std::fprintf(stderr, "%s: %s\n", argv[1],
                 llvm::toString(program.takeError()).c_str());
    return 2;
  }
  // The GPU side, when there is one.
  Driver driver;
  std::unique_ptr<Backend> backend;
  void *function = nullptr;
  if (llvm::Expected<std::unique_ptr<Backend>> opened = createCudaBackend())
    backend = std::move(*opened);
  else
    std::printf("gpu: none (%s); the emulator against the host model only\n",
                llvm::toString(opened.takeError()).c_str());
  if (backend && !driver.open()) {
    std::printf("gpu: libcuda lacks a call this check needs\n");
    backend.reset();
  } else if (backend) {
    void *module = nullptr;
    std::string text2 = text.str();
    if (!driver.check(driver.loadData(&module, text2.c_str()), "cuModuleLoadData(ptx)",
                      error) ||
        !driver.check(driver.getFunction(&function, module, "fa4_tma_copy"),
                      "cuModuleGetFunction", error)) {
      std::printf("gpu: %s\n", error.c_str());
      return 1;
    }
    std::printf("gpu: %s, the round-trip kernel JIT-compiled from PTX\n", backend->name());
  }

  int failures = 0, maps = 0;
  for (int i = 2; i < argc; ++i) {
    llvm::Expected<Kernel> kernel = Kernel::load(argv[i]);
    if (!kernel) {
      std::printf("%s: %s\n", argv[i],
                  llvm::toString(kernel.takeError()).c_str());
      ++failures;
      continue;
    }
    const Manifest &m = kernel->manifest;
    Shapes shapes;
    shapes.batch = 2;
    shapes.seqQ = 300;
    shapes.seqK = 257;
    // Addresses are the checks' own; planLaunch binds sizes and strides.
    Buffers buffers{1 << 20, 2 << 20, 3 << 20, 4 << 20, m.lse ? uint64_t(5 << 20) : 0};
    if (headsOuter) {
      // [batch, heads, seq, head_dim] storage, strides in [b, s, h, d] order.
      auto bhsd = [&](int64_t seq, int64_t heads) {
        return std::vector<int64_t>{heads * seq * m.headDim, m.headDim, seq * m.headDim, 1};
      };
      buffers.qStrides = buffers.oStrides = bhsd(shapes.seqQ, m.qHeads);
      buffers.kStrides = buffers.vStrides = bhsd(shapes.seqK, m.kvHeads);
    }
    llvm::Expected<LaunchPlan> plan =
        planLaunch(m, shapes, buffers, emu::encodeTensorMap);
    if (!plan) {
      std::printf("%s: plan failed: %s\n", argv[i],
                  llvm::toString(plan.takeError()).c_str());
      ++failures;
      continue;
    }
    for (const auto &[tensor, spec] : plan->tensorMaps) {
      ++maps;
      std::vector<int32_t> coords = boxCoordinates(spec);
      std::vector<uint8_t> src = sourceBytes(extentOf(spec));
      std::vector<uint8_t> wantOut, wantStored, emuOut, emuStored;
      model(spec, coords, src, wantOut, wantStored);
      std::string line = std::string(argv[i]) + ": " + tensor + (headsOuter ? " bhsd" : "") +
                         " rank " +
                         std::to_string(spec.rank) + " box";
      for (uint32_t d = 0; d < spec.rank; ++d)
        line += (d ? "x" : " ") + std::to_string(spec.boxDims[d]);
      line += " swizzle " + std::string(swizzleName(spec.swizzle)) + ", " +
              std::to_string(coords.size() / 5) + " boxes";
      bool ok =
          runEmulator(**program, spec, coords, src, emuOut, emuStored, error);
      if (!ok) {
        std::printf("%s: emulator failed: %s\n", line.c_str(), error.c_str());
        ++failures;
        continue;
      }
      std::string emuVsModel = compare(emuOut, wantOut) + "/" + compare(emuStored, wantStored);
      line += ": emulator vs model " + emuVsModel;
      bool same = emuVsModel == "ok/ok";
      if (backend) {
        std::vector<uint8_t> gpuOut, gpuStored;
        if (!runGpu(driver, *backend, function, spec, coords, src, gpuOut, gpuStored,
                    error)) {
          line += ", gpu failed: " + error;
          same = false;
        } else {
          std::string gpuVsEmu = compare(gpuOut, emuOut) + "/" + compare(gpuStored, emuStored);
          line += ", gpu vs emulator " + gpuVsEmu;
          same = same && gpuVsEmu == "ok/ok";
        }
      }
      std::printf("%s\n", line.c_str());
      failures += !same;
    }
  }
  std::printf("%d tensor maps, %d failing\n", maps, failures);
  return failures ? 1 : 0;
}
