// The part of the CUDA runtime API that commbench._cuda calls, for its emulated build (tests/emu):
// a worker thread per stream runs the stream's work in order while the host goes on, and device
// memory is a host arena that is readable only inside runtime calls and kernels. Test
// infrastructure: it lets the GPU path's host code, kernels and protocol run where no GPU is, and is
// never part of an installed commbench. Values of the enums are CUDA's own.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>

#define CUDART_VERSION 13000

// Kernels compile as host functions; emu_launch (below) runs them once per emulated thread.
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorDevicesUnavailable = 46,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorPeerAccessUnsupported = 217,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalState = 401,
  cudaErrorNotReady = 600,
  cudaErrorPeerAccessAlreadyEnabled = 704,
  cudaErrorPeerAccessNotEnabled = 705,
  cudaErrorTooManyPeers = 711,
  cudaErrorLaunchFailure = 719,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureIsolation = 905,
  cudaErrorStreamCaptureImplicit = 906,
};

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaDeviceAttr {
  cudaDevAttrMemoryClockRate = 36,       // kHz
  cudaDevAttrGlobalMemoryBusWidth = 37,  // bits
};

enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};

typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
typedef struct CUgraph_st* cudaGraph_t;
typedef struct CUgraphExec_st* cudaGraphExec_t;

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02

struct cudaUUID_t {
  char bytes[16];
};

struct cudaDeviceProp {
  char name[256];
  cudaUUID_t uuid;
  std::size_t totalGlobalMem;
  int major, minor;
  int multiProcessorCount;
  int pciDomainID, pciBusID, pciDeviceID;
};

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
// constinit: no thread-local initialisation wrapper around every read in a kernel.
extern constinit thread_local dim3 blockIdx, threadIdx, blockDim, gridDim;

inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }

// A kernel's clock: nanoseconds here, the SM's cycles on a GPU (both count up at about 1-2 per ns).
inline long long clock64() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
// A kernel that waits gives the host's cores back (8 emulated ranks share 2 cores in the tests).
inline void __nanosleep(unsigned) { std::this_thread::yield(); }

const char* cudaGetErrorString(cudaError_t);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
cudaError_t cudaRuntimeGetVersion(int*);
cudaError_t cudaDriverGetVersion(int*);

cudaError_t cudaGetDeviceCount(int*);
cudaError_t cudaGetDevice(int*);
cudaError_t cudaSetDevice(int);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp*, int);
cudaError_t cudaDeviceGetAttribute(int*, cudaDeviceAttr, int);
cudaError_t cudaDeviceGetPCIBusId(char*, int, int);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaDeviceCanAccessPeer(int*, int, int);
cudaError_t cudaDeviceEnablePeerAccess(int, unsigned);
cudaError_t cudaMemGetInfo(std::size_t*, std::size_t*);

cudaError_t cudaMalloc(void**, std::size_t);
cudaError_t cudaFree(void*);
cudaError_t cudaHostAlloc(void**, std::size_t, unsigned);
cudaError_t cudaFreeHost(void*);
cudaError_t cudaHostGetDevicePointer(void**, void*, unsigned);
cudaError_t cudaMemcpy(void*, const void*, std::size_t, cudaMemcpyKind);
cudaError_t cudaMemcpyAsync(void*, const void*, std::size_t, cudaMemcpyKind, cudaStream_t = nullptr);
cudaError_t cudaMemcpyPeerAsync(void*, int, const void*, int, std::size_t, cudaStream_t = nullptr);

cudaError_t cudaStreamCreate(cudaStream_t*);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t*, unsigned);
cudaError_t cudaStreamDestroy(cudaStream_t);
cudaError_t cudaStreamQuery(cudaStream_t);
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned = 0);

cudaError_t cudaEventCreate(cudaEvent_t*);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t*, unsigned);
cudaError_t cudaEventDestroy(cudaEvent_t);
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t = nullptr);
cudaError_t cudaEventQuery(cudaEvent_t);
cudaError_t cudaEventSynchronize(cudaEvent_t);
cudaError_t cudaEventElapsedTime(float*, cudaEvent_t, cudaEvent_t);

cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode);
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t*);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t*, cudaGraph_t, unsigned long long = 0);
cudaError_t cudaGraphUpload(cudaGraphExec_t, cudaStream_t);
cudaError_t cudaGraphLaunch(cudaGraphExec_t, cudaStream_t);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t);
cudaError_t cudaGraphDestroy(cudaGraph_t);

// A kernel launch: `grid` runs the whole grid, in the stream's order. `name` is what an injected launch
// failure matches (COMMBENCH_EMU_FAIL_LAUNCH).
cudaError_t emu_launch_grid(const char* name, unsigned blocks, unsigned threads, cudaStream_t stream,
                            std::function<void()> grid);

// A kernel launch: `thread` runs once per emulated thread of the grid, one after another. The loop is
// compiled with the kernel, so the kernel inlines into it (a grid of a million threads is a million
// calls otherwise).
template <typename Thread>
cudaError_t emu_launch(const char* name, unsigned blocks, unsigned threads, cudaStream_t stream, Thread thread) {
  return emu_launch_grid(name, blocks, threads, stream, [blocks, threads, thread] {
    gridDim.x = blocks;
    blockDim.x = threads;
    for (unsigned b = 0; b < blocks; ++b) {
      blockIdx.x = b;
      for (unsigned t = 0; t < threads; ++t) {
        threadIdx.x = t;
        thread();
      }
    }
  });
}
