//===- CApi.cpp - fa4rt.h over the C++ runtime ----------------------------===//
//
// The C API is a translation, not a second runtime: handles own the C++
// objects (runtime::Kernel, a Backend and, for fa4-emu, its Device), tensors
// are turned into runtime::Tensor and every launch is runtime::launch. What
// C adds is the error channel (a thread's last message) and a lock per
// backend: a binding such as ctypes calls without Python's lock, and neither
// backend's caches (the CUDA functions per context, fa4-emu's parsed PTX)
// are meant for concurrent launches. No C++ exception leaves a call (it
// would abort the caller's process): each body runs under `guarded`, and a
// std::bad_alloc or anything else thrown becomes the call's error.
//
//===----------------------------------------------------------------------===//

#include "fa4/Runtime/fa4rt.h"

#include "fa4/Emu/Emulator.h"
#include "fa4/Runtime/Fp8Value.h"
#include "fa4/Runtime/Runtime.h"
#include "fa4/Support/InputLimits.h"

#include <cinttypes>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

using namespace mlir::fa4;

struct fa4rt_kernel {
  runtime::Kernel kernel;
};

struct fa4rt_backward {
  runtime::BackwardKernel kernel;
};

struct fa4rt_backend {
  /// fa4-emu's memory; null for the CUDA backend.
  std::unique_ptr<emu::Device> device;
  std::unique_ptr<runtime::Backend> backend;
  std::mutex mutex;
};

namespace {

thread_local std::string lastError;

int fail(std::string message) {
  lastError = std::move(message);
  return 1;
}

template <typename T>
T *failWith(std::string message) {
  lastError = std::move(message);
  return nullptr;
}

/// Runs `body`; an exception it throws is turned into the thread's error
/// and `failed` returned, so that none crosses the C ABI.
template <typename T, typename Body>
T guarded(T failed, Body body) {
  try {
    return body();
  } catch (const std::bad_alloc &) {
    lastError = "out of memory";
  } catch (const std::exception &e) {
    lastError = std::string("internal error: ") + e.what();
  } catch (...) {
    lastError = "internal error";
  }
  return failed;
}

bool tensorOf(const char *name, const fa4rt_tensor *from,
              runtime::Tensor &to) {
  if (!from->dtype) {
    lastError = std::string(name) + ": no dtype";
    return false;
  }
  if (from->rank < 1 || from->rank > FA4RT_MAX_RANK) {
    lastError = std::string(name) + ": rank " + std::to_string(from->rank) +
                " is outside 1.." + std::to_string(FA4RT_MAX_RANK);
    return false;
  }
  to.address = from->address;
  to.dtype = from->dtype;
  to.sizes.assign(from->sizes, from->sizes + from->rank);
  to.strides.assign(from->strides, from->strides + from->rank);
  return true;
}

/// The process's CUDA backend, or null with the thread's error saying why
/// there is none (asked once: the driver is opened and initialised once).
fa4rt_backend *cudaBackend() {
  static fa4rt_backend *backend;
  static std::string openError;
  static std::once_flag opened;
  std::call_once(opened, [] {
    llvm::Expected<std::unique_ptr<runtime::Backend>> cuda =
        runtime::createCudaBackend();
    if (!cuda) {
      openError = llvm::toString(cuda.takeError());
      return;
    }
    backend = new fa4rt_backend;
    backend->backend = std::move(*cuda);
  });
  if (!backend)
    return failWith<fa4rt_backend>(openError);
  return backend;
}

} // namespace

/// A kernel handed over in memory (fa4rt_kernel_create and
/// fa4rt_backward_create): the arguments checked, then `create` (the C++
/// runtime's Kernel::create or BackwardKernel::create) on copies of them.
template <typename Handle, typename Create>
static Handle *createFrom(const char *manifest_json, const char *ptx,
                          size_t ptx_bytes, const void *cubin,
                          size_t cubin_bytes, Create create) {
  return guarded<Handle *>(nullptr, [&]() -> Handle * {
    lastError.clear();
    if (!manifest_json)
      return failWith<Handle>("no manifest");
    if ((ptx_bytes && !ptx) || (cubin_bytes && !cubin))
      return failWith<Handle>(ptx_bytes && !ptx
                                  ? "PTX bytes announced, no PTX given"
                                  : "cubin bytes announced, no cubin given");
    // Limits before copies: create() checks the same sizes.
    if (ptx_bytes > kMaxKernelFileBytes || cubin_bytes > kMaxKernelFileBytes)
      return failWith<Handle>(
          std::string(ptx_bytes > kMaxKernelFileBytes ? "the PTX" : "the cubin") +
          " is larger than the " + std::to_string(kMaxKernelFileBytes) +
          " bytes a kernel file may have");
    const auto *cubinBytes = static_cast<const uint8_t *>(cubin);
    auto created =
        create(manifest_json, std::string(ptx ? ptx : "", ptx_bytes),
               std::vector<uint8_t>(cubinBytes, cubinBytes + cubin_bytes));
    if (!created)
      return failWith<Handle>(llvm::toString(created.takeError()));
    auto handle = std::make_unique<Handle>();
    handle->kernel = std::move(*created);
    return handle.release();
  });
}

extern "C" {

int fa4rt_abi_version(void) { return FA4RT_ABI_VERSION; }

const char *fa4rt_last_error(void) { return lastError.c_str(); }

fa4rt_kernel *fa4rt_kernel_load(const char *manifest_path) {
  return guarded<fa4rt_kernel *>(nullptr, [&]() -> fa4rt_kernel * {
    lastError.clear();
    if (!manifest_path)
      return failWith<fa4rt_kernel>("no manifest path");
    llvm::Expected<runtime::Kernel> loaded =
        runtime::Kernel::load(manifest_path);
    if (!loaded)
      return failWith<fa4rt_kernel>(llvm::toString(loaded.takeError()));
    auto kernel = std::make_unique<fa4rt_kernel>();
    kernel->kernel = std::move(*loaded);
    return kernel.release();
  });
}

fa4rt_kernel *fa4rt_kernel_create(const char *manifest_json, const char *ptx,
                                  size_t ptx_bytes, const void *cubin,
                                  size_t cubin_bytes) {
  return createFrom<fa4rt_kernel>(manifest_json, ptx, ptx_bytes, cubin,
                                  cubin_bytes, runtime::Kernel::create);
}

void fa4rt_kernel_free(fa4rt_kernel *kernel) { delete kernel; }

const char *fa4rt_kernel_manifest(const fa4rt_kernel *kernel) {
  return guarded<const char *>(nullptr, [&]() -> const char * {
    lastError.clear();
    if (!kernel)
      return failWith<const char>("no kernel");
    return kernel->kernel.manifestJson.c_str();
  });
}

fa4rt_backend *fa4rt_backend_cuda(void) {
  return guarded<fa4rt_backend *>(nullptr, [&]() -> fa4rt_backend * {
    lastError.clear();
    return cudaBackend();
  });
}

fa4rt_backend *fa4rt_backend_emulator(unsigned workers, uint64_t seed,
                                      unsigned flags) {
  return guarded<fa4rt_backend *>(nullptr, [&]() -> fa4rt_backend * {
    lastError.clear();
    if (flags & ~FA4RT_EMULATOR_PLAN_ONLY)
      return failWith<fa4rt_backend>("fa4rt_backend_emulator: unknown flags " +
                                     std::to_string(flags & ~FA4RT_EMULATOR_PLAN_ONLY));
    auto backend = std::make_unique<fa4rt_backend>();
    backend->device = std::make_unique<emu::Device>();
    backend->backend = runtime::createEmulatorBackend(
        *backend->device, workers, seed,
        /*execute=*/!(flags & FA4RT_EMULATOR_PLAN_ONLY));
    return backend.release();
  });
}

void fa4rt_backend_free(fa4rt_backend *backend) {
  // The CUDA backend (the only one without a device) lives as long as the
  // process.
  if (backend && backend->device)
    delete backend;
}

uint64_t fa4rt_emulator_allocate(fa4rt_backend *backend, uint64_t bytes) {
  return guarded<uint64_t>(uint64_t(0), [&]() -> uint64_t {
    lastError.clear();
    if (!backend || !backend->device) {
      fail("fa4rt_emulator_allocate needs an emulator backend");
      return 0;
    }
    // The largest span a tensor map reaches (docs/Runtime.md): anything
    // larger is refused before the host memory is asked for.
    if (bytes > (uint64_t(1) << 48)) {
      fail("fa4rt_emulator_allocate: " + std::to_string(bytes) +
           " bytes, more than the 2^48 a tensor may span");
      return 0;
    }
    std::lock_guard<std::mutex> lock(backend->mutex);
    return backend->device->allocate(bytes);
  });
}

void *fa4rt_emulator_host(fa4rt_backend *backend, uint64_t address,
                          uint64_t bytes) {
  return guarded<void *>(nullptr, [&]() -> void * {
    lastError.clear();
    if (!backend || !backend->device)
      return failWith<void>("fa4rt_emulator_host needs an emulator backend");
    std::lock_guard<std::mutex> lock(backend->mutex);
    uint8_t *host = backend->device->host(address, bytes);
    if (!host) {
      char range[64];
      std::snprintf(range, sizeof(range), "[0x%" PRIx64 ", +%" PRIu64 ")",
                    address, bytes);
      return failWith<void>(std::string(range) +
                            " is not inside one allocation of the emulator");
    }
    return host;
  });
}

int fa4rt_launch(const fa4rt_kernel *kernel, fa4rt_backend *backend,
                 const fa4rt_tensor *q, const fa4rt_tensor *k,
                 const fa4rt_tensor *v, const fa4rt_tensor *o,
                 const fa4rt_tensor *lse, const fa4rt_tensor *extras,
                 size_t num_extras, void *stream) {
  return guarded<int>(1, [&]() -> int {
    lastError.clear();
    if (!kernel)
      return fail("no kernel");
    if (!backend)
      return fail("no backend");
    if (!q || !k || !v || !o)
      return fail("q, k, v and o are all required");
    if (num_extras && !extras)
      return fail(std::to_string(num_extras) + " extras announced, none given");
    // The count is checked before anything is allocated for it.
    size_t expected = kernel->kernel.manifest.extras.size();
    if (num_extras != expected)
      return fail("extras: the kernel reads " + std::to_string(expected) +
                  " extra tensors (" +
                  runtime::describeExtras(kernel->kernel.manifest) + "), got " +
                  std::to_string(num_extras));
    runtime::Tensor tensors[5];
    const char *names[5] = {"q", "k", "v", "o", "lse"};
    const fa4rt_tensor *given[5] = {q, k, v, o, lse};
    for (int i = 0; i < 5; ++i)
      if (given[i] && !tensorOf(names[i], given[i], tensors[i]))
        return 1;
    std::vector<runtime::Tensor> extraTensors(num_extras);
    for (size_t i = 0; i < num_extras; ++i)
      if (!tensorOf(("extra" + std::to_string(i)).c_str(), &extras[i],
                    extraTensors[i]))
        return 1;
    std::lock_guard<std::mutex> lock(backend->mutex);
    if (llvm::Error refused =
            runtime::launch(*backend->backend, kernel->kernel, tensors[0],
                            tensors[1], tensors[2], tensors[3],
                            lse ? &tensors[4] : nullptr, extraTensors, stream))
      return fail(llvm::toString(std::move(refused)));
    return 0;
  });
}

fa4rt_backward *fa4rt_backward_load(const char *manifest_path) {
  return guarded<fa4rt_backward *>(nullptr, [&]() -> fa4rt_backward * {
    lastError.clear();
    if (!manifest_path)
      return failWith<fa4rt_backward>("no manifest path");
    llvm::Expected<runtime::BackwardKernel> loaded =
        runtime::BackwardKernel::load(manifest_path);
    if (!loaded)
      return failWith<fa4rt_backward>(llvm::toString(loaded.takeError()));
    auto kernel = std::make_unique<fa4rt_backward>();
    kernel->kernel = std::move(*loaded);
    return kernel.release();
  });
}

fa4rt_backward *fa4rt_backward_create(const char *manifest_json,
                                      const char *ptx, size_t ptx_bytes,
                                      const void *cubin, size_t cubin_bytes) {
  return createFrom<fa4rt_backward>(manifest_json, ptx, ptx_bytes, cubin,
                                    cubin_bytes,
                                    runtime::BackwardKernel::create);
}

void fa4rt_backward_free(fa4rt_backward *kernel) { delete kernel; }

const char *fa4rt_backward_manifest(const fa4rt_backward *kernel) {
  return guarded<const char *>(nullptr, [&]() -> const char * {
    lastError.clear();
    if (!kernel)
      return failWith<const char>("no kernel");
    return kernel->kernel.manifestJson.c_str();
  });
}

int fa4rt_backward_launch(const fa4rt_backward *kernel, fa4rt_backend *backend,
                          const fa4rt_tensor *tensors, size_t num_tensors,
                          void *stream) {
  return guarded<int>(1, [&]() -> int {
    lastError.clear();
    if (!kernel)
      return fail("no kernel");
    if (!backend)
      return fail("no backend");
    static const char *names[] = {"q",  "k",  "v",  "o",     "dout",    "lse",
                                  "dq", "dk", "dv", "delta", "dq_accum"};
    constexpr size_t kCount = sizeof(names) / sizeof(names[0]);
    size_t extras = kernel->kernel.manifest.extras.size();
    if (!tensors)
      return fail("no tensors (the backward takes " + std::to_string(kCount) +
                  ": q, k, v, o, dout, lse, dq, dk, dv, delta, dq_accum)");
    if (num_tensors != kCount + extras)
      return fail("the backward takes " + std::to_string(kCount) +
                  " tensors (q, k, v, o, dout, lse, dq, dk, dv, delta, "
                  "dq_accum) and its regions' " + std::to_string(extras) +
                  " extras, got " + std::to_string(num_tensors));
    runtime::BackwardTensors given;
    runtime::Tensor *slots[] = {&given.q,  &given.k,  &given.v,     &given.o,
                                &given.dout, &given.lse, &given.dq, &given.dk,
                                &given.dv, &given.delta, &given.dqAccum};
    for (size_t i = 0; i < kCount; ++i)
      if (!tensorOf(names[i], &tensors[i], *slots[i]))
        return 1;
    given.extras.resize(extras);
    for (size_t i = 0; i < extras; ++i)
      if (!tensorOf(("extra" + std::to_string(i)).c_str(), &tensors[kCount + i],
                    given.extras[i]))
        return 1;
    std::lock_guard<std::mutex> lock(backend->mutex);
    if (llvm::Error refused = runtime::launchBackward(
            *backend->backend, kernel->kernel, given, stream))
      return fail(llvm::toString(std::move(refused)));
    return 0;
  });
}

int fa4rt_launch_cuda(const fa4rt_kernel *kernel, const fa4rt_tensor *q,
                      const fa4rt_tensor *k, const fa4rt_tensor *v,
                      const fa4rt_tensor *o, const fa4rt_tensor *lse,
                      const fa4rt_tensor *extras, size_t num_extras,
                      void *stream) {
  fa4rt_backend *backend = fa4rt_backend_cuda();
  if (!backend)
    return 1;
  return fa4rt_launch(kernel, backend, q, k, v, o, lse, extras, num_extras,
                      stream);
}

} // extern "C"

int fa4rt_prepare_fp8_value(const void *value, size_t value_bytes,
                            const int64_t sizes[4], const int64_t strides[4],
                            void *vt, size_t vt_bytes) {
  return guarded<int>(1, [&]() -> int {
    lastError.clear();
    if (!sizes || !strides)
      return fail("v: no sizes or strides");
    if (llvm::Error refused = runtime::prepareFp8Value(
            static_cast<const uint8_t *>(value), value_bytes,
            llvm::ArrayRef<int64_t>(sizes, 4),
            llvm::ArrayRef<int64_t>(strides, 4), static_cast<uint8_t *>(vt),
            vt_bytes))
      return fail(llvm::toString(std::move(refused)));
    return 0;
  });
}
