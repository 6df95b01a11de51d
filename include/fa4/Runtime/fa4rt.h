/*===- fa4rt.h - fa4rt's C API: load a kernel, launch it -----------*- C -*-===*\
|*                                                                            *|
|* The runtime (Runtime.h) behind a C ABI, for callers that cannot link C++   *|
|* or load fa4's Python extension: ctypes under any Python, other languages,  *|
|* machines without LLVM (libfa4rt.so carries what it needs of LLVM and      *|
|* depends on nothing but libc, libstdc++ and libgcc). A launch here is       *|
|* runtime::launch: the same tensor checks, launch plan and backends.         *|
|*                                                                            *|
|* Every call that can fail returns 0 (or a non-null handle) on success and   *|
|* leaves fa4rt_last_error() empty; on failure it returns non-zero (or null)  *|
|* and fa4rt_last_error() says why, in fa4's words ("k: dtype bf16, the       *|
|* kernel takes fp16"). The message is the calling thread's own.              *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/

#ifndef FA4_RUNTIME_FA4RT_H
#define FA4_RUNTIME_FA4RT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a declaration below changes; a binding checks it against
   fa4rt_abi_version() before its first call. */
#define FA4RT_ABI_VERSION 5

/* The highest rank of a tensor (q, k, v, o have 4, the LSE 3; an extra any
   up to this). */
#define FA4RT_MAX_RANK 8

/* A tensor in a backend's memory: its base address (a CUDA device pointer,
   or an address fa4rt_emulator_allocate returned), element type ("fp16",
   "bf16" or "f32" for q, k, v, o and the LSE; an extra's as MLIR names it:
   "f32", "i32", "i1", ...), rank, and sizes and strides in elements,
   outermost first (entries past `rank` are ignored). q and o are [batch,
   seq_q, q_heads, head_dim], k and v [batch, seq_k, kv_heads, head_dim], the
   LSE [batch, q_heads, seq_q] (docs/Runtime.md, "What launch does"). */
typedef struct fa4rt_tensor {
  uint64_t address;
  const char *dtype;
  int32_t rank;
  int64_t sizes[FA4RT_MAX_RANK];
  int64_t strides[FA4RT_MAX_RANK];
} fa4rt_tensor;

/* A loaded kernel: the manifest and the cubin and PTX it names. */
typedef struct fa4rt_kernel fa4rt_kernel;

/* Where a kernel runs: the CUDA driver, or fa4-emu with its own memory. */
typedef struct fa4rt_backend fa4rt_backend;

int fa4rt_abi_version(void);

/* The calling thread's last error ("" after a call that succeeded). Valid
   until the thread's next fa4rt call. */
const char *fa4rt_last_error(void);

/* Reads `<name>.cubin.json` and the cubin and PTX it names, beside it. */
fa4rt_kernel *fa4rt_kernel_load(const char *manifest_path);
void fa4rt_kernel_free(fa4rt_kernel *kernel);
/* A kernel handed over in memory, as a compiler in the same process has it
   (fa4's Python package hands over what fa4.compile made): the manifest's
   JSON (NUL-terminated), the PTX (`ptx_bytes` of it, 0 for none) and the
   cubin (`cubin_bytes`, 0 for none; not both 0). The same checks as
   fa4rt_kernel_load; the file names the manifest gives are not read. */
fa4rt_kernel *fa4rt_kernel_create(const char *manifest_json, const char *ptx,
                                  size_t ptx_bytes, const void *cubin,
                                  size_t cubin_bytes);
/* The manifest as fa4c wrote it (JSON), valid while the kernel is. */
const char *fa4rt_kernel_manifest(const fa4rt_kernel *kernel);

/* The process's CUDA backend, opened on first use (libcuda.so.1 with dlopen)
   in the calling thread's current context, else device 0's primary context.
   Owned by fa4rt: never freed (fa4rt_backend_free ignores it). */
fa4rt_backend *fa4rt_backend_cuda(void);

/* An fa4-emu backend with a device of its own: launches run the kernel's PTX
   (sm_100a, sm_103a or sm_90a) on `workers` host threads (0: one per core), the
   schedule seeded from `seed`; a launch fails with the emulator's first
   report (a fault, a deadlock, a hazard or barrier misuse). `flags` is 0 or
   FA4RT_EMULATOR_PLAN_ONLY: launches then stop after every check and the
   launch plan, where the kernel would start (a dry run; 0 returned; the
   PTX is not parsed, so a PTX the emulator would refuse passes). */
#define FA4RT_EMULATOR_PLAN_ONLY 1u
fa4rt_backend *fa4rt_backend_emulator(unsigned workers, uint64_t seed,
                                      unsigned flags);
void fa4rt_backend_free(fa4rt_backend *backend);

/* The emulator's memory: a zeroed allocation (0 on failure; not for the CUDA
   backend), and the host bytes of [address, address + bytes) (null unless
   they lie inside one allocation), through which a caller fills the inputs
   and reads the outputs. */
uint64_t fa4rt_emulator_allocate(fa4rt_backend *backend, uint64_t bytes);
void *fa4rt_emulator_host(fa4rt_backend *backend, uint64_t address,
                          uint64_t bytes);

/* runtime::launch: checks the tensors against the kernel (and the extras,
   the tensors a kernel's score_mod / mask_mod read, in the manifest's
   order), plans the launch and runs it on `backend` in `stream` (a CUstream;
   null is the legacy default stream; unused by the emulator). `lse` is null
   for a kernel compiled without --lse; `extras` may be null when
   `num_extras` is 0. On the CUDA backend the launch is asynchronous: a 0
   says it was enqueued. */
int fa4rt_launch(const fa4rt_kernel *kernel, fa4rt_backend *backend,
                 const fa4rt_tensor *q, const fa4rt_tensor *k,
                 const fa4rt_tensor *v, const fa4rt_tensor *o,
                 const fa4rt_tensor *lse, const fa4rt_tensor *extras,
                 size_t num_extras, void *stream);

/* The backward's three kernels (fa4c --backward, sm_90a): a manifest of kind
   "backward" and the cubin and PTX beside it. */
typedef struct fa4rt_backward fa4rt_backward;
fa4rt_backward *fa4rt_backward_load(const char *manifest_path);
/* The backward handed over in memory, as fa4rt_kernel_create takes a
   forward (fa4.compile's backward comes this way): the manifest's JSON, the
   PTX and the cubin; the same checks as fa4rt_backward_load. */
fa4rt_backward *fa4rt_backward_create(const char *manifest_json,
                                      const char *ptx, size_t ptx_bytes,
                                      const void *cubin, size_t cubin_bytes);
void fa4rt_backward_free(fa4rt_backward *kernel);
/* The manifest as fa4c wrote it (JSON), valid while the kernel is. */
const char *fa4rt_backward_manifest(const fa4rt_backward *kernel);
/* runtime::launchBackward: the `num_tensors` (11, and the manifest's
   extras after them) tensors q, k, v, o, dout, lse (as the forward took and
   gave them), dq, dk, dv (written), delta ([batch, q_heads, seq_q] f32) and
   dq_accum (q's sizes, f32), both dense scratch, then the memrefs the
   kernels' score_mod / mask_mod regions read (as fa4rt_launch's extras),
   checked against the kernels, then the three kernels enqueued in order on
   `stream` (asynchronous on CUDA: a 0 says they were enqueued). */
int fa4rt_backward_launch(const fa4rt_backward *kernel, fa4rt_backend *backend,
                          const fa4rt_tensor *tensors, size_t num_tensors,
                          void *stream);

/* FP8 (e4m3) kernels for sm_90a read V as "vt" (the manifest's V map says
   "layout": "vt"): [batch, kv_heads, v_head_dim, seq_k_padded] bytes,
   seq_k_padded = 16 * ceil(seq_k / 16), keys contiguous and permuted within
   each 16 (position k = 4t + 2h + e holds key 8h + 2t + e), the padding
   keys +0.0 (docs/FP8.md). This writes it, dense, into the host buffer `vt`
   (`vt_bytes` at least that product) from the host e4m3 V `value` [batch,
   seq_k, kv_heads, v_head_dim] (`sizes`) with `strides` in elements (any
   signs; every byte they reach inside [value, value + value_bytes)).
   runtime::prepareFp8Value; ABI 5. */
int fa4rt_prepare_fp8_value(const void *value, size_t value_bytes,
                            const int64_t sizes[4], const int64_t strides[4],
                            void *vt, size_t vt_bytes);

/* fa4rt_launch on fa4rt_backend_cuda(). */
int fa4rt_launch_cuda(const fa4rt_kernel *kernel, const fa4rt_tensor *q,
                      const fa4rt_tensor *k, const fa4rt_tensor *v,
                      const fa4rt_tensor *o, const fa4rt_tensor *lse,
                      const fa4rt_tensor *extras, size_t num_extras,
                      void *stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FA4_RUNTIME_FA4RT_H */
