//===- CompileCache.cpp - compiled kernels on disk ------------------------===//

#include "fa4/Runtime/CompileCache.h"
#include "fa4/Runtime/Backward.h"
#include "fa4/Runtime/Contract.h"

#include "fa4/Runtime/Launch.h"
#include "fa4/Support/Error.h"
#include "fa4/Support/InputLimits.h"
#include "fa4/Support/OutputFile.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

#include <filesystem>
#include <random>

namespace mlir::fa4::runtime {

namespace fs = llvm::sys::fs;
namespace path = llvm::sys::path;

std::string CompileCache::defaultDirectory() {
  // An empty variable counts as unset (as the XDG base directories say of
  // XDG_CACHE_HOME).
  auto variable = [](const char *name) -> std::optional<std::string> {
    std::optional<std::string> value = llvm::sys::Process::GetEnv(name);
    if (value && value->empty())
      return std::nullopt;
    return value;
  };
  if (std::optional<std::string> dir = variable("FA4_CACHE_DIR"))
    return *dir;
  llvm::SmallString<256> result;
  if (std::optional<std::string> xdg = variable("XDG_CACHE_HOME")) {
    result = *xdg;
  } else if (std::optional<std::string> home = variable("HOME")) {
    result = *home;
    path::append(result, ".cache");
  } else {
    return "";
  }
  path::append(result, "fa4");
  return std::string(result);
}

std::string CompileCache::key(const std::vector<std::string> &parts) {
  llvm::SHA256 hash;
  for (const std::string &part : parts) {
    std::string length = std::to_string(part.size()) + ":";
    hash.update(llvm::StringRef(length));
    hash.update(llvm::StringRef(part));
  }
  std::array<uint8_t, 32> digest = hash.final();
  return llvm::toHex(digest, /*LowerCase=*/true);
}

static std::string sha256(llvm::StringRef bytes) {
  return llvm::toHex(llvm::SHA256::hash(llvm::arrayRefFromStringRef(bytes)),
                     /*LowerCase=*/true);
}

static llvm::Error writeFile(const llvm::Twine &file, const std::string &text) {
  std::error_code ec;
  llvm::raw_fd_ostream os(file.str(), ec, fs::OF_None);
  if (ec)
    return makeError("cannot write " + file.str() + ": " + ec.message());
  os << text;
  os.close();
  if (os.has_error()) {
    llvm::Error error =
        makeError("cannot write " + file.str() + ": " + os.error().message());
    os.clear_error();
    return error;
  }
  return llvm::Error::success();
}

// An entry is a directory named by its key holding kernel.cubin, kernel.ptx,
// manifest.json and, written last, `index`: the key and each file's SHA-256
// (and the names the manifest gives the cubin and the PTX). A lookup checks
// all of it, so an entry whose files were swapped for another's, cut short
// or edited is no hit.
static constexpr const char *kIndexHeader = "fa4-compile-cache-entry 1";

static std::string indexOf(const std::string &key, const CompileCache::Entry &entry) {
  return std::string(kIndexHeader) + "\nkey " + key + "\ncubin " +
         sha256(entry.cubin) + " " + entry.cubinName + "\nptx " +
         sha256(entry.ptx) + " " + entry.ptxName + "\nmanifest " +
         sha256(entry.manifest) + "\n";
}

/// The entry in `dir`, read and checked against `key`; an error saying
/// what is wrong with it otherwise.
static llvm::Expected<CompileCache::Entry> readEntry(const llvm::Twine &dir,
                                                     const std::string &key) {
  llvm::Expected<std::string> index =
      readRegularFile((dir + "/index").str(), 4096);
  if (!index)
    return index.takeError();
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(*index).split(lines, '\n', -1, /*KeepEmpty=*/false);
  if (lines.size() != 5 || lines[0] != kIndexHeader)
    return makeError("its index is not one fa4 writes");
  if (lines[1] != "key " + key)
    return makeError("it holds another key's compilation");
  // One file the index lists: its contents, which must hash as the index
  // says, and (with `fileName`) the name the index gives it.
  auto file = [&](llvm::StringRef line, llvm::StringRef field, const char *name,
                  std::string &contents, std::string *fileName) -> llvm::Error {
    llvm::SmallVector<llvm::StringRef, 3> parts;
    line.split(parts, ' ', fileName ? 2 : 1, /*KeepEmpty=*/false);
    if (parts.size() != (fileName ? 3u : 2u) || parts[0] != field)
      return makeError("its index is not one fa4 writes");
    llvm::Expected<std::string> read =
        readRegularFile((dir + "/" + name).str(), kMaxKernelFileBytes);
    if (!read)
      return read.takeError();
    contents = std::move(*read);
    if (sha256(contents) != parts[1])
      return makeError(std::string(name) +
                       " is not the file the entry was written with");
    if (fileName)
      *fileName = parts[2].str();
    return llvm::Error::success();
  };
  CompileCache::Entry entry;
  if (llvm::Error bad = file(lines[2], "cubin", "kernel.cubin", entry.cubin,
                             &entry.cubinName))
    return std::move(bad);
  if (llvm::Error bad =
          file(lines[3], "ptx", "kernel.ptx", entry.ptx, &entry.ptxName))
    return std::move(bad);
  if (llvm::Error bad =
          file(lines[4], "manifest", "manifest.json", entry.manifest, nullptr))
    return std::move(bad);
  // fa4 writes both the cubin and the PTX of every kernel.
  if (entry.cubin.empty() || entry.ptx.empty())
    return makeError("it lacks its cubin or its PTX");
  // What the files say must hold together: the manifest parses, describes
  // the PTX's entry point, agrees with the contract the PTX and the cubin
  // declare and names the files the index names. A backward's manifest
  // (kind "backward": three kernels) is held to its own contract.
  llvm::ArrayRef<uint8_t> cubin(
      reinterpret_cast<const uint8_t *>(entry.cubin.data()), entry.cubin.size());
  if (isBackwardManifest(entry.manifest)) {
    llvm::Expected<BackwardManifest> backward =
        parseBackwardManifest(entry.manifest);
    if (!backward)
      return backward.takeError();
    if (llvm::Error bad = checkContractText(backwardContract(*backward),
                                            entry.ptx, cubin))
      return std::move(bad);
    if (entry.cubinName.empty() || entry.ptxName.empty() ||
        backward->cubin != entry.cubinName || backward->ptx != entry.ptxName)
      return makeError("its manifest names other files than its index");
    return std::move(entry);
  }
  llvm::Expected<Manifest> manifest = parseManifest(entry.manifest);
  if (!manifest)
    return manifest.takeError();
  if (llvm::Error bad = checkInterface(*manifest))
    return std::move(bad);
  if (llvm::Error bad = checkPtxEntry(*manifest, entry.ptx))
    return std::move(bad);
  if (llvm::Error bad = checkContract(*manifest, entry.ptx, cubin))
    return std::move(bad);
  if (entry.cubinName.empty() || entry.ptxName.empty() ||
      manifest->cubin != entry.cubinName || manifest->ptx != entry.ptxName)
    return makeError("its manifest names other files than its index");
  return std::move(entry);
}

/// Deletes `dir` and everything in it. (llvm::sys::fs::remove_directories
/// leaves FIFOs and devices, and the directory holding them, behind.)
static void removeTree(const llvm::Twine &dir) {
  std::error_code ignored;
  std::filesystem::remove_all(dir.str(), ignored);
}

/// Moves the entry at `dir` out of the way (one rename, so a reader sees it
/// whole or not at all) and deletes it.
static void discardDirectory(const std::string &directory, const llvm::Twine &dir,
                    const std::string &key) {
  std::random_device random;
  llvm::SmallString<256> doomed(directory);
  path::append(doomed, ".bad-" + key.substr(0, 16) + "-" +
                           std::to_string(llvm::sys::Process::getProcessId()) +
                           "-" + std::to_string(random()));
  if (!fs::rename(dir, doomed))
    removeTree(doomed);
}

bool CompileCache::lookup(const std::string &key, Entry &entry,
                          std::string *rejected) const {
  llvm::SmallString<256> dir(directory);
  path::append(dir, key);
  if (!fs::exists(dir))
    return false;
  llvm::Expected<Entry> found = readEntry(dir, key);
  if (found) {
    entry = std::move(*found);
    return true;
  }
  // A bad entry is replaced by the next store, not kept failing lookups.
  std::string why = llvm::toString(found.takeError());
  if (rejected)
    *rejected = "the compile cache's entry " + key.substr(0, 16) +
                " was discarded: " + why;
  discardDirectory(directory, dir, key);
  return false;
}

llvm::Error CompileCache::store(const std::string &key,
                                const Entry &entry) const {
  if (std::error_code ec = fs::create_directories(directory))
    return makeError("cannot create the cache directory " + directory + ": " +
                     ec.message());
  // A private directory, filled, then renamed to the key.
  std::random_device random;
  llvm::SmallString<256> scratch(directory);
  path::append(scratch, ".tmp-" + key.substr(0, 16) + "-" +
                            std::to_string(llvm::sys::Process::getProcessId()) +
                            "-" + std::to_string(random()));
  if (std::error_code ec = fs::create_directory(scratch))
    return makeError("cannot create " + std::string(scratch) + ": " +
                     ec.message());
  std::string index = indexOf(key, entry);
  for (auto [name, text] : {std::pair<const char *, const std::string *>{
                                "kernel.cubin", &entry.cubin},
                            {"kernel.ptx", &entry.ptx},
                            {"manifest.json", &entry.manifest},
                            {"index", &index}})
    if (llvm::Error unwritten = writeFile(scratch + "/" + name, *text)) {
      removeTree(scratch);
      return unwritten;
    }
  llvm::SmallString<256> final(directory);
  path::append(final, key);
  if (!fs::rename(scratch, final))
    return llvm::Error::success();
  // The key is taken: by another process's whole entry (ours is dropped),
  // or by a bad one, which ours replaces.
  if (fs::exists(final)) {
    llvm::Expected<Entry> existing = readEntry(final, key);
    if (!existing) {
      llvm::consumeError(existing.takeError());
      discardDirectory(directory, final, key);
      if (!fs::rename(scratch, final))
        return llvm::Error::success();
    }
  }
  removeTree(scratch);
  return llvm::Error::success();
}

/// The manifest with its "cubin" and "ptx" fields naming other files. The
/// names are JSON strings there, escaped as the manifest's writer escapes
/// them (a quote or a backslash in a file name).
static std::string renamed(const CompileCache::Entry &entry,
                           const std::string &cubinName, const std::string &ptxName) {
  std::string manifest = entry.manifest;
  auto quoted = [](const std::string &text) {
    std::string out;
    llvm::raw_string_ostream(out) << llvm::json::Value(llvm::json::fixUTF8(text));
    return out;
  };
  auto replace = [&](const std::string &field, const std::string &from,
                     const std::string &to) {
    std::string old = "\"" + field + "\": " + quoted(from);
    size_t at = manifest.find(old);
    if (at != std::string::npos)
      manifest.replace(at, old.size(), "\"" + field + "\": " + quoted(to));
  };
  replace("cubin", entry.cubinName, cubinName);
  replace("ptx", entry.ptxName, ptxName);
  return manifest;
}

void CompileCache::discard(const std::string &key) const {
  llvm::SmallString<256> dir(directory);
  path::append(dir, key);
  if (fs::exists(dir))
    discardDirectory(directory, dir, key);
}

llvm::Error CompileCache::materialize(const Entry &entry,
                                      const std::string &cubinPath,
                                      const std::string &ptxPath) {
  // One set (fa4/Support/OutputFile.h): a cubin without its PTX or manifest
  // is no kernel, nor one beside an earlier kernel's.
  std::string manifest = renamed(entry, path::filename(cubinPath).str(),
                                 path::filename(ptxPath).str());
  return writeFileSet({{ptxPath, entry.ptx},
                       {cubinPath + ".json", manifest},
                       {cubinPath, entry.cubin}});
}

} // namespace mlir::fa4::runtime
