// Launch-free timing: the stream is held behind a gate kernel (kernels.cuh) while the host enqueues
// the start event, the timed work and the stop event, then released, so that the event pair encloses
// the device's work and not the host's enqueue and launch latency (on an idle stream the start event
// would fire as soon as it is recorded). The flag and the expiry count live in mapped host memory,
// written by the host and read by the gate.
//
// A stream takes about a thousand pending launches before the next launch blocks the host, and a
// blocked host would leave the gate to expire: so the gate lets the stream go once kGateOps operations
// (kernels, copies, NCCL groups) are enqueued behind it. A sample of more (our algorithms' pipeline
// steps at large sizes) is held for its first kGateOps; the rest of its enqueue overlaps the device's
// work, as without the gate. Where every launch waits for the device (CUDA_LAUNCH_BLOCKING=1) nothing
// can be enqueued behind a held stream, and the gate holds nothing.
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "errors.h"
#include "kernels.cuh"

namespace commbench {

constexpr unsigned kGateOps = 128;

class Gate;
// The gate this thread holds, while it holds one.
inline thread_local Gate* held_gate = nullptr;

class Gate {
 public:
  explicit Gate(const Where& w) {
    const char* blocking = std::getenv("CUDA_LAUNCH_BLOCKING");
    off_ = blocking && std::strcmp(blocking, "1") == 0;
    cuda_check(cudaHostAlloc(&host_, 2 * sizeof(unsigned), cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc", w);
    flag()[0] = flag()[1] = 0;
    const cudaError_t rc = cudaHostGetDevicePointer(&device_, host_, 0);
    if (rc != cudaSuccess) {
      cudaFreeHost(host_);
      cuda_check(rc, "cudaHostGetDevicePointer", w);
    }
  }
  ~Gate() {
    release();  // no gate kernel may still read the page it frees
    cudaFreeHost(host_);
  }
  void hold(cudaStream_t stream) {
    if (off_) return;
    auto* d = static_cast<unsigned*>(device_);
    launch_gate(d, ++seq_, d + 1, stream);
    ops_ = 0;
    held_gate = this;
  }
  void release() {
    __atomic_store_n(flag(), seq_, __ATOMIC_RELEASE);
    if (held_gate == this) held_gate = nullptr;
  }
  // Gates that gave up waiting since the gate was made: their samples include the enqueue.
  unsigned expired() const { return __atomic_load_n(flag() + 1, __ATOMIC_ACQUIRE); }
  // One more operation enqueued by this thread: past kGateOps behind a held gate, the gate lets go.
  // A thread holds two gates at once only for a bidirectional copy (one per GPU's stream), whose
  // operations then count against the second: one copy a direction, far below kGateOps either way.
  static void enqueued() {
    if (held_gate && ++held_gate->ops_ >= kGateOps) held_gate->release();
  }
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;

 private:
  unsigned* flag() const { return static_cast<unsigned*>(host_); }
  void* host_ = nullptr;
  void* device_ = nullptr;
  unsigned seq_ = 0, ops_ = 0;
  bool off_ = false;
};

// A gate that gave up since `expired_before` (the host blocked while it enqueued behind the held
// stream: NCCL waiting on the host for its internal stream, CUDA_LAUNCH_BLOCKING) leaves samples that
// include the enqueue, which launch-free timing promises to leave out: the run stops instead, saying
// `remedy`.
inline void require_held(const Gate& gate, unsigned expired_before, const std::string& what, const char* remedy,
                         const Where& w) {
  if (gate.expired() == expired_before) return;
  throw std::runtime_error(what + ": the stream was held for " + std::to_string(static_cast<int>(kGateSeconds)) +
                           " s or more while the host enqueued one sample, and let go: the samples would include "
                           "the enqueue (the host waited inside it: NCCL connecting its peers or an algorithm on "
                           "the host, or waiting for its own stream; or CUDA_LAUNCH_BLOCKING=1); " + remedy + w.text());
}

}  // namespace commbench
