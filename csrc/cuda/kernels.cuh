// Device kernels, declared for the host code of the CUDA extension. Each is instantiated in
// kernels.cu for every dtype (and op) that the host path supports.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "commbench/reduce.h"

namespace commbench {

// dst = op(dst, src) over n elements, calling the functor of reduce.h; 16-byte vector loads when
// both pointers are 16-byte aligned.
template <typename T, typename Op>
void launch_reduce(T* dst, const T* src, std::size_t n, cudaStream_t stream);

// The exact-reduction pattern of pattern.h: rank r's input, and a count of wrong elements added to
// *wrong (device memory).
template <typename T>
void launch_fill(T* data, std::size_t n, RedOp op, int rank, int nranks, cudaStream_t stream);
template <typename T>
void launch_count_wrong(const T* data, std::size_t n, RedOp op, int nranks, unsigned long long* wrong,
                        cudaStream_t stream);

// A copy done by streaming multiprocessors (16-byte loads and stores), for peer memory that the
// copy engines would otherwise move.
void launch_sm_copy(void* dst, const void* src, std::size_t bytes, cudaStream_t stream);

}  // namespace commbench
