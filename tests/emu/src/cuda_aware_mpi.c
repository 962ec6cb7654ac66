/* A CUDA-aware MPI for the emulated GPUs: preloaded (LD_PRELOAD) into the ranks, it says MPI is
 * CUDA-aware and opens the emulated device memory for the duration of each MPI call that commbench makes
 * on GPU buffers, as a CUDA-aware library reaches device memory itself. Host code outside MPI calls
 * still faults on a device pointer, so a host memcpy on GPU buffers is caught. The emulated runtime
 * registers how to open its memory when it loads (runtime.cpp). Test infrastructure only. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>

static void (*open_memory)(int) = 0;

__attribute__((visibility("default"))) void commbench_emu_register(void (*fn)(int)) { open_memory = fn; }

int MPIX_Query_cuda_support(void) { return 1; }

/* The library's own function: the MPI library is loaded by then (by mpi4py or commbench._host), in a
 * scope of its own where RTLD_NEXT does not reach. */
static void* real_function(const char* name) {
  static void* lib = 0;
  if (!lib) lib = dlopen("libmpi.so.40", RTLD_NOLOAD | RTLD_LAZY);
  if (!lib) lib = dlopen("libmpi.so.12", RTLD_NOLOAD | RTLD_LAZY);
  return lib ? dlsym(lib, name) : dlsym(RTLD_NEXT, name);
}

#define WRAP(name, params, args)                                   \
  int name params {                                                \
    static int(*real) params = 0;                                  \
    if (!real) *(void**)(&real) = real_function(#name);            \
    if (open_memory) open_memory(1);                               \
    const int rc = real args;                                      \
    if (open_memory) open_memory(0);                               \
    return rc;                                                     \
  }

WRAP(MPI_Allreduce, (const void* s, void* r, int n, MPI_Datatype t, MPI_Op o, MPI_Comm c), (s, r, n, t, o, c))
WRAP(MPI_Allgather, (const void* s, int sn, MPI_Datatype st, void* r, int rn, MPI_Datatype rt, MPI_Comm c),
     (s, sn, st, r, rn, rt, c))
WRAP(MPI_Reduce_scatter_block, (const void* s, void* r, int n, MPI_Datatype t, MPI_Op o, MPI_Comm c),
     (s, r, n, t, o, c))
WRAP(MPI_Bcast, (void* b, int n, MPI_Datatype t, int root, MPI_Comm c), (b, n, t, root, c))
WRAP(MPI_Reduce, (const void* s, void* r, int n, MPI_Datatype t, MPI_Op o, int root, MPI_Comm c),
     (s, r, n, t, o, root, c))
WRAP(MPI_Alltoall, (const void* s, int sn, MPI_Datatype st, void* r, int rn, MPI_Datatype rt, MPI_Comm c),
     (s, sn, st, r, rn, rt, c))
WRAP(MPI_Gather, (const void* s, int sn, MPI_Datatype st, void* r, int rn, MPI_Datatype rt, int root, MPI_Comm c),
     (s, sn, st, r, rn, rt, root, c))
WRAP(MPI_Scatter, (const void* s, int sn, MPI_Datatype st, void* r, int rn, MPI_Datatype rt, int root, MPI_Comm c),
     (s, sn, st, r, rn, rt, root, c))
WRAP(MPI_Sendrecv, (const void* s, int sn, MPI_Datatype st, int d, int stag, void* r, int rn, MPI_Datatype rt, int src,
                    int rtag, MPI_Comm c, MPI_Status* status),
     (s, sn, st, d, stag, r, rn, rt, src, rtag, c, status))
