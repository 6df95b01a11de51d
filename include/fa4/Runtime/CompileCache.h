//===- CompileCache.h - compiled kernels on disk, keyed by what made them -===//
//
// A cache of compiled kernels (cubin, PTX, manifest) in a user directory:
// $FA4_CACHE_DIR, else $XDG_CACHE_HOME/fa4, else ~/.cache/fa4. An entry is
// keyed by the SHA-256 of everything that decides the output — the entry IR
// as printed, the target, the pipeline options, the compiler's own binary
// and ptxas's version — so a changed compiler or toolkit never hits a stale
// entry. Entries are written into a private directory and renamed into place
// whole: concurrent processes never see half an entry, and when two store
// the same key one rename wins and the other's copy is dropped. An entry
// records its key and its files' SHA-256; a lookup verifies both (and that
// the manifest parses), so an entry swapped for another's, cut short or
// edited is no hit: it is discarded, and the next store replaces it.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_RUNTIME_COMPILECACHE_H
#define FA4_RUNTIME_COMPILECACHE_H

#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace mlir::fa4::runtime {

class CompileCache {
public:
  /// The files of one compiled kernel, and the names the manifest gives the
  /// cubin and the PTX (rewritten when an entry is copied out under others).
  struct Entry {
    std::string cubin, ptx, manifest;
    std::string cubinName, ptxName;
  };

  /// $FA4_CACHE_DIR, else $XDG_CACHE_HOME/fa4, else $HOME/.cache/fa4; empty
  /// when none of them is set.
  static std::string defaultDirectory();

  explicit CompileCache(std::string directory) : directory(std::move(directory)) {}
  const std::string &getDirectory() const { return directory; }

  /// The key of a compilation: SHA-256 over the parts, each length-prefixed
  /// so that no two lists of parts collide by concatenation.
  static std::string key(const std::vector<std::string> &parts);

  /// The entry of `key`, when there is a whole one that verifies. One that
  /// does not is discarded (moved away in one rename and deleted), with
  /// `rejected` saying why.
  bool lookup(const std::string &key, Entry &entry,
              std::string *rejected = nullptr) const;
  /// Stores an entry atomically; an error when the directory cannot be
  /// written (another process storing the same key is no error). A bad
  /// entry under the key is replaced.
  llvm::Error store(const std::string &key, const Entry &entry) const;
  /// Discards the entry of `key` (as lookup discards one that does not
  /// verify): for a caller that found a verified entry unusable, say of
  /// another kind than the compilation it asked for, so that its store
  /// replaces it.
  void discard(const std::string &key) const;

  /// Writes an entry's files as `cubinPath`, `ptxPath` and
  /// `cubinPath + ".json"`, the manifest naming the new files (one set:
  /// writeFileSet, fa4/Support/OutputFile.h).
  static llvm::Error materialize(const Entry &entry,
                                 const std::string &cubinPath,
                                 const std::string &ptxPath);

private:
  std::string directory;
};

} // namespace mlir::fa4::runtime

#endif // FA4_RUNTIME_COMPILECACHE_H
