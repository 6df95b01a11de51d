// RUN: fa4-opt %s -split-input-file -verify-diagnostics | FileCheck %s
// RUN: fa4-opt %s -split-input-file -verify-diagnostics --fa4-set-target=chip=sm_90a \
// RUN:   | FileCheck %s --check-prefix=SET

// #fa4.target names a row of the chip table; `fa4.target` belongs on a
// module. fa4-set-target writes it, keeps the same chip and refuses
// another.

// CHECK: module attributes {fa4.target = #fa4.target<sm_90a>}
// SET: module attributes {fa4.target = #fa4.target<sm_90a>}
module attributes {fa4.target = #fa4.target<sm_90a>} {
}

// -----

// A chip may be written as a string.
// CHECK: module attributes {fa4.target = #fa4.target<sm_90a>}
module attributes {fa4.target = #fa4.target<"sm_90a">} {
}

// -----

// CHECK: module {
// SET: module attributes {fa4.target = #fa4.target<sm_90a>}
module {
}

// -----

// expected-error @+1 {{unknown target 'sm_80' (expected sm_100a or sm_103a for Blackwell, or sm_90a for Hopper)}}
module attributes {fa4.target = #fa4.target<sm_80>} {
}

// -----

// expected-error @+1 {{'fa4.target' must be a #fa4.target<...> (one of sm_100a or sm_103a for Blackwell, or sm_90a for Hopper), got "sm_100a"}}
module attributes {fa4.target = "sm_100a"} {
}

// -----

module {
  // expected-error @+1 {{'fa4.target' belongs on a builtin.module, not on 'func.func'}}
  func.func @f() attributes {fa4.target = #fa4.target<sm_100a>} {
    return
  }
}

// -----

// One chip for a compile: a nested module may repeat its enclosing
// module's, not name another.
// CHECK: module @same attributes {fa4.target = #fa4.target<sm_90a>}
module attributes {fa4.target = #fa4.target<sm_90a>} {
  module @same attributes {fa4.target = #fa4.target<sm_90a>} {
  }
}

// -----

module attributes {fa4.target = #fa4.target<sm_100a>} {
  // expected-error @+1 {{'fa4.target' names sm_90a inside a module for sm_100a (a compile is for one chip)}}
  module @other attributes {fa4.target = #fa4.target<sm_90a>} {
  }
}
