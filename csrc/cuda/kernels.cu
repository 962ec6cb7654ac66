#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>

#include "commbench/pattern.h"
#include "commbench/reduce.h"
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
  static constexpr int kLanes = 16 / sizeof(T);
  T v[kLanes];
};

template <typename T, typename Op>
__global__ void reduce_vec_kernel(Pack<T>* __restrict__ dst, const Pack<T>* __restrict__ src, std::size_t packs) {
  const Op op;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < packs;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    Pack<T> a = dst[i];
    const Pack<T> b = src[i];
#pragma unroll
    for (int l = 0; l < Pack<T>::kLanes; ++l) a.v[l] = op(a.v[l], b.v[l]);
    dst[i] = a;
  }
}

template <typename T, typename Op>
__global__ void reduce_scalar_kernel(T* __restrict__ dst, const T* __restrict__ src, std::size_t n) {
  const Op op;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    dst[i] = op(dst[i], src[i]);
}

template <typename T>
__global__ void fill_kernel(T* data, std::size_t n, RedOp op, int rank, int nranks) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    data[i] = static_cast<T>(pattern_value(op, i, rank, nranks));
}

template <typename T>
__global__ void count_wrong_kernel(const T* data, std::size_t n, RedOp op, int nranks, unsigned long long* wrong) {
  unsigned long long local = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    local += static_cast<double>(data[i]) != pattern_expected(op, i, nranks) ? 1 : 0;
  if (local) atomicAdd(wrong, local);
}

__global__ void sm_copy_kernel(uint4* __restrict__ dst, const uint4* __restrict__ src, std::size_t n16,
                               unsigned char* __restrict__ dst_tail, const unsigned char* __restrict__ src_tail,
                               std::size_t tail) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t first = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  for (std::size_t i = first; i < n16; i += stride) dst[i] = src[i];
  for (std::size_t i = first; i < tail; i += stride) dst_tail[i] = src_tail[i];
}

}  // namespace

template <typename T, typename Op>
void launch_reduce(T* dst, const T* src, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  const bool aligned = ((reinterpret_cast<std::uintptr_t>(dst) | reinterpret_cast<std::uintptr_t>(src)) % 16) == 0;
  std::size_t done = 0;
  if (aligned) {
    const std::size_t packs = n / Pack<T>::kLanes;
    if (packs > 0)
      reduce_vec_kernel<T, Op><<<blocks_for(packs), kThreads, 0, stream>>>(
          reinterpret_cast<Pack<T>*>(dst), reinterpret_cast<const Pack<T>*>(src), packs);
    done = packs * Pack<T>::kLanes;
  }
  if (done < n)
    reduce_scalar_kernel<T, Op><<<blocks_for(n - done), kThreads, 0, stream>>>(dst + done, src + done, n - done);
}

template <typename T>
void launch_fill(T* data, std::size_t n, RedOp op, int rank, int nranks, cudaStream_t stream) {
  if (n > 0) fill_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(data, n, op, rank, nranks);
}

template <typename T>
void launch_count_wrong(const T* data, std::size_t n, RedOp op, int nranks, unsigned long long* wrong,
                        cudaStream_t stream) {
  if (n > 0) count_wrong_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(data, n, op, nranks, wrong);
}

void launch_sm_copy(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  // The 16-byte body needs both ends aligned; buffers from cudaMalloc are, offsets may not be.
  const bool aligned = ((reinterpret_cast<std::uintptr_t>(dst) | reinterpret_cast<std::uintptr_t>(src)) % 16) == 0;
  const std::size_t n16 = aligned ? bytes / 16 : 0, body = n16 * 16;
  sm_copy_kernel<<<blocks_for(std::max(n16, bytes - body)), kThreads, 0, stream>>>(
      static_cast<uint4*>(dst), static_cast<const uint4*>(src), n16, static_cast<unsigned char*>(dst) + body,
      static_cast<const unsigned char*>(src) + body, bytes - body);
}

#define COMMBENCH_FOR_OPS(T)                                                              \
  template void launch_reduce<T, OpSum>(T*, const T*, std::size_t, cudaStream_t);         \
  template void launch_reduce<T, OpProd>(T*, const T*, std::size_t, cudaStream_t);        \
  template void launch_reduce<T, OpMax>(T*, const T*, std::size_t, cudaStream_t);         \
  template void launch_reduce<T, OpMin>(T*, const T*, std::size_t, cudaStream_t);         \
  template void launch_fill<T>(T*, std::size_t, RedOp, int, int, cudaStream_t);           \
  template void launch_count_wrong<T>(const T*, std::size_t, RedOp, int, unsigned long long*, cudaStream_t);

COMMBENCH_FOR_OPS(float)
COMMBENCH_FOR_OPS(double)
COMMBENCH_FOR_OPS(c10::Half)
COMMBENCH_FOR_OPS(c10::BFloat16)
COMMBENCH_FOR_OPS(int32_t)
COMMBENCH_FOR_OPS(int64_t)

}  // namespace commbench
