//===- Surfaces.cpp - fa4-fuzz's inputs beyond IR -------------------------===//
//
// The runtime's input surfaces as fa4-fuzz modes: launch manifests (the JSON
// reader, the interface checks and the launch planner with the emulator's
// tensor-map encoder), compile-cache entries (files edited, cut short,
// swapped, replaced by FIFOs and devices), the C API's tensor
// descriptions and cubins (the ELF64 reader of the kernel's contract). Each input is bytes that replay alone; each run states what
// must hold beyond "no crash, no hang" and aborts when it does not (a plan
// whose tensor map reaches past its tensor; a cache hit that is not the
// entry as stored; a bad entry that the next store does not replace).
//
//===----------------------------------------------------------------------===//

#include "Surfaces.h"

#include "fa4/Emu/Emulator.h"
#include "fa4/Runtime/CompileCache.h"
#include "fa4/Runtime/Contract.h"
#include "fa4/Runtime/Launch.h"
#include "fa4/Runtime/Runtime.h"
#include "fa4/Runtime/fa4rt.h"
#include "fa4/Support/InputLimits.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <functional>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace mlir::fa4;

namespace fuzz {

namespace {

/// A random generator seeded by the input itself, so that a saved input
/// replays the choices its run made.
std::mt19937_64 rngOf(const std::string &input) {
  return std::mt19937_64(std::hash<std::string>()(input));
}

const char *const kBoundaryNumbers[] = {
    "0", "1", "-1", "2", "3", "4", "16", "63", "64", "65", "127", "128", "129",
    "255", "256", "257", "512", "1024", "4096", "65536", "2147483647",
    "2147483648", "-2147483648", "4294967296", "281474976710656",
    "9223372036854775807", "-9223372036854775808", "1e308", "-0.0", "0.5",
    "1e-45", "NaN", "\"7\""};

const char *const kManifestWords[] = {
    "q", "k", "v", "o", "lse", "q_map", "k_map", "v_map", "o_map", "batch",
    "seq_q", "seq_k", "extra0", "extra0_dim0", "extra1", "fp16", "bf16",
    "f32", "i32", "i1", "f64", "CUtensorMap", "float*", "void*", "int32",
    "128B", "64B", "32B", "none", "zero", "nan", "causal", "window",
    "sm_100a", "sm_90a", "sm_80", "../k.ptx", "/dev/zero", ".", "..", "",
    "1024 * seq_q", "seq_q * seq_q", "9223372036854775807 * batch", "2 * ",
    "attention", "static", "lpt"};

/// Byte and token mutations of text, `count` of them.
std::string mutateText(std::string text, std::mt19937_64 &rng, int count,
                       const char *const *words, size_t numWords) {
  for (int n = 0; n < count; ++n) {
    if (text.empty())
      text = "{}";
    size_t at = rng() % text.size();
    switch (rng() % 10) {
    case 0:
    case 1: { // a number becomes a boundary value
      size_t begin = text.find_first_of("-0123456789", at);
      if (begin == std::string::npos)
        break;
      size_t end = text.find_first_not_of("-+.eE0123456789", begin);
      text.replace(begin, (end == std::string::npos ? text.size() : end) - begin,
                   kBoundaryNumbers[rng() % std::size(kBoundaryNumbers)]);
      break;
    }
    case 2:
    case 3: { // a string becomes a word of the vocabulary
      size_t open = text.find('"', at);
      size_t close = open == std::string::npos ? open : text.find('"', open + 1);
      if (close == std::string::npos)
        break;
      text.replace(open + 1, close - open - 1, words[rng() % numWords]);
      break;
    }
    case 4: { // a span goes
      size_t length = 1 + rng() % 64;
      text.erase(at, length);
      break;
    }
    case 5: { // a span is repeated
      size_t length = 1 + rng() % 64;
      text.insert(at, text.substr(at, length));
      break;
    }
    case 6: { // deep nesting, around the limit and far past it
      static const size_t depths[] = {8, 63, 64, 65, 300, 100000};
      size_t depth = depths[rng() % std::size(depths)];
      char open = "[{("[rng() % 3];
      text.insert(at, std::string(depth, open));
      break;
    }
    case 7: // cut short
      text.resize(at);
      break;
    case 8: // a byte changes
      text[at] = static_cast<char>(rng());
      break;
    default: { // two lines change places
      size_t a = text.rfind('\n', at);
      size_t b = text.find('\n', rng() % text.size());
      if (a == std::string::npos || b == std::string::npos || a == b)
        break;
      if (a > b)
        std::swap(a, b);
      size_t aEnd = text.find('\n', a + 1), bEnd = text.find('\n', b + 1);
      if (aEnd == std::string::npos || bEnd == std::string::npos || aEnd > b)
        break;
      std::string lineA = text.substr(a, aEnd - a), lineB = text.substr(b, bEnd - b);
      text.replace(b, lineB.size(), lineA);
      text.replace(a, lineA.size(), lineB);
      break;
    }
    }
  }
  return text;
}

//===----------------------------------------------------------------------===//
// Manifests
//===----------------------------------------------------------------------===//

/// Bytes from `address` to the last byte of a [batch, seq, heads, head_dim]
/// tensor with `strides` (elements) and `bytes` per element.
unsigned __int128 tensorEnd(const std::vector<int64_t> &sizes,
                            const std::vector<int64_t> &strides, int64_t bytes) {
  unsigned __int128 last = 0;
  for (size_t i = 0; i < 4; ++i)
    last += (unsigned __int128)(sizes[i] - 1) * (uint64_t)strides[i];
  return (last + 1) * bytes;
}

void runManifest(const std::string &input, const Corpus &corpus) {
  llvm::Expected<runtime::Manifest> parsed = runtime::parseManifest(input);
  if (!parsed) {
    llvm::consumeError(parsed.takeError());
    return;
  }
  const runtime::Manifest &m = *parsed;
  llvm::Error refused = runtime::checkInterface(m);
  bool interface = !refused;
  llvm::consumeError(std::move(refused));
  for (const std::string &ptx : corpus.ptx) {
    llvm::consumeError(runtime::checkPtxEntry(m, ptx));
    llvm::consumeError(runtime::checkContract(m, ptx, {}));
  }
  std::mt19937_64 rng = rngOf(input);
  static const int64_t extents[] = {1, 2, 3, 127, 128, 129, 300, 65536,
                                    int64_t(1) << 30, (int64_t(1) << 31) - 1,
                                    int64_t(1) << 31, -1, 0};
  auto pick = [&] {
    return rng() % 4 ? 1 + int64_t(rng() % 300) : extents[rng() % std::size(extents)];
  };
  runtime::Shapes shapes{pick(), pick(), pick()};
  runtime::Buffers buffers{0x10000, 0x20000000000ull, 0x40000000000ull,
                           0x60000000000ull, m.lse ? 0x80000000000ull : 0};
  // Dense, [batch, heads, seq, head_dim] storage, or strides at random.
  auto strides = [&](int64_t seq, int64_t heads) -> std::vector<int64_t> {
    switch (rng() % 3) {
    case 0: return {};
    case 1: return {seq * heads * m.headDim, m.headDim, seq * m.headDim, 1};
    default: {
      std::vector<int64_t> s(4);
      static const int64_t huge[] = {int64_t(1) << 39, int64_t(1) << 40,
                                     INT64_MAX / 2, INT64_MAX, INT64_MIN};
      for (int64_t &stride : s)
        stride = rng() % 2   ? int64_t(rng() % 4096) * 8
                 : rng() % 4 ? extents[rng() % std::size(extents)]
                             : huge[rng() % std::size(huge)];
      s[3] = 1;
      return s;
    }
    }
  };
  buffers.qStrides = buffers.oStrides = strides(shapes.seqQ, m.qHeads);
  buffers.kStrides = buffers.vStrides = strides(shapes.seqK, m.kvHeads);
  for (const runtime::Manifest::Extra &extra : m.extras) {
    runtime::Buffers::Extra given{0xa0000000000ull, {}};
    for (int64_t dim : extra.shape)
      given.shape.push_back(dim < 0 ? pick() : dim);
    buffers.extras.push_back(given);
  }
  llvm::Expected<runtime::LaunchPlan> planned =
      runtime::planLaunch(m, shapes, buffers, emu::encodeTensorMap);
  if (!planned) {
    llvm::consumeError(planned.takeError());
    return;
  }
  const runtime::LaunchPlan &plan = *planned;
  // What must hold of every plan: each tensor map stays inside its tensor
  // (the sizes a launch was checked against, with its strides).
  for (auto &[tensor, spec] : plan.tensorMaps) {
    bool isQuery = tensor == "q" || tensor == "o";
    std::vector<int64_t> sizes = {shapes.batch, isQuery ? shapes.seqQ : shapes.seqK,
                                  isQuery ? m.qHeads : m.kvHeads, m.headDim};
    std::vector<int64_t> given = tensor == "q"   ? buffers.qStrides
                                 : tensor == "k" ? buffers.kStrides
                                 : tensor == "v" ? buffers.vStrides
                                                 : buffers.oStrides;
    if (given.empty()) {
      given = {sizes[1] * sizes[2] * sizes[3], sizes[2] * sizes[3], sizes[3], 1};
    }
    for (size_t i = 0; i < 4; ++i)
      if (sizes[i] == 1)
        given[i] = 1;
    unsigned __int128 reach = runtime::elementBytes(spec.dataType);
    for (uint32_t d = 0; d < spec.rank; ++d)
      reach += (unsigned __int128)(spec.globalDims[d] - 1) *
               (d == 0 ? runtime::elementBytes(spec.dataType) : spec.globalStrides[d - 1]);
    int64_t bytes = m.dtype == "f32" ? 4 : 2;
    if (reach > tensorEnd(sizes, given, bytes)) {
      llvm::errs() << "fa4-fuzz: the plan's tensor map of " << tensor
                   << " reaches past its tensor (interface check "
                   << (interface ? "passed" : "failed") << ")\n";
      std::abort();
    }
  }
}

//===----------------------------------------------------------------------===//
// Compile-cache entries
//===----------------------------------------------------------------------===//

// An input: for each file of an entry (kernel.cubin, kernel.ptx,
// manifest.json, index), a kind and its bytes, length-prefixed.
const char *const kEntryFiles[] = {"kernel.cubin", "kernel.ptx", "manifest.json", "index"};
enum FileKind : char {
  Regular = 'r',
  Missing = 'm',
  Directory = 'd',
  Fifo = 'f',
  DevZero = 'z',
  Empty = 'e',
};
struct EntryFiles {
  char kind[4] = {Regular, Regular, Regular, Regular};
  std::string bytes[4];
};

std::string serialize(const EntryFiles &files) {
  std::string out;
  for (int i = 0; i < 4; ++i)
    out += std::string(1, files.kind[i]) + std::to_string(files.bytes[i].size()) +
           "\n" + files.bytes[i];
  return out;
}

EntryFiles deserialize(const std::string &input) {
  EntryFiles files;
  size_t at = 0;
  for (int i = 0; i < 4 && at < input.size(); ++i) {
    files.kind[i] = input[at++];
    size_t newline = input.find('\n', at);
    if (newline == std::string::npos)
      break;
    uint64_t length = std::strtoull(input.c_str() + at, nullptr, 10);
    at = newline + 1;
    length = std::min<uint64_t>(length, input.size() - at);
    files.bytes[i] = input.substr(at, length);
    at += length;
  }
  return files;
}

void runCache(const std::string &input, const Corpus &corpus) {
  const EntryFiles files = deserialize(input);
  // A private cache directory (the child's own: it is removed at the end).
  llvm::SmallString<128> root;
  if (llvm::sys::fs::createUniqueDirectory("fa4-fuzz-cache", root))
    return;
  std::string directory = std::string(root) + "/cache";
  std::string dir = directory + "/" + corpus.cacheKey;
  llvm::sys::fs::create_directories(dir);
  for (int i = 0; i < 4; ++i) {
    std::string path = dir + "/" + kEntryFiles[i];
    switch (files.kind[i]) {
    case Missing: break;
    case Directory: llvm::sys::fs::create_directory(path); break;
    case Fifo: ::mkfifo(path.c_str(), 0600); break;
    case DevZero: (void)::symlink("/dev/zero", path.c_str()); break;
    default: {
      std::error_code ec;
      llvm::raw_fd_ostream os(path, ec);
      if (!ec && files.kind[i] != Empty)
        os << files.bytes[i];
      os.close();
      if (os.has_error())
        os.clear_error();
    }
    }
  }
  runtime::CompileCache cache(directory);
  const runtime::CompileCache::Entry &stored = corpus.cacheEntry;
  auto same = [&](const runtime::CompileCache::Entry &e) {
    return e.cubin == stored.cubin && e.ptx == stored.ptx &&
           e.manifest == stored.manifest && e.cubinName == stored.cubinName &&
           e.ptxName == stored.ptxName;
  };
  runtime::CompileCache::Entry found;
  std::string why;
  if (cache.lookup(corpus.cacheKey, found, &why) && !same(found)) {
    llvm::errs() << "fa4-fuzz: the cache returned an entry that is not the one stored\n";
    std::abort();
  }
  // Whatever was there, a store leaves the key's entry whole.
  std::string error;
  if (llvm::Error unstored = cache.store(corpus.cacheKey, stored))
    error = llvm::toString(std::move(unstored));
  if (!error.empty() || !cache.lookup(corpus.cacheKey, found, &why) ||
      !same(found)) {
    llvm::errs() << "fa4-fuzz: a store did not replace the entry: " << error << why
                 << "\n";
    std::abort();
  }
  // And nothing else is left: no discarded entry, no scratch directory.
  std::error_code ec;
  size_t names = 0;
  for (llvm::sys::fs::directory_iterator it(directory, ec), end; it != end && !ec;
       it.increment(ec))
    ++names;
  if (names != 1) {
    llvm::errs() << "fa4-fuzz: the cache holds " << names << " names, not the one entry\n";
    std::abort();
  }
  std::filesystem::remove_all(std::string(root), ec);
}

std::string mutateCache(const Corpus &corpus, std::mt19937_64 &rng) {
  EntryFiles files;
  const runtime::CompileCache::Entry &e = corpus.cacheEntry;
  files.bytes[0] = e.cubin;
  files.bytes[1] = e.ptx;
  files.bytes[2] = e.manifest;
  files.bytes[3] = corpus.cacheIndex;
  int count = 1 + rng() % 3;
  for (int n = 0; n < count; ++n) {
    int file = rng() % 4;
    switch (rng() % 6) {
    case 0: { // another kind of file
      static const char kinds[] = {Missing, Directory, Fifo, DevZero, Empty};
      files.kind[file] = kinds[rng() % std::size(kinds)];
      break;
    }
    case 1: // another variant's file, or another file of this entry
      if (!corpus.otherEntries.empty() && file < 3 && rng() % 2) {
        const runtime::CompileCache::Entry &other =
            corpus.otherEntries[rng() % corpus.otherEntries.size()];
        files.bytes[file] = file == 0 ? other.cubin : file == 1 ? other.ptx : other.manifest;
      } else {
        std::swap(files.bytes[file], files.bytes[rng() % 4]);
      }
      break;
    case 2: // cut short
      files.bytes[file].resize(files.bytes[file].empty()
                                   ? 0
                                   : rng() % files.bytes[file].size());
      break;
    default: // edited
      files.bytes[file] = mutateText(files.bytes[file], rng, 1, kManifestWords,
                                     std::size(kManifestWords));
      break;
    }
  }
  return serialize(files);
}

//===----------------------------------------------------------------------===//
// The C API's tensor descriptions
//===----------------------------------------------------------------------===//

// An input: the five tensors (q, k, v, o, lse), each present or not, with
// the allocation it points into (an index, an offset, a size), dtype, rank,
// sizes and strides; then the extras' count.
struct Description {
  struct Slot {
    uint8_t present = 1;
    uint8_t dtype = 0;
    int32_t rank = 4;
    uint64_t allocationBytes = 0;
    int64_t offset = 0;
    int64_t sizes[FA4RT_MAX_RANK] = {};
    int64_t strides[FA4RT_MAX_RANK] = {};
  } slots[5];
  uint64_t extras = 0;
};
static_assert(std::is_trivially_copyable_v<Description>);

const char *const kDtypes[] = {"fp16", "bf16", "f32", "i32", "", "fp1", "f16"};

std::string describe(const Description &d) {
  return std::string(reinterpret_cast<const char *>(&d), sizeof(d));
}

Description capiSeed(const Corpus &corpus) {
  const runtime::Manifest &m = corpus.capiManifest;
  Description d;
  int64_t seqQ = 64, seqK = 64;
  auto dense = [&](Description::Slot &slot, std::vector<int64_t> sizes, int bytes) {
    slot.rank = static_cast<int32_t>(sizes.size());
    int64_t stride = 1;
    for (size_t i = sizes.size(); i-- > 0;) {
      slot.sizes[i] = sizes[i];
      slot.strides[i] = stride;
      stride *= sizes[i];
    }
    slot.allocationBytes = uint64_t(stride) * bytes;
  };
  uint8_t dtype = m.dtype == "bf16" ? 1 : 0;
  for (int i = 0; i < 4; ++i) {
    bool query = i == 0 || i == 3;
    dense(d.slots[i], {1, query ? seqQ : seqK, query ? m.qHeads : m.kvHeads, m.headDim}, 2);
    d.slots[i].dtype = dtype;
  }
  dense(d.slots[4], {1, m.qHeads, seqQ}, 4);
  d.slots[4].dtype = 2;
  d.slots[4].present = m.lse;
  d.extras = m.extras.size();
  return d;
}

std::string mutateCapi(const Corpus &corpus, std::mt19937_64 &rng) {
  Description d = capiSeed(corpus);
  static const int64_t values[] = {0, 1, -1, 2, 3, 7, 8, 16, 63, 64, 65, 128,
                                   4096, int64_t(1) << 31, (int64_t(1) << 31) - 1,
                                   int64_t(1) << 40, int64_t(1) << 47,
                                   INT64_MAX, INT64_MIN, INT64_MAX / 2};
  auto value = [&] { return values[rng() % std::size(values)]; };
  int count = 1 + rng() % 4;
  for (int n = 0; n < count; ++n) {
    Description::Slot &slot = d.slots[rng() % 5];
    int axis = rng() % FA4RT_MAX_RANK;
    switch (rng() % 9) {
    case 0: slot.sizes[axis] = value(); break;
    case 1: slot.strides[axis] = value(); break;
    case 2: slot.strides[axis] = slot.strides[rng() % FA4RT_MAX_RANK]; break;
    case 3: slot.rank = static_cast<int32_t>(value()); break;
    case 4: slot.dtype = rng() % std::size(kDtypes); break;
    case 5: slot.offset = rng() % 2 ? value() : int64_t(rng() % 64); break;
    case 6: slot.allocationBytes = uint64_t(value()); break;
    case 7: slot.present = !slot.present; break;
    default: d.extras = rng() % 2 ? uint64_t(value()) : rng() % 3; break;
    }
  }
  return describe(d);
}

void runCapi(const std::string &input, const Corpus &corpus) {
  Description d;
  std::memcpy(&d, input.data(), std::min(input.size(), sizeof(d)));
  // No request for memory may take the machine: a child gets 4 GiB.
  struct rlimit limit = {uint64_t(4) << 30, uint64_t(4) << 30};
  setrlimit(RLIMIT_AS, &limit);
  fa4rt_backend *backend = fa4rt_backend_emulator(1, 0, 0);
  if (!backend)
    std::abort();
  fa4rt_tensor tensors[5];
  std::vector<fa4rt_tensor> extras(std::min<uint64_t>(d.extras, 64));
  for (int i = 0; i < 5; ++i) {
    const Description::Slot &slot = d.slots[i];
    fa4rt_tensor &t = tensors[i];
    // Past the emulator's bound an allocation is refused, past the child's
    // 4 GiB it fails at once (std::bad_alloc, caught in the C API); between
    // them, what would take seconds to zero is asked for as 1 MiB.
    uint64_t bytes = slot.allocationBytes <= (uint64_t(1) << 20) ||
                             slot.allocationBytes > (uint64_t(1) << 33)
                         ? slot.allocationBytes
                         : uint64_t(1) << 20;
    uint64_t base = fa4rt_emulator_allocate(backend, bytes);
    if (!base && !*fa4rt_last_error())
      std::abort(); // a refusal always says why
    if (base && bytes && !fa4rt_emulator_host(backend, base, bytes))
      std::abort(); // an allocation is all host memory
    t.address = base + static_cast<uint64_t>(slot.offset);
    t.dtype = kDtypes[slot.dtype % std::size(kDtypes)];
    t.rank = slot.rank;
    std::memcpy(t.sizes, slot.sizes, sizeof(t.sizes));
    std::memcpy(t.strides, slot.strides, sizeof(t.strides));
  }
  for (fa4rt_tensor &extra : extras)
    extra = tensors[0];
  int status = fa4rt_launch(corpus.capiKernel, backend, d.slots[0].present ? &tensors[0] : nullptr,
                            d.slots[1].present ? &tensors[1] : nullptr,
                            d.slots[2].present ? &tensors[2] : nullptr,
                            d.slots[3].present ? &tensors[3] : nullptr,
                            d.slots[4].present ? &tensors[4] : nullptr,
                            extras.empty() ? nullptr : extras.data(), d.extras, nullptr);
  // The kernel has no PTX: a launch that passes every check stops there.
  if (status == 0 || !*fa4rt_last_error())
    std::abort();
  fa4rt_backend_free(backend);
}

//===----------------------------------------------------------------------===//
// Cubins
//===----------------------------------------------------------------------===//

/// A kernel's cubin with its ELF64 headers, section headers and symbols
/// edited: a field at an 8-byte boundary of the file's head or tail (where
/// the ELF header, the symbol table and the section headers lie) set to a
/// boundary value, bytes changed, spans cut out or the file cut short.
std::string mutateCubin(const Corpus &corpus, std::mt19937_64 &rng) {
  size_t chosen = rng() % (1 + corpus.otherEntries.size());
  std::string cubin =
      chosen ? corpus.otherEntries[chosen - 1].cubin : corpus.cacheEntry.cubin;
  static const uint64_t values[] = {0, 1, 2, 8, 24, 64, 0x7f, 0xff, 0xffff,
                                    0x7fffffff, 0xffffffff, uint64_t(1) << 32,
                                    ~uint64_t(0), ~uint64_t(0) - 63};
  for (int n = 1 + rng() % 4; n-- > 0 && cubin.size() >= 8;) {
    // Half the edits in the first 4 KiB (ELF header, string and symbol
    // tables), half in the last 4 KiB (the section headers).
    size_t span = std::min<size_t>(cubin.size(), 4096);
    size_t at = rng() % 2 ? rng() % span : cubin.size() - 1 - rng() % span;
    switch (rng() % 5) {
    case 0:
    case 1: { // a field becomes a boundary value
      at = std::min(at & ~size_t(1), cubin.size() - 8);
      unsigned width = 2u << (rng() % 3);
      uint64_t value = values[rng() % std::size(values)];
      for (unsigned i = 0; i < width; ++i)
        cubin[at + i] = static_cast<char>(value >> (8 * i));
      break;
    }
    case 2: // a byte changes
      cubin[at] = static_cast<char>(rng());
      break;
    case 3: // a span goes
      cubin.erase(at, 1 + rng() % 64);
      break;
    default: // cut short
      cubin.resize(at);
    }
  }
  return cubin;
}

/// The reader stays inside the file and a contract it returns is bytes of
/// the file; checked against the first kernel's manifest and PTX, a cubin is
/// accepted only with that kernel's contract, unchanged.
void runCubin(const std::string &input, const Corpus &corpus) {
  llvm::ArrayRef<uint8_t> bytes(reinterpret_cast<const uint8_t *>(input.data()),
                                input.size());
  auto read = runtime::readCubinContract(bytes);
  if (!read) {
    llvm::consumeError(read.takeError());
  } else if (read->has_value() && input.find(**read) == std::string::npos) {
    llvm::errs() << "fa4-fuzz: the cubin's contract is not bytes of the cubin\n";
    std::abort();
  }
  llvm::Expected<runtime::Manifest> parsed =
      runtime::parseManifest(corpus.manifests.front());
  if (!parsed)
    std::abort();
  const runtime::Manifest &manifest = *parsed;
  llvm::Error checked = runtime::checkContract(manifest, corpus.ptx.front(), bytes);
  bool accepted = !checked;
  llvm::consumeError(std::move(checked));
  // No bytes is no cubin (its file missing), which the PTX's contract alone
  // decides.
  if (accepted && !input.empty() && !(read && read->has_value() &&
                    **read == runtime::kernelContract(manifest))) {
    llvm::errs() << "fa4-fuzz: a cubin without the kernel's contract was accepted\n";
    std::abort();
  }
}

bool readSeed(const std::string &path, std::string &text) {
  llvm::Expected<std::string> read = readRegularFile(path, kMaxKernelFileBytes);
  if (!read) {
    llvm::consumeError(read.takeError());
    return false;
  }
  text = std::move(*read);
  return true;
}

} // namespace

std::optional<Surface> surfaceNamed(const std::string &name) {
  if (name == "manifest")
    return Surface::Manifest;
  if (name == "cache")
    return Surface::Cache;
  if (name == "capi")
    return Surface::Capi;
  if (name == "cubin")
    return Surface::Cubin;
  return std::nullopt;
}

bool loadCorpus(Surface surface, const std::vector<std::string> &manifests,
                Corpus &corpus, std::string &error) {
  for (const std::string &path : manifests) {
    std::string json, ptx;
    if (!readSeed(path, json)) {
      error = "cannot read " + path;
      return false;
    }
    corpus.manifests.push_back(json);
    llvm::Expected<runtime::Kernel> loaded = runtime::Kernel::load(path);
    if (!loaded) {
      error = llvm::toString(loaded.takeError());
      return false;
    }
    const runtime::Kernel &kernel = *loaded;
    corpus.ptx.push_back(kernel.ptx);
    runtime::CompileCache::Entry entry;
    entry.cubin.assign(kernel.cubin.begin(), kernel.cubin.end());
    entry.ptx = kernel.ptx;
    entry.manifest = json;
    entry.cubinName = kernel.manifest.cubin;
    entry.ptxName = kernel.manifest.ptx;
    (corpus.manifests.size() == 1 ? corpus.cacheEntry : corpus.otherEntries.emplace_back()) =
        entry;
  }
  if (corpus.manifests.empty()) {
    error = "no manifests (give .cubin.json files or directories holding them)";
    return false;
  }
  if (surface == Surface::Cache) {
    // The files' contents matter to the cache only through their hashes,
    // the PTX's entry point and the contract the PTX (before its entry) and
    // the cubin (in its symbol table) declare: the PTX up to the entry's
    // body keeps an input's I/O small; the cubin stays whole, since an ELF
    // file cut short is refused.
    auto shorten = [](runtime::CompileCache::Entry &entry) {
      size_t body = entry.ptx.find('{', entry.ptx.find(".entry"));
      if (body != std::string::npos)
        entry.ptx.resize(body);
    };
    shorten(corpus.cacheEntry);
    for (runtime::CompileCache::Entry &entry : corpus.otherEntries)
      shorten(entry);
    // The index as CompileCache writes it: store the entry once and read it.
    corpus.cacheKey = runtime::CompileCache::key({"fa4-fuzz"});
    llvm::SmallString<128> root;
    if (llvm::sys::fs::createUniqueDirectory("fa4-fuzz-seed", root)) {
      error = "cannot create a temporary directory";
      return false;
    }
    runtime::CompileCache cache{std::string(root)};
    if (llvm::Error unstored =
            cache.store(corpus.cacheKey, corpus.cacheEntry)) {
      error =
          "cannot store the seed entry: " + llvm::toString(std::move(unstored));
      return false;
    }
    if (!readSeed(std::string(root) + "/" + corpus.cacheKey + "/index",
                  corpus.cacheIndex)) {
      error = "cannot store the seed entry: ";
      return false;
    }
    llvm::sys::fs::remove_directories(root, /*IgnoreErrors=*/true);
  }
  if (surface == Surface::Capi) {
    // The first kernel without extras (their tensors are not described
    // here), without its PTX: a launch that passes every check ends at the
    // emulator's "no PTX", so that inputs run in microseconds.
    size_t chosen = 0;
    for (size_t i = corpus.manifests.size(); i-- > 0;) {
      llvm::Expected<runtime::Manifest> m =
          runtime::parseManifest(corpus.manifests[i]);
      if (!m)
        llvm::consumeError(m.takeError());
      else if (m->extras.empty())
        chosen = i;
    }
    std::swap(corpus.manifests[0], corpus.manifests[chosen]);
    if (chosen)
      std::swap(corpus.cacheEntry, corpus.otherEntries[chosen - 1]);
    llvm::SmallString<128> root;
    if (llvm::sys::fs::createUniqueDirectory("fa4-fuzz-capi", root)) {
      error = "cannot create a temporary directory";
      return false;
    }
    llvm::Expected<llvm::json::Value> json = llvm::json::parse(corpus.manifests.front());
    if (!json || !json->getAsObject()) {
      llvm::consumeError(json.takeError());
      error = "the first manifest is not a JSON object";
      return false;
    }
    json->getAsObject()->erase("ptx");
    std::string path = std::string(root) + "/k.cubin.json";
    {
      std::error_code ec;
      llvm::raw_fd_ostream manifest(path, ec), cubin(std::string(root) + "/" +
                                                         corpus.cacheEntry.cubinName,
                                                     ec);
      manifest << *json;
      cubin << corpus.cacheEntry.cubin;
    }
    corpus.capiKernel = fa4rt_kernel_load(path.c_str());
    llvm::sys::fs::remove_directories(root, /*IgnoreErrors=*/true);
    if (!corpus.capiKernel) {
      error = std::string("fa4rt_kernel_load: ") + fa4rt_last_error();
      return false;
    }
    llvm::Expected<runtime::Manifest> manifest =
        runtime::parseManifest(corpus.manifests.front());
    if (!manifest)
      llvm::consumeError(manifest.takeError());
    else
      corpus.capiManifest = std::move(*manifest);
  }
  return true;
}

std::string mutateInput(Surface surface, const Corpus &corpus, std::mt19937_64 &rng) {
  switch (surface) {
  case Surface::Manifest:
    return mutateText(corpus.manifests[rng() % corpus.manifests.size()], rng,
                      1 + rng() % 3, kManifestWords, std::size(kManifestWords));
  case Surface::Cache:
    return mutateCache(corpus, rng);
  case Surface::Capi:
    return mutateCapi(corpus, rng);
  case Surface::Cubin:
    return mutateCubin(corpus, rng);
  }
  return "";
}

void runInput(Surface surface, const std::string &input, const Corpus &corpus) {
  switch (surface) {
  case Surface::Manifest: return runManifest(input, corpus);
  case Surface::Cache: return runCache(input, corpus);
  case Surface::Capi: return runCapi(input, corpus);
  case Surface::Cubin: return runCubin(input, corpus);
  }
}

} // namespace fuzz
