//===- CompileCache.cpp - compiled kernels on disk ------------------------===//

#include "fa4/Runtime/CompileCache.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

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

static bool readFile(const llvm::Twine &file, std::string &text) {
  auto buffer = llvm::MemoryBuffer::getFile(file, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return false;
  text = (*buffer)->getBuffer().str();
  return true;
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

bool CompileCache::lookup(const std::string &key, Entry &entry) const {
  llvm::SmallString<256> dir(directory);
  path::append(dir, key);
  // The manifest is the last file of an entry; a renamed entry is whole.
  std::string names;
  if (!readFile(dir + "/names", names) || !readFile(dir + "/kernel.cubin", entry.cubin) ||
      !readFile(dir + "/kernel.ptx", entry.ptx) ||
      !readFile(dir + "/manifest.json", entry.manifest))
    return false;
  auto [cubinName, ptxName] = llvm::StringRef(names).split('\n');
  entry.cubinName = cubinName.str();
  entry.ptxName = ptxName.trim().str();
  return !entry.cubinName.empty() && !entry.ptxName.empty();
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
                 writeFile(scratch + "/names", entry.cubinName + "\n" + entry.ptxName + "\n",
                           error) &&
                 writeFile(scratch + "/manifest.json", entry.manifest, error);
  llvm::SmallString<256> final(directory);
  path::append(final, key);
  if (written && !fs::rename(scratch, final))
    return true;
  // Failed, or another process stored the key first: drop the copy.
  fs::remove_directories(scratch, /*IgnoreErrors=*/true);
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
  return writeFile(cubinPath, entry.cubin, error) &&
         writeFile(ptxPath, entry.ptx, error) &&
         writeFile(cubinPath + ".json",
                   renamed(entry, path::filename(cubinPath).str(),
                           path::filename(ptxPath).str()),
                   error);
}

} // namespace mlir::fa4::runtime
