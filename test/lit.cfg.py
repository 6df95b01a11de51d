# -*- Python -*-
import os

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "FA4"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.fa4_obj_root, "test")
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "Inputs", "lib"]

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%fa4_src_root", config.fa4_src_root))
# libfa4rt.so, the C API, for tests that call it as a binding would.
config.substitutions.append(("%fa4rt", os.path.join(config.fa4_obj_root, "lib", "libfa4rt.so")))

llvm_config.with_system_environment(["HOME", "INCLUDE", "LIB", "TMP", "TEMP"])
llvm_config.with_system_environment(["ASAN_OPTIONS", "UBSAN_OPTIONS"])
# The knobs that widen the sampled checks into the long runs (README, "Long
# runs"); lit passes no other variable of the caller's environment.
llvm_config.with_system_environment(["FA4_MATRIX_EMULATE_EVERY", "FA4_MATRIX_INTERLEAVINGS",
                                     "FA4_MATRIX_SIM_EVERY"])
# The sanitizer build (scripts/test.sh --asan): a Python that loads the
# instrumented libfa4rt.so needs the ASan runtime loaded first.
if getattr(config, "fa4_sanitize", "OFF").upper() in ("ON", "1", "TRUE", "YES"):
    config.available_features.add("asan")
    import subprocess
    import sys
    libasan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True,
                             text=True).stdout.strip()
    if os.path.isabs(libasan):
        config.substitutions.insert(0, ("%python", 'env LD_PRELOAD="%s" "%s"' % (
            libasan, sys.executable)))
llvm_config.use_default_substitutions()

tool_dirs = [config.fa4_tools_dir, config.llvm_tools_dir]
tools = ["fa4-opt", "fa4c", "fa4-sim", "fa4-emu", "fa4-emu-gemm", "fa4-fuzz", "fa4-runtime-check",
         "fa4-tma-check"]
llvm_config.add_tool_substitutions(tools, tool_dirs)
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

# The CPU evaluator of linalg-on-tensors functions (scripts/evaluate-linalg.py)
# runs the installed MLIR's mlir-opt and mlir-runner with the runner's
# libraries, which live in the lib directory beside the tools' bin directory
# (or config.llvm_lib_dir where a site config sets it); tests that use
# %evaluate_linalg should say `REQUIRES: mlir-runner`.
import sys
llvm_lib_dir = getattr(config, "llvm_lib_dir", None) or \
    os.path.join(os.path.dirname(os.path.normpath(config.llvm_tools_dir)), "lib")
config.substitutions.append(("%evaluate_linalg", '"%s" "%s" --mlir-opt "%s" --mlir-runner "%s" --lib-dir "%s"' % (
    sys.executable, os.path.join(config.fa4_src_root, "scripts", "evaluate-linalg.py"),
    os.path.join(config.llvm_tools_dir, "mlir-opt"),
    os.path.join(config.llvm_tools_dir, "mlir-runner"), llvm_lib_dir)))
config.substitutions.append(("%reference_attention", '"%s" "%s"' % (
    sys.executable, os.path.join(config.fa4_src_root, "test", "Raise", "Inputs",
                                 "reference_attention.py"))))
if os.access(os.path.join(config.llvm_tools_dir, "mlir-runner"), os.X_OK) and \
        all(os.path.exists(os.path.join(llvm_lib_dir, lib))
            for lib in ("libmlir_runner_utils.so", "libmlir_c_runner_utils.so")):
    config.available_features.add("mlir-runner")

# NVIDIA's disassembler, installed from PyPI by scripts/test.sh when the
# registry is reachable (the CUDA toolkit here ships none): the SASS tests
# need it and are reported unsupported without it.
cuda_tools = os.environ.get("FA4_CUDA_TOOLS_BIN", "")
if cuda_tools and os.path.exists(os.path.join(cuda_tools, "cuobjdump")) and \
        os.path.exists(os.path.join(cuda_tools, "nvdisasm")):
    config.available_features.add("cuobjdump")
    config.environment["PATH"] = cuda_tools + os.pathsep + config.environment["PATH"]

# NVIDIA's CuTe headers, from PyPI's nvidia-cutlass as scripts/test.sh
# installs it when the registry is reachable, and the toolkit's nvcc: the
# cross-check of the emulator's layouts and fa4's descriptors against CuTe
# needs both and is reported unsupported without them.
nvcc = os.path.join(config.cuda_toolkit_path, "bin", "nvcc")
if os.access(nvcc, os.X_OK):
    config.available_features.add("nvcc")
    config.substitutions.append(("%nvcc", nvcc))
cutlass_include = os.environ.get("FA4_CUTLASS_INCLUDE", "")
if cutlass_include and \
        os.path.exists(os.path.join(cutlass_include, "cute", "tensor.hpp")) and \
        os.access(nvcc, os.X_OK):
    config.available_features.add("cute")
    config.substitutions.append(("%cutlass_include", cutlass_include))
