//===- CudaBackend.cpp - the CUDA driver, loaded at run time --------------===//
//
// libcuda.so.1 is opened with dlopen and the few entry points fa4rt needs
// are looked up by name, so fa4rt builds, links and runs its tests on
// machines without a driver; every failing call comes back as a message
// that names the call and the driver's error string.
//
//===----------------------------------------------------------------------===//

#include "fa4/Runtime/Runtime.h"
#include "fa4/Support/Error.h"

#include <dlfcn.h>

#include <cstring>
#include <unordered_map>

namespace mlir::fa4::runtime {
namespace {

// The driver API's types and constants, as cuda.h declares them.
using CUresult = int;
using CUdevice = int;
using CUcontext = void *;
using CUmodule = void *;
using CUfunction = void *;
using CUstream = void *;
struct alignas(64) CUtensorMap {
  uint64_t opaque[16];
};
struct CUlaunchConfig {
  unsigned gridDimX, gridDimY, gridDimZ;
  unsigned blockDimX, blockDimY, blockDimZ;
  unsigned sharedMemBytes;
  CUstream hStream;
  void *attrs;
  unsigned numAttrs;
};
constexpr CUresult kSuccess = 0;
constexpr int kComputeCapabilityMajor = 75;
constexpr int kComputeCapabilityMinor = 76;
constexpr int kMaxDynamicSharedSizeBytes = 8;
constexpr int kInterleaveNone = 0;
constexpr int kL2Promotion256B = 3;

struct Driver {
  void *library = nullptr;
  CUresult (*cuInit)(unsigned);
  CUresult (*cuGetErrorString)(CUresult, const char **);
  CUresult (*cuGetErrorName)(CUresult, const char **);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*cuCtxGetCurrent)(CUcontext *);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxGetDevice)(CUdevice *);
  CUresult (*cuModuleLoadData)(CUmodule *, const void *);
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuTensorMapEncodeTiled)(CUtensorMap *, int, uint32_t, void *,
                                     const uint64_t *, const uint64_t *,
                                     const uint32_t *, const uint32_t *, int,
                                     int, int, int);
  CUresult (*cuLaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **,
                               void **);

  /// "cuModuleLoadData: CUDA_ERROR_INVALID_IMAGE (device kernel image is
  /// invalid)".
  std::string message(const char *call, CUresult result) const {
    const char *name = nullptr, *text = nullptr;
    if (cuGetErrorName)
      cuGetErrorName(result, &name);
    if (cuGetErrorString)
      cuGetErrorString(result, &text);
    return std::string(call) + ": " + (name ? name : "error " + std::to_string(result)) +
           (text ? std::string(" (") + text + ")" : "");
  }
};

template <typename F>
bool resolve(void *library, const char *name, F &function, std::string &error) {
  function = reinterpret_cast<F>(dlsym(library, name));
  if (!function && error.empty())
    error = std::string("libcuda.so.1 has no ") + name + " (a driver older than CUDA 12)";
  return function != nullptr;
}

class CudaBackend final : public Backend {
public:
  CudaBackend(Driver driver, int major, int minor)
      : driver(driver), major(major), minor(minor) {}
  const char *name() const override { return "cuda"; }
  bool runsPtx() const override { return false; }

  llvm::Error encodeTensorMap(const TensorMapSpec &spec,
                              uint8_t out[128]) override {
    CUtensorMap map;
    // The driver takes the strides of every dimension but the innermost.
    CUresult result = driver.cuTensorMapEncodeTiled(
        &map, static_cast<int>(spec.dataType), spec.rank,
        reinterpret_cast<void *>(spec.globalAddress), spec.globalDims,
        spec.globalStrides, spec.boxDims, spec.elementStrides, kInterleaveNone,
        static_cast<int>(spec.swizzle), kL2Promotion256B,
        static_cast<int>(spec.oobFill));
    if (result != kSuccess)
      return makeError(driver.message("cuTensorMapEncodeTiled", result));
    std::memcpy(out, &map, sizeof(map));
    return llvm::Error::success();
  }

  llvm::Error run(const KernelCode &kernel, const LaunchPlan &plan,
                  void *stream) override {
    const std::string &target = kernel.target;
    std::string device = "sm_" + std::to_string(major) + std::to_string(minor);
    // An arch-specific target (sm_100a) runs on its own compute capability
    // only.
    std::string wanted = target;
    if (!wanted.empty() && wanted.back() == 'a')
      wanted.pop_back();
    if (wanted != device)
      return makeError("the kernel needs " + target + "; the device is " +
                       device + " (compute capability " +
                       std::to_string(major) + "." + std::to_string(minor) +
                       ")");
    if (kernel.cubin.empty())
      return makeError("the kernel has no cubin to load");
    llvm::Expected<CUfunction> function = functionOf(kernel);
    if (!function)
      return function.takeError();
    std::vector<void *> parameters;
    for (const std::vector<uint8_t> &argument : plan.arguments)
      parameters.push_back(const_cast<uint8_t *>(argument.data()));
    CUlaunchConfig config{};
    config.gridDimX = plan.grid[0];
    config.gridDimY = plan.grid[1];
    config.gridDimZ = plan.grid[2];
    config.blockDimX = plan.block[0];
    config.blockDimY = plan.block[1];
    config.blockDimZ = plan.block[2];
    config.sharedMemBytes = plan.dynamicSmemBytes;
    config.hStream = stream;
    CUresult result =
        driver.cuLaunchKernelEx(&config, *function, parameters.data(), nullptr);
    if (result != kSuccess)
      return makeError(driver.message("cuLaunchKernelEx", result));
    return llvm::Error::success();
  }

private:
  /// The kernel's function in the current context, its module loaded once.
  /// A module belongs to a context: one function per (context, code,
  /// entry), so that launches from another device's context load their own.
  /// One cubin may hold several kernels (the backward's three): its module
  /// is loaded once, each function looked up by its name. The code is known
  /// by its digest (a launch neither copies nor compares the cubin).
  llvm::Expected<CUfunction> functionOf(const KernelCode &kernel) {
    CUcontext context = nullptr;
    driver.cuCtxGetCurrent(&context);
    std::string moduleKey(reinterpret_cast<const char *>(&context),
                          sizeof(context));
    moduleKey += kernel.digest;
    std::string key = kernel.entry + '\0' + moduleKey;
    auto found = functions.find(key);
    if (found != functions.end())
      return found->second;
    CUmodule &module = modules[moduleKey];
    CUresult result = kSuccess;
    if (!module) {
      result = driver.cuModuleLoadData(&module, kernel.cubin.data());
      if (result != kSuccess) {
        modules.erase(moduleKey);
        return makeError(driver.message("cuModuleLoadData", result));
      }
    }
    CUfunction function = nullptr;
    result = driver.cuModuleGetFunction(&function, module,
                                        kernel.entry.c_str());
    if (result != kSuccess)
      return makeError(driver.message("cuModuleGetFunction", result));
    // More than 48 KB of dynamic shared memory must be asked for.
    result = driver.cuFuncSetAttribute(function, kMaxDynamicSharedSizeBytes,
                                       static_cast<int>(kernel.dynamicSmemBytes));
    if (result != kSuccess)
      return makeError(driver.message("cuFuncSetAttribute", result));
    functions.emplace(std::move(key), function);
    return function;
  }

  Driver driver;
  int major, minor;
  std::unordered_map<std::string, CUfunction> functions;
  std::unordered_map<std::string, CUmodule> modules;
};
} // namespace

llvm::Expected<std::unique_ptr<Backend>> createCudaBackend() {
  Driver driver;
  driver.library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!driver.library) {
    const char *why = dlerror();
    return makeError(std::string("cannot load libcuda.so.1 (no NVIDIA driver "
                                 "on this machine?): ") +
                     (why ? why : "dlopen failed"));
  }
  std::string missing;
  resolve(driver.library, "cuGetErrorString", driver.cuGetErrorString, missing);
  resolve(driver.library, "cuGetErrorName", driver.cuGetErrorName, missing);
  bool ok = resolve(driver.library, "cuInit", driver.cuInit, missing) &&
            resolve(driver.library, "cuDeviceGet", driver.cuDeviceGet, missing) &&
            resolve(driver.library, "cuDeviceGetAttribute",
                    driver.cuDeviceGetAttribute, missing) &&
            resolve(driver.library, "cuDevicePrimaryCtxRetain",
                    driver.cuDevicePrimaryCtxRetain, missing) &&
            resolve(driver.library, "cuCtxGetCurrent", driver.cuCtxGetCurrent, missing) &&
            resolve(driver.library, "cuCtxSetCurrent", driver.cuCtxSetCurrent, missing) &&
            resolve(driver.library, "cuCtxGetDevice", driver.cuCtxGetDevice, missing) &&
            resolve(driver.library, "cuModuleLoadData", driver.cuModuleLoadData, missing) &&
            resolve(driver.library, "cuModuleGetFunction",
                    driver.cuModuleGetFunction, missing) &&
            resolve(driver.library, "cuFuncSetAttribute",
                    driver.cuFuncSetAttribute, missing) &&
            resolve(driver.library, "cuTensorMapEncodeTiled",
                    driver.cuTensorMapEncodeTiled, missing) &&
            resolve(driver.library, "cuLaunchKernelEx", driver.cuLaunchKernelEx,
                    missing);
  if (!ok)
    return makeError(missing);
  CUresult result = driver.cuInit(0);
  if (result != kSuccess)
    return makeError(driver.message("cuInit", result));
  // The caller's context when it has one (torch's), else device 0's
  // primary context.
  CUcontext context = nullptr;
  CUdevice device = 0;
  result = driver.cuCtxGetCurrent(&context);
  if (result == kSuccess && context) {
    result = driver.cuCtxGetDevice(&device);
    if (result != kSuccess)
      return makeError(driver.message("cuCtxGetDevice", result));
  } else {
    if ((result = driver.cuDeviceGet(&device, 0)) != kSuccess)
      return makeError(driver.message("cuDeviceGet", result));
    if ((result = driver.cuDevicePrimaryCtxRetain(&context, device)) !=
        kSuccess)
      return makeError(driver.message("cuDevicePrimaryCtxRetain", result));
    if ((result = driver.cuCtxSetCurrent(context)) != kSuccess)
      return makeError(driver.message("cuCtxSetCurrent", result));
  }
  int major = 0, minor = 0;
  if ((result = driver.cuDeviceGetAttribute(&major, kComputeCapabilityMajor,
                                            device)) != kSuccess ||
      (result = driver.cuDeviceGetAttribute(&minor, kComputeCapabilityMinor,
                                            device)) != kSuccess)
    return makeError(driver.message("cuDeviceGetAttribute", result));
  return std::make_unique<CudaBackend>(driver, major, minor);
}

} // namespace mlir::fa4::runtime
