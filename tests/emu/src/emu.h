// What the emulated NCCL needs from the emulated CUDA runtime: work on a stream, the capture a stream
// is in, the device memory guard, and the emulated devices' identities.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <cstddef>
#include <memory>
#include <string>

namespace emu {

// Queues `work` on `stream` (recorded into the graph instead while the stream is being captured).
// Work runs on the stream's worker with device memory open. `hold`, when given, is kept alive by a
// graph that captured the work, for as long as the graph or an instance of it exists.
cudaError_t enqueue(cudaStream_t stream, std::function<void()> work, std::shared_ptr<void> hold = nullptr);

// The current device of the calling thread, and the identity of a visible device: its host and its
// physical index on that host.
int current_device();
std::string host_name();
int physical_index(int device);

// Whether [p, p + bytes) lies inside one device allocation.
bool device_range(const void* p, std::size_t bytes);

// The device whose allocation holds [p, p + bytes) (-1: none), and the device of a stream (-1 for 0
// and cudaStreamLegacy, whose device is whichever is current where the work is enqueued).
int device_of(const void* p, std::size_t bytes);
int stream_device(cudaStream_t stream);

// Device memory is readable while at least one Open is alive anywhere in the process.
struct Open {
  Open();
  ~Open();
  Open(const Open&) = delete;
  Open& operator=(const Open&) = delete;
};

// Seconds to sleep in a wait loop that made no progress: spin first, then back off.
void idle(unsigned& rounds);

}  // namespace emu
