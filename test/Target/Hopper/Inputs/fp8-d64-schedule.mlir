// Hand-made (not by fa4c): the bf16 head-dim-64 Hopper schedule with its Q,
// K and V in e4m3 and V's stages transposed, but no descales; fp8.test
// widens its Q and K tiles to 112 columns for the refusal of 8-bit tiles
// of a width no head dim has.
module attributes {fa4.target = #fa4.target<sm_90a>} {
  func.func @attention(%arg0: memref<?x?x4x64xf8E4M3FN, strided<[?, ?, ?, 1], offset: ?>>, %arg1: memref<?x?x2x64xf8E4M3FN, strided<[?, ?, ?, 1], offset: ?>>, %arg2: memref<?x?x2x64xf8E4M3FN, strided<[?, ?, ?, 1], offset: ?>>, %arg3: memref<?x?x4x64xbf16, strided<[?, ?, ?, 1], offset: ?>>) attributes {fa4.spec = #fa4.spec<mask = none, window_left = -1, window_right = -1, scale = 1.250000e-01, softcap = 0.000000e+00, lse = false, arguments = [0, 1, 2, 3]>} {
    %c64 = arith.constant 64 : index
    %c3 = arith.constant 3 : index
    %c2 = arith.constant 2 : index
    %c128 = arith.constant 128 : index
    %c1 = arith.constant 1 : index
    %c0 = arith.constant 0 : index
    %c0_0 = arith.constant 0 : index
    %dim = memref.dim %arg0, %c0_0 : memref<?x?x4x64xf8E4M3FN, strided<[?, ?, ?, 1], offset: ?>>
    %c1_1 = arith.constant 1 : index
    %dim_2 = memref.dim %arg0, %c1_1 : memref<?x?x4x64xf8E4M3FN, strided<[?, ?, ?, 1], offset: ?>>
    %c1_3 = arith.constant 1 : index
    %dim_4 = memref.dim %arg1, %c1_3 : memref<?x?x2x64xf8E4M3FN, strided<[?, ?, ?, 1], offset: ?>>
    %0 = fa4.task_count %dim, %dim_2 {gqa_ratio = 2 : i64, kv_heads = 2 : i64, rows = 128 : i64}
    %1 = fa4.smem_alloc "q" : <[128, 64], f8E4M3FN, stages = 1>
    %2 = fa4.smem_alloc "k" : <[128, 64], f8E4M3FN, stages = 4>
    %3 = fa4.smem_alloc "v" : <[64, 128], f8E4M3FN, stages = 4>
    %4 = fa4.smem_alloc "o0" : <[64, 64], bf16, stages = 1>
    %5 = fa4.smem_alloc "o1" : <[64, 64], bf16, stages = 1>
    %6 = fa4.mbarrier_alloc "q_full" {count = 1 : i64} : <tma, stages = 1>
    %7 = fa4.mbarrier_alloc "q_empty" {count = 256 : i64} : <threads, stages = 1>
    %8 = fa4.mbarrier_alloc "k_full" {count = 1 : i64} : <tma, stages = 4>
    %9 = fa4.mbarrier_alloc "k_empty" {count = 256 : i64} : <threads, stages = 4>
    %10 = fa4.mbarrier_alloc "v_full" {count = 1 : i64} : <tma, stages = 4>
    %11 = fa4.mbarrier_alloc "v_empty" {count = 256 : i64} : <threads, stages = 4>
    %12 = fa4.mbarrier_alloc "o0_full" {count = 128 : i64} : <threads, stages = 1>
    %13 = fa4.mbarrier_alloc "o0_empty" {count = 128 : i64} : <threads, stages = 1>
    %14 = fa4.mbarrier_alloc "o1_full" {count = 128 : i64} : <threads, stages = 1>
    %15 = fa4.mbarrier_alloc "o1_empty" {count = 128 : i64} : <threads, stages = 1>
    %16 = fa4.cta_id
    %17 = fa4.grid_size {sm_count = 132 : i64}
    fa4.warp_specialize attributes {fa4.barriers = [#fa4.barrier<name = "q_full", kind = tma, count = 1, stages = 1, producers = ["producer"], consumers = ["consumer0", "consumer1"]>, #fa4.barrier<name = "q_empty", kind = threads, count = 256, stages = 1, producers = ["consumer0", "consumer1"], consumers = ["producer"]>, #fa4.barrier<name = "k_full", kind = tma, count = 1, stages = 4, producers = ["producer"], consumers = ["consumer0", "consumer1"]>, #fa4.barrier<name = "k_empty", kind = threads, count = 256, stages = 4, producers = ["consumer0", "consumer1"], consumers = ["producer"]>, #fa4.barrier<name = "v_full", kind = tma, count = 1, stages = 4, producers = ["producer"], consumers = ["consumer0", "consumer1"]>, #fa4.barrier<name = "v_empty", kind = threads, count = 256, stages = 4, producers = ["consumer0", "consumer1"], consumers = ["producer"]>, #fa4.barrier<name = "o0_full", kind = threads, count = 128, stages = 1, producers = ["consumer0"], consumers = ["consumer0"]>, #fa4.barrier<name = "o0_empty", kind = threads, count = 128, stages = 1, producers = ["consumer0"], consumers = ["consumer0"]>, #fa4.barrier<name = "o1_full", kind = threads, count = 128, stages = 1, producers = ["consumer1"], consumers = ["consumer1"]>, #fa4.barrier<name = "o1_empty", kind = threads, count = 128, stages = 1, producers = ["consumer1"], consumers = ["consumer1"]>], fa4.grid = #fa4.grid<sm_count = 132, order = static>} {
      fa4.role "producer" warps(0, 4) registers(40) attributes {fa4.single_warp} {
        %18:2 = scf.for %arg4 = %16 to %0 step %17 iter_args(%arg5 = %c0, %arg6 = %c0) -> (index, index) {
          %batch_index, %head_group, %m_block = fa4.task_coords %arg4, %dim, %dim_2, %dim_4 {block_n = 128 : i64, gqa_ratio = 2 : i64, kv_heads = 2 : i64, mask = #fa4.mask<none>, order = #fa4.task_order<static>, rows = 128 : i64}
          %27 = arith.muli %m_block, %c128 : index
          %begin, %full_begin, %full_end, %end = fa4.kv_block_range %27, %dim_2, %dim_4 {block_n = 128 : i64, gqa_ratio = 2 : i64, mask = #fa4.mask<none>, rows = 128 : i64}
          %28 = arith.subi %end, %begin : index
          fa4.mbarrier_wait %7[%arg5] prior : <threads, stages = 1>
          fa4.mbarrier_expect_tx %6[%arg5], 8192 : <tma, stages = 1>
          fa4.tma_load %arg0[%batch_index, %head_group, %27] -> %1[%arg5] signal %6[%arg5] {gqa_ratio = 2 : i64} : memref<?x?x4x64xf8E4M3FN, strided<[?, ?, ?, 1], offset: ?>>, <[128, 64], f8E4M3FN, stages = 1>, !fa4.mbarrier<tma, stages = 1>
          scf.for %arg7 = %c0 to %28 step %c1 {
            %31 = arith.subi %end, %c1 : index
            %32 = arith.subi %31, %arg7 : index
            %33 = arith.muli %32, %c128 : index
            %34 = arith.addi %arg6, %arg7 : index
            fa4.mbarrier_wait %9[%34] prior : <threads, stages = 4>
            fa4.mbarrier_expect_tx %8[%34], 8192 : <tma, stages = 4>
            fa4.tma_load %arg1[%batch_index, %head_group, %33] -> %2[%34] signal %8[%34] {gqa_ratio = 1 : i64} : memref<?x?x2x64xf8E4M3FN, strided<[?, ?, ?, 1], offset: ?>>, <[128, 64], f8E4M3FN, stages = 4>, !fa4.mbarrier<tma, stages = 4>
            fa4.mbarrier_wait %11[%34] prior : <threads, stages = 4>
            fa4.mbarrier_expect_tx %10[%34], 8192 : <tma, stages = 4>
            fa4.tma_load %arg2[%batch_index, %head_group, %33] -> %3[%34] signal %10[%34] {gqa_ratio = 1 : i64, transposed} : memref<?x?x2x64xf8E4M3FN, strided<[?, ?, ?, 1], offset: ?>>, <[64, 128], f8E4M3FN, stages = 4>, !fa4.mbarrier<tma, stages = 4>
          }
          %29 = arith.addi %arg5, %c1 : index
          %30 = arith.addi %arg6, %28 : index
          scf.yield %29, %30 : index, index
        } {fa4.task_loop}
        fa4.mbarrier_wait %7[%18#0] prior : <threads, stages = 1>
        %19 = arith.addi %18#1, %c0 : index
        fa4.mbarrier_wait %9[%19] prior : <threads, stages = 4>
        %20 = arith.addi %18#1, %c0 : index
        fa4.mbarrier_wait %11[%20] prior : <threads, stages = 4>
        %21 = arith.addi %18#1, %c1 : index
        fa4.mbarrier_wait %9[%21] prior : <threads, stages = 4>
        %22 = arith.addi %18#1, %c1 : index
        fa4.mbarrier_wait %11[%22] prior : <threads, stages = 4>
        %23 = arith.addi %18#1, %c2 : index
        fa4.mbarrier_wait %9[%23] prior : <threads, stages = 4>
        %24 = arith.addi %18#1, %c2 : index
        fa4.mbarrier_wait %11[%24] prior : <threads, stages = 4>
        %25 = arith.addi %18#1, %c3 : index
        fa4.mbarrier_wait %9[%25] prior : <threads, stages = 4>
        %26 = arith.addi %18#1, %c3 : index
        fa4.mbarrier_wait %11[%26] prior : <threads, stages = 4>
      }
      fa4.role "consumer0" warps(4, 4) registers(232) {
        %18:2 = scf.for %arg4 = %16 to %0 step %17 iter_args(%arg5 = %c0, %arg6 = %c0) -> (index, index) {
          %batch_index, %head_group, %m_block = fa4.task_coords %arg4, %dim, %dim_2, %dim_4 {block_n = 128 : i64, gqa_ratio = 2 : i64, kv_heads = 2 : i64, mask = #fa4.mask<none>, order = #fa4.task_order<static>, rows = 128 : i64}
          %19 = arith.muli %m_block, %c128 : index
          %begin, %full_begin, %full_end, %end = fa4.kv_block_range %19, %dim_2, %dim_4 {block_n = 128 : i64, gqa_ratio = 2 : i64, mask = #fa4.mask<none>, rows = 128 : i64}
          %20 = arith.subi %end, %begin : index
          %21 = arith.addi %19, %c0 : index
          fa4.mbarrier_wait %6[%arg5] : <tma, stages = 1>
          %cst = arith.constant dense<0xFF800000> : tensor<64xf32>
          %cst_5 = arith.constant dense<0.000000e+00> : tensor<64xf32>
          %cst_6 = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
          %22 = arith.cmpi sgt, %20, %c0 : index
          %23:3 = scf.if %22 -> (tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>) {
            fa4.mbarrier_wait %8[%arg6] : <tma, stages = 4>
            fa4.named_barrier_sync 1, 256
            %26 = fa4.wgmma_score %1[%arg5] rows 0, %2[%arg6] {async} : <[128, 64], f8E4M3FN, stages = 1>, <[128, 64], f8E4M3FN, stages = 4> -> tensor<64x128xf32>
            fa4.named_barrier_arrive 2, 256
            %27 = fa4.wgmma_wait %26 {pending = 0 : i64} : tensor<64x128xf32>
            fa4.mbarrier_arrive %9[%arg6] : <threads, stages = 4>
            %28 = arith.subi %end, %c1 : index
            %29 = arith.subi %28, %c0 : index
            %30 = arith.muli %29, %c128 : index
            %31 = arith.subi %end, %c1 : index
            %32 = arith.subi %31, %c0 : index
            %33 = arith.cmpi sge, %32, %full_end : index
            %34 = arith.cmpi slt, %32, %full_begin : index
            %35 = arith.ori %34, %33 : i1
            %36 = scf.if %35 -> (tensor<64x128xf32>) {
              %49 = fa4.mask %27, %21, %30, %dim_2, %dim_4 {gqa_ratio = 2 : i64, mask = #fa4.mask<none>} : tensor<64x128xf32>
              scf.yield %49 : tensor<64x128xf32>
            } else {
              scf.yield %27 : tensor<64x128xf32>
            }
            %probs, %new_row_max, %new_row_sum, %acc_scale = fa4.online_softmax %36, %cst, %cst_5 {rescale_threshold = 8.000000e+00 : f32, scale_log2 = 0.180336878 : f32} : tensor<64x128xf32>, tensor<64xf32> -> tensor<64x128xf8E4M3FN>
            %37 = arith.subi %end, %full_end : index
            %38 = arith.maxsi %37, %c1 : index
            %39 = arith.minsi %38, %20 : index
            %40 = arith.subi %end, %full_begin : index
            %41 = arith.maxsi %40, %39 : index
            %42 = arith.minsi %41, %20 : index
            %43:4 = scf.for %arg7 = %c1 to %39 step %c1 iter_args(%arg8 = %new_row_max, %arg9 = %new_row_sum, %arg10 = %cst_6, %arg11 = %probs) -> (tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<64x128xf8E4M3FN>) {
              %49 = arith.addi %arg6, %arg7 : index
              %50 = arith.subi %49, %c1 : index
              fa4.mbarrier_wait %8[%49] : <tma, stages = 4>
              fa4.named_barrier_sync 1, 256
              %51 = fa4.wgmma_score %1[%arg5] rows 0, %2[%49] {async} : <[128, 64], f8E4M3FN, stages = 1>, <[128, 64], f8E4M3FN, stages = 4> -> tensor<64x128xf32>
              fa4.mbarrier_wait %10[%50] : <tma, stages = 4>
              %52 = fa4.wgmma_value %arg11, %3[%50], %arg10 {async} : tensor<64x128xf8E4M3FN>, <[64, 128], f8E4M3FN, stages = 4>, tensor<64x64xf32>
              fa4.named_barrier_arrive 2, 256
              %53 = fa4.wgmma_wait %51 {pending = 1 : i64} : tensor<64x128xf32>
              fa4.mbarrier_arrive %9[%49] : <threads, stages = 4>
              %54 = arith.subi %end, %c1 : index
              %55 = arith.subi %54, %arg7 : index
              %56 = arith.muli %55, %c128 : index
              %57 = fa4.mask %53, %21, %56, %dim_2, %dim_4 {gqa_ratio = 2 : i64, mask = #fa4.mask<none>} : tensor<64x128xf32>
              %probs_7, %new_row_max_8, %new_row_sum_9, %acc_scale_10 = fa4.online_softmax %57, %arg8, %arg9 {rescale_threshold = 8.000000e+00 : f32, scale_log2 = 0.180336878 : f32} : tensor<64x128xf32>, tensor<64xf32> -> tensor<64x128xf8E4M3FN>
              %58 = fa4.wgmma_wait %52 {pending = 0 : i64} : tensor<64x64xf32>
              fa4.mbarrier_arrive %11[%50] : <threads, stages = 4>
              %59 = fa4.correction %58, %acc_scale_10 : tensor<64x64xf32>, tensor<64xf32>
              scf.yield %new_row_max_8, %new_row_sum_9, %59, %probs_7 : tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<64x128xf8E4M3FN>
            }
            %44:4 = scf.for %arg7 = %39 to %42 step %c1 iter_args(%arg8 = %43#0, %arg9 = %43#1, %arg10 = %43#2, %arg11 = %43#3) -> (tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<64x128xf8E4M3FN>) {
              %49 = arith.addi %arg6, %arg7 : index
              %50 = arith.subi %49, %c1 : index
              fa4.mbarrier_wait %8[%49] : <tma, stages = 4>
              fa4.named_barrier_sync 1, 256
              %51 = fa4.wgmma_score %1[%arg5] rows 0, %2[%49] {async} : <[128, 64], f8E4M3FN, stages = 1>, <[128, 64], f8E4M3FN, stages = 4> -> tensor<64x128xf32>
              fa4.mbarrier_wait %10[%50] : <tma, stages = 4>
              %52 = fa4.wgmma_value %arg11, %3[%50], %arg10 {async} : tensor<64x128xf8E4M3FN>, <[64, 128], f8E4M3FN, stages = 4>, tensor<64x64xf32>
              fa4.named_barrier_arrive 2, 256
              %53 = fa4.wgmma_wait %51 {pending = 1 : i64} : tensor<64x128xf32>
              fa4.mbarrier_arrive %9[%49] : <threads, stages = 4>
              %54 = arith.subi %end, %c1 : index
              %55 = arith.subi %54, %arg7 : index
              %56 = arith.muli %55, %c128 : index
              %probs_7, %new_row_max_8, %new_row_sum_9, %acc_scale_10 = fa4.online_softmax %53, %arg8, %arg9 {rescale_threshold = 8.000000e+00 : f32, scale_log2 = 0.180336878 : f32} : tensor<64x128xf32>, tensor<64xf32> -> tensor<64x128xf8E4M3FN>
              %57 = fa4.wgmma_wait %52 {pending = 0 : i64} : tensor<64x64xf32>
              fa4.mbarrier_arrive %11[%50] : <threads, stages = 4>
              %58 = fa4.correction %57, %acc_scale_10 : tensor<64x64xf32>, tensor<64xf32>
              scf.yield %new_row_max_8, %new_row_sum_9, %58, %probs_7 : tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<64x128xf8E4M3FN>
            }
            %45:4 = scf.for %arg7 = %42 to %20 step %c1 iter_args(%arg8 = %44#0, %arg9 = %44#1, %arg10 = %44#2, %arg11 = %44#3) -> (tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<64x128xf8E4M3FN>) {
              %49 = arith.addi %arg6, %arg7 : index
              %50 = arith.subi %49, %c1 : index
              fa4.mbarrier_wait %8[%49] : <tma, stages = 4>
              fa4.named_barrier_sync 1, 256
              %51 = fa4.wgmma_score %1[%arg5] rows 0, %2[%49] {async} : <[128, 64], f8E4M3FN, stages = 1>, <[128, 64], f8E4M3FN, stages = 4> -> tensor<64x128xf32>
              fa4.mbarrier_wait %10[%50] : <tma, stages = 4>
              %52 = fa4.wgmma_value %arg11, %3[%50], %arg10 {async} : tensor<64x128xf8E4M3FN>, <[64, 128], f8E4M3FN, stages = 4>, tensor<64x64xf32>
              fa4.named_barrier_arrive 2, 256
              %53 = fa4.wgmma_wait %51 {pending = 1 : i64} : tensor<64x128xf32>
              fa4.mbarrier_arrive %9[%49] : <threads, stages = 4>
              %54 = arith.subi %end, %c1 : index
              %55 = arith.subi %54, %arg7 : index
              %56 = arith.muli %55, %c128 : index
              %57 = fa4.mask %53, %21, %56, %dim_2, %dim_4 {gqa_ratio = 2 : i64, mask = #fa4.mask<none>} : tensor<64x128xf32>
              %probs_7, %new_row_max_8, %new_row_sum_9, %acc_scale_10 = fa4.online_softmax %57, %arg8, %arg9 {rescale_threshold = 8.000000e+00 : f32, scale_log2 = 0.180336878 : f32} : tensor<64x128xf32>, tensor<64xf32> -> tensor<64x128xf8E4M3FN>
              %58 = fa4.wgmma_wait %52 {pending = 0 : i64} : tensor<64x64xf32>
              fa4.mbarrier_arrive %11[%50] : <threads, stages = 4>
              %59 = fa4.correction %58, %acc_scale_10 : tensor<64x64xf32>, tensor<64xf32>
              scf.yield %new_row_max_8, %new_row_sum_9, %59, %probs_7 : tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<64x128xf8E4M3FN>
            }
            %46 = arith.addi %arg6, %20 : index
            %47 = arith.subi %46, %c1 : index
            fa4.mbarrier_wait %10[%47] : <tma, stages = 4>
            %48 = fa4.wgmma_value %45#3, %3[%47], %45#2 : tensor<64x128xf8E4M3FN>, <[64, 128], f8E4M3FN, stages = 4>, tensor<64x64xf32>
            fa4.mbarrier_arrive %11[%47] : <threads, stages = 4>
            scf.yield %45#0, %45#1, %48 : tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>
          } else {
            scf.yield %cst, %cst_5, %cst_6 : tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>
          }
          fa4.mbarrier_arrive %7[%arg5] : <threads, stages = 1>
          %out, %lse = fa4.normalize %23#2, %23#0, %23#1 {scale_log2 = 0.180336878 : f32} : tensor<64x64xf32>, tensor<64xf32> -> tensor<64x64xbf16>
          fa4.mbarrier_wait %13[%arg5] prior : <threads, stages = 1>
          fa4.smem_store %out, %4[%arg5] : tensor<64x64xbf16>, <[64, 64], bf16, stages = 1>
          fa4.mbarrier_arrive %12[%arg5] : <threads, stages = 1>
          fa4.mbarrier_wait %12[%arg5] : <threads, stages = 1>
          fa4.tma_store %4[%arg5] -> %arg3[%batch_index, %head_group, %21] {gqa_ratio = 2 : i64} : <[64, 64], bf16, stages = 1>, memref<?x?x4x64xbf16, strided<[?, ?, ?, 1], offset: ?>>
          fa4.tma_store_wait
          fa4.mbarrier_arrive %13[%arg5] : <threads, stages = 1>
          %24 = arith.addi %arg5, %c1 : index
          %25 = arith.addi %arg6, %20 : index
          scf.yield %24, %25 : index, index
        } {fa4.task_loop}
      }
      fa4.role "consumer1" warps(8, 4) registers(232) {
        fa4.named_barrier_arrive 1, 256
        %18:2 = scf.for %arg4 = %16 to %0 step %17 iter_args(%arg5 = %c0, %arg6 = %c0) -> (index, index) {
          %batch_index, %head_group, %m_block = fa4.task_coords %arg4, %dim, %dim_2, %dim_4 {block_n = 128 : i64, gqa_ratio = 2 : i64, kv_heads = 2 : i64, mask = #fa4.mask<none>, order = #fa4.task_order<static>, rows = 128 : i64}
          %19 = arith.muli %m_block, %c128 : index
          %begin, %full_begin, %full_end, %end = fa4.kv_block_range %19, %dim_2, %dim_4 {block_n = 128 : i64, gqa_ratio = 2 : i64, mask = #fa4.mask<none>, rows = 128 : i64}
          %20 = arith.subi %end, %begin : index
          %21 = arith.addi %19, %c64 : index
          fa4.mbarrier_wait %6[%arg5] : <tma, stages = 1>
          %cst = arith.constant dense<0xFF800000> : tensor<64xf32>
          %cst_5 = arith.constant dense<0.000000e+00> : tensor<64xf32>
          %cst_6 = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
          %22 = arith.cmpi sgt, %20, %c0 : index
          %23:3 = scf.if %22 -> (tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>) {
            fa4.mbarrier_wait %8[%arg6] : <tma, stages = 4>
            fa4.named_barrier_sync 2, 256
            %26 = fa4.wgmma_score %1[%arg5] rows 64, %2[%arg6] {async} : <[128, 64], f8E4M3FN, stages = 1>, <[128, 64], f8E4M3FN, stages = 4> -> tensor<64x128xf32>
            fa4.named_barrier_arrive 1, 256
            %27 = fa4.wgmma_wait %26 {pending = 0 : i64} : tensor<64x128xf32>
            fa4.mbarrier_arrive %9[%arg6] : <threads, stages = 4>
            %28 = arith.subi %end, %c1 : index
            %29 = arith.subi %28, %c0 : index
            %30 = arith.muli %29, %c128 : index
            %31 = arith.subi %end, %c1 : index
            %32 = arith.subi %31, %c0 : index
            %33 = arith.cmpi sge, %32, %full_end : index
            %34 = arith.cmpi slt, %32, %full_begin : index
            %35 = arith.ori %34, %33 : i1
            %36 = scf.if %35 -> (tensor<64x128xf32>) {
              %49 = fa4.mask %27, %21, %30, %dim_2, %dim_4 {gqa_ratio = 2 : i64, mask = #fa4.mask<none>} : tensor<64x128xf32>
              scf.yield %49 : tensor<64x128xf32>
            } else {
              scf.yield %27 : tensor<64x128xf32>
            }
            %probs, %new_row_max, %new_row_sum, %acc_scale = fa4.online_softmax %36, %cst, %cst_5 {rescale_threshold = 8.000000e+00 : f32, scale_log2 = 0.180336878 : f32} : tensor<64x128xf32>, tensor<64xf32> -> tensor<64x128xf8E4M3FN>
            %37 = arith.subi %end, %full_end : index
            %38 = arith.maxsi %37, %c1 : index
            %39 = arith.minsi %38, %20 : index
            %40 = arith.subi %end, %full_begin : index
            %41 = arith.maxsi %40, %39 : index
            %42 = arith.minsi %41, %20 : index
            %43:4 = scf.for %arg7 = %c1 to %39 step %c1 iter_args(%arg8 = %new_row_max, %arg9 = %new_row_sum, %arg10 = %cst_6, %arg11 = %probs) -> (tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<64x128xf8E4M3FN>) {
              %49 = arith.addi %arg6, %arg7 : index
              %50 = arith.subi %49, %c1 : index
              fa4.mbarrier_wait %8[%49] : <tma, stages = 4>
              fa4.named_barrier_sync 2, 256
              %51 = fa4.wgmma_score %1[%arg5] rows 64, %2[%49] {async} : <[128, 64], f8E4M3FN, stages = 1>, <[128, 64], f8E4M3FN, stages = 4> -> tensor<64x128xf32>
              fa4.mbarrier_wait %10[%50] : <tma, stages = 4>
              %52 = fa4.wgmma_value %arg11, %3[%50], %arg10 {async} : tensor<64x128xf8E4M3FN>, <[64, 128], f8E4M3FN, stages = 4>, tensor<64x64xf32>
              fa4.named_barrier_arrive 1, 256
              %53 = fa4.wgmma_wait %51 {pending = 1 : i64} : tensor<64x128xf32>
              fa4.mbarrier_arrive %9[%49] : <threads, stages = 4>
              %54 = arith.subi %end, %c1 : index
              %55 = arith.subi %54, %arg7 : index
              %56 = arith.muli %55, %c128 : index
              %57 = fa4.mask %53, %21, %56, %dim_2, %dim_4 {gqa_ratio = 2 : i64, mask = #fa4.mask<none>} : tensor<64x128xf32>
              %probs_7, %new_row_max_8, %new_row_sum_9, %acc_scale_10 = fa4.online_softmax %57, %arg8, %arg9 {rescale_threshold = 8.000000e+00 : f32, scale_log2 = 0.180336878 : f32} : tensor<64x128xf32>, tensor<64xf32> -> tensor<64x128xf8E4M3FN>
              %58 = fa4.wgmma_wait %52 {pending = 0 : i64} : tensor<64x64xf32>
              fa4.mbarrier_arrive %11[%50] : <threads, stages = 4>
              %59 = fa4.correction %58, %acc_scale_10 : tensor<64x64xf32>, tensor<64xf32>
              scf.yield %new_row_max_8, %new_row_sum_9, %59, %probs_7 : tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<64x128xf8E4M3FN>
            }
            %44:4 = scf.for %arg7 = %39 to %42 step %c1 iter_args(%arg8 = %43#0, %arg9 = %43#1, %arg10 = %43#2, %arg11 = %43#3) -> (tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<64x128xf8E4M3FN>) {
              %49 = arith.addi %arg6, %arg7 : index
              %50 = arith.subi %49, %c1 : index
              fa4.mbarrier_wait %8[%49] : <tma, stages = 4>
              fa4.named_barrier_sync 2, 256
              %51 = fa4.wgmma_score %1[%arg5] rows 64, %2[%49] {async} : <[128, 64], f8E4M3FN, stages = 1>, <[128, 64], f8E4M3FN, stages = 4> -> tensor<64x128xf32>
              fa4.mbarrier_wait %10[%50] : <tma, stages = 4>
              %52 = fa4.wgmma_value %arg11, %3[%50], %arg10 {async} : tensor<64x128xf8E4M3FN>, <[64, 128], f8E4M3FN, stages = 4>, tensor<64x64xf32>
              fa4.named_barrier_arrive 1, 256
              %53 = fa4.wgmma_wait %51 {pending = 1 : i64} : tensor<64x128xf32>
              fa4.mbarrier_arrive %9[%49] : <threads, stages = 4>
              %54 = arith.subi %end, %c1 : index
              %55 = arith.subi %54, %arg7 : index
              %56 = arith.muli %55, %c128 : index
              %probs_7, %new_row_max_8, %new_row_sum_9, %acc_scale_10 = fa4.online_softmax %53, %arg8, %arg9 {rescale_threshold = 8.000000e+00 : f32, scale_log2 = 0.180336878 : f32} : tensor<64x128xf32>, tensor<64xf32> -> tensor<64x128xf8E4M3FN>
              %57 = fa4.wgmma_wait %52 {pending = 0 : i64} : tensor<64x64xf32>
              fa4.mbarrier_arrive %11[%50] : <threads, stages = 4>
              %58 = fa4.correction %57, %acc_scale_10 : tensor<64x64xf32>, tensor<64xf32>
              scf.yield %new_row_max_8, %new_row_sum_9, %58, %probs_7 : tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<64x128xf8E4M3FN>
            }
            %45:4 = scf.for %arg7 = %42 to %20 step %c1 iter_args(%arg8 = %44#0, %arg9 = %44#1, %arg10 = %44#2, %arg11 = %44#3) -> (tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<64x128xf8E4M3FN>) {
              %49 = arith.addi %arg6, %arg7 : index
              %50 = arith.subi %49, %c1 : index
              fa4.mbarrier_wait %8[%49] : <tma, stages = 4>
              fa4.named_barrier_sync 2, 256
              %51 = fa4.wgmma_score %1[%arg5] rows 64, %2[%49] {async} : <[128, 64], f8E4M3FN, stages = 1>, <[128, 64], f8E4M3FN, stages = 4> -> tensor<64x128xf32>
              fa4.mbarrier_wait %10[%50] : <tma, stages = 4>
              %52 = fa4.wgmma_value %arg11, %3[%50], %arg10 {async} : tensor<64x128xf8E4M3FN>, <[64, 128], f8E4M3FN, stages = 4>, tensor<64x64xf32>
              fa4.named_barrier_arrive 1, 256
              %53 = fa4.wgmma_wait %51 {pending = 1 : i64} : tensor<64x128xf32>
              fa4.mbarrier_arrive %9[%49] : <threads, stages = 4>
              %54 = arith.subi %end, %c1 : index
              %55 = arith.subi %54, %arg7 : index
              %56 = arith.muli %55, %c128 : index
              %57 = fa4.mask %53, %21, %56, %dim_2, %dim_4 {gqa_ratio = 2 : i64, mask = #fa4.mask<none>} : tensor<64x128xf32>
              %probs_7, %new_row_max_8, %new_row_sum_9, %acc_scale_10 = fa4.online_softmax %57, %arg8, %arg9 {rescale_threshold = 8.000000e+00 : f32, scale_log2 = 0.180336878 : f32} : tensor<64x128xf32>, tensor<64xf32> -> tensor<64x128xf8E4M3FN>
              %58 = fa4.wgmma_wait %52 {pending = 0 : i64} : tensor<64x64xf32>
              fa4.mbarrier_arrive %11[%50] : <threads, stages = 4>
              %59 = fa4.correction %58, %acc_scale_10 : tensor<64x64xf32>, tensor<64xf32>
              scf.yield %new_row_max_8, %new_row_sum_9, %59, %probs_7 : tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<64x128xf8E4M3FN>
            }
            %46 = arith.addi %arg6, %20 : index
            %47 = arith.subi %46, %c1 : index
            fa4.mbarrier_wait %10[%47] : <tma, stages = 4>
            %48 = fa4.wgmma_value %45#3, %3[%47], %45#2 : tensor<64x128xf8E4M3FN>, <[64, 128], f8E4M3FN, stages = 4>, tensor<64x64xf32>
            fa4.mbarrier_arrive %11[%47] : <threads, stages = 4>
            scf.yield %45#0, %45#1, %48 : tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>
          } else {
            scf.yield %cst, %cst_5, %cst_6 : tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>
          }
          fa4.mbarrier_arrive %7[%arg5] : <threads, stages = 1>
          %out, %lse = fa4.normalize %23#2, %23#0, %23#1 {scale_log2 = 0.180336878 : f32} : tensor<64x64xf32>, tensor<64xf32> -> tensor<64x64xbf16>
          fa4.mbarrier_wait %15[%arg5] prior : <threads, stages = 1>
          fa4.smem_store %out, %5[%arg5] : tensor<64x64xbf16>, <[64, 64], bf16, stages = 1>
          fa4.mbarrier_arrive %14[%arg5] : <threads, stages = 1>
          fa4.mbarrier_wait %14[%arg5] : <threads, stages = 1>
          fa4.tma_store %5[%arg5] -> %arg3[%batch_index, %head_group, %21] {gqa_ratio = 2 : i64} : <[64, 64], bf16, stages = 1>, memref<?x?x4x64xbf16, strided<[?, ?, ?, 1], offset: ?>>
          fa4.tma_store_wait
          fa4.mbarrier_arrive %15[%arg5] : <threads, stages = 1>
          %24 = arith.addi %arg5, %c1 : index
          %25 = arith.addi %arg6, %20 : index
          scf.yield %24, %25 : index, index
        } {fa4.task_loop}
      }
    }
    return
  }
}

