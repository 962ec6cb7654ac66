// commbench._cuda: GPU timed loops. Collectives run on a NCCL communicator that this module creates
// from a unique id broadcast by rank 0; our ring and tree walk the same schedules (schedule.h) with
// the same executors (collectives.h) as the host path, over NCCL point-to-point, reducing with a
// kernel that calls the same functor (reduce.h). Iterations are timed with CUDA events, one pair per
// iteration; local copies (peer, host<->device, staged) need no communicator.
#include <torch/extension.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "commbench/collectives.h"
#include "commbench/reduce.h"
#include "commbench/schedule.h"
#include "errors.h"
#include "kernels.cuh"
#include "nccl_transport.h"
#include "torch_dispatch.h"

namespace commbench {
namespace {

template <typename T> ncclDataType_t nccl_type();
template <> ncclDataType_t nccl_type<float>() { return ncclFloat32; }
template <> ncclDataType_t nccl_type<double>() { return ncclFloat64; }
template <> ncclDataType_t nccl_type<c10::Half>() { return ncclFloat16; }
template <> ncclDataType_t nccl_type<c10::BFloat16>() { return ncclBfloat16; }
template <> ncclDataType_t nccl_type<int32_t>() { return ncclInt32; }
template <> ncclDataType_t nccl_type<int64_t>() { return ncclInt64; }

ncclRedOp_t nccl_op(RedOp op) {
  switch (op) {
    case RedOp::Prod: return ncclProd;
    case RedOp::Max: return ncclMax;
    case RedOp::Min: return ncclMin;
    default: return ncclSum;
  }
}

template <typename T, typename Op>
struct DeviceReducer {
  cudaStream_t stream;
  void operator()(T* dst, const T* src, std::size_t n) const { launch_reduce<T, Op>(dst, src, n, stream); }
};

// Device memory owned for the length of one measurement.
struct DeviceBuffer {
  void* ptr = nullptr;
  int device = 0;
  DeviceBuffer(std::size_t bytes, int dev, const Where& w) : device(dev) {
    cuda_check(cudaSetDevice(dev), "cudaSetDevice", w);
    cuda_check(cudaMalloc(&ptr, std::max<std::size_t>(bytes, 16)), "cudaMalloc", w);
  }
  ~DeviceBuffer() {
    cudaSetDevice(device);
    cudaFree(ptr);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct PinnedBuffer {
  void* ptr = nullptr;
  PinnedBuffer(std::size_t bytes, const Where& w) {
    cuda_check(cudaHostAlloc(&ptr, std::max<std::size_t>(bytes, 16), cudaHostAllocPortable), "cudaHostAlloc", w);
  }
  ~PinnedBuffer() { cudaFreeHost(ptr); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
};

struct Stream {
  cudaStream_t s = nullptr;
  int device = 0;
  Stream(int dev, const Where& w) : device(dev) {
    cuda_check(cudaSetDevice(dev), "cudaSetDevice", w);
    cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate", w);
  }
  ~Stream() {
    cudaSetDevice(device);
    cudaStreamDestroy(s);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

// One start/stop event pair per iteration, recorded on `stream`; before each iteration `sync()` runs
// untimed. Returns seconds per iteration.
template <typename Sync, typename Body>
std::vector<double> event_times(cudaStream_t stream, int64_t iters, const Where& w, Sync&& sync, Body&& body) {
  std::vector<cudaEvent_t> ev(static_cast<std::size_t>(2 * iters));
  for (auto& e : ev) cuda_check(cudaEventCreate(&e), "cudaEventCreate", w);
  std::vector<double> t(static_cast<std::size_t>(iters));
  try {
    for (int64_t i = 0; i < iters; ++i) {
      sync();
      cuda_check(cudaEventRecord(ev[2 * i], stream), "cudaEventRecord", w);
      body();
      cuda_check(cudaEventRecord(ev[2 * i + 1], stream), "cudaEventRecord", w);
    }
    cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize", w);
    for (int64_t i = 0; i < iters; ++i) {
      float ms = 0;
      cuda_check(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]), "cudaEventElapsedTime", w);
      t[i] = ms * 1e-3;
    }
  } catch (...) {
    for (auto& e : ev) cudaEventDestroy(e);
    throw;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  return t;
}

at::Tensor to_tensor(const std::vector<double>& v) {
  at::Tensor out = at::empty({static_cast<int64_t>(v.size())}, at::kDouble);
  std::memcpy(out.data_ptr<double>(), v.data(), v.size() * sizeof(double));
  return out;
}

void require_device_tensor(const at::Tensor& t, int device, const char* what) {
  if (!t.is_cuda() || t.get_device() != device || !t.is_contiguous())
    throw std::invalid_argument(std::string(what) + " must be a contiguous tensor on cuda:" + std::to_string(device));
}

py::bytes nccl_unique_id() {
  ncclUniqueId id;
  nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId", Where{});
  return py::bytes(id.internal, sizeof(id.internal));
}

// A NCCL communicator over all ranks, one GPU per rank, with its own stream.
class DeviceComm {
 public:
  DeviceComm(const std::string& uid, int rank, int size, int device) : where_{rank, device}, size_(size) {
    if (uid.size() != sizeof(ncclUniqueId().internal))
      throw std::invalid_argument("NCCL unique id has the wrong length");
    ncclUniqueId id;
    std::memcpy(id.internal, uid.data(), uid.size());
    cuda_check(cudaSetDevice(device), "cudaSetDevice", where_);
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate", where_);
    cuda_check(cudaMalloc(&scratch_, kScratch), "cudaMalloc", where_);
    nccl_check(ncclCommInitRank(&comm_, size, id, rank), "ncclCommInitRank", where_);
  }

  ~DeviceComm() {
    cudaSetDevice(where_.device);
    if (comm_) ncclCommDestroy(comm_);
    cudaFree(scratch_);
    cudaStreamDestroy(stream_);
  }

  // Untimed: all ranks meet and this rank's stream is idle.
  void barrier() {
    nccl_check(ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, stream_), "ncclAllReduce", where_);
    cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", where_);
  }

  at::Tensor allreduce_times(const std::string& impl, at::Tensor send, at::Tensor recv, int64_t op_code,
                             int64_t iters, int64_t chunk_bytes, bool graph) {
    require_device_tensor(send, where_.device, "send buffer");
    require_device_tensor(recv, where_.device, "recv buffer");
    if (send.scalar_type() != recv.scalar_type() || send.numel() != recv.numel())
      throw std::invalid_argument("send and recv buffers differ in dtype or length");
    cuda_check(cudaSetDevice(where_.device), "cudaSetDevice", where_);
    const RedOp op = redop_from(op_code);
    const std::size_t n = static_cast<std::size_t>(recv.numel());
    const bool in_place = send.data_ptr() == recv.data_ptr();
    pybind11::gil_scoped_release no_gil;
    return dispatch_dtype_op(recv.scalar_type(), op, [&](auto tag, auto functor) {
      using T = typename decltype(tag)::type;
      using Op = decltype(functor);
      T* out = static_cast<T*>(recv.data_ptr());
      const T* in = static_cast<const T*>(send.data_ptr());
      auto copy_in = [&] {
        if (!in_place && n > 0)
          cuda_check(cudaMemcpyAsync(out, in, n * sizeof(T), cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync", where_);
      };
      NcclTransport transport(comm_, stream_, where_);
      DeviceReducer<T, Op> reducer{stream_};
      if (impl == "nccl") {
        return timed(iters, graph, [&] {
          nccl_check(ncclAllReduce(in, out, n, nccl_type<T>(), nccl_op(op), comm_, stream_), "ncclAllReduce", where_);
        });
      }
      if (impl == "ring") {
        const RingSchedule sched{where_.rank, size_};
        DeviceBuffer tmp((n / static_cast<std::size_t>(size_) + 1) * sizeof(T), where_.device, where_);
        return timed(iters, graph, [&] {
          copy_in();
          ring_allreduce(transport, reducer, sched, out, static_cast<T*>(tmp.ptr), n);
        });
      }
      if (impl == "tree") {
        if (chunk_bytes < static_cast<int64_t>(sizeof(T)))
          throw std::invalid_argument("tree chunk must hold at least one element");
        const std::size_t chunk = TreeSchedule::chunk_for(static_cast<std::size_t>(chunk_bytes), sizeof(T), n);
        const TreeSchedule sched{where_.rank, size_, chunk};
        DeviceBuffer tmp(4 * chunk * sizeof(T), where_.device, where_);
        return timed(iters, graph, [&] {
          copy_in();
          tree_allreduce(transport, reducer, sched, out, static_cast<T*>(tmp.ptr), n);
        });
      }
      throw std::invalid_argument("unknown device all-reduce impl '" + impl + "'");
    });
  }

  // NCCL ping-pong between this rank and `peer`; the lower rank starts. Half the round trip.
  at::Tensor pingpong_times(at::Tensor buf, int64_t bytes, int64_t peer, int64_t iters) {
    require_device_tensor(buf, where_.device, "buffer");
    cuda_check(cudaSetDevice(where_.device), "cudaSetDevice", where_);
    void* p = buf.data_ptr();
    const bool first = where_.rank < peer;
    pybind11::gil_scoped_release no_gil;
    std::vector<double> t = event_times(stream_, iters, where_, [] {}, [&] {
      for (int leg = 0; leg < 2; ++leg) {
        if ((leg == 0) == first)
          nccl_check(ncclSend(p, static_cast<std::size_t>(bytes), ncclUint8, static_cast<int>(peer), comm_, stream_), "ncclSend", where_);
        else
          nccl_check(ncclRecv(p, static_cast<std::size_t>(bytes), ncclUint8, static_cast<int>(peer), comm_, stream_), "ncclRecv", where_);
      }
    });
    for (double& x : t) x /= 2;
    return to_tensor(max_with_peer(std::move(t), static_cast<int>(peer)));
  }

  // Unidirectional bandwidth: `window` messages from the lower rank to the higher in one NCCL group
  // per iteration. Time per iteration (the whole window).
  at::Tensor bandwidth_times(at::Tensor buf, int64_t bytes, int64_t peer, int64_t window, int64_t iters) {
    require_device_tensor(buf, where_.device, "buffer");
    cuda_check(cudaSetDevice(where_.device), "cudaSetDevice", where_);
    void* p = buf.data_ptr();
    const bool sender = where_.rank < peer;
    pybind11::gil_scoped_release no_gil;
    std::vector<double> t = event_times(stream_, iters, where_, [] {}, [&] {
      nccl_check(ncclGroupStart(), "ncclGroupStart", where_);
      for (int64_t w = 0; w < window; ++w) {
        if (sender)
          nccl_check(ncclSend(p, static_cast<std::size_t>(bytes), ncclUint8, static_cast<int>(peer), comm_, stream_), "ncclSend", where_);
        else
          nccl_check(ncclRecv(p, static_cast<std::size_t>(bytes), ncclUint8, static_cast<int>(peer), comm_, stream_), "ncclRecv", where_);
      }
      nccl_check(ncclGroupEnd(), "ncclGroupEnd", where_);
    });
    return to_tensor(max_with_peer(std::move(t), static_cast<int>(peer)));
  }

  // Maximum over ranks, element-wise, of a host tensor of doubles.
  at::Tensor max_over_ranks(at::Tensor host) {
    const std::size_t n = static_cast<std::size_t>(host.numel());
    cuda_check(cudaSetDevice(where_.device), "cudaSetDevice", where_);
    DeviceBuffer d(n * sizeof(double), where_.device, where_);
    at::Tensor out = host.contiguous().clone();
    cuda_check(cudaMemcpyAsync(d.ptr, out.data_ptr(), n * sizeof(double), cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync", where_);
    nccl_check(ncclAllReduce(d.ptr, d.ptr, n, ncclFloat64, ncclMax, comm_, stream_), "ncclAllReduce", where_);
    cuda_check(cudaMemcpyAsync(out.data_ptr(), d.ptr, n * sizeof(double), cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync", where_);
    cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", where_);
    return out;
  }

  void fill_pattern(at::Tensor t, int64_t op_code) {
    require_device_tensor(t, where_.device, "tensor");
    cuda_check(cudaSetDevice(where_.device), "cudaSetDevice", where_);
    const RedOp op = redop_from(op_code);
    dispatch_dtype(t.scalar_type(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      launch_fill<T>(static_cast<T*>(t.data_ptr()), static_cast<std::size_t>(t.numel()), op, where_.rank, size_, stream_);
      return 0;
    });
    cuda_check(cudaStreamSynchronize(stream_), "fill kernel", where_);
  }

  int64_t count_wrong(at::Tensor t, int64_t op_code) {
    require_device_tensor(t, where_.device, "tensor");
    cuda_check(cudaSetDevice(where_.device), "cudaSetDevice", where_);
    const RedOp op = redop_from(op_code);
    unsigned long long* wrong = static_cast<unsigned long long*>(scratch_) + 1;
    cuda_check(cudaMemsetAsync(wrong, 0, sizeof(*wrong), stream_), "cudaMemsetAsync", where_);
    dispatch_dtype(t.scalar_type(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      launch_count_wrong<T>(static_cast<const T*>(t.data_ptr()), static_cast<std::size_t>(t.numel()), op, size_, wrong, stream_);
      return 0;
    });
    unsigned long long host = 0;
    cuda_check(cudaMemcpyAsync(&host, wrong, sizeof(host), cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync", where_);
    cuda_check(cudaStreamSynchronize(stream_), "check kernel", where_);
    return static_cast<int64_t>(host);
  }

 private:
  static constexpr std::size_t kScratch = 64;

  // Per-iteration event times, reduced to the maximum over ranks. With `graph`, the body is
  // captured once into a CUDA graph and each iteration launches the graph, which removes the
  // host's launch cost from small messages.
  template <typename Body>
  at::Tensor timed(int64_t iters, bool graph, Body&& body) {
    std::vector<double> t;
    if (!graph) {
      t = event_times(stream_, iters, where_, [&] { barrier(); }, body);
    } else {
      cudaGraph_t g = nullptr;
      cudaGraphExec_t exec = nullptr;
      cuda_check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture", where_);
      try {
        body();
      } catch (...) {
        // Leave the stream usable for the untimed calls that follow an error.
        cudaStreamEndCapture(stream_, &g);
        if (g) cudaGraphDestroy(g);
        throw;
      }
      cuda_check(cudaStreamEndCapture(stream_, &g), "cudaStreamEndCapture", where_);
      try {
        cuda_check(cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate", where_);
        t = event_times(stream_, iters, where_, [&] { barrier(); },
                        [&] { cuda_check(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch", where_); });
      } catch (...) {
        if (exec) cudaGraphExecDestroy(exec);
        cudaGraphDestroy(g);
        throw;
      }
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(g);
    }
    return max_over_ranks(to_tensor(t));
  }

  // Element-wise maximum of this rank's times and its peer's: both ranks of a pair then hold the
  // same samples, as the maximum over the pair.
  std::vector<double> max_with_peer(std::vector<double> t, int peer) {
    const std::size_t bytes = t.size() * sizeof(double);
    DeviceBuffer mine(bytes, where_.device, where_), theirs(bytes, where_.device, where_);
    std::vector<double> other(t.size());
    cuda_check(cudaMemcpyAsync(mine.ptr, t.data(), bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync", where_);
    nccl_check(ncclGroupStart(), "ncclGroupStart", where_);
    nccl_check(ncclSend(mine.ptr, t.size(), ncclFloat64, peer, comm_, stream_), "ncclSend", where_);
    nccl_check(ncclRecv(theirs.ptr, t.size(), ncclFloat64, peer, comm_, stream_), "ncclRecv", where_);
    nccl_check(ncclGroupEnd(), "ncclGroupEnd", where_);
    cuda_check(cudaMemcpyAsync(other.data(), theirs.ptr, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync", where_);
    cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", where_);
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = std::max(t[i], other[i]);
    return t;
  }

  Where where_;
  int size_;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  void* scratch_ = nullptr;
};

// ---- Local copies within one process ------------------------------------------------------------

// Enables src -> dst peer access; returns an empty string when it works, else why not.
std::string enable_peer(int src, int dst) {
  if (src == dst) return "";
  int can = 0;
  const Where w{0, src};
  cuda_check(cudaDeviceCanAccessPeer(&can, src, dst), "cudaDeviceCanAccessPeer", w);
  if (!can) return "peer access between cuda:" + std::to_string(src) + " and cuda:" + std::to_string(dst) + " is not supported (no NVLink or PCIe P2P path, or P2P disabled)";
  cuda_check(cudaSetDevice(src), "cudaSetDevice", w);
  const cudaError_t rc = cudaDeviceEnablePeerAccess(dst, 0);
  if (rc == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();
  } else {
    cuda_check(rc, "cudaDeviceEnablePeerAccess", w);
  }
  return "";
}

std::string peer_status(int src, int dst) {
  const std::string why = enable_peer(src, dst);
  return why.empty() && src != dst ? enable_peer(dst, src) : why;
}

// Device-to-device copy of `bytes`: "ce" (copy engine, cudaMemcpyPeerAsync) or "sm" (a kernel on the
// source device). Bidirectional runs both directions at once on two streams; the iteration ends when
// both are done. Seconds per iteration.
at::Tensor peer_copy_times(int64_t dst_dev, int64_t src_dev, int64_t bytes, const std::string& mode,
                           bool bidirectional, int64_t iters) {
  const int a = static_cast<int>(src_dev), b = static_cast<int>(dst_dev);
  const Where w{0, a};
  if (mode != "ce" && mode != "sm") throw std::invalid_argument("copy mode must be 'ce' or 'sm'");
  if (mode == "sm" || a != b) {
    const std::string why = peer_status(a, b);
    if (!why.empty() && mode == "sm") throw std::invalid_argument(why);
  }
  const std::size_t n = static_cast<std::size_t>(bytes);
  DeviceBuffer src(n, a, w), dst(n, b, w), back_src(bidirectional ? n : 0, b, w), back_dst(bidirectional ? n : 0, a, w);
  Stream s0(a, w), s1(b, w);
  cudaEvent_t fork = nullptr, join = nullptr;
  cuda_check(cudaSetDevice(a), "cudaSetDevice", w);
  cuda_check(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), "cudaEventCreate", w);
  cuda_check(cudaSetDevice(b), "cudaSetDevice", w);
  cuda_check(cudaEventCreateWithFlags(&join, cudaEventDisableTiming), "cudaEventCreate", w);
  auto copy = [&](void* d, int dd, const void* s, int sd, cudaStream_t st, int run_on) {
    cuda_check(cudaSetDevice(run_on), "cudaSetDevice", w);
    if (mode == "ce")
      cuda_check(cudaMemcpyPeerAsync(d, dd, s, sd, n, st), "cudaMemcpyPeerAsync", w);
    else
      launch_sm_copy(d, s, n, st);
  };
  std::vector<double> t;
  {
    pybind11::gil_scoped_release no_gil;
    cuda_check(cudaSetDevice(a), "cudaSetDevice", w);
    t = event_times(s0.s, iters, w,
                    [&] {
                      cuda_check(cudaStreamSynchronize(s0.s), "cudaStreamSynchronize", w);
                      cuda_check(cudaStreamSynchronize(s1.s), "cudaStreamSynchronize", w);
                      cuda_check(cudaSetDevice(a), "cudaSetDevice", w);
                    },
                    [&] {
                      if (bidirectional) {
                        cuda_check(cudaEventRecord(fork, s0.s), "cudaEventRecord", w);
                        cuda_check(cudaStreamWaitEvent(s1.s, fork, 0), "cudaStreamWaitEvent", w);
                      }
                      copy(dst.ptr, b, src.ptr, a, s0.s, a);
                      if (bidirectional) {
                        copy(back_dst.ptr, a, back_src.ptr, b, s1.s, b);
                        cuda_check(cudaEventRecord(join, s1.s), "cudaEventRecord", w);
                        cuda_check(cudaStreamWaitEvent(s0.s, join, 0), "cudaStreamWaitEvent", w);
                      }
                      cuda_check(cudaSetDevice(a), "cudaSetDevice", w);
                    });
  }
  cudaEventDestroy(fork);
  cudaEventDestroy(join);
  return to_tensor(t);
}

// Host <-> device copies: direction "h2d" or "d2h", from pinned or pageable host memory.
at::Tensor host_copy_times(int64_t device, int64_t bytes, const std::string& direction, bool pinned, int64_t iters) {
  const int dev = static_cast<int>(device);
  const Where w{0, dev};
  if (direction != "h2d" && direction != "d2h") throw std::invalid_argument("direction must be 'h2d' or 'd2h'");
  const std::size_t n = static_cast<std::size_t>(bytes);
  DeviceBuffer d(n, dev, w);
  std::unique_ptr<PinnedBuffer> pin;
  std::vector<char> pageable;
  void* host = nullptr;
  if (pinned) {
    pin = std::make_unique<PinnedBuffer>(n, w);
    host = pin->ptr;
  } else {
    pageable.assign(std::max<std::size_t>(n, 16), 1);
    host = pageable.data();
  }
  Stream s(dev, w);
  const bool h2d = direction == "h2d";
  pybind11::gil_scoped_release no_gil;
  return to_tensor(event_times(s.s, iters, w, [&] { cuda_check(cudaStreamSynchronize(s.s), "cudaStreamSynchronize", w); }, [&] {
    cuda_check(cudaMemcpyAsync(h2d ? d.ptr : host, h2d ? host : d.ptr, n, h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, s.s),
               "cudaMemcpyAsync", w);
  }));
}

// GPU src -> pinned host -> GPU dst in chunks through two pinned buffers: the device-to-host copy
// of chunk k + 1 overlaps the host-to-device copy of chunk k, on two streams. This is what a
// transfer costs without peer-to-peer. Timed on the host (the streams may sit on two devices).
at::Tensor staged_copy_times(int64_t dst_dev, int64_t src_dev, int64_t bytes, int64_t chunk_bytes, int64_t iters) {
  const int a = static_cast<int>(src_dev), b = static_cast<int>(dst_dev);
  const Where w{0, a};
  if (chunk_bytes <= 0) throw std::invalid_argument("staging chunk must be positive");
  const std::size_t n = static_cast<std::size_t>(bytes), chunk = std::min<std::size_t>(static_cast<std::size_t>(chunk_bytes), std::max<std::size_t>(n, 1));
  DeviceBuffer src(n, a, w), dst(n, b, w);
  PinnedBuffer slots(2 * chunk, w);
  Stream down(a, w), up(b, w);
  cudaEvent_t drained[2], filled[2];
  for (int k = 0; k < 2; ++k) {
    cuda_check(cudaSetDevice(b), "cudaSetDevice", w);
    cuda_check(cudaEventCreateWithFlags(&drained[k], cudaEventDisableTiming), "cudaEventCreate", w);
    cuda_check(cudaSetDevice(a), "cudaSetDevice", w);
    cuda_check(cudaEventCreateWithFlags(&filled[k], cudaEventDisableTiming), "cudaEventCreate", w);
  }
  std::vector<double> t(static_cast<std::size_t>(iters));
  {
    pybind11::gil_scoped_release no_gil;
    for (int64_t i = 0; i < iters; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      std::size_t k = 0;
      for (std::size_t off = 0; off < n; off += chunk, ++k) {
        const std::size_t len = std::min(chunk, n - off);
        char* slot = static_cast<char*>(slots.ptr) + (k % 2) * chunk;
        cuda_check(cudaSetDevice(a), "cudaSetDevice", w);
        // The slot is free once the upload of chunk k - 2 has drained it.
        if (k >= 2) cuda_check(cudaStreamWaitEvent(down.s, drained[k % 2], 0), "cudaStreamWaitEvent", w);
        cuda_check(cudaMemcpyAsync(slot, static_cast<char*>(src.ptr) + off, len, cudaMemcpyDeviceToHost, down.s), "cudaMemcpyAsync", w);
        cuda_check(cudaEventRecord(filled[k % 2], down.s), "cudaEventRecord", w);
        cuda_check(cudaSetDevice(b), "cudaSetDevice", w);
        cuda_check(cudaStreamWaitEvent(up.s, filled[k % 2], 0), "cudaStreamWaitEvent", w);
        cuda_check(cudaMemcpyAsync(static_cast<char*>(dst.ptr) + off, slot, len, cudaMemcpyHostToDevice, up.s), "cudaMemcpyAsync", w);
        cuda_check(cudaEventRecord(drained[k % 2], up.s), "cudaEventRecord", w);
      }
      cuda_check(cudaStreamSynchronize(up.s), "cudaStreamSynchronize", w);
      t[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  }
  for (int k = 0; k < 2; ++k) {
    cudaEventDestroy(drained[k]);
    cudaEventDestroy(filled[k]);
  }
  return to_tensor(t);
}

// dst = op(dst, src) with the device reduction kernel, on the current device; lets tests compare the
// kernel (vectorised and scalar paths) against torch on a single GPU.
void reduce_tensors(at::Tensor dst, at::Tensor src, int64_t op_code) {
  if (!dst.is_cuda() || !src.is_cuda() || dst.get_device() != src.get_device() || !dst.is_contiguous() ||
      !src.is_contiguous() || dst.scalar_type() != src.scalar_type() || dst.numel() != src.numel())
    throw std::invalid_argument("reduce_tensors: two contiguous tensors of one dtype and length on one GPU");
  const Where w{0, static_cast<int>(dst.get_device())};
  cuda_check(cudaSetDevice(w.device), "cudaSetDevice", w);
  dispatch_dtype_op(dst.scalar_type(), redop_from(op_code), [&](auto tag, auto functor) {
    using T = typename decltype(tag)::type;
    launch_reduce<T, decltype(functor)>(static_cast<T*>(dst.data_ptr()), static_cast<const T*>(src.data_ptr()),
                                        static_cast<std::size_t>(dst.numel()), nullptr);
    return 0;
  });
  cuda_check(cudaGetLastError(), "reduce kernel launch", w);
  cuda_check(cudaDeviceSynchronize(), "reduce kernel", w);
}

int device_count() {
  int n = 0;
  // No driver or no device: report zero rather than fail, the caller explains.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string versions() {
  int runtime = 0, nccl = 0;
  cudaRuntimeGetVersion(&runtime);
  ncclGetVersion(&nccl);
  return "CUDA runtime " + std::to_string(runtime / 1000) + "." + std::to_string((runtime % 1000) / 10) + ", NCCL " +
         std::to_string(nccl / 10000) + "." + std::to_string((nccl / 100) % 100) + "." + std::to_string(nccl % 100);
}

}  // namespace
}  // namespace commbench

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace commbench;
  m.doc() = "commbench GPU timed loops (NCCL, device ring/tree, copies)";
  py::class_<DeviceComm>(m, "DeviceComm")
      .def(py::init<const std::string&, int, int, int>(), py::arg("unique_id"), py::arg("rank"), py::arg("size"), py::arg("device"))
      .def("barrier", &DeviceComm::barrier, py::call_guard<py::gil_scoped_release>())
      .def("allreduce_times", &DeviceComm::allreduce_times, py::arg("impl"), py::arg("send"), py::arg("recv"), py::arg("op"),
           py::arg("iters"), py::arg("chunk_bytes"), py::arg("graph") = false)
      .def("pingpong_times", &DeviceComm::pingpong_times, py::arg("buf"), py::arg("bytes"), py::arg("peer"), py::arg("iters"))
      .def("bandwidth_times", &DeviceComm::bandwidth_times, py::arg("buf"), py::arg("bytes"), py::arg("peer"), py::arg("window"),
           py::arg("iters"))
      .def("fill_pattern", &DeviceComm::fill_pattern, py::arg("tensor"), py::arg("op"))
      .def("count_wrong", &DeviceComm::count_wrong, py::arg("tensor"), py::arg("op"));
  m.def("nccl_unique_id", &nccl_unique_id);
  m.def("peer_status", &peer_status, py::arg("src"), py::arg("dst"));
  m.def("peer_copy_times", &peer_copy_times, py::arg("dst"), py::arg("src"), py::arg("bytes"), py::arg("mode"),
        py::arg("bidirectional"), py::arg("iters"));
  m.def("host_copy_times", &host_copy_times, py::arg("device"), py::arg("bytes"), py::arg("direction"), py::arg("pinned"),
        py::arg("iters"));
  m.def("staged_copy_times", &staged_copy_times, py::arg("dst"), py::arg("src"), py::arg("bytes"), py::arg("chunk"),
        py::arg("iters"));
  m.def("reduce_tensors", &reduce_tensors, py::arg("dst"), py::arg("src"), py::arg("op"));
  m.def("device_count", &device_count);
  m.def("versions", &versions);
}
