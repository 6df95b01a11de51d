// An entry on tensors whose arguments are not in Q, K, V order: K is #0,
// the ALiBi slopes (reaching the op through bufferization.to_buffer) #1, Q
// #2, V #3; O is made with tensor.empty and returned. fp16, 4 query heads
// over 2 K/V heads, head dim 64, causal.
//
// Also an input of inputs.test (its files name arguments by number). On its
// own: seeded inputs at level A and level C, and the cubin in fa4-emu, whose
// parameters follow the function's own argument order.
// RUN: fa4-sim %s --batch 2 --seq-q 70 --seq-k 130 | FileCheck %s
// RUN: fa4c %s --emit=mlir --sm-count 2 | fa4-sim --seq-q 301 --seq-k 129 --interleavings 2 | FileCheck %s
// CHECK: "ok":true
// RUN: fa4c %s -o %t.cubin
// RUN: fa4-emu %t.cubin.json --entry %s --batch 2 --seq-q 301 --seq-k 129 --interleavings 2 --workers 2 | FileCheck %s --check-prefix=EMU
// EMU: "error_count":0
// EMU-SAME: "hazard_count":0

func.func @attention(%k: tensor<?x?x2x64xf16>, %slopes: tensor<4xf32>,
                     %q: tensor<?x?x4x64xf16>, %v: tensor<?x?x2x64xf16>)
    -> tensor<?x?x4x64xf16> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %batch = tensor.dim %q, %c0 : tensor<?x?x4x64xf16>
  %seq = tensor.dim %q, %c1 : tensor<?x?x4x64xf16>
  %init = tensor.empty(%batch, %seq) : tensor<?x?x4x64xf16>
  %slope_table = bufferization.to_buffer %slopes : tensor<4xf32> to memref<4xf32>
  %o = fa4.attention %q, %k, %v -> %init extras(%slope_table : memref<4xf32>)
      {mask = #fa4.mask<causal>}
      : tensor<?x?x4x64xf16>, tensor<?x?x2x64xf16>, tensor<?x?x2x64xf16>
      -> tensor<?x?x4x64xf16>
  score_mod {
  ^bb0(%s: f32, %b: index, %h: index, %i: index, %j: index,
       %slope_of: memref<4xf32>):
    %slope = memref.load %slope_of[%h] : memref<4xf32>
    %distance = arith.subi %j, %i : index
    %distance_i64 = arith.index_cast %distance : index to i64
    %distance_f32 = arith.sitofp %distance_i64 : i64 to f32
    %bias = arith.mulf %slope, %distance_f32 : f32
    %biased = arith.addf %s, %bias : f32
    fa4.yield %biased : f32
  }
  return %o : tensor<?x?x4x64xf16>
}
