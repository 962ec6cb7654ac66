#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "commbench/alignment.h"
#include "commbench/pattern.h"
#include "commbench/reduce.h"
#include "errors.h"
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

template <typename T, typename F>
void launch_split(T* dst, const T* src, std::size_t n, cudaStream_t stream, const char* name) {
  if (n == 0) return;
  const VecSplit sp = vec_split(reinterpret_cast<std::uintptr_t>(dst), reinterpret_cast<std::uintptr_t>(src), n, sizeof(T));
  split_kernel<T, F><<<blocks_for(std::max(sp.packs, sp.head + sp.tail)), kThreads, 0, stream>>>(dst, src, sp);
  check_launch(name);
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
  arm_sentinel_kernel<<<1, 1, 0, stream>>>(wrong, blocks);
  check_launch("check counter kernel");
  return blocks;
}

template <typename T>
__global__ void fill_kernel(T* data, std::size_t n, std::size_t first, RedOp op, int rank, int nranks) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    data[i] = static_cast<T>(pattern_value(op, first + i, rank, nranks));
}

// source < 0: the exact reduction over nranks; otherwise rank source's own values.
template <typename T>
__global__ void count_wrong_kernel(const T* data, std::size_t n, std::size_t first, RedOp op, int nranks, int source,
                                   unsigned long long* wrong) {
  unsigned long long local = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const double expected = source < 0 ? pattern_expected(op, first + i, nranks)
                                       : static_cast<double>(pattern_value(op, first + i, source, nranks));
    local += static_cast<double>(data[i]) != expected ? 1 : 0;
  }
  add_block_count(wrong, local);
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

void launch_sm_copy(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  launch_split<unsigned char, Take>(static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), bytes,
                                    stream, "SM copy kernel");
}

template <typename T>
void launch_fill(T* data, std::size_t n, std::size_t first, RedOp op, int rank, int nranks, cudaStream_t stream) {
  if (n == 0) return;
  fill_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(data, n, first, op, rank, nranks);
  check_launch("fill kernel");
}

template <typename T>
void launch_count_wrong(const T* data, std::size_t n, std::size_t first, RedOp op, int nranks, int source,
                        unsigned long long* wrong, cudaStream_t stream) {
  // Launched even for n == 0: only a kernel that ran clears the sentinel.
  const unsigned blocks = arm_counter(wrong, n, stream);
  count_wrong_kernel<T><<<blocks, kThreads, 0, stream>>>(data, n, first, op, nranks, source, wrong);
  check_launch("check kernel");
}

void launch_fill_bytes(void* data, std::size_t bytes, unsigned seed, cudaStream_t stream) {
  if (bytes == 0) return;
  fill_bytes_kernel<<<blocks_for(bytes), kThreads, 0, stream>>>(static_cast<unsigned char*>(data), bytes, seed);
  check_launch("byte fill kernel");
}

void launch_count_bytes_wrong(const void* data, std::size_t bytes, unsigned seed, unsigned long long* wrong,
                              cudaStream_t stream) {
  const unsigned blocks = arm_counter(wrong, bytes, stream);
  count_bytes_wrong_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const unsigned char*>(data), bytes, seed, wrong);
  check_launch("byte check kernel");
}

#define COMMBENCH_FOR_OPS(T)                                                              \
  template void launch_reduce<T, OpSum>(T*, const T*, std::size_t, cudaStream_t);         \
  template void launch_reduce<T, OpProd>(T*, const T*, std::size_t, cudaStream_t);        \
  template void launch_reduce<T, OpMax>(T*, const T*, std::size_t, cudaStream_t);         \
  template void launch_reduce<T, OpMin>(T*, const T*, std::size_t, cudaStream_t);         \
  template void launch_fill<T>(T*, std::size_t, std::size_t, RedOp, int, int, cudaStream_t);  \
  template void launch_count_wrong<T>(const T*, std::size_t, std::size_t, RedOp, int, int, unsigned long long*, \
                                      cudaStream_t);

COMMBENCH_FOR_OPS(float)
COMMBENCH_FOR_OPS(double)
COMMBENCH_FOR_OPS(c10::Half)
COMMBENCH_FOR_OPS(c10::BFloat16)
COMMBENCH_FOR_OPS(int32_t)
COMMBENCH_FOR_OPS(int64_t)

}  // namespace commbench
