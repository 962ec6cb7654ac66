#include "copies.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "commbench/pattern.h"
#include "errors.h"
#include "gate.h"
#include "kernels.cuh"
#include "resources.h"

namespace commbench {
namespace {

// Seeds of the byte pattern: a source, the stale content its destination starts with, and the same
// pair for the reverse direction of a bidirectional copy.
constexpr unsigned kSource = 0, kStale = 1, kBackSource = 2, kBackStale = 3;

void on(int device, const Where& w) { cuda_check(cudaSetDevice(device), "cudaSetDevice", w); }

void sync(cudaStream_t s, const Where& w) { cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize", w); }

Event event_on(int device, const Where& w) {
  on(device, w);
  return Event(w, false);
}

// A device-side counter for the check kernels, and the count it holds once `s` is idle.
struct Counter {
  DeviceBuffer buf;
  Counter(int device, const Where& w) : buf(sizeof(unsigned long long), device, w) {}
  unsigned long long* ptr() { return static_cast<unsigned long long*>(buf.ptr); }
  int64_t read(cudaStream_t s, const Where& w) {
    unsigned long long host = 0;
    cuda_check(cudaMemcpyAsync(&host, buf.ptr, sizeof(host), cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync", w);
    sync(s, w);
    return static_cast<int64_t>(host);
  }
};

int64_t count_host_bytes_wrong(const void* p, std::size_t n, unsigned seed) {
  const unsigned char* c = static_cast<const unsigned char*>(p);
  int64_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += c[i] != byte_pattern(i, seed) ? 1 : 0;
  return wrong;
}

void fill_host_bytes(void* p, std::size_t n, unsigned seed) {
  unsigned char* c = static_cast<unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) c[i] = byte_pattern(i, seed);
}

// Enables src -> dst peer access; returns an empty string when it works, else why not.
std::string enable_peer(int src, int dst) {
  if (src == dst) return "";
  int can = 0;
  const Where w{0, src};
  cuda_check(cudaDeviceCanAccessPeer(&can, src, dst), "cudaDeviceCanAccessPeer", w);
  if (!can)
    return "peer access between cuda:" + std::to_string(src) + " and cuda:" + std::to_string(dst) +
           " is not supported (no NVLink or PCIe P2P path, or P2P disabled)";
  on(src, w);
  const cudaError_t rc = cudaDeviceEnablePeerAccess(dst, 0);
  if (rc == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();
  } else if (rc == cudaErrorTooManyPeers) {
    // A GPU maps at most 8 peers at once, and peer access stays on for the process: on a host of more
    // GPUs the pairs beyond that are reported, not the whole matrix ended.
    cudaGetLastError();
    return "cuda:" + std::to_string(src) + " has peer access to as many GPUs as it can map at once " +
           "(cudaErrorTooManyPeers)";
  } else {
    cuda_check(rc, "cudaDeviceEnablePeerAccess", w);
  }
  return "";
}

std::string peer_status(int64_t src, int64_t dst) {
  const int a = static_cast<int>(src), b = static_cast<int>(dst);
  const std::string why = enable_peer(a, b);
  return why.empty() && a != b ? enable_peer(b, a) : why;
}

// What a copy's timing refusal suggests: nothing times copies otherwise.
constexpr const char* kCopyRemedy = "unset CUDA_LAUNCH_BLOCKING";

// Device-to-device copy of `bytes`: "ce" (copy engine, cudaMemcpyPeerAsync) or "sm" (a copy kernel),
// issued by the source GPU, which writes into its peer, or with `read` by the destination GPU, which
// reads from its peer (a link can be slower one way: nvbandwidth's read and write tests).
// Bidirectional runs both directions at once, each on the stream of the GPU that issues it. Each
// sample is enqueued behind the gate (gate.h), so that the host's call and the launch latency stay out
// of it, as nvbandwidth holds its streams; except a copy-engine copy without peer access, which the
// driver stages through the host, as the host may wait for it. Both directions are held by a gate on
// each GPU, released together, and each is timed by events on its own stream: the slower is the
// sample (the two gates' releases reach the GPUs about a microsecond apart, which this leaves out). No
// event crosses between the GPUs inside a sample (a wait on another GPU's event costs
// microseconds, which a 1-16 MiB copy would read as a lower bandwidth).
class PeerCopy {
 public:
  PeerCopy(int64_t dst_dev, int64_t src_dev, int64_t bytes, const std::string& mode, bool bidirectional, bool read)
      : a_(static_cast<int>(src_dev)), b_(static_cast<int>(dst_dev)), n_(static_cast<std::size_t>(bytes)),
        sm_(check_mode(mode, a_, b_, read)), bidi_(bidirectional), read_(read),
        direct_(sm_ || peer_status(a_, b_).empty()), t_(read_ && !bidi_ ? b_ : a_), w_{0, a_},
        src_(n_, a_, w_), dst_(n_, b_, w_), back_src_(bidi_ ? n_ : 0, b_, w_), back_dst_(bidi_ ? n_ : 0, a_, w_),
        count_a_(a_, w_), count_b_(b_, w_), s0_(a_, w_), s1_(b_, w_), gate_(w_), back_gate_(w_) {}

  std::vector<double> times(int64_t iters) {
    pybind11::gil_scoped_release no_gil;
    if (bidi_) return both_ways_times(iters);
    on(t_, w_);
    const unsigned expired = gate_.expired();
    std::vector<double> t = event_times(timing_stream(), iters, w_, [&] { idle(); }, [&] { enqueue(); }, [&] { idle(); }, 1,
                                        direct_ ? &gate_ : nullptr);
    require_held(gate_, expired, "peer copy", kCopyRemedy, w_);
    return t;
  }

  int64_t wrong() {
    pybind11::gil_scoped_release no_gil;
    on(a_, w_);
    launch_fill_bytes(src_.ptr, n_, kSource, s0_.s);
    if (bidi_) launch_fill_bytes(back_dst_.ptr, n_, kBackStale, s0_.s);
    on(b_, w_);
    launch_fill_bytes(dst_.ptr, n_, kStale, s1_.s);
    if (bidi_) launch_fill_bytes(back_src_.ptr, n_, kBackSource, s1_.s);
    idle();
    enqueue();
    idle();
    on(b_, w_);
    launch_count_bytes_wrong(dst_.ptr, n_, kSource, count_b_.ptr(), s1_.s);
    int64_t wrong = count_b_.read(s1_.s, w_);
    if (bidi_) {
      on(a_, w_);
      launch_count_bytes_wrong(back_dst_.ptr, n_, kBackSource, count_a_.ptr(), s0_.s);
      wrong += count_a_.read(s0_.s, w_);
    }
    return wrong;
  }

 private:
  static bool check_mode(const std::string& mode, int a, int b, bool read) {
    if (mode != "ce" && mode != "sm") throw std::invalid_argument("copy mode must be 'ce' or 'sm'");
    const bool sm = mode == "sm";
    if (sm || read || a != b) {
      // A copy-engine copy without peer access is staged by the driver, which leaves no GPU reading
      // from its peer; an SM copy cannot run.
      const std::string why = peer_status(a, b);
      if (!why.empty() && (sm || read)) throw std::invalid_argument(why);
    }
    return sm;
  }

  // The stream the events time on, which the gate holds: the issuing GPU's (timed on the copy's own
  // stream, as nvbandwidth times).
  // By direction, not by device: on the diagonal (a GPU to itself) both streams are one GPU's, and
  // a read is issued on s1.
  cudaStream_t timing_stream() const { return read_ && !bidi_ ? s1_.s : s0_.s; }

  // Each sample: per direction a start and an end event on its stream, made on its stream's GPU.
  std::vector<double> both_ways_times(int64_t iters) {
    std::vector<Event> ev;
    ev.reserve(static_cast<std::size_t>(4 * iters));
    for (int64_t i = 0; i < iters; ++i)
      for (int device : {a_, a_, b_, b_}) {
        on(device, w_);
        ev.emplace_back(w_);
      }
    const unsigned expired = gate_.expired(), back_expired = back_gate_.expired();
    for (int64_t i = 0; i < iters; ++i) {
      idle();
      struct Release {  // on every way out: a failed enqueue must not leave a stream held
        Gate* a;
        Gate* b;
        ~Release() {
          if (a) a->release();
          if (b) b->release();
        }
      } release{direct_ ? &gate_ : nullptr, direct_ ? &back_gate_ : nullptr};
      Event* e = &ev[static_cast<std::size_t>(4 * i)];
      on(a_, w_);
      if (direct_) gate_.hold(s0_.s);
      cuda_check(cudaEventRecord(e[0].e, s0_.s), "cudaEventRecord", w_);
      on(b_, w_);
      if (direct_) back_gate_.hold(s1_.s);
      cuda_check(cudaEventRecord(e[2].e, s1_.s), "cudaEventRecord", w_);
      enqueue();
      on(a_, w_);
      cuda_check(cudaEventRecord(e[1].e, s0_.s), "cudaEventRecord", w_);
      on(b_, w_);
      cuda_check(cudaEventRecord(e[3].e, s1_.s), "cudaEventRecord", w_);
    }
    idle();
    require_held(gate_, expired, "peer copy", kCopyRemedy, w_);
    require_held(back_gate_, back_expired, "peer copy", kCopyRemedy, w_);
    std::vector<double> t(static_cast<std::size_t>(iters));
    for (int64_t i = 0; i < iters; ++i) {
      float forth = 0, back = 0;
      const Event* e = &ev[static_cast<std::size_t>(4 * i)];
      on(a_, w_);
      cuda_check(cudaEventElapsedTime(&forth, e[0].e, e[1].e), "cudaEventElapsedTime", w_);
      on(b_, w_);
      cuda_check(cudaEventElapsedTime(&back, e[2].e, e[3].e), "cudaEventElapsedTime", w_);
      t[static_cast<std::size_t>(i)] = std::max(forth, back) * 1e-3;
    }
    on(t_, w_);
    return t;
  }

  void idle() {
    sync(s0_.s, w_);
    sync(s1_.s, w_);
    on(t_, w_);
  }

  void copy(void* d, int dd, const void* s, int sd, cudaStream_t st, int run_on) {
    on(run_on, w_);
    if (sm_)
      launch_sm_copy(d, s, n_, st);
    else
      cuda_check(cudaMemcpyPeerAsync(d, dd, s, sd, n_, st), "cudaMemcpyPeerAsync", w_);
  }

  void enqueue() {
    // Each direction on the stream of the GPU that issues it: the writer's, or the reader's.
    if (read_)
      copy(dst_.ptr, b_, src_.ptr, a_, s1_.s, b_);
    else
      copy(dst_.ptr, b_, src_.ptr, a_, s0_.s, a_);
    if (bidi_) {
      if (read_)
        copy(back_dst_.ptr, a_, back_src_.ptr, b_, s0_.s, a_);
      else
        copy(back_dst_.ptr, a_, back_src_.ptr, b_, s1_.s, b_);
    }
    on(t_, w_);
  }

  int a_, b_;
  std::size_t n_;
  bool sm_, bidi_, read_, direct_;
  int t_;  // the device whose stream the events time on (timing_stream)
  Where w_;
  DeviceBuffer src_, dst_, back_src_, back_dst_;
  Counter count_a_, count_b_;
  Stream s0_, s1_;
  Gate gate_, back_gate_;  // the timing stream's; with both directions, s0's and s1's
};

// Host <-> device copies: direction "h2d" or "d2h", from pinned or pageable host memory. A pinned copy
// is enqueued behind the gate, as a peer copy is; a pageable one is not, as its call waits on the
// host for the stream (CUDA stages pageable memory through a buffer of its own).
class HostCopy {
 public:
  HostCopy(int64_t device, int64_t bytes, const std::string& direction, bool pinned)
      : dev_(static_cast<int>(device)), n_(static_cast<std::size_t>(bytes)), h2d_(check_direction(direction)),
        w_{0, dev_}, d_(n_, dev_, w_), count_(dev_, w_), s_(dev_, w_), gate_(w_) {
    if (pinned) {
      pinned_ = std::make_unique<PinnedBuffer>(n_, w_);
      host_ = pinned_->ptr;
    } else {
      pageable_ = std::make_unique<PageableBuffer>(n_, w_);
      host_ = pageable_->ptr;
    }
  }

  std::vector<double> times(int64_t iters) {
    pybind11::gil_scoped_release no_gil;
    on(dev_, w_);
    const unsigned expired = gate_.expired();
    std::vector<double> t = event_times(s_.s, iters, w_, [&] { sync(s_.s, w_); }, [&] { enqueue(); },
                                        [&] { sync(s_.s, w_); }, 1, pinned_ ? &gate_ : nullptr);
    require_held(gate_, expired, "host copy", kCopyRemedy, w_);
    return t;
  }

  int64_t wrong() {
    pybind11::gil_scoped_release no_gil;
    on(dev_, w_);
    fill_host_bytes(host_, n_, h2d_ ? kSource : kStale);
    launch_fill_bytes(d_.ptr, n_, h2d_ ? kStale : kSource, s_.s);
    sync(s_.s, w_);
    enqueue();
    sync(s_.s, w_);
    if (!h2d_) return count_host_bytes_wrong(host_, n_, kSource);
    launch_count_bytes_wrong(d_.ptr, n_, kSource, count_.ptr(), s_.s);
    return count_.read(s_.s, w_);
  }

 private:
  static bool check_direction(const std::string& direction) {
    if (direction != "h2d" && direction != "d2h") throw std::invalid_argument("direction must be 'h2d' or 'd2h'");
    return direction == "h2d";
  }

  void enqueue() {
    cuda_check(cudaMemcpyAsync(h2d_ ? d_.ptr : host_, h2d_ ? host_ : d_.ptr, n_,
                               h2d_ ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, s_.s),
               "cudaMemcpyAsync", w_);
  }

  int dev_;
  std::size_t n_;
  bool h2d_;
  Where w_;
  DeviceBuffer d_;
  Counter count_;
  Stream s_;
  Gate gate_;
  std::unique_ptr<PinnedBuffer> pinned_;
  std::unique_ptr<PageableBuffer> pageable_;
  void* host_ = nullptr;
};

// GPU src -> pinned host -> GPU dst in chunks through two pinned buffers: the device-to-host copy of
// chunk k + 1 overlaps the host-to-device copy of chunk k, on two streams. This is what a transfer
// costs without peer-to-peer. Timed on the host (the streams may sit on two devices).
class StagedCopy {
 public:
  StagedCopy(int64_t dst_dev, int64_t src_dev, int64_t bytes, int64_t chunk_bytes)
      : a_(static_cast<int>(src_dev)), b_(static_cast<int>(dst_dev)), n_(static_cast<std::size_t>(bytes)),
        chunk_(check_chunk(chunk_bytes, n_)), w_{0, a_}, src_(n_, a_, w_), dst_(n_, b_, w_), slots_(2 * chunk_, w_),
        count_(b_, w_), down_(a_, w_), up_(b_, w_) {
    for (int k = 0; k < 2; ++k) {
      drained_.push_back(event_on(b_, w_));
      filled_.push_back(event_on(a_, w_));
    }
  }

  std::vector<double> times(int64_t iters) {
    std::vector<double> t(static_cast<std::size_t>(iters));
    pybind11::gil_scoped_release no_gil;
    for (int64_t i = 0; i < iters; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      enqueue();
      sync(up_.s, w_);
      t[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    return t;
  }

  int64_t wrong() {
    pybind11::gil_scoped_release no_gil;
    on(a_, w_);
    launch_fill_bytes(src_.ptr, n_, kSource, down_.s);
    on(b_, w_);
    launch_fill_bytes(dst_.ptr, n_, kStale, up_.s);
    sync(down_.s, w_);
    sync(up_.s, w_);
    enqueue();
    sync(up_.s, w_);
    on(b_, w_);
    launch_count_bytes_wrong(dst_.ptr, n_, kSource, count_.ptr(), up_.s);
    return count_.read(up_.s, w_);
  }

 private:
  static std::size_t check_chunk(int64_t chunk_bytes, std::size_t n) {
    if (chunk_bytes <= 0) throw std::invalid_argument("staging chunk must be positive");
    return std::min<std::size_t>(static_cast<std::size_t>(chunk_bytes), std::max<std::size_t>(n, 1));
  }

  void enqueue() {
    std::size_t k = 0;
    for (std::size_t off = 0; off < n_; off += chunk_, ++k) {
      const std::size_t len = std::min(chunk_, n_ - off);
      char* slot = static_cast<char*>(slots_.ptr) + (k % 2) * chunk_;
      on(a_, w_);
      // The slot is free once the upload of chunk k - 2 has drained it.
      if (k >= 2) cuda_check(cudaStreamWaitEvent(down_.s, drained_[k % 2].e, 0), "cudaStreamWaitEvent", w_);
      cuda_check(cudaMemcpyAsync(slot, static_cast<char*>(src_.ptr) + off, len, cudaMemcpyDeviceToHost, down_.s),
                 "cudaMemcpyAsync", w_);
      cuda_check(cudaEventRecord(filled_[k % 2].e, down_.s), "cudaEventRecord", w_);
      on(b_, w_);
      cuda_check(cudaStreamWaitEvent(up_.s, filled_[k % 2].e, 0), "cudaStreamWaitEvent", w_);
      cuda_check(cudaMemcpyAsync(static_cast<char*>(dst_.ptr) + off, slot, len, cudaMemcpyHostToDevice, up_.s),
                 "cudaMemcpyAsync", w_);
      cuda_check(cudaEventRecord(drained_[k % 2].e, up_.s), "cudaEventRecord", w_);
    }
  }

  int a_, b_;
  std::size_t n_, chunk_;
  Where w_;
  DeviceBuffer src_, dst_;
  PinnedBuffer slots_;
  Counter count_;
  Stream down_, up_;
  std::vector<Event> drained_, filled_;
};

}  // namespace

void bind_copies(pybind11::module& m) {
  namespace py = pybind11;
  m.def("peer_status", &peer_status, py::arg("src"), py::arg("dst"));
  py::class_<PeerCopy>(m, "PeerCopy")
      .def(py::init<int64_t, int64_t, int64_t, const std::string&, bool, bool>(), py::arg("dst"), py::arg("src"),
           py::arg("bytes"), py::arg("mode"), py::arg("bidirectional"), py::arg("read") = false)
      .def("times", &PeerCopy::times, py::arg("iters"))
      .def("wrong", &PeerCopy::wrong);
  py::class_<HostCopy>(m, "HostCopy")
      .def(py::init<int64_t, int64_t, const std::string&, bool>(), py::arg("device"), py::arg("bytes"),
           py::arg("direction"), py::arg("pinned"))
      .def("times", &HostCopy::times, py::arg("iters"))
      .def("wrong", &HostCopy::wrong);
  py::class_<StagedCopy>(m, "StagedCopy")
      .def(py::init<int64_t, int64_t, int64_t, int64_t>(), py::arg("dst"), py::arg("src"), py::arg("bytes"),
           py::arg("chunk"))
      .def("times", &StagedCopy::times, py::arg("iters"))
      .def("wrong", &StagedCopy::wrong);
}

}  // namespace commbench
