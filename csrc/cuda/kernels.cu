#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "commbench/alignment.h"
#include "commbench/pattern.h"
#include "commbench/reduce.h"
#include "errors.h"
#include "gate.h"
#include "kernels.cuh"

namespace commbench {
namespace {

constexpr int kThreads = 256;

// Enough blocks to fill any current GPU; grid-stride loops cover the rest.
unsigned blocks_for(std::size_t work) {
  const std::size_t b = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<std::size_t>(1, std::min<std::size_t>(b, 4096)));
}

template <typename T>
struct alignas(16) Pack {
  static constexpr int kLanes = static_cast<int>(kVecBytes / sizeof(T));
  T v[kLanes];
};

// Launches `kernel` over blocks x threads on `stream` and checks the launch. On a GPU the chevron
// launch; in the emulated build (tests/emu) its runtime runs the same kernel once per emulated thread,
// in stream order.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), const char* name, unsigned blocks, unsigned threads, cudaStream_t stream,
            Args... args) {
#if defined(__CUDACC__)
  kernel<<<blocks, threads, 0, stream>>>(args...);
#else
  emu_launch(name, blocks, threads, stream, [=] { kernel(args...); });
#endif
  Gate::enqueued();
  check_launch(name);
}

// Element-wise functors of split_kernel: a reduction reads both sides, a copy only the source.
template <typename Op>
struct Combine {
  static constexpr bool kReadsDst = true;
  template <typename T> COMMBENCH_HD T operator()(T a, T b) const { return Op{}(a, b); }
};
struct Take {
  static constexpr bool kReadsDst = false;
  template <typename T> COMMBENCH_HD T operator()(T, T b) const { return b; }
};

// dst[i] = f(dst[i], src[i]) over a VecSplit: a scalar head, 16-byte packs, a scalar tail.
template <typename T, typename F>
__global__ void split_kernel(T* __restrict__ dst, const T* __restrict__ src, VecSplit sp) {
  const F f;
  const std::size_t first = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = first; i < sp.head; i += stride) dst[i] = f(F::kReadsDst ? dst[i] : T{}, src[i]);
  Pack<T>* vdst = reinterpret_cast<Pack<T>*>(dst + sp.head);
  const Pack<T>* vsrc = reinterpret_cast<const Pack<T>*>(src + sp.head);
  for (std::size_t i = first; i < sp.packs; i += stride) {
    const Pack<T> b = vsrc[i];
    Pack<T> a{};
    if constexpr (F::kReadsDst) a = vdst[i];
#pragma unroll
    for (int l = 0; l < Pack<T>::kLanes; ++l) a.v[l] = f(a.v[l], b.v[l]);
    vdst[i] = a;
  }
  const std::size_t done = sp.head + sp.packs * Pack<T>::kLanes;
  for (std::size_t i = first; i < sp.tail; i += stride)
    dst[done + i] = f(F::kReadsDst ? dst[done + i] : T{}, src[done + i]);
}

// Nanoseconds: the GPU's global timer (clock64 would count the SM's cycles, whose rate boosts and
// throttles); the emulated clock64 counts nanoseconds.
__device__ __forceinline__ long long now_ns() {
#if defined(__CUDA_ARCH__)
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return static_cast<long long>(t);
#else
  return clock64();
#endif
}

__global__ void gate_kernel(const volatile unsigned* flag, unsigned seq, unsigned* expired) {
  const long long start = now_ns();
  const long long limit = static_cast<long long>(kGateSeconds * 1e9);
  while (static_cast<int>(*flag - seq) < 0) {  // wrap-safe: the sequence counts up for ever
    if (now_ns() - start > limit) {
      atomicAdd(expired, 1u);
      return;
    }
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 700  // __nanosleep: Volta and later
    __nanosleep(256);
#endif
  }
}

__global__ void spin_kernel(long long ns) {
  const long long start = now_ns();
  while (now_ns() - start < ns) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 700
    __nanosleep(256);
#endif
  }
}

template <typename T, typename F>
void launch_split(T* dst, const T* src, std::size_t n, cudaStream_t stream, const char* name) {
  if (n == 0) return;
  const VecSplit sp = vec_split(reinterpret_cast<std::uintptr_t>(dst), reinterpret_cast<std::uintptr_t>(src), n, sizeof(T));
  launch(split_kernel<T, F>, name, blocks_for(std::max(sp.packs, sp.head + sp.tail)), kThreads, stream, dst, src, sp);
}

// Each block adds its count and takes one away from the sentinel that arm_counter set.
__device__ void add_block_count(unsigned long long* wrong, unsigned long long local) {
  if (local) atomicAdd(wrong, local);
  if (threadIdx.x == 0) atomicAdd(wrong, ~0ULL);
}

__global__ void arm_sentinel_kernel(unsigned long long* wrong, unsigned long long value) { *wrong = value; }

// Sets *wrong, in stream order, to the number of blocks the check of `work` items will run with,
// and returns it. A kernel rather than a copy from host memory, which would wait for the stream.
unsigned arm_counter(unsigned long long* wrong, std::size_t work, cudaStream_t stream) {
  const unsigned blocks = blocks_for(work);
  launch(arm_sentinel_kernel, "check counter kernel", 1, 1, stream, wrong, static_cast<unsigned long long>(blocks));
  return blocks;
}

template <typename T>
__global__ void fill_kernel(T* data, std::size_t n, std::size_t first, RedOp op, int rank, int nranks) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    data[i] = static_cast<T>(pattern_value(op, first + i, rank, nranks));
}

// What each element must hold from `source`: pattern.h's expected_at.
template <typename T>
__global__ void count_wrong_kernel(const T* data, std::size_t n, std::size_t first, RedOp op, int nranks, int source,
                                   unsigned long long* wrong) {
  unsigned long long local = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    local += static_cast<double>(data[i]) != expected_at(op, first + i, source, nranks) ? 1 : 0;
  }
  add_block_count(wrong, local);
}

template <typename T>
__global__ void fill_value_kernel(T* data, std::size_t n, double value) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    data[i] = static_cast<T>(value);
}

__global__ void fill_bytes_kernel(unsigned char* data, std::size_t n, unsigned seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    data[i] = byte_pattern(i, seed);
}

__global__ void count_bytes_wrong_kernel(const unsigned char* data, std::size_t n, unsigned seed,
                                         unsigned long long* wrong) {
  unsigned long long local = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    local += data[i] != byte_pattern(i, seed) ? 1 : 0;
  add_block_count(wrong, local);
}

}  // namespace

template <typename T, typename Op>
void launch_reduce(T* dst, const T* src, std::size_t n, cudaStream_t stream) {
  launch_split<T, Combine<Op>>(dst, src, n, stream, "reduce kernel");
}

void launch_gate(const volatile unsigned* flag, unsigned seq, unsigned* expired, cudaStream_t stream) {
  launch(gate_kernel, "gate kernel", 1, 1, stream, flag, seq, expired);
}

void launch_spin(double seconds, cudaStream_t stream) {
  launch(spin_kernel, "spin kernel", 1, 1, stream, static_cast<long long>(seconds * 1e9));
}

void launch_sm_copy(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  launch_split<unsigned char, Take>(static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), bytes,
                                    stream, "SM copy kernel");
}

template <typename T>
void launch_fill(T* data, std::size_t n, std::size_t first, RedOp op, int rank, int nranks, cudaStream_t stream) {
  if (n == 0) return;
  launch(fill_kernel<T>, "fill kernel", blocks_for(n), kThreads, stream, data, n, first, op, rank, nranks);
}

template <typename T>
void launch_count_wrong(const T* data, std::size_t n, std::size_t first, RedOp op, int nranks, int source,
                        unsigned long long* wrong, cudaStream_t stream) {
  // Launched even for n == 0: only a kernel that ran clears the sentinel.
  const unsigned blocks = arm_counter(wrong, n, stream);
  launch(count_wrong_kernel<T>, "check kernel", blocks, kThreads, stream, data, n, first, op, nranks, source, wrong);
}

template <typename T>
void launch_fill_value(T* data, std::size_t n, double value, cudaStream_t stream) {
  if (n == 0) return;
  launch(fill_value_kernel<T>, "value fill kernel", blocks_for(n), kThreads, stream, data, n, value);
}

void launch_fill_bytes(void* data, std::size_t bytes, unsigned seed, cudaStream_t stream) {
  if (bytes == 0) return;
  launch(fill_bytes_kernel, "byte fill kernel", blocks_for(bytes), kThreads, stream, static_cast<unsigned char*>(data),
         bytes, seed);
}

void launch_count_bytes_wrong(const void* data, std::size_t bytes, unsigned seed, unsigned long long* wrong,
                              cudaStream_t stream) {
  const unsigned blocks = arm_counter(wrong, bytes, stream);
  launch(count_bytes_wrong_kernel, "byte check kernel", blocks, kThreads, stream,
         static_cast<const unsigned char*>(data), bytes, seed, wrong);
}

#define COMMBENCH_FOR_OPS(T)                                                              \
  template void launch_reduce<T, OpSum>(T*, const T*, std::size_t, cudaStream_t);         \
  template void launch_reduce<T, OpProd>(T*, const T*, std::size_t, cudaStream_t);        \
  template void launch_reduce<T, OpMax>(T*, const T*, std::size_t, cudaStream_t);         \
  template void launch_reduce<T, OpMin>(T*, const T*, std::size_t, cudaStream_t);         \
  template void launch_fill<T>(T*, std::size_t, std::size_t, RedOp, int, int, cudaStream_t);  \
  template void launch_fill_value<T>(T*, std::size_t, double, cudaStream_t);                  \
  template void launch_count_wrong<T>(const T*, std::size_t, std::size_t, RedOp, int, int, unsigned long long*, \
                                      cudaStream_t);

COMMBENCH_FOR_OPS(float)
COMMBENCH_FOR_OPS(double)
COMMBENCH_FOR_OPS(c10::Half)
COMMBENCH_FOR_OPS(c10::BFloat16)
COMMBENCH_FOR_OPS(int32_t)
COMMBENCH_FOR_OPS(int64_t)
template void launch_fill_value<uint8_t>(uint8_t*, std::size_t, double, cudaStream_t);

}  // namespace commbench
