//===- Contract.h - what a kernel's code assumes of its manifest -*- C++ -*-===//
//
// The manifest tells a launcher how to build what the kernel reads: the
// tensor maps' swizzle, box and element type, the block, the shared memory,
// the parameters. The kernel's code was generated for one answer to each —
// its shared-memory descriptors assume the swizzle TMA writes, its MMAs the
// element type — and nothing in the PTX's entry point says which. So fa4c
// embeds the answer in the code: a module-level constant `fa4_contract`, a
// `.visible .global .b8` array in the PTX that ptxas keeps, symbol and
// bytes, in the cubin's ELF. Its text is kernelContract() of the manifest
// fa4c writes, one `field=value` line per field the code depends on, named
// as the manifest's JSON names it; the runtime recomputes it from the
// manifest it is given and compares line by line, so a refusal names the
// field and both values.
//
// A global rather than a comment or an ELF note: a comment does not survive
// ptxas, and only what the PTX declares reaches the cubin — one
// declaration, carried by the same lowering for every target, puts the same
// bytes in both files, which is what lets the PTX and the cubin of one fa4c
// run be checked against each other.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_RUNTIME_CONTRACT_H
#define FA4_RUNTIME_CONTRACT_H

#include "fa4/Runtime/Backward.h"
#include "fa4/Runtime/Launch.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>

namespace mlir::fa4::runtime {

/// The symbol that holds the contract in the PTX and the cubin.
constexpr const char *kContractSymbol = "fa4_contract";
/// The largest contract read (fa4c's are about 2 KB).
constexpr uint64_t kMaxContractBytes = 64 * 1024;

/// The contract of the code a manifest describes: the first line
/// `fa4-contract 1`, then `field=value` for every field of the manifest the
/// generated code depends on (the kernel's name and target, block, shared
/// memory and TMEM columns, the attention variant, each tensor map and
/// extra, the parameters, the warp roles). Left out, because the code does
/// not depend on them: the cubin and PTX file names, the grid's sm_count
/// (the kernel reads its grid size), the tensor maps' `strides_bytes` (dense
/// defaults a launch replaces with its tensors' strides, which planLaunch
/// checks) and ptxas's report.
std::string kernelContract(const Manifest &manifest);

/// The contract the PTX declares (`.global ... .b8 fa4_contract[N] = {...}`),
/// std::nullopt when it declares none; an error when the declaration is
/// malformed, declared twice or larger than kMaxContractBytes.
llvm::Expected<std::optional<std::string>> readPtxContract(llvm::StringRef ptx);

/// The contract a cubin holds: the bytes of the ELF64 symbol
/// `fa4_contract` (in `.symtab`, defined in a section with contents),
/// std::nullopt when the cubin has no such symbol or is no ELF file at all.
/// Every offset and size is checked against the file, which is untrusted
/// input: an error when an ELF file is not a little-endian ELF64 one, when
/// a header, the symbol table, a name or the symbol's bytes lie outside it,
/// or when the symbol is defined twice.
llvm::Expected<std::optional<std::string>>
readCubinContract(llvm::ArrayRef<uint8_t> cubin);

/// Checks the manifest against the contracts of the code given (either may
/// be empty: not there, or not what will run): the PTX's and the cubin's
/// must agree with each other and with kernelContract(manifest). A refusal
/// names the first field that differs, the manifest's value and the
/// kernel's. Code with no contract (hand-written PTX, the output of an fa4
/// from before contracts) is accepted when no other code given has one.
llvm::Error checkContract(const Manifest &manifest, llvm::StringRef ptx,
                          llvm::ArrayRef<uint8_t> cubin);

/// The backward's contract (a manifest of kind "backward", Backward.h):
/// the variant and each kernel's name, block, shared memory and roles, in
/// the same `field=value` lines. fa4c embeds it in the backward's PTX and
/// cubin as in a forward kernel's; BackwardKernel::load and fa4-emu check
/// it as checkContract does.
std::string backwardContract(const BackwardManifest &manifest);
/// checkContract's comparison, against a contract text already made.
llvm::Error checkContractText(const std::string &expected, llvm::StringRef ptx,
                              llvm::ArrayRef<uint8_t> cubin);

} // namespace mlir::fa4::runtime

#endif // FA4_RUNTIME_CONTRACT_H
