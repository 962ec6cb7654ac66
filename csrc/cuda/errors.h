// Every CUDA and NCCL status is checked and turned into an exception naming the call, the rank and
// the device, so Python can report it in one line.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <stdexcept>
#include <string>
#include <thread>

namespace commbench {

// Who is calling: set once per communicator or per local test, printed in every error.
struct Where {
  int rank = 0;
  int device = 0;
  std::string text() const { return " (rank " + std::to_string(rank) + ", device " + std::to_string(device) + ")"; }
};

// A wait for peers that ran past --timeout: Python sees it as TimeoutError (module.cpp registers it),
// which the run reports as a timeout, not as any failure.
struct DeadlineExceeded : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void cuda_check(cudaError_t rc, const char* call, const Where& w) {
  if (rc != cudaSuccess)
    throw std::runtime_error(std::string(call) + " failed: " + cudaGetErrorString(rc) + w.text());
}

// NCCL's status names only a class of error ("unhandled system error"); its last-error text usually
// says which call and why, so it goes into every message. That text is NCCL's latest warning in the
// process, from any thread and never cleared, so it is given as such, not as this call's own words.
inline std::string nccl_error_text(ncclResult_t rc) {
  std::string text = ncclGetErrorString(rc);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && last[0] != '\0') text += std::string(" (NCCL's last warning: ") + last + ")";
  return text;
}

inline void nccl_check(ncclResult_t rc, const char* call, const Where& w) {
  if (rc != ncclSuccess) throw std::runtime_error(std::string(call) + " failed: " + nccl_error_text(rc) + w.text());
}

// A non-blocking communicator may answer ncclInProgress while a call is still being enqueued; the
// call is complete once ncclCommGetAsyncError stops saying so. The calls run on blocking communicators
// (NcclComm: NCCL_COMM_BLOCKING, which would make them non-blocking, is refused), which never answer so.
inline void nccl_enqueued(ncclResult_t rc, ncclComm_t comm, const char* call, const Where& w) {
  while (rc == ncclInProgress) {
    nccl_check(ncclCommGetAsyncError(comm, &rc), "ncclCommGetAsyncError", w);
    if (rc == ncclInProgress) std::this_thread::yield();
  }
  nccl_check(rc, call, w);
}

// A kernel launch reports a bad configuration or a missing device image only through
// cudaGetLastError, which a later synchronisation does not return: call this right after every
// launch (tests/test_cuda_static.py holds every `<<<` to it).
inline void check_launch(const char* kernel) {
  const cudaError_t rc = cudaGetLastError();
  if (rc != cudaSuccess) throw std::runtime_error(std::string(kernel) + " launch failed: " + cudaGetErrorString(rc));
}

}  // namespace commbench
