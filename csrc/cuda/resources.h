// CUDA resources owned by objects, so that every error path (an exception from any check) frees
// streams, events, device and pinned memory; and the per-iteration event timer both the
// communicator and the local copies use.
#pragma once

#include "python.h"

#include <cuda_runtime.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "errors.h"
#include "gate.h"

namespace commbench {

// Runs `release` with `device` current and then restores the caller's device: destructors run from
// any context. A failure here is not reported (the first error is), and its status is cleared so
// that the next launch check does not mistake it for its own.
template <typename F>
void release_on(int device, F&& release) {
  int previous = -1;
  const bool known = cudaGetDevice(&previous) == cudaSuccess;
  cudaSetDevice(device);
  release();
  if (known) cudaSetDevice(previous);
  cudaGetLastError();
}

struct DeviceBuffer {
  void* ptr = nullptr;
  int device = 0;
  DeviceBuffer(std::size_t bytes, int dev, const Where& w) : device(dev) {
    cuda_check(cudaSetDevice(dev), "cudaSetDevice", w);
    cuda_check(cudaMalloc(&ptr, std::max<std::size_t>(bytes, 16)), "cudaMalloc", w);
  }
  ~DeviceBuffer() {
    if (ptr) release_on(device, [&] { cudaFree(ptr); });
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct PinnedBuffer {
  void* ptr = nullptr;
  PinnedBuffer(std::size_t bytes, const Where& w) {
    cuda_check(cudaHostAlloc(&ptr, std::max<std::size_t>(bytes, 16), cudaHostAllocPortable), "cudaHostAlloc", w);
  }
  ~PinnedBuffer() {
    if (ptr) cudaFreeHost(ptr);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
};

// Pageable host memory of its own mapping, so that its pages are first touched, and so placed on a
// NUMA node, by the thread that fills it (a heap block may reuse pages touched elsewhere before).
struct PageableBuffer {
  void* ptr = nullptr;
  std::size_t bytes;
  PageableBuffer(std::size_t n, const Where& w) : bytes(std::max<std::size_t>(n, 16)) {
    ptr = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ptr == MAP_FAILED) {
      ptr = nullptr;
      cuda_check(cudaErrorMemoryAllocation, "mmap", w);
    }
  }
  ~PageableBuffer() {
    if (ptr) munmap(ptr, bytes);
  }
  PageableBuffer(const PageableBuffer&) = delete;
  PageableBuffer& operator=(const PageableBuffer&) = delete;
};

struct Stream {
  cudaStream_t s = nullptr;
  int device = 0;
  Stream(int dev, const Where& w) : device(dev) {
    cuda_check(cudaSetDevice(dev), "cudaSetDevice", w);
    cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate", w);
  }
  ~Stream() {
    if (s) release_on(device, [&] { cudaStreamDestroy(s); });
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

// An event on the current device; timing events unless `timing` is false (then cheaper, for
// ordering streams only).
struct Event {
  cudaEvent_t e = nullptr;
  Event(const Where& w, bool timing = true) {
    cuda_check(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming), "cudaEventCreate", w);
  }
  ~Event() {
    if (e) cudaEventDestroy(e);  // null once moved from
  }
  Event(Event&& o) noexcept : e(o.e) { o.e = nullptr; }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

// One start/stop event pair per sample, recorded on `stream`; before each sample `sync()` runs
// untimed, after the last `wait()` must return once the stream is idle; a sample is `calls` calls of
// body() back to back. With a `gate`, each sample is enqueued behind it and released once enqueued;
// `before_start`, where given, enqueues what comes between the gate and the start event. Seconds per
// sample.
template <typename Sync, typename Body, typename Wait>
std::vector<double> event_times(cudaStream_t stream, int64_t iters, const Where& w, Sync&& sync, Body&& body,
                                Wait&& wait, int64_t calls = 1, Gate* gate = nullptr,
                                const std::function<void()>& before_start = {}) {
  std::vector<Event> ev;
  ev.reserve(static_cast<std::size_t>(2 * iters));
  for (int64_t i = 0; i < 2 * iters; ++i) ev.emplace_back(w);
  for (int64_t i = 0; i < iters; ++i) {
    sync();
    // Released on every way out, a failed hold included: a failed enqueue must not leave the stream held.
    struct Release {
      Gate* g;
      ~Release() {
        if (g) g->release();
      }
    } release{gate};
    if (gate) gate->hold(stream);
    if (before_start) before_start();
    cuda_check(cudaEventRecord(ev[2 * i].e, stream), "cudaEventRecord", w);
    for (int64_t c = 0; c < calls; ++c) body();
    cuda_check(cudaEventRecord(ev[2 * i + 1].e, stream), "cudaEventRecord", w);
  }
  wait();
  std::vector<double> t(static_cast<std::size_t>(iters));
  for (int64_t i = 0; i < iters; ++i) {
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, ev[2 * i].e, ev[2 * i + 1].e), "cudaEventElapsedTime", w);
    t[i] = ms * 1e-3;
  }
  return t;
}

}  // namespace commbench
