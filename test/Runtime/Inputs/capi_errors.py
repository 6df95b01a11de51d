"""capi_errors.py LIBFA4RT: calls that used to end the process through
libfa4rt.so's C ABI (an exception escaping it) print their error instead."""
import ctypes
import resource
import sys

# Whatever the machine's overcommit policy, an allocation past 8 GiB fails.
resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))

lib = ctypes.CDLL(sys.argv[1])
lib.fa4rt_last_error.restype = ctypes.c_char_p
lib.fa4rt_backend_emulator.restype = ctypes.c_void_p
lib.fa4rt_backend_emulator.argtypes = [ctypes.c_uint, ctypes.c_uint64, ctypes.c_uint]
lib.fa4rt_emulator_allocate.restype = ctypes.c_uint64
lib.fa4rt_emulator_allocate.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
lib.fa4rt_backend_free.argtypes = [ctypes.c_void_p]

backend = lib.fa4rt_backend_emulator(1, 0, 0)
for size in (1 << 62, (1 << 48) + 1, 1 << 47, 4096):
    address = lib.fa4rt_emulator_allocate(backend, size)
    print("allocate", size, "->", "ok" if address else "0",
          lib.fa4rt_last_error().decode())
lib.fa4rt_backend_free(backend)
