//===- Surfaces.h - fa4-fuzz's inputs beyond IR -----------------*- C++ -*-===//
//
// The runtime's input surfaces that fa4-fuzz mutates besides IR: launch
// manifests, compile-cache entries, the C API's tensor descriptions and
// cubins. The driver (fa4-fuzz.cpp) forks, counts and saves; this file makes
// inputs and runs one.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_TEST_FUZZ_SURFACES_H
#define FA4_TEST_FUZZ_SURFACES_H

#include "fa4/Runtime/CompileCache.h"
#include "fa4/Runtime/Launch.h"

#include <optional>
#include <random>
#include <string>
#include <vector>

struct fa4rt_kernel;

namespace fuzz {

enum class Surface { Manifest, Cache, Capi, Cubin };

/// "manifest", "cache", "capi" or "cubin".
std::optional<Surface> surfaceNamed(const std::string &name);

/// What the inputs are made from: kernels fa4c wrote (each manifest with
/// its cubin and PTX beside it).
struct Corpus {
  std::vector<std::string> manifests, ptx;
  /// The first kernel as a cache entry, its index as stored, and the key it
  /// is stored under; the other kernels' entries (what a swap brings in).
  mlir::fa4::runtime::CompileCache::Entry cacheEntry;
  std::vector<mlir::fa4::runtime::CompileCache::Entry> otherEntries;
  std::string cacheIndex, cacheKey;
  /// The first kernel through the C API, without its PTX.
  fa4rt_kernel *capiKernel = nullptr;
  mlir::fa4::runtime::Manifest capiManifest;
};

bool loadCorpus(Surface surface, const std::vector<std::string> &manifests,
                Corpus &corpus, std::string &error);

/// One input: a seed with random mutations.
std::string mutateInput(Surface surface, const Corpus &corpus, std::mt19937_64 &rng);

/// Runs one input; aborts when what must hold of the surface does not.
void runInput(Surface surface, const std::string &input, const Corpus &corpus);

} // namespace fuzz

#endif // FA4_TEST_FUZZ_SURFACES_H
