//===- CompileCache.cpp - compiled kernels on disk ------------------------===//

#include "fa4/Runtime/CompileCache.h"
#include "fa4/Runtime/Contract.h"

#include "fa4/Runtime/Launch.h"
#include "fa4/Support/InputLimits.h"
#include "fa4/Support/OutputFile.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
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
  if (std::optional<std::string> dir = llvm::sys::Process::GetEnv("FA4_CACHE_DIR"))
    return *dir;
  llvm::SmallString<256> result;
  if (std::optional<std::string> xdg = llvm::sys::Process::GetEnv("XDG_CACHE_HOME")) {
    result = *xdg;
  } else if (std::optional<std::string> home = llvm::sys::Process::GetEnv("HOME")) {
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

static bool writeFile(const llvm::Twine &file, const std::string &text,
                      std::string &error) {
  std::error_code ec;
  llvm::raw_fd_ostream os(file.str(), ec, fs::OF_None);
  if (ec) {
    error = "cannot write " + file.str() + ": " + ec.message();
    return false;
  }
  os << text;
  os.close();
  if (os.has_error()) {
    error = "cannot write " + file.str() + ": " + os.error().message();
    os.clear_error();
    return false;
  }
  return true;
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

/// Reads and checks the entry in `dir` against `key`; false with `why`.
static bool readEntry(const llvm::Twine &dir, const std::string &key,
                      CompileCache::Entry &entry, std::string &why) {
  std::string index;
  if (!readRegularFile((dir + "/index").str(), 4096, index, why))
    return false;
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(index).split(lines, '\n', -1, /*KeepEmpty=*/false);
  if (lines.size() != 5 || lines[0] != kIndexHeader) {
    why = "its index is not one fa4 writes";
    return false;
  }
  if (lines[1] != "key " + key) {
    why = "it holds another key's compilation";
    return false;
  }
  auto file = [&](llvm::StringRef line, llvm::StringRef field, const char *name,
                  std::string &contents, std::string *fileName) {
    llvm::SmallVector<llvm::StringRef, 3> parts;
    line.split(parts, ' ', fileName ? 2 : 1, /*KeepEmpty=*/false);
    if (parts.size() != (fileName ? 3u : 2u) || parts[0] != field) {
      why = "its index is not one fa4 writes";
      return false;
    }
    if (!readRegularFile((dir + "/" + name).str(), kMaxKernelFileBytes, contents, why))
      return false;
    if (sha256(contents) != parts[1]) {
      why = std::string(name) + " is not the file the entry was written with";
      return false;
    }
    if (fileName)
      *fileName = parts[2].str();
    return true;
  };
  if (!file(lines[2], "cubin", "kernel.cubin", entry.cubin, &entry.cubinName) ||
      !file(lines[3], "ptx", "kernel.ptx", entry.ptx, &entry.ptxName) ||
      !file(lines[4], "manifest", "manifest.json", entry.manifest, nullptr))
    return false;
  // What the files say must hold together: the manifest parses, describes
  // the PTX's entry point, agrees with the contract the PTX and the cubin
  // declare and names the files the index names.
  Manifest manifest;
  std::string error;
  if (!parseManifest(entry.manifest, manifest, error) ||
      !checkInterface(manifest, error) ||
      !checkPtxEntry(manifest, entry.ptx, error)) {
    why = error;
    return false;
  }
  if (llvm::Error refused = checkContract(
          manifest, entry.ptx,
          llvm::ArrayRef<uint8_t>(reinterpret_cast<const uint8_t *>(entry.cubin.data()),
                                  entry.cubin.size()))) {
    why = llvm::toString(std::move(refused));
    return false;
  }
  if (entry.cubinName.empty() || entry.ptxName.empty() ||
      manifest.cubin != entry.cubinName || manifest.ptx != entry.ptxName) {
    why = "its manifest names other files than its index";
    return false;
  }
  return true;
}

/// Deletes `dir` and everything in it. (llvm::sys::fs::remove_directories
/// leaves FIFOs and devices, and the directory holding them, behind.)
static void removeTree(const llvm::Twine &dir) {
  std::error_code ignored;
  std::filesystem::remove_all(dir.str(), ignored);
}

/// Moves the entry at `dir` out of the way (one rename, so a reader sees it
/// whole or not at all) and deletes it.
static void discard(const std::string &directory, const llvm::Twine &dir,
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
  std::string why;
  if (readEntry(dir, key, entry, why))
    return true;
  // A bad entry is replaced by the next store, not kept failing lookups.
  if (rejected)
    *rejected = "the compile cache's entry " + key.substr(0, 16) +
                " was discarded: " + why;
  discard(directory, dir, key);
  return false;
}

bool CompileCache::store(const std::string &key, const Entry &entry,
                         std::string &error) const {
  if (std::error_code ec = fs::create_directories(directory)) {
    error = "cannot create the cache directory " + directory + ": " + ec.message();
    return false;
  }
  // A private directory, filled, then renamed to the key.
  std::random_device random;
  llvm::SmallString<256> scratch(directory);
  path::append(scratch, ".tmp-" + key.substr(0, 16) + "-" +
                            std::to_string(llvm::sys::Process::getProcessId()) +
                            "-" + std::to_string(random()));
  if (std::error_code ec = fs::create_directory(scratch)) {
    error = "cannot create " + std::string(scratch) + ": " + ec.message();
    return false;
  }
  bool written = writeFile(scratch + "/kernel.cubin", entry.cubin, error) &&
                 writeFile(scratch + "/kernel.ptx", entry.ptx, error) &&
                 writeFile(scratch + "/manifest.json", entry.manifest, error) &&
                 writeFile(scratch + "/index", indexOf(key, entry), error);
  llvm::SmallString<256> final(directory);
  path::append(final, key);
  if (written && !fs::rename(scratch, final))
    return true;
  // The key is taken: by another process's whole entry (ours is dropped),
  // or by a bad one, which ours replaces.
  Entry existing;
  std::string why;
  if (written && fs::exists(final) && !readEntry(final, key, existing, why)) {
    discard(directory, final, key);
    if (!fs::rename(scratch, final))
      return true;
  }
  removeTree(scratch);
  return written;
}

/// The manifest with its "cubin" and "ptx" fields naming other files.
static std::string renamed(const CompileCache::Entry &entry,
                           const std::string &cubinName, const std::string &ptxName) {
  std::string manifest = entry.manifest;
  auto replace = [&](const std::string &field, const std::string &from,
                     const std::string &to) {
    std::string old = "\"" + field + "\": \"" + from + "\"";
    size_t at = manifest.find(old);
    if (at != std::string::npos)
      manifest.replace(at, old.size(), "\"" + field + "\": \"" + to + "\"");
  };
  replace("cubin", entry.cubinName, cubinName);
  replace("ptx", entry.ptxName, ptxName);
  return manifest;
}

bool CompileCache::materialize(const Entry &entry, const std::string &cubinPath,
                               const std::string &ptxPath, std::string &error) {
  // One set (fa4/Support/OutputFile.h): a cubin without its PTX or manifest
  // is no kernel, nor one beside an earlier kernel's.
  std::string manifest = renamed(entry, path::filename(cubinPath).str(),
                                 path::filename(ptxPath).str());
  return writeFileSet({{ptxPath, entry.ptx},
                       {cubinPath + ".json", manifest},
                       {cubinPath, entry.cubin}},
                      error);
}

} // namespace mlir::fa4::runtime
