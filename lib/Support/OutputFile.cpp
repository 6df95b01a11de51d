//===- OutputFile.cpp - output written whole or not at all ----------------===//

#include "fa4/Support/OutputFile.h"

#include "llvm/Support/Errc.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/Path.h"

#include <vector>

using namespace mlir;
using namespace mlir::fa4;

std::unique_ptr<OutputFile> OutputFile::open(StringRef path,
                                             std::string &error) {
  std::unique_ptr<OutputFile> file(new OutputFile);
  file->path = path.str();
  auto fail = [&](const Twine &cause) {
    error = ("cannot write " + path + ": " + cause).str();
    return nullptr;
  };
  if (path == "-") {
    file->stream = &llvm::outs();
    return file;
  }
  // Through a symbolic link to the file it names: the rename replaces that
  // file, not the link.
  SmallString<256> target(path);
  if (llvm::sys::fs::is_symlink_file(path)) {
    if (std::error_code code = llvm::sys::fs::real_path(path, target))
      return fail(code.message());
  }
  llvm::sys::fs::file_status status;
  bool exists = !llvm::sys::fs::status(target, status);
  if (exists && status.type() != llvm::sys::fs::file_type::regular_file) {
    if (status.type() == llvm::sys::fs::file_type::directory_file)
      return fail("is a directory");
    std::error_code code;
    file->owned = std::make_unique<llvm::raw_fd_ostream>(
        target, code, llvm::sys::fs::OF_None);
    if (code)
      return fail(code.message());
    file->stream = file->owned.get();
    return file;
  }
  file->path = target.str().str();
  llvm::Expected<llvm::sys::fs::TempFile> temporary =
      llvm::sys::fs::TempFile::create(target + "-%%%%%%.tmp");
  if (!temporary)
    return fail(llvm::toString(temporary.takeError()));
  file->temporary.emplace(std::move(*temporary));
  // The file it replaces keeps its permissions (a 0600 output stays
  // private); a new one gets the process's defaults.
  if (exists)
    (void)llvm::sys::fs::setPermissions(file->temporary->FD, status.permissions());
  file->owned = std::make_unique<llvm::raw_fd_ostream>(
      file->temporary->FD, /*shouldClose=*/false);
  file->stream = file->owned.get();
  return file;
}

OutputFile::~OutputFile() {
  // A stream with an unreported error would end the process at its
  // destruction, and so would the flush of what it still buffers: flushed
  // here and the error dropped (commit reported it, or nothing was
  // committed and the temporary file goes).
  if (stream) {
    stream->flush();
    stream->clear_error();
  }
  owned.reset();
  if (temporary)
    llvm::consumeError(temporary->discard());
}

bool OutputFile::finish(std::string &error) {
  if (!stream)
    return true; // finished already
  auto fail = [&](const Twine &cause) {
    error = ("cannot write " + (path == "-" ? "stdout" : path) + ": " + cause)
                .str();
    stream->clear_error();
    owned.reset();
    stream = nullptr;
    if (temporary)
      llvm::consumeError(temporary->discard());
    temporary.reset();
    failed = true;
    return false;
  };
  stream->flush();
  if (owned && !temporary)
    owned->close(); // a device; a temporary file's descriptor is its own
  if (stream->has_error())
    return fail(stream->error().message());
  owned.reset();
  stream = nullptr;
  return true;
}

bool OutputFile::commit(std::string &error) {
  if (!finish(error))
    return false;
  if (failed) {
    error = "cannot write " + path + ": an earlier write failed";
    return false;
  }
  if (!temporary)
    return true;
  llvm::Error kept = temporary->keep(path);
  temporary.reset();
  if (kept) {
    error = "cannot write " + path + ": " + llvm::toString(std::move(kept));
    return false;
  }
  return true;
}

bool fa4::writeFileSet(ArrayRef<std::pair<StringRef, StringRef>> files,
                       std::string &error) {
  std::vector<std::unique_ptr<OutputFile>> outputs;
  for (auto [path, text] : files) {
    outputs.push_back(OutputFile::open(path, error));
    if (!outputs.back())
      return false;
    outputs.back()->os() << text;
  }
  for (std::unique_ptr<OutputFile> &output : outputs)
    if (!output->finish(error))
      return false;
  for (std::unique_ptr<OutputFile> &output : outputs)
    if (!output->commit(error))
      return false;
  return true;
}

bool fa4::flushStdout(std::string &error) {
  llvm::outs().flush();
  if (!llvm::outs().has_error())
    return true;
  error = "cannot write stdout: " + llvm::outs().error().message();
  llvm::outs().clear_error();
  return false;
}
