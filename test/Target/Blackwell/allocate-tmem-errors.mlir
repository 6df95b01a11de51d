// RUN: fa4-opt %s --fa4-allocate-tmem -split-input-file -verify-diagnostics

// Head dim 256 with FA4's layout: two 256-column accumulators after two S.
// expected-error @+1 {{TMEM overflow: the accumulators need 768 columns, more than the 512 of an SM (S0 [0, 128), S1 [128, 256), O0 [256, 512), O1 [512, 768))}}
func.func @head_dim_256() {
  %s0 = fa4.tmem_alloc "S0" : !fa4.tmem<[128, 128], f32>
  %s1 = fa4.tmem_alloc "S1" : !fa4.tmem<[128, 128], f32>
  %o0 = fa4.tmem_alloc "O0" : !fa4.tmem<[128, 256], f32>
  %o1 = fa4.tmem_alloc "O1" : !fa4.tmem<[128, 256], f32>
  fa4.warp_specialize {
    fa4.role "mma" warps(12, 4) registers(48) {
    }
  }
  return
}

// -----

func.func @no_owner() {
  %s0 = fa4.tmem_alloc "S0" : !fa4.tmem<[128, 128], f32>
  // expected-error @+1 {{no role issues tensor-core ops, so none can own the TMEM allocation}}
  fa4.warp_specialize {
    fa4.role "softmax0" warps(0, 4) registers(192) {
      %c0 = arith.constant 0 : index
      %s = fa4.tmem_load %s0[%c0] : !fa4.tmem<[128, 128], f32> -> tensor<128x128xf32>
    }
  }
  return
}
