// RUN: fa4-opt %s -split-input-file -verify-diagnostics | FileCheck %s

// The typed attributes of a compiled kernel: #fa4.spec (what a tiled
// function computes, written by fa4-tile), #fa4.grid (fa4-tile-scheduler)
// and #fa4.launch (fa4-to-nvvm, the manifest's source). Each verifies
// itself; fa4.spec also against its function. fa4.barriers and fa4.tmem
// (the schedule's summaries, fa4-insert-barriers and fa4-allocate-tmem)
// are typed too.

// CHECK-LABEL: func.func @spec
// CHECK-SAME: fa4.spec = #fa4.spec<mask = window, window_left = 128, window_right = 0, scale = 2.500000e-01, softcap = 5.000000e+01, lse = true, arguments = [0, 1, 2, 3, 4]>
func.func @spec(%q: memref<?x?x2x64xf16>, %k: memref<?x?x1x64xf16>,
                %v: memref<?x?x1x64xf16>, %o: memref<?x?x2x64xf16>,
                %lse: memref<?x2x?xf32>) attributes {
    fa4.spec = #fa4.spec<mask = window, window_left = 128, window_right = 0,
                         scale = 0.25, softcap = 50.0, lse = true,
                         arguments = [0, 1, 2, 3, 4]>} {
  return
}

// -----

// The extras and the block mask's index among them are optional.
// CHECK-LABEL: func.func @extras
// CHECK-SAME: arguments = [1, 2, 3, 4], extras = [0, 5], block_mask = 1>
func.func @extras(%bias: memref<8xf32>, %q: memref<?x?x2x64xf16>,
                  %k: memref<?x?x1x64xf16>, %v: memref<?x?x1x64xf16>,
                  %o: memref<?x?x2x64xf16>, %mask: memref<1x1x4x4xi32>) attributes {
    fa4.spec = #fa4.spec<mask = none, window_left = -1, window_right = -1,
                         scale = 0.125, softcap = 0.0, lse = false,
                         arguments = [1, 2, 3, 4], extras = [0, 5], block_mask = 1>} {
  return
}

// -----

// expected-error @+1 {{fa4.spec names argument #4, which is not a memref argument of the function}}
func.func @missing(%q: memref<?x?x2x64xf16>, %k: memref<?x?x1x64xf16>,
                   %v: memref<?x?x1x64xf16>, %o: memref<?x?x2x64xf16>) attributes {
    fa4.spec = #fa4.spec<mask = none, window_left = -1, window_right = -1,
                         scale = 0.125, softcap = 0.0, lse = true,
                         arguments = [0, 1, 2, 3, 4]>} {
  return
}

// -----

// expected-error @+1 {{fa4.spec names argument #1, which is not a memref argument of the function}}
func.func @scalar(%q: memref<?x?x2x64xf16>, %k: index,
                  %v: memref<?x?x1x64xf16>, %o: memref<?x?x2x64xf16>) attributes {
    fa4.spec = #fa4.spec<mask = none, window_left = -1, window_right = -1,
                         scale = 0.125, softcap = 0.0, lse = false,
                         arguments = [0, 1, 2, 3]>} {
  return
}

// -----

func.func @twice(%q: memref<?x?x2x64xf16>, %k: memref<?x?x1x64xf16>,
                 %v: memref<?x?x1x64xf16>, %o: memref<?x?x2x64xf16>) attributes {
    // expected-error @+1 {{fa4.spec names argument #0 twice}}
    fa4.spec = #fa4.spec<mask = none, window_left = -1, window_right = -1,
                         scale = 0.125, softcap = 0.0, lse = false,
                         arguments = [0, 1, 2, 0]>} {
  return
}

// -----

func.func @count(%q: memref<?x?x2x64xf16>, %k: memref<?x?x1x64xf16>,
                 %v: memref<?x?x1x64xf16>, %o: memref<?x?x2x64xf16>) attributes {
    // expected-error @+1 {{fa4.spec: arguments names 4 positions; Q, K, V, O and the LSE are 5}}
    fa4.spec = #fa4.spec<mask = none, window_left = -1, window_right = -1,
                         scale = 0.125, softcap = 0.0, lse = true,
                         arguments = [0, 1, 2, 3]>} {
  return
}

// -----

func.func @window(%q: memref<?x?x2x64xf16>) attributes {
    // expected-error @+1 {{fa4.spec: window_left must be -1 (unbounded) or in [0, 2^31), got 2147483648}}
    fa4.spec = #fa4.spec<mask = window, window_left = 2147483648, window_right = 0,
                         scale = 0.125, softcap = 0.0, lse = false,
                         arguments = [0, 0, 0, 0]>} {
  return
}

// -----

func.func @scale(%q: memref<?x?x2x64xf16>) attributes {
    // expected-error @+1 {{fa4.spec: scale must be positive and finite}}
    fa4.spec = #fa4.spec<mask = none, window_left = -1, window_right = -1,
                         scale = 0x7FC00000, softcap = 0.0, lse = false,
                         arguments = [0, 1, 2, 3]>} {
  return
}

// -----

func.func @softcap(%q: memref<?x?x2x64xf16>) attributes {
    // expected-error @+1 {{fa4.spec: softcap must be non-negative and finite}}
    fa4.spec = #fa4.spec<mask = none, window_left = -1, window_right = -1,
                         scale = 0.125, softcap = -1.0, lse = false,
                         arguments = [0, 1, 2, 3]>} {
  return
}

// -----

func.func @block_mask(%q: memref<?x?x2x64xf16>) attributes {
    // expected-error @+1 {{fa4.spec: block_mask 1 is not the index of one of its 1 extras}}
    fa4.spec = #fa4.spec<mask = none, window_left = -1, window_right = -1,
                         scale = 0.125, softcap = 0.0, lse = false,
                         arguments = [0, 1, 2, 3], extras = [4], block_mask = 1>} {
  return
}

// -----

func.func @flag(%q: memref<?x?x2x64xf16>) attributes {
    // expected-error @+3 {{expected true or false, got 'yes'}}
    // expected-error @+2 {{failed to parse FA4_KernelSpecAttr parameter 'lse' which is to be a `bool`}}
    fa4.spec = #fa4.spec<mask = none, window_left = -1, window_right = -1,
                         scale = 0.125, softcap = 0.0, lse = yes,
                         arguments = [0, 1, 2, 3]>} {
  return
}

// -----

// The dictionary fa4.spec once was is refused by name.
// expected-error @+1 {{'fa4.spec' must be a #fa4.spec<...>, got {arguments = array<i64: 0, 1, 2, 3>}}}
func.func @dictionary(%q: memref<?x?x2x64xf16>) attributes {
    fa4.spec = {arguments = array<i64: 0, 1, 2, 3>}} {
  return
}

// -----

// expected-error @+1 {{'fa4.spec' belongs on a function, not on 'builtin.module'}}
module attributes {fa4.spec = #fa4.spec<mask = none, window_left = -1, window_right = -1,
                                        scale = 0.125, softcap = 0.0, lse = false,
                                        arguments = [0, 1, 2, 3]>} {
}

// -----

// fa4.grid belongs on fa4.warp_specialize (tile-scheduler.test prints it
// there), fa4.launch on the kernel's llvm.func.
// expected-error @+1 {{'fa4.grid' belongs on 'fa4.warp_specialize', not on 'func.func'}}
func.func @grid() attributes {fa4.grid = #fa4.grid<sm_count = 148, order = lpt>} {
  return
}

// -----

// expected-error @+1 {{fa4.grid: sm_count must be in [1, 2^31), got 0}}
func.func @grid_zero() attributes {fa4.grid = #fa4.grid<sm_count = 0, order = static>} {
  return
}

// -----

// expected-error @+1 {{'fa4.grid' must be a #fa4.grid<...>, got {sm_count = 148 : i64}}}
func.func @grid_dictionary() attributes {fa4.grid = {sm_count = 148 : i64}} {
  return
}

// -----

// CHECK-LABEL: llvm.func @launch
// CHECK-SAME: fa4.launch = #fa4.launch<block = 512, smem_bytes = 1024, tmem_columns = 512, rows_per_task = 256, grid = <sm_count = 2, order = static>, spec = <{{.*}}>, roles = [#fa4.role_info<name = "mma", first_warp = 12, num_warps = 1, registers = 72>], tensor_maps = [#fa4.tensor_map<name = "q", dtype = "fp16", heads = 2, head_dim = 64, box = [64, 1, 128, 1], strides = [-1, -1, 64, 1]>, {{.*}}], lse = false, score_mod = false, mask_mod = true, extras = [#fa4.extra<dtype = "i32", shape = [-1, 4]>], block_mask = 0>
llvm.func @launch() attributes {fa4.launch = #fa4.launch<
    block = 512, smem_bytes = 1024, tmem_columns = 512, rows_per_task = 256,
    grid = #fa4.grid<sm_count = 2, order = static>,
    spec = #fa4.spec<mask = none, window_left = -1, window_right = -1,
                     scale = 0.125, softcap = 0.0, lse = false,
                     arguments = [0, 1, 2, 3], extras = [4], block_mask = 0>,
    roles = [#fa4.role_info<name = "mma", first_warp = 12, num_warps = 1, registers = 72>],
    tensor_maps = [
      #fa4.tensor_map<name = "q", dtype = "fp16", heads = 2, head_dim = 64, box = [64, 1, 128, 1], strides = [-1, -1, 64, 1]>,
      #fa4.tensor_map<name = "k", dtype = "fp16", heads = 1, head_dim = 64, box = [64, 1, 128, 1], strides = [-1, -1, 64, 1]>,
      #fa4.tensor_map<name = "v", dtype = "fp16", heads = 1, head_dim = 64, box = [64, 1, 128, 1], strides = [-1, -1, 64, 1]>,
      #fa4.tensor_map<name = "o", dtype = "fp16", heads = 2, head_dim = 64, box = [64, 1, 128, 1], strides = [-1, -1, 64, 1]>],
    lse = false, score_mod = false, mask_mod = true,
    extras = [#fa4.extra<dtype = "i32", shape = [-1, 4]>], block_mask = 0>} {
  llvm.return
}

// -----

// expected-error @+1 {{'fa4.launch' must be a #fa4.launch<...>, got {block = 512 : i64}}}
func.func @launch_dictionary() attributes {fa4.launch = {block = 512 : i64}} {
  return
}

// -----

// expected-error @+1 {{'fa4.launch' belongs on 'llvm.func', not on 'func.func'}}
func.func @launch_on_func() attributes {fa4.launch = #fa4.launch<
    block = 512, smem_bytes = 0, tmem_columns = 0, rows_per_task = 0,
    spec = #fa4.spec<mask = none, window_left = -1, window_right = -1,
                     scale = 0.125, softcap = 0.0, lse = false, arguments = [0, 1, 2, 3]>,
    roles = [#fa4.role_info<name = "mma", first_warp = 0, num_warps = 1, registers = 72>],
    tensor_maps = [
      #fa4.tensor_map<name = "q", dtype = "fp16", heads = 2, head_dim = 64, box = [64, 1, 128, 1], strides = [-1, -1, 64, 1]>,
      #fa4.tensor_map<name = "k", dtype = "fp16", heads = 1, head_dim = 64, box = [64, 1, 128, 1], strides = [-1, -1, 64, 1]>,
      #fa4.tensor_map<name = "v", dtype = "fp16", heads = 1, head_dim = 64, box = [64, 1, 128, 1], strides = [-1, -1, 64, 1]>,
      #fa4.tensor_map<name = "o", dtype = "fp16", heads = 2, head_dim = 64, box = [64, 1, 128, 1], strides = [-1, -1, 64, 1]>],
    lse = false, score_mod = false, mask_mod = false>} {
  return
}

// -----

// expected-error @+1 {{fa4.launch: lse = true but its spec says lse = false}}
llvm.func @launch_lse() attributes {fa4.launch = #fa4.launch<
    block = 512, smem_bytes = 0, tmem_columns = 0, rows_per_task = 0,
    spec = #fa4.spec<mask = none, window_left = -1, window_right = -1,
                     scale = 0.125, softcap = 0.0, lse = false, arguments = [0, 1, 2, 3]>,
    roles = [#fa4.role_info<name = "mma", first_warp = 0, num_warps = 1, registers = 72>],
    tensor_maps = [
      #fa4.tensor_map<name = "q", dtype = "fp16", heads = 2, head_dim = 64, box = [64, 1, 128, 1], strides = [-1, -1, 64, 1]>,
      #fa4.tensor_map<name = "k", dtype = "fp16", heads = 1, head_dim = 64, box = [64, 1, 128, 1], strides = [-1, -1, 64, 1]>,
      #fa4.tensor_map<name = "v", dtype = "fp16", heads = 1, head_dim = 64, box = [64, 1, 128, 1], strides = [-1, -1, 64, 1]>,
      #fa4.tensor_map<name = "o", dtype = "fp16", heads = 2, head_dim = 64, box = [64, 1, 128, 1], strides = [-1, -1, 64, 1]>],
    lse = true, score_mod = false, mask_mod = false>} {
  llvm.return
}

// -----

// expected-error @+1 {{fa4.launch: tensor_maps must describe q, k, v and o once each}}
llvm.func @launch_maps() attributes {fa4.launch = #fa4.launch<
    block = 512, smem_bytes = 0, tmem_columns = 0, rows_per_task = 0,
    spec = #fa4.spec<mask = none, window_left = -1, window_right = -1,
                     scale = 0.125, softcap = 0.0, lse = false, arguments = [0, 1, 2, 3]>,
    roles = [#fa4.role_info<name = "mma", first_warp = 0, num_warps = 1, registers = 72>],
    tensor_maps = [], lse = false, score_mod = false, mask_mod = false>} {
  llvm.return
}

// -----

// expected-error @+1 {{fa4.launch: block must be whole warps, 32 to 1024 threads, got -5}}
llvm.func @launch_block() attributes {fa4.launch = #fa4.launch<
    block = -5, smem_bytes = 0, tmem_columns = 0, rows_per_task = 0,
    spec = #fa4.spec<mask = none, window_left = -1, window_right = -1,
                     scale = 0.125, softcap = 0.0, lse = false, arguments = [0, 1, 2, 3]>,
    roles = [#fa4.role_info<name = "mma", first_warp = 0, num_warps = 1, registers = 72>],
    tensor_maps = [
      #fa4.tensor_map<name = "q", dtype = "fp16", heads = 2, head_dim = 64, box = [64, 1, 128, 1], strides = [-1, -1, 64, 1]>,
      #fa4.tensor_map<name = "k", dtype = "fp16", heads = 1, head_dim = 64, box = [64, 1, 128, 1], strides = [-1, -1, 64, 1]>,
      #fa4.tensor_map<name = "v", dtype = "fp16", heads = 1, head_dim = 64, box = [64, 1, 128, 1], strides = [-1, -1, 64, 1]>,
      #fa4.tensor_map<name = "o", dtype = "fp16", heads = 2, head_dim = 64, box = [64, 1, 128, 1], strides = [-1, -1, 64, 1]>],
    lse = false, score_mod = false, mask_mod = false>} {
  llvm.return
}

// -----

// expected-error @+1 {{fa4.role_info: 'mma' needs a name, warps within a CTA's 32 and 24 to 256 registers, got warps 31 + 2 and 72 registers}}
llvm.func @role() attributes {r = #fa4.role_info<name = "mma", first_warp = 31, num_warps = 2, registers = 72>} {
  llvm.return
}

// -----

// expected-error @+1 {{fa4.tensor_map: name must be q, k, v or o, got 'x'}}
llvm.func @map() attributes {m = #fa4.tensor_map<name = "x", dtype = "fp16", heads = 2, head_dim = 64, box = [64, 1, 128, 1], strides = [-1, -1, 64, 1]>} {
  llvm.return
}

// -----

// The entry op's rules: bounds only with mask = window, the softcap limit.
func.func @causal_bounds(%q: memref<?x?x2x64xf16>) attributes {
    // expected-error @+1 {{fa4.spec: window bounds (7, 9) require mask = window, got mask = causal}}
    fa4.spec = #fa4.spec<mask = causal, window_left = 7, window_right = 9,
                         scale = 0.125, softcap = 0.0, lse = false,
                         arguments = [0, 1, 2, 3]>} {
  return
}

// -----

func.func @big_softcap(%q: memref<?x?x2x64xf16>) attributes {
    // expected-error @+1 {{fa4.spec: softcap must be at most 1024}}
    fa4.spec = #fa4.spec<mask = none, window_left = -1, window_right = -1,
                         scale = 0.125, softcap = 2000.0, lse = false,
                         arguments = [0, 1, 2, 3]>} {
  return
}

// -----

// expected-error @+1 {{fa4.spec names argument #9223372036854775807, which is not a memref argument of the function}}
func.func @largest(%q: memref<?x?x2x64xf16>, %k: memref<?x?x1x64xf16>,
                   %v: memref<?x?x1x64xf16>) attributes {
    fa4.spec = #fa4.spec<mask = none, window_left = -1, window_right = -1,
                         scale = 0.125, softcap = 0.0, lse = false,
                         arguments = [0, 1, 2, 9223372036854775807]>} {
  return
}

// -----

// expected-error @+1 {{fa4.spec's Q, K, V and O ('memref<?x?x4x64xf16>', 'memref<?x?x3x64xf16>', 'memref<?x?x3x64xf16>', 'memref<?x?x4x64xf16>') do not describe one attention}}
func.func @heads(%q: memref<?x?x4x64xf16>, %k: memref<?x?x3x64xf16>,
                 %v: memref<?x?x3x64xf16>, %o: memref<?x?x4x64xf16>) attributes {
    fa4.spec = #fa4.spec<mask = none, window_left = -1, window_right = -1,
                         scale = 0.125, softcap = 0.0, lse = false,
                         arguments = [0, 1, 2, 3]>} {
  return
}

// -----

// expected-error @+1 {{fa4.spec's LSE is 'memref<?x4x?xf32>'; expected a row-major [batch, q_heads = 2, seq_q] memref of f32}}
func.func @lse_heads(%q: memref<?x?x2x64xf16>, %k: memref<?x?x1x64xf16>,
                     %v: memref<?x?x1x64xf16>, %o: memref<?x?x2x64xf16>,
                     %lse: memref<?x4x?xf32>) attributes {
    fa4.spec = #fa4.spec<mask = none, window_left = -1, window_right = -1,
                         scale = 0.125, softcap = 0.0, lse = true,
                         arguments = [0, 1, 2, 3, 4]>} {
  return
}

// -----

// The schedule's summaries: a list of #fa4.barrier and a #fa4.tmem_layout,
// on fa4.warp_specialize only (the old dictionaries are refused).

// expected-error @+1 {{'fa4.barriers' belongs on 'fa4.warp_specialize', not on 'func.func'}}
func.func @barriers_on_func() attributes {fa4.barriers = [#fa4.barrier<name = "kv_full", kind = tma, count = 1, stages = 3, producers = ["load"], consumers = ["mma"]>]} {
  return
}

// -----

// expected-error @+1 {{'fa4.barriers' must be a list of #fa4.barrier<...>, got [{count = 1 : i64, name = "kv_full"}]}}
func.func @barriers_dictionary() attributes {fa4.barriers = [{name = "kv_full", count = 1 : i64}]} {
  return
}

// -----

// expected-error @+1 {{fa4.barrier: 'kv_full' needs a name, 1 to 2^20 - 1 arrivals and stages and a role on each side, got count 0, stages 3, 1 producers and 1 consumers}}
func.func @barrier_no_arrivals() attributes {fa4.barriers = [#fa4.barrier<name = "kv_full", kind = tma, count = 0, stages = 3, producers = ["load"], consumers = ["mma"]>]} {
  return
}

// -----

// expected-error @+1 {{fa4.barrier: 'kv_empty' needs a name, 1 to 2^20 - 1 arrivals and stages and a role on each side, got count 1, stages 3, 1 producers and 0 consumers}}
func.func @barrier_no_waiter() attributes {fa4.barriers = [#fa4.barrier<name = "kv_empty", kind = tcgen05, count = 1, stages = 3, producers = ["mma"], consumers = []>]} {
  return
}

// -----

// expected-error @+1 {{'fa4.tmem' belongs on 'fa4.warp_specialize', not on 'func.func'}}
func.func @tmem_on_func() attributes {fa4.tmem = #fa4.tmem_layout<columns = 256, buffers = [#fa4.tmem_buffer<name = "S0", column = 0, columns = 128>, #fa4.tmem_buffer<name = "O0", column = 128, columns = 128>]>} {
  return
}

// -----

// expected-error @+1 {{fa4.tmem_layout: buffers 'S0' and 'O0' overlap}}
func.func @tmem_overlap() attributes {fa4.tmem = #fa4.tmem_layout<columns = 256, buffers = [#fa4.tmem_buffer<name = "O0", column = 64, columns = 128>, #fa4.tmem_buffer<name = "S0", column = 0, columns = 128>]>} {
  return
}

// -----

// expected-error @+1 {{fa4.tmem_layout: buffer 'O0' ends at column 384, past the 256 allocated}}
func.func @tmem_past_allocation() attributes {fa4.tmem = #fa4.tmem_layout<columns = 256, buffers = [#fa4.tmem_buffer<name = "O0", column = 256, columns = 128>]>} {
  return
}

// -----

// expected-error @+1 {{fa4.tmem_layout: columns must be a power of two from 32 to 512 (tcgen05.alloc's), got 384}}
func.func @tmem_columns() attributes {fa4.tmem = #fa4.tmem_layout<columns = 384, buffers = []>} {
  return
}

// -----

// expected-error @+2 {{fa4.tmem_buffer: 'S0' needs a name and columns inside TMEM's 512, got 128 from column 448}}
// expected-error @+1 {{failed to parse FA4_TmemLayoutAttr parameter 'buffers'}}
func.func @tmem_buffer_past_tmem() attributes {fa4.tmem = #fa4.tmem_layout<columns = 512, buffers = [#fa4.tmem_buffer<name = "S0", column = 448, columns = 128>]>} {
  return
}

// -----

// expected-error @+1 {{fa4.spec's cu_seqlens table 'memref<?xi64>' is not an i32 memref [batch + 1]}}
func.func @cu_seqlens_type(%q: memref<1x?x2x64xf16>, %k: memref<1x?x1x64xf16>,
                           %v: memref<1x?x1x64xf16>, %o: memref<1x?x2x64xf16>,
                           %cq: memref<?xi64>, %ck: memref<?xi32>) attributes {
    fa4.spec = #fa4.spec<mask = none, window_left = -1, window_right = -1,
                         scale = 0.125, softcap = 0.0, lse = false,
                         arguments = [0, 1, 2, 3], extras = [4, 5],
                         cu_seqlens_q = 0, cu_seqlens_k = 1>} {
  return
}

// -----

// expected-error @+1 {{fa4.spec's varlen Q is 'memref<2x?x2x64xf16>'; packed tensors are [1, total, heads, head_dim]}}
func.func @cu_seqlens_batched(%q: memref<2x?x2x64xf16>, %k: memref<?x?x1x64xf16>,
                              %v: memref<?x?x1x64xf16>, %o: memref<?x?x2x64xf16>,
                              %cq: memref<?xi32>, %ck: memref<?xi32>) attributes {
    fa4.spec = #fa4.spec<mask = none, window_left = -1, window_right = -1,
                         scale = 0.125, softcap = 0.0, lse = false,
                         arguments = [0, 1, 2, 3], extras = [4, 5],
                         cu_seqlens_q = 0, cu_seqlens_k = 1>} {
  return
}

// -----

func.func @cu_seqlens_alone(%q: memref<1x?x2x64xf16>, %k: memref<1x?x1x64xf16>,
                            %v: memref<1x?x1x64xf16>, %o: memref<1x?x2x64xf16>,
                            %cq: memref<?xi32>) attributes {
    // expected-error @+1 {{fa4.spec: cu_seqlens_q and cu_seqlens_k go together}}
    fa4.spec = #fa4.spec<mask = none, window_left = -1, window_right = -1,
                         scale = 0.125, softcap = 0.0, lse = false,
                         arguments = [0, 1, 2, 3], extras = [4],
                         cu_seqlens_q = 0>} {
  return
}
