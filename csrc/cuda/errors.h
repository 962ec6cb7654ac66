// Every CUDA and NCCL status is checked and turned into an exception naming the call, the rank and
// the device, so Python can report it in one line.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <stdexcept>
#include <string>

namespace commbench {

// Who is calling: set once per communicator or per local test, printed in every error.
struct Where {
  int rank = 0;
  int device = 0;
  std::string text() const { return " (rank " + std::to_string(rank) + ", device " + std::to_string(device) + ")"; }
};

inline void cuda_check(cudaError_t rc, const char* call, const Where& w) {
  if (rc != cudaSuccess)
    throw std::runtime_error(std::string(call) + " failed: " + cudaGetErrorString(rc) + w.text());
}

inline void nccl_check(ncclResult_t rc, const char* call, const Where& w) {
  if (rc != ncclSuccess)
    throw std::runtime_error(std::string(call) + " failed: " + ncclGetErrorString(rc) + w.text());
}

}  // namespace commbench
