// The NCCL communicator of one rank and everything timed on it: collectives (NCCL's calls and our
// algorithms over NCCL point-to-point, collective_times.h), NCCL ping-pong and bandwidth. One stream per communicator; every wait for it is bounded.
#pragma once

#include "python.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "commbench/collective_times.h"
#include "commbench/library_calls.h"
#include "commbench/own_algorithms.h"
#include "commbench/reduce.h"
#include "commbench/spin.h"
#include "errors.h"
#include "kernels.cuh"
#include "nccl_transport.h"
#include "buffer_caster.h"
#include "resources.h"

namespace commbench {

using Clock = std::chrono::steady_clock;

inline void require_device(const Buffer& b, int device, const char* what) {
  if (b.device != device) throw std::invalid_argument(std::string(what) + " must be on cuda:" + std::to_string(device));
}

inline py::bytes nccl_unique_id() {
  ncclUniqueId id;
  nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId", Where{});
  return py::bytes(id.internal, sizeof(id.internal));
}

// The NCCL communicator handle: destroyed normally, or aborted once a peer failed (an aborted
// communicator must not be destroyed again).
//
// Blocking or not is fixed when a communicator is made. A non-blocking one bounds the host's waits for
// peers, but NCCL runs every group of its calls on a thread of its own, made per group: some 25 us of
// host time per call on an H100 host, which a loop of back-to-back calls (--timing loop) would time.
// So the communicator the calls run on is blocking, split from a non-blocking one (DeviceComm's
// init_): its making, and every later split, still meets the deadline, and the calls are enqueued as
// nccl-tests' are. A blocking communicator connects to a peer on the host in its first call to it
// (NCCL connects at run time): a peer dead by then holds that call, and the watchdog ends the run.
class NcclComm {
 public:
  // A new communicator, made by `start(&comm, &config)` (ncclCommInitRankConfig or ncclCommSplit),
  // blocking or not as `blocking` says, polled against `timeout_s` (the caller releases the GIL)
  // until NCCL has made it: a non-blocking one answers ncclInProgress while it is made, and a split
  // of a non-blocking `parent` answers ncclSuccess at once and writes the new handle only when done,
  // the parent's state saying ncclInProgress until then. `parent` is the communicator split (null
  // for ncclCommInitRankConfig); it is aborted with the new one when the making fails: a split still
  // running on it must never meet a destroyed parent.
  template <typename Start>
  NcclComm(const char* call, Start&& start, NcclComm* parent, bool blocking, double timeout_s, const Where& w) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = blocking ? 1 : 0;
    ncclResult_t rc = start(&comm_, &config);
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    auto fail = [&] {  // the parent first: aborting it waits for its split, which writes comm_
      if (parent) parent->abort();
      abort();
    };
    // ncclInProgress while the parent's split or the new communicator's making runs
    auto state = [&] {
      ncclResult_t s = ncclSuccess;
      if (parent) nccl_check(ncclCommGetAsyncError(parent->get(), &s), "ncclCommGetAsyncError", w);
      if (s == ncclSuccess && comm_) nccl_check(ncclCommGetAsyncError(comm_, &s), "ncclCommGetAsyncError", w);
      return s;
    };
    auto poll = [&] {
      try {
        rc = state();
      } catch (...) {
        fail();
        throw;
      }
    };
    if (rc == ncclSuccess || rc == ncclInProgress) poll();
    while (rc == ncclInProgress) {
      if (Clock::now() > deadline) {
        fail();
        char limit[32];
        std::snprintf(limit, sizeof(limit), "%g", timeout_s);
        throw DeadlineExceeded(std::string(call) + " did not finish within --timeout " + limit + " s" + w.text() +
                               ": a peer rank is dead, stalled or never started");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      poll();
    }
    if (rc != ncclSuccess) {
      const std::string text = nccl_error_text(rc);
      fail();
      throw std::runtime_error(std::string(call) + " failed: " + text + w.text());
    }
  }
  explicit NcclComm(std::nullptr_t) {}  // none
  // A communicator in error (a peer's failure seen by NCCL after the last call) is aborted: NCCL's
  // destroy of one returns at once, leaving a group open on this thread that would defer every later
  // NCCL call of it (init.cc, ncclCommDestroy).
  // A failure seen between the state check and the destroy makes the destroy return it the same way:
  // the group it left open is closed and the communicator aborted.
  ~NcclComm() { close(); }
  void close() {
    if (!comm_) return;
    if (!in_error()) {
      if (ncclCommDestroy(comm_) == ncclSuccess) {
        comm_ = nullptr;
        return;
      }
      if (in_error()) ncclGroupEnd();
    }
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  ncclComm_t get() const { return comm_; }
  bool alive() const { return comm_ != nullptr; }
  bool in_error() const {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm_, &state);
    return rc != ncclSuccess || state != ncclSuccess;
  }
  void abort() {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

 private:
  ncclComm_t comm_ = nullptr;
};

inline ncclUniqueId unique_id_from(const std::string& uid) {
  ncclUniqueId id;
  if (uid.size() != sizeof(id.internal)) throw std::invalid_argument("NCCL unique id has the wrong length");
  std::memcpy(id.internal, uid.data(), uid.size());
  return id;
}

// Scratch layout: the barrier's int, the pair barrier's two ints.
constexpr std::size_t kScratch = 64;
constexpr std::size_t kPairSendOffset = 4, kPairRecvOffset = 8;

// A NCCL communicator over all ranks, one GPU per rank, with its own stream. Every wait for the
// stream is bounded (see wait()).
class DeviceComm {
 public:
  // `splits`: rank counts of it follow (split()); otherwise the non-blocking communicator it was split
  // from goes once the split is made, so that no second full communicator (its connections, its NVLS
  // objects, about 1-1.5 GiB a GPU where NCCL connects at initialisation) is held all run.
  DeviceComm(const std::string& uid, int rank, int size, int device, double timeout_s, bool splits)
      : where_{rank, device}, size_(size), timeout_s_(timeout_s), stream_(device, where_),
        scratch_(kScratch, device, where_), gate_(where_),
        init_("ncclCommInitRankConfig",
              [&](ncclComm_t* c, ncclConfig_t* config) {
                const ncclResult_t rc = ncclCommInitRankConfig(c, size, unique_id_from(uid), rank, config);
                return rc;  // checked by NcclComm
              },
              nullptr, false, timeout_s, where_),
        comm_("ncclCommSplit",
              [&](ncclComm_t* c, ncclConfig_t* config) {
                const ncclResult_t rc = ncclCommSplit(init_.get(), 0, rank, c, config);
                return rc;
              },
              &init_, true, timeout_s, where_) {
    if (!splits) init_.close();
  }

  // The first `size` ranks of this communicator as one of their own (ncclCommSplit from the
  // non-blocking init_, within the deadline, instead of a whole new communicator per rank count; it
  // has buffers of its own once it connects, as NCCL shares a parent's only where the parent's
  // config says splitShare); every rank of this one calls it, and those not in it get none.
  std::unique_ptr<DeviceComm> split(int64_t size) {
    if (!init_.alive())
      throw std::logic_error("split: only a communicator over all ranks made to split splits (this one is a split, "
                             "was made without splits, or was aborted)" + where_.text());
    cuda_check(cudaSetDevice(where_.device), "cudaSetDevice", where_);
    const bool member = where_.rank < size;
    auto child = std::unique_ptr<DeviceComm>(new DeviceComm(*this, member, static_cast<int>(size)));
    if (!member) return nullptr;
    return child;
  }

  void set_timeout(double seconds) {
    if (!(seconds > 0)) throw std::invalid_argument("timeout must be positive");
    timeout_s_ = seconds;
  }

  // Untimed: all ranks meet and this rank's stream is idle.
  void barrier() {
    or_abort([&] {
      nccl_enqueued(ncclAllReduce(scratch_.ptr, scratch_.ptr, 1, ncclInt32, ncclSum, comm(), stream_.s), comm(), "ncclAllReduce", where_);
      wait("barrier");
    });
  }

  // Times one call of collective `coll` by `algo`: NCCL's call or one of our algorithms over NCCL
  // point-to-point (collective_times.h); with `graph`, each iteration launches a CUDA graph of the
  // call; with `launch_free`, each sample is held behind the gate while it is enqueued (see timed()).
  std::vector<double> collective_times(Collective coll, Algorithm algo, const Buffer& send, const Buffer& recv,
                                       int64_t op_code, int64_t root, int64_t iters, int64_t chunk_bytes, bool graph, int64_t agg,
                                       double delay_s, int64_t loop, bool launch_free) {
    cuda_check(cudaSetDevice(where_.device), "cudaSetDevice", where_);
    Backend backend{*this, graph, launch_free, {}};
    return commbench::collective_times(backend, coll, algo, send, recv, op_code, root, iters, chunk_bytes, agg, delay_s,
                                       loop);
  }

  // NCCL ping-pong between this rank and `peer`, from the send buffer into the receive buffer; the
  // lower rank starts. Half the round trip; a sample of `loop` round trips back to back (the loop
  // timing) gives it per round trip.
  std::vector<double> pingpong_times(const Buffer& send, const Buffer& recv, int64_t bytes, int64_t peer, int64_t iters,
                                     int64_t loop) {
    return pair_times(send, recv, bytes, peer, iters, loop, 0.5, "NCCL ping-pong", [](auto& leg, bool lead) {
      leg(lead);
      leg(!lead);
    });
  }

  // Unidirectional bandwidth: `window` messages from the lower rank to the higher in one NCCL group
  // per iteration. Time per iteration (the whole window); `loop` windows back to back per sample.
  std::vector<double> bandwidth_times(const Buffer& send, const Buffer& recv, int64_t bytes, int64_t peer,
                                      int64_t window, int64_t iters, int64_t loop) {
    if (window < 1) throw std::invalid_argument("window must be at least 1");
    return pair_times(send, recv, bytes, peer, iters, loop, 1.0, "NCCL bandwidth window", [&](auto& leg, bool lead) {
      NcclGroup g(comm(), where_);
      for (int64_t w = 0; w < window; ++w) leg(lead);
      g.end();
    });
  }

 private:
  DeviceComm(DeviceComm& parent, bool member, int size)
      : where_(parent.where_), size_(size), timeout_s_(parent.timeout_s_), stream_(where_.device, where_),
        scratch_(kScratch, where_.device, where_), gate_(where_), init_(nullptr),
        comm_("ncclCommSplit",
              [&](ncclComm_t* c, ncclConfig_t* config) {
                const int color = member ? 0 : NCCL_SPLIT_NOCOLOR;
                const ncclResult_t rc = ncclCommSplit(parent.init_.get(), color, where_.rank, c, config);
                return rc;
              },
              &parent.init_, true, timeout_s_, where_) {}

  ncclComm_t comm() const {
    if (!comm_.alive()) throw std::runtime_error("the NCCL communicator was aborted after an earlier failure" + where_.text());
    return comm_.get();
  }

  // Runs `work`, which queues NCCL operations. Any failure once work is queued aborts the
  // communicator before the exception unwinds further: an NCCL kernel left waiting for a peer that
  // will never post would otherwise block for ever whatever frees memory on the way out. The abort
  // comes here, after `work` has unwound, never inside it, and only at the outermost of nested calls
  // (a barrier within timed()): ncclCommAbort waits for every CUDA graph that captured work of the
  // communicator to be destroyed, and timed()'s graph is destroyed only as its `work` unwinds.
  template <typename Work>
  auto or_abort(Work&& work) -> decltype(work()) {
    const bool outermost = nesting_++ == 0;
    struct Leave {
      int& n;
      ~Leave() { --n; }
    } leave{nesting_};
    try {
      return work();
    } catch (...) {
      if (outermost) comm_.abort();
      throw;
    }
  }

  void require_message(const Buffer& send, const Buffer& recv, int64_t bytes, int64_t peer) const {
    require_device(send, where_.device, "send buffer");
    require_device(recv, where_.device, "recv buffer");
    if (bytes < 0 || bytes > static_cast<int64_t>(std::min(nbytes(send), nbytes(recv))))
      throw std::invalid_argument("message of " + std::to_string(bytes) + " bytes does not fit the buffers");
    if (peer < 0 || peer >= size_ || peer == where_.rank) throw std::invalid_argument("peer must be another rank");
  }

  // One side of a point-to-point test with `peer`: event times of `loop` body(leg, lead) per sample,
  // scaled by `scale` per body, the maximum over the pair. leg(true) posts this rank's send of the
  // message, leg(false) its receive; `lead` says this rank is the lower of the two. A pair barrier
  // before each sample keeps the pair's skew out of it. One body per sample is held behind the gate
  // (launch-free); a loop is not, as the loop timing lets the host enqueue ahead. Gated, each rank
  // releases its stream once its own enqueue is done: behind the gate and before the start event, the
  // pair's exchange of one element (their device-side barrier, as timed()'s all-reduce) starts both
  // samples once the later stream is released.
  template <typename Body>
  std::vector<double> pair_times(const Buffer& send, const Buffer& recv, int64_t bytes, int64_t peer, int64_t iters,
                                 int64_t loop, double scale, const char* what, Body&& body) {
    require_message(send, recv, bytes, peer);
    if (loop < 1) throw std::invalid_argument("loop must be at least 1");
    if (iters < 0) throw std::invalid_argument("iters must not be negative");
    cuda_check(cudaSetDevice(where_.device), "cudaSetDevice", where_);
    const int other = static_cast<int>(peer);
    const std::size_t n = static_cast<std::size_t>(bytes);
    auto leg = [&, s = send.data, r = recv.data](bool sending) {
      if (sending)
        nccl_enqueued(ncclSend(s, n, ncclUint8, other, comm(), stream_.s), comm(), "ncclSend", where_);
      else
        nccl_enqueued(ncclRecv(r, n, ncclUint8, other, comm(), stream_.s), comm(), "ncclRecv", where_);
    };
    const bool lead = where_.rank < other;
    const unsigned expired = gate_.expired();
    std::vector<double> t = or_abort([&] {
      // Once ungated and untimed: NCCL connects a peer on first use, on the host, inside the call.
      pair_barrier(other);
      body(leg, lead);
      wait(what);
      const bool gated = loop == 1;
      return event_times(stream_.s, iters, where_, [&] { pair_barrier(other); }, [&] { body(leg, lead); }, [&] { wait(what); },
                         loop, gated ? &gate_ : nullptr, gated ? [&] { pair_exchange(other); } : std::function<void()>{});
    });
    require_gates_held(expired, what);
    for (double& x : t) x *= scale / static_cast<double>(loop);
    return max_with_peer(std::move(t), other);
  }

  // Waits until the stream is idle. A dead or stalled peer would hang cudaStreamSynchronize for
  // ever, so the stream is polled together with NCCL's asynchronous error, against a deadline;
  // either failure throws, and the caller's or_abort aborts the communicator, which releases the
  // stream.
  void wait(const char* what) {
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration<double>(timeout_s_);
    for (;;) {
      const cudaError_t rc = cudaStreamQuery(stream_.s);
      if (rc == cudaSuccess) return;
      if (rc != cudaErrorNotReady) cuda_check(rc, what, where_);
      cudaGetLastError();  // "not ready" is a status, not an error: keep it from the next launch check
      ncclResult_t async = ncclSuccess;
      nccl_check(ncclCommGetAsyncError(comm(), &async), "ncclCommGetAsyncError", where_);
      if (async != ncclSuccess && async != ncclInProgress) {
        const std::string text = nccl_error_text(async);
        throw std::runtime_error(std::string(what) + " failed: " + text + where_.text() + "; NCCL communicator aborted");
      }
      const auto now = Clock::now();
      if (now > deadline) {
        char limit[32];
        std::snprintf(limit, sizeof(limit), "%g", timeout_s_);
        throw DeadlineExceeded(std::string(what) + " did not finish within --timeout " + limit + " s" + where_.text() +
                                 ": a peer rank is dead or stalled; NCCL communicator aborted");
      }
      // Spin for the first second: the barrier before each timed iteration must return on every
      // rank at once, or the skew between ranks enters the next sample. Past that, a peer is slow
      // or gone, and polling gently is enough.
      if (now - start < std::chrono::seconds(1))
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  // Untimed: this rank and `peer` meet, and this rank's stream is idle.
  void pair_barrier(int peer) {
    pair_exchange(peer);
    wait("pair barrier");
  }

  // One element each way between this rank and `peer`, enqueued on the stream.
  void pair_exchange(int peer) {
    char* s = static_cast<char*>(scratch_.ptr);
    NcclGroup g(comm(), where_);
    nccl_enqueued(ncclSend(s + kPairSendOffset, 1, ncclInt32, peer, comm(), stream_.s), comm(), "ncclSend", where_);
    nccl_enqueued(ncclRecv(s + kPairRecvOffset, 1, ncclInt32, peer, comm(), stream_.s), comm(), "ncclRecv", where_);
    g.end();
  }

  // collective_times.h's backend: NCCL on this communicator's stream, the reduction kernel, CUDA
  // events; every wait bounded by the deadline, and a failure aborts the communicator (timed()).
  struct Backend {
    static constexpr const char* kLibrary = "nccl";
    DeviceComm& dc;
    bool graph, launch_free;
    std::unique_ptr<DeviceBuffer> scratch_memory;

    int rank() const { return dc.where_.rank; }
    int size() const { return dc.size_; }
    void check_buffers(const Buffer& send, const Buffer& recv, Algorithm) const {
      require_device(send, dc.where_.device, "send buffer");
      require_device(recv, dc.where_.device, "recv buffer");
    }
    NcclTransport transport() const { return NcclTransport(dc.comm(), dc.stream_.s, dc.where_); }
    template <typename T, typename Op>
    auto reducer() const {
      return [s = dc.stream_.s](T* dst, const T* src, std::size_t n) { launch_reduce<T, Op>(dst, src, n, s); };
    }
    // Copies within this rank's GPU, in stream order.
    auto copy() const {
      return [s = dc.stream_.s, w = dc.where_](auto* dst, const auto* src, std::size_t n) {
        if (n == 0) return;
        cuda_check(cudaMemcpyAsync(dst, src, n * sizeof(*src), cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync", w);
        Gate::enqueued();
      };
    }
    template <typename T>
    T* scratch(std::size_t elems) {
      scratch_memory = std::make_unique<DeviceBuffer>(elems * sizeof(T), dc.where_.device, dc.where_);
      return static_cast<T*>(scratch_memory->ptr);
    }
    template <typename T, typename Op>
    std::function<void()> library_call(Collective coll, const CallBuffers<T>& b, RedOp op) const {
      return nccl_call(coll, b, op, dc.comm(), dc.stream_.s, dc.where_);
    }
    NcclGroup library_group() const { return NcclGroup(dc.comm(), dc.where_); }
    template <typename Body>
    std::vector<double> time(int64_t iters, int64_t calls, double delay_s, const std::string& what, Body&& body) {
      return dc.timed(iters, calls, graph, launch_free, delay_s, what.c_str(), body);
    }
  };

  // This rank's event times per sample of `calls` back-to-back calls of the body. With `graph`, the
  // body is captured once into a CUDA graph and each call launches the graph, which removes the
  // host's launch cost from small messages. With `launch_free` and one call a sample, each sample is
  // enqueued behind the gate (gate.h), so that neither the host's enqueue nor the launch latency is
  // in it; a loop of calls is not gated (its enqueue overlaps the device's work, as in nccl-tests).
  // NCCL connects peers and algorithms on first use, on the host, inside the call, which neither a
  // capture nor a held stream may contain: the graph runs the body once before its capture (and once
  // after its upload); a collective's untimed check, ungated, comes before its gated samples.
  // Gated, every rank releases its stream once its own enqueue is done, and one rank may take longer
  // (an interior rank of `tree` enqueues more): behind the gate and before the start event, a
  // one-element all-reduce on the stream (the ranks' device-side barrier, whose end reaches ranks a few hops
  // apart within its own skew) starts every rank's sample
  // when the last rank's stream is released, so the spread of the releases stays out of the samples.
  // A delay then spins on this rank's device after that barrier, as a compute kernel queued ahead of
  // the call would hold it; the start event follows, so the delay stays out of this rank's own time
  // and shows in its peers', which wait for it inside the call. Ungated (a loop of calls), the
  // delay spins on the host between the barrier and the start event: the barrier leaves the stream
  // idle, so holding back the enqueue holds back this GPU's start of the call by the same time. The
  // graph path gets the same delay without capturing it.
  template <typename Body>
  std::vector<double> timed(int64_t iters, int64_t calls, bool graph, bool launch_free, double delay_s, const char* what,
                            Body&& body) {
    Gate* gate = launch_free && calls == 1 ? &gate_ : nullptr;
    const unsigned expired = gate_.expired();
    auto sync = [&] { barrier(); };
    auto start = [&] {
      barrier();
      if (!gate) spin_for(delay_s);
    };
    std::function<void()> released_together;
    if (gate)
      released_together = [&] {
        nccl_enqueued(ncclAllReduce(scratch_.ptr, scratch_.ptr, 1, ncclInt32, ncclSum, comm(), stream_.s), comm(),
                      "ncclAllReduce", where_);
        if (delay_s > 0) launch_spin(delay_s, stream_.s);
      };
    auto done = [&] { wait(what); };
    std::vector<double> t = or_abort([&] {
      if (!graph) return event_times(stream_.s, iters, where_, start, body, done, calls, gate, released_together);
      // No iterations: the graph's own check (nccl-tests' -G checks one launch), on buffers just
      // filled: captured and launched once, without the uncaptured run, which would change an
      // in-place result; the untimed check just before it ran the same call and connected its peers.
      if (iters > 0) {
        sync();
        body();
        done();
      }
      Graph g(stream_.s, where_, body);
      sync();
      g.launch();
      done();
      return event_times(stream_.s, iters, where_, start, [&] { g.launch(); }, done, calls, gate, released_together);
    });
    require_gates_held(expired, what);
    return t;
  }

  void require_gates_held(unsigned expired_before, const char* what) const {
    require_held(gate_, expired_before, what, "use --timing loop", where_);
  }

  // A CUDA graph captured from `body` on `stream`, and its executable instance.
  struct Graph {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    cudaStream_t stream;
    Where where;
    template <typename Body>
    Graph(cudaStream_t s, const Where& w, Body&& body) : stream(s), where(w) {
      cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture", where);
      try {
        body();
      } catch (...) {
        // End the capture so the stream stays usable; the constructor never finishes, so no
        // destructor will free what the capture made.
        cudaStreamEndCapture(stream, &graph);
        if (graph) cudaGraphDestroy(graph);
        throw;
      }
      cuda_check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture", where);
      try {
        cuda_check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate", where);
        cuda_check(cudaGraphUpload(exec, stream), "cudaGraphUpload", where);
      } catch (...) {
        if (exec) cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        throw;
      }
    }
    void launch() { cuda_check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch", where); }
    ~Graph() {
      if (exec) cudaGraphExecDestroy(exec);
      if (graph) cudaGraphDestroy(graph);
    }
    Graph(const Graph&) = delete;
    Graph& operator=(const Graph&) = delete;
  };

  // Element-wise maximum of this rank's times and its peer's: both ranks of a pair then hold the
  // same samples, as the maximum over the pair.
  std::vector<double> max_with_peer(std::vector<double> t, int peer) {
    const std::size_t bytes = t.size() * sizeof(double);
    DeviceBuffer mine(bytes, where_.device, where_), theirs(bytes, where_.device, where_);
    std::vector<double> other(t.size());
    or_abort([&] {
      cuda_check(cudaMemcpyAsync(mine.ptr, t.data(), bytes, cudaMemcpyHostToDevice, stream_.s), "cudaMemcpyAsync", where_);
      NcclGroup g(comm(), where_);
      nccl_enqueued(ncclSend(mine.ptr, t.size(), ncclFloat64, peer, comm(), stream_.s), comm(), "ncclSend", where_);
      nccl_enqueued(ncclRecv(theirs.ptr, t.size(), ncclFloat64, peer, comm(), stream_.s), comm(), "ncclRecv", where_);
      g.end();
      wait("exchange of times with the peer");
      cuda_check(cudaMemcpyAsync(other.data(), theirs.ptr, bytes, cudaMemcpyDeviceToHost, stream_.s), "cudaMemcpyAsync", where_);
      wait("copy of the peer's times to the host");
    });
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = std::max(t[i], other[i]);
    return t;
  }

  Where where_;
  int size_;
  double timeout_s_;
  int nesting_ = 0;  // or_abort calls in progress
  // Declared in order of construction; destroyed in reverse, the communicator first.
  Stream stream_;
  DeviceBuffer scratch_;
  Gate gate_;
  // Non-blocking, made against the deadline: the communicators the calls run on are split from it
  // (a rank count's too), each split polled against the deadline; none in a split's DeviceComm.
  NcclComm init_;
  NcclComm comm_;  // blocking (NcclComm)
};

}  // namespace commbench
