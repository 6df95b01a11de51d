// RUN: fa4-opt %s -split-input-file -verify-diagnostics

func.func @registers_overflow() {
  // expected-error @+1 {{'fa4.warp_specialize' op register budgets need 81920 registers, more than the 64512 its 384 threads hold at launch (softmax0: 128 threads x 256, a: 128 threads x 256, b: 128 threads x 128)}}
  fa4.warp_specialize {
    fa4.role "softmax0" warps(0, 4) registers(256) {}
    fa4.role "a" warps(4, 4) registers(256) {}
    fa4.role "b" warps(8, 4) registers(128) {}
  }
  return
}

// -----

// The register file is 65 536, but 384 threads start with 168 each: a
// consumer's setmaxnreg.inc to 240 beside a producer at 32 would wait
// forever for registers the CTA never had.
func.func @registers_past_the_launch() {
  // expected-error @+1 {{'fa4.warp_specialize' op register budgets need 65536 registers, more than the 64512 its 384 threads hold at launch (producer: 128 threads x 32, consumer0: 128 threads x 240, consumer1: 128 threads x 240)}}
  fa4.warp_specialize {
    fa4.role "producer" warps(0, 4) registers(32) {}
    fa4.role "consumer0" warps(4, 4) registers(240) {}
    fa4.role "consumer1" warps(8, 4) registers(240) {}
  }
  return
}

// -----

func.func @warps_overlap() {
  fa4.warp_specialize {
    fa4.role "a" warps(0, 4) registers(48) {}
    // expected-error @+1 {{'fa4.role' op warp 3 already belongs to another role}}
    fa4.role "b" warps(3, 1) registers(48) {}
  }
  return
}

// -----

func.func @warp_out_of_range() {
  fa4.warp_specialize {
    // expected-error @+1 {{'fa4.role' op needs warps inside the CTA's 16, got warps(15, 2)}}
    fa4.role "a" warps(15, 2) registers(48) {}
  }
  return
}

// -----

func.func @registers_not_setmaxnreg() {
  fa4.warp_specialize {
    // expected-error @+1 {{'fa4.role' op register budget 100 is not a multiple of 8 in [24, 256] (what setmaxnreg accepts)}}
    fa4.role "a" warps(0, 4) registers(100) {}
  }
  return
}

// -----

func.func @no_warps() {
  fa4.warp_specialize {
    // expected-error @+1 {{'fa4.role' op needs warps inside the CTA's 16, got warps(0, 0)}}
    fa4.role "a" warps(0, 0) registers(48) {}
  }
  return
}

// -----

// Read signed: a negative first warp is refused, not wrapped around.
func.func @negative_warp() {
  fa4.warp_specialize {
    // expected-error @+1 {{'fa4.role' op needs warps inside the CTA's 16, got warps(-1, 4)}}
    fa4.role "a" warps(-1, 4) registers(48) {}
  }
  return
}

// -----

func.func @huge_warp_count() {
  fa4.warp_specialize {
    // expected-error @+1 {{'fa4.role' op needs warps inside the CTA's 16, got warps(4, 9223372036854775807)}}
    fa4.role "a" warps(4, 9223372036854775807) registers(48) {}
  }
  return
}

// -----

func.func @not_a_role() {
  // expected-error @+1 {{'fa4.warp_specialize' op may only hold fa4.role ops, found 'arith.constant'}}
  fa4.warp_specialize {
    %c0 = arith.constant 0 : index
  }
  return
}

// -----

func.func @role_outside() {
  // expected-error @+1 {{'fa4.role' op expects parent op 'fa4.warp_specialize'}}
  fa4.role "a" warps(0, 1) registers(48) {}
  return
}

// -----

func.func @tmem_alloc_f16() {
  // expected-error @+1 {{'fa4.tmem_alloc' op allocates f32 accumulators; reinterpret with fa4.tmem_view for 'f16'}}
  %p = fa4.tmem_alloc "P" : !fa4.tmem<[128, 128], f16>
  return
}

// -----

func.func @tmem_offset_out_of_range() {
  // expected-error @+1 {{'fa4.tmem_alloc' op columns [448, 576) are outside TMEM's 512 columns}}
  %o = fa4.tmem_alloc "O1" {column_offset = 448 : i64} : !fa4.tmem<[128, 128], f32>
  return
}

// -----

func.func @tmem_view_too_wide() {
  %s = fa4.tmem_alloc "S" : !fa4.tmem<[128, 64], f32>
  // expected-error @+1 {{'fa4.tmem_view' op view spans 128 columns, more than its source's 64}}
  %p = fa4.tmem_view "P" %s : !fa4.tmem<[128, 64], f32> -> !fa4.tmem<[128, 256], f16>
  return
}

// -----

// expected-error @+1 {{tmem buffers span all 128 lanes, got 64}}
func.func @tmem_lanes(%t: !fa4.tmem<[64, 128], f32>) {
  return
}

// -----

// expected-error @+1 {{tmem buffer of 3 'f16' elements does not fill whole 32-bit columns}}
func.func @tmem_odd_halves(%t: !fa4.tmem<[128, 3], f16>) {
  return
}

// -----

// expected-error @+1 {{smem ring needs at least one stage, got 0}}
func.func @smem_no_stages(%t: !fa4.smem<[128, 64], f16, stages = 0>) {
  return
}

// -----

// expected-error @+1 {{an mbarrier array needs at least one stage, got 0}}
func.func @barrier_no_stages(%t: !fa4.mbarrier<tma, stages = 0>) {
  return
}

// -----

func.func @barrier_count() {
  // expected-error @+1 {{'fa4.mbarrier_alloc' op attribute 'count' failed to satisfy constraint}}
  %b = fa4.mbarrier_alloc "b" {count = 0 : i64} : !fa4.mbarrier<threads, stages = 1>
  return
}

// -----

func.func @arrive_outside_role(%b: !fa4.mbarrier<threads, stages = 1>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa4.mbarrier_arrive' op arrives for its role's threads, so it must be inside an fa4.role}}
  fa4.mbarrier_arrive %b[%c0] : !fa4.mbarrier<threads, stages = 1>
  return
}

// -----

func.func @tma_element(%k: memref<?x?x8x128xf16>, %kv: !fa4.smem<[128, 128], bf16, stages = 3>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa4.tma_load' op buffer element type 'bf16' does not match the tensor's 'f16'}}
  fa4.tma_load %k[%c0, %c0, %c0] -> %kv[%c0] {gqa_ratio = 1 : i64} : memref<?x?x8x128xf16>, !fa4.smem<[128, 128], bf16, stages = 3>
  return
}

// -----

func.func @tma_head_dim(%o: memref<?x?x8x128xf16>, %stage: !fa4.smem<[128, 64], f16, stages = 2>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa4.tma_store' op buffer tile has 64 columns, the tensor's head dim is 128}}
  fa4.tma_store %stage[%c0] -> %o[%c0, %c0, %c0] {gqa_ratio = 1 : i64} : !fa4.smem<[128, 64], f16, stages = 2>, memref<?x?x8x128xf16>
  return
}

// -----

func.func @tma_reduce_f16(%o: memref<?x?x8x128xf16>, %stage: !fa4.smem<[64, 64], f16, stages = 1>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa4.tma_store' op reduces (adds) 'f16' elements; a reduction adds f32 only}}
  fa4.tma_store %stage[%c0] -> %o[%c0, %c0, %c0] {gqa_ratio = 1 : i64, reduce} : !fa4.smem<[64, 64], f16, stages = 1>, memref<?x?x8x128xf16>
  return
}

// -----

func.func @tma_store_part(%o: memref<?x?x8x128xf32>, %stage: !fa4.smem<[64, 64], f32, stages = 1>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa4.tma_store' op stores from column 64; only a reduction stores part of the columns}}
  fa4.tma_store %stage[%c0] -> %o[%c0, %c0, %c0] {column = 64 : i64, gqa_ratio = 1 : i64} : !fa4.smem<[64, 64], f32, stages = 1>, memref<?x?x8x128xf32>
  return
}

// -----

func.func @tma_reduce_past_head_dim(%o: memref<?x?x8x96xf32>, %stage: !fa4.smem<[64, 64], f32, stages = 1>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa4.tma_store' op buffer tile's 64 columns from column 64 run past the tensor's head dim 96}}
  fa4.tma_store %stage[%c0] -> %o[%c0, %c0, %c0] {column = 64 : i64, gqa_ratio = 1 : i64, reduce} : !fa4.smem<[64, 64], f32, stages = 1>, memref<?x?x8x96xf32>
  return
}

// -----

func.func @tma_reduce_box(%o: memref<?x?x8x128xf32>, %stage: !fa4.smem<[64, 48], f32, stages = 1>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa4.tma_store' op reduces 48 columns from column 16; a reduction's part starts and ends on whole boxes of 32 columns}}
  fa4.tma_store %stage[%c0] -> %o[%c0, %c0, %c0] {column = 16 : i64, gqa_ratio = 1 : i64, reduce} : !fa4.smem<[64, 48], f32, stages = 1>, memref<?x?x8x128xf32>
  return
}

// -----

func.func @score_dtypes(%q: !fa4.smem<[128, 128], f16, stages = 2>, %k: !fa4.smem<[128, 128], bf16, stages = 3>, %s: !fa4.tmem<[128, 128], f32>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa4.score_mma_async' op query and key must both hold f16, bf16 or f8E4M3FN, got 'f16' and 'bf16'}}
  fa4.score_mma_async %q[%c0], %k[%c0] -> %s : !fa4.smem<[128, 128], f16, stages = 2>, !fa4.smem<[128, 128], bf16, stages = 3>, !fa4.tmem<[128, 128], f32>
  return
}

// -----

func.func @score_shape(%q: !fa4.smem<[128, 128], f16, stages = 2>, %k: !fa4.smem<[128, 128], f16, stages = 3>, %s: !fa4.tmem<[128, 64], f32>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa4.score_mma_async' op scores must be [128, 128], got [128, 64]}}
  fa4.score_mma_async %q[%c0], %k[%c0] -> %s : !fa4.smem<[128, 128], f16, stages = 2>, !fa4.smem<[128, 128], f16, stages = 3>, !fa4.tmem<[128, 64], f32>
  return
}

// -----

// The accumulator takes V's first columns (a K/V ring sized for a wider K),
// never more than the ring holds.
func.func @value_chain(%p: !fa4.tmem<[128, 128], f16>, %v: !fa4.smem<[128, 128], f16, stages = 3>, %o: !fa4.tmem<[128, 192], f32>, %acc: i1) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa4.value_mma_async' op shapes do not chain: probs [128, 128] x value [128, 128] -> acc [128, 192]}}
  fa4.value_mma_async %p, %v[%c0] -> %o, accumulate %acc : !fa4.tmem<[128, 128], f16>, !fa4.smem<[128, 128], f16, stages = 3>, !fa4.tmem<[128, 192], f32>
  return
}

// -----

func.func @value_rows(%p: !fa4.tmem<[128, 128], f16>, %v: !fa4.smem<[64, 128], f16, stages = 3>, %o: !fa4.tmem<[128, 64], f32>, %acc: i1) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa4.value_mma_async' op shapes do not chain: probs [128, 128] x value [64, 128] -> acc [128, 64]}}
  fa4.value_mma_async %p, %v[%c0] -> %o, accumulate %acc : !fa4.tmem<[128, 128], f16>, !fa4.smem<[64, 128], f16, stages = 3>, !fa4.tmem<[128, 64], f32>
  return
}

// -----

func.func @tmem_load_columns(%o: !fa4.tmem<[128, 64], f32>) {
  %c56 = arith.constant 56 : index
  // expected-error @+1 {{'fa4.tmem_load' op columns [56, 72) are outside the buffer's 64}}
  %chunk = fa4.tmem_load %o[%c56] : !fa4.tmem<[128, 64], f32> -> tensor<128x16xf32>
  return
}

// -----

func.func @tmem_store_element(%p: !fa4.tmem<[128, 128], f16>, %t: tensor<128x128xbf16>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa4.tmem_store' op tile element type 'bf16' does not match the buffer's 'f16'}}
  fa4.tmem_store %t, %p[%c0] : tensor<128x128xbf16>, !fa4.tmem<[128, 128], f16>
  return
}

// -----

func.func @smem_row(%stats: !fa4.smem<[2, 128], f32, stages = 1>, %t: tensor<128xf32>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa4.smem_store' op row 2 is outside the buffer's 2 rows}}
  fa4.smem_store %t, %stats[%c0] row 2 : tensor<128xf32>, !fa4.smem<[2, 128], f32, stages = 1>
  return
}

// -----

func.func @smem_tile(%stage: !fa4.smem<[128, 64], f16, stages = 2>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa4.smem_load' op tile must be [128, 64] like the buffer's stages}}
  %t = fa4.smem_load %stage[%c0] : !fa4.smem<[128, 64], f16, stages = 2> -> tensor<64x64xf16>
  return
}

// -----

func.func @finalize_shape(%o: !fa4.tmem<[128, 64], f32>, %m: tensor<128xf32>, %stage: !fa4.smem<[128, 128], f16, stages = 2>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa4.finalize_o' op staging tiles must be [128, 64] like acc, got [128, 128]}}
  %lse = fa4.finalize_o %o, %m, %m -> %stage[%c0] {scale_log2 = 1.0 : f32} : !fa4.tmem<[128, 64], f32>, tensor<128xf32>, !fa4.smem<[128, 128], f16, stages = 2>
  return
}

// -----

func.func @smem_row_and_column(%stats: !fa4.smem<[2, 128], f32, stages = 1>, %t: tensor<128xf32>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa4.smem_store' op stores a row or a column range, not both}}
  fa4.smem_store %t, %stats[%c0] column %c0 row 0 : tensor<128xf32>, !fa4.smem<[2, 128], f32, stages = 1>
  return
}

// -----

func.func @rescale_rows(%o: !fa4.tmem<[128, 64], f32>, %a: tensor<64xf32>) {
  // expected-error @+1 {{'fa4.rescale_o' op row vectors must have 128 elements, one per lane}}
  fa4.rescale_o %o, %a : !fa4.tmem<[128, 64], f32>, tensor<64xf32>
  return
}

// -----

func.func @alloc_columns() {
  // expected-error @+1 {{'fa4.tmem_alloc_columns' op TMEM is allocated in powers of two from 32 to 512 columns, got 384}}
  fa4.tmem_alloc_columns {columns = 384 : i64}
  return
}

// -----

func.func @warpgroup_budgets_differ() {
  fa4.warp_specialize {
    fa4.role "mma" warps(12, 1) registers(72) {}
    // expected-error @+1 {{'fa4.role' op asks for 48 registers but shares warpgroup 3 with 'mma', which asks for 72 (setmaxnreg sets one budget per warpgroup)}}
    fa4.role "load" warps(13, 3) registers(48) {}
  }
  return
}

// -----

func.func @warpgroup_partly_assigned() {
  // expected-error @+1 {{'fa4.warp_specialize' op warpgroup 3 is only partly assigned to roles; every warp of it must take part in setmaxnreg (give the rest an empty role)}}
  fa4.warp_specialize {
    fa4.role "mma" warps(12, 1) registers(72) {}
  }
  return
}

// -----

func.func @task_count_head_groups(%b: index, %s: index) -> index {
  // expected-error @+1 {{has kv_heads 2 x groups_per_kv 1073741824 head groups, 2^31 or more (the kernel's head index is 32-bit)}}
  %n = fa4.task_count %b, %s {kv_heads = 2 : i64, gqa_ratio = 2 : i64, rows = 256 : i64, groups_per_kv = 1073741824 : i64}
  return %n : index
}

// -----

func.func @tma_load_packing(%q: memref<?x?x6x64xf16>, %b: index, %c: index) {
  %buf = fa4.smem_alloc "q" : <[128, 64], f16, stages = 2>
  // expected-error @+1 {{packs gqa_ratio = 3 heads in a tile of 128 rows; expected a power of two of at most 16 dividing the rows}}
  fa4.tma_load %q[%b, %b, %b] -> %buf[%c] {gqa_ratio = 3 : i64}
      : memref<?x?x6x64xf16>, !fa4.smem<[128, 64], f16, stages = 2>
  return
}

// -----

func.func @tma_reduce_huge_column(%o: memref<?x?x8x128xf32>, %stage: !fa4.smem<[64, 64], f32, stages = 1>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa4.tma_store' op buffer tile's 64 columns from column 9223372036854775776 run past the tensor's head dim 128}}
  fa4.tma_store %stage[%c0] -> %o[%c0, %c0, %c0] {column = 9223372036854775776 : i64, gqa_ratio = 1 : i64, reduce} : !fa4.smem<[64, 64], f32, stages = 1>, memref<?x?x8x128xf32>
  return
}

// -----

func.func @tma_reduce_dynamic_head_dim(%o: memref<?x?x8x?xf32>, %stage: !fa4.smem<[64, 64], f32, stages = 1>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa4.tma_store' op adds part of the columns of a tensor whose head dim is dynamic; a reduction needs it static}}
  fa4.tma_store %stage[%c0] -> %o[%c0, %c0, %c0] {column = 64 : i64, gqa_ratio = 1 : i64, reduce} : !fa4.smem<[64, 64], f32, stages = 1>, memref<?x?x8x?xf32>
  return
}

// -----

func.func @tma_store_wide_elements(%o: memref<?x?x8x128xi2048>, %stage: !fa4.smem<[64, 128], i2048, stages = 1>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa4.tma_store' op reduces (adds) 'i2048' elements; a reduction adds f32 only}}
  fa4.tma_store %stage[%c0] -> %o[%c0, %c0, %c0] {gqa_ratio = 1 : i64, reduce} : !fa4.smem<[64, 128], i2048, stages = 1>, memref<?x?x8x128xi2048>
  return
}

// -----

func.func @smem_load_transposed_tile(%stats: !fa4.smem<[2, 64], f32, stages = 2>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa4.smem_load' op reads a transposed tile's column vector from a row only (transposed needs row)}}
  %t = fa4.smem_load %stats[%c0] {transposed} : !fa4.smem<[2, 64], f32, stages = 2> -> tensor<2x64xf32>
  return
}

// -----

func.func @smem_load_column_without_row(%stats: !fa4.smem<[2, 128], f32, stages = 2>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa4.smem_load' op reads part of a row only (column needs row)}}
  %t = fa4.smem_load %stats[%c0] column 32 : !fa4.smem<[2, 128], f32, stages = 2> -> tensor<2x128xf32>
  return
}

// -----

func.func @smem_load_column_past_row(%stats: !fa4.smem<[2, 128], f32, stages = 2>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa4.smem_load' op reads 32 elements from column 112 of a row of 128 elements}}
  %t = fa4.smem_load %stats[%c0] row 1 column 112 {transposed} : !fa4.smem<[2, 128], f32, stages = 2> -> tensor<32xf32>
  return
}

// -----

func.func @smem_load_column_negative(%stats: !fa4.smem<[2, 128], f32, stages = 2>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa4.smem_load' op reads 32 elements from column -4 of a row of 128 elements}}
  %t = fa4.smem_load %stats[%c0] row 0 column -4 {transposed} : !fa4.smem<[2, 128], f32, stages = 2> -> tensor<32xf32>
  return
}

// -----

func.func @smem_load_column_row_outside(%stats: !fa4.smem<[2, 128], f32, stages = 2>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa4.smem_load' op row 2 is outside the buffer's 2 rows}}
  %t = fa4.smem_load %stats[%c0] row 2 column 0 {transposed} : !fa4.smem<[2, 128], f32, stages = 2> -> tensor<32xf32>
  return
}

// -----

func.func @smem_load_column_not_transposed(%stats: !fa4.smem<[2, 128], f32, stages = 2>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa4.smem_load' op reads part of a row along a transposed tile's columns only (column needs transposed)}}
  %t = fa4.smem_load %stats[%c0] row 0 column 32 : !fa4.smem<[2, 128], f32, stages = 2> -> tensor<32xf32>
  return
}

// -----

func.func @smem_load_column_empty(%stats: !fa4.smem<[2, 128], f32, stages = 2>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa4.smem_load' op reads part of a row into a 1-D tile of a static, positive size, got 'tensor<0xf32>'}}
  %t = fa4.smem_load %stats[%c0] row 0 column 8 {transposed} : !fa4.smem<[2, 128], f32, stages = 2> -> tensor<0xf32>
  return
}

// -----

func.func @smem_load_column_negative_row(%stats: !fa4.smem<[2, 128], f32, stages = 2>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa4.smem_load' op row -1 is outside the buffer's 2 rows}}
  %t = fa4.smem_load %stats[%c0] row -1 column 0 {transposed} : !fa4.smem<[2, 128], f32, stages = 2> -> tensor<32xf32>
  return
}
