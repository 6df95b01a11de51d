//===- fa4-cuda-check.cpp - fa4rt's CUDA backend against a real driver ----===//
//
// fa4-cuda-check KERNEL.cubin.json...
//
// Opens the driver through runtime::createCudaBackend, then for each kernel
// plans a launch at sizes that cover tails (batch 2, seq_q 300, seq_k 257)
// with tensors at aligned device-sized addresses: every tensor map of the
// manifest goes through cuTensorMapEncodeTiled, which checks each of its
// rules. The plan then goes to the backend, which launches it on a device of
// the kernel's architecture or refuses it by name on any other. Last, the
// cubin is handed to cuModuleLoadData directly, to show what the driver
// itself says of it. One line per step.
//
//===----------------------------------------------------------------------===//

#include "fa4/Runtime/Runtime.h"

#include <dlfcn.h>

#include <cstdio>
#include <string>

using namespace mlir::fa4::runtime;

int main(int argc, char **argv) {
  llvm::Expected<std::unique_ptr<Backend>> opened = createCudaBackend();
  if (!opened) {
    std::printf("cuda backend unavailable: %s\n",
                llvm::toString(opened.takeError()).c_str());
    return 1;
  }
  std::unique_ptr<Backend> backend = std::move(*opened);
  std::printf("cuda backend: %s\n", backend->name());
  int failures = 0;
  for (int i = 1; i < argc; ++i) {
    llvm::Expected<Kernel> loaded = Kernel::load(argv[i]);
    if (!loaded) {
      std::printf("%s: load failed: %s\n", argv[i],
                  llvm::toString(loaded.takeError()).c_str());
      ++failures;
      continue;
    }
    const Kernel &kernel = *loaded;
    const Manifest &m = kernel.manifest;
    int64_t batch = 2, seqQ = 300, seqK = 257;
    // Addresses a device allocation could have (256-byte aligned); the
    // encoder checks alignment and sizes, not residency, and nothing is
    // launched where the architecture differs.
    uint64_t next = uint64_t(1) << 40;
    auto tensor = [&](std::vector<int64_t> sizes, const std::string &dtype) {
      Tensor t;
      t.dtype = dtype;
      t.sizes = sizes;
      t.strides.assign(sizes.size(), 1);
      for (size_t d = sizes.size() - 1; d > 0; --d)
        t.strides[d - 1] = t.strides[d] * sizes[d];
      t.address = next;
      next += (uint64_t(t.strides[0] * sizes[0]) * 4 + 255) / 256 * 256;
      return t;
    };
    Tensor q = tensor({batch, seqQ, m.qHeads, m.headDim}, m.dtype);
    Tensor k = tensor({batch, seqK, m.kvHeads, m.headDim}, m.dtype);
    Tensor v = tensor({batch, seqK, m.kvHeads, m.headDim}, m.dtype);
    Tensor o = tensor({batch, seqQ, m.qHeads, m.headDim}, m.dtype);
    Tensor lse = tensor({batch, m.qHeads, seqQ}, "f32");
    Buffers buffers{q.address, k.address, v.address, o.address,
                    m.lse ? lse.address : 0};
    auto encode = [&](const TensorMapSpec &spec, uint8_t *out) {
      return backend->encodeTensorMap(spec, out);
    };
    auto plan = [&]() -> llvm::Expected<LaunchPlan> {
      llvm::Expected<Shapes> shapes =
          checkTensors(m, q, k, v, o, m.lse ? &lse : nullptr);
      if (!shapes)
        return shapes.takeError();
      return planLaunch(m, *shapes, buffers, encode);
    }();
    if (!plan) {
      std::printf("%s: plan failed: %s\n", argv[i],
                  llvm::toString(plan.takeError()).c_str());
      ++failures;
      continue;
    }
    std::printf("%s: %zu tensor maps encoded by the driver, grid %u, %u bytes "
                "of shared memory\n",
                argv[i], plan->tensorMaps.size(), plan->grid[0],
                plan->dynamicSmemBytes);
    if (llvm::Error refused = backend->run(kernel.code(), *plan, nullptr))
      std::printf("%s: refused: %s\n", argv[i],
                  llvm::toString(std::move(refused)).c_str());
    else
      std::printf("%s: launched\n", argv[i]);
  }
  // What the driver itself says of loading the first cubin here.
  if (argc > 1) {
    void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    using Load = int (*)(void **, const void *);
    using Name = int (*)(int, const char **);
    auto load = library ? reinterpret_cast<Load>(dlsym(library, "cuModuleLoadData")) : nullptr;
    auto name = library ? reinterpret_cast<Name>(dlsym(library, "cuGetErrorName")) : nullptr;
    // A kernel that does not load was reported above.
    llvm::Expected<Kernel> kernel =
        load && name ? Kernel::load(argv[1]) : llvm::Expected<Kernel>(Kernel());
    if (!kernel)
      llvm::consumeError(kernel.takeError());
    else if (!kernel->cubin.empty()) {
      void *module = nullptr;
      int result = load(&module, kernel->cubin.data());
      const char *text = "?";
      name(result, &text);
      std::printf("cuModuleLoadData(%s) directly: %s\n",
                  kernel->manifest.target.c_str(),
                  result ? text : "CUDA_SUCCESS");
    }
  }
  return failures ? 1 : 0;
}
