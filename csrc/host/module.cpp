// commbench._host: timed loops on host memory over MPI. Every function runs its whole loop in native
// code with the GIL released (the bindings' call guards) and returns one time per iteration
// (seconds). A collective (collective_times.h over MpiBackend) returns this rank's own times, which
// Python gathers from every rank (the slowest sets the pace; the others' show who kept them
// waiting); a point-to-point test returns the maximum over its pair.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // CUDA-awareness queries (Open MPI, MPICH)
#endif

#include <algorithm>
#include <climits>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "commbench/collective_times.h"
#include "commbench/compute.h"
#include "commbench/library_calls.h"
#include "commbench/own_algorithms.h"
#include "commbench/pattern.h"
#include "commbench/reduce.h"
#include "commbench/spin.h"
#include "buffer_caster.h"
#include "mpi_transport.h"

namespace py = pybind11;

namespace commbench {
namespace {

using Clock = std::chrono::steady_clock;

MPI_Comm comm_from(int64_t fortran_handle) {
  return MPI_Comm_f2c(static_cast<MPI_Fint>(fortran_handle));
}

// Times `iters` samples of `calls` back-to-back body() calls, each sample preceded by an untimed
// barrier so that every sample starts together and, on a rank given a delay, by that delay (spin.h)
// outside the timed interval: the rank
// arrives late and its peers wait for it inside theirs. The delayed rank keeps MPI progressing while
// it spins: a library without a progress thread may hold the barrier's last message until the
// rank's next call, and the peers would wait in the untimed barrier instead of the timed call.
// Returns this rank's own times.
// `sync` is the barrier: every rank of comm, or the two of a pair (PairSide::sync).
template <typename Sync, typename Body>
std::vector<double> time_iterations_with(MPI_Comm comm, Sync&& sync, int64_t iters, int64_t calls, double delay_s,
                                         Body&& body) {
  std::vector<double> t(static_cast<std::size_t>(std::max<int64_t>(iters, 0)));
  for (int64_t i = 0; i < iters; ++i) {
    sync();
    spin_for(delay_s, [&] {
      int arrived = 0;
      mpi_check(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &arrived, MPI_STATUS_IGNORE), "MPI_Iprobe");
    });
    const auto t0 = Clock::now();
    for (int64_t c = 0; c < calls; ++c) body();
    t[i] = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  return t;
}

template <typename Body>
std::vector<double> time_iterations(MPI_Comm comm, int64_t iters, int64_t calls, double delay_s, Body&& body) {
  return time_iterations_with(comm, [comm] { mpi_check(MPI_Barrier(comm), "MPI_Barrier"); }, iters, calls, delay_s,
                              std::forward<Body>(body));
}

// Seconds per call of samples of `calls` calls each.
std::vector<double> per_call(std::vector<double> t, int64_t calls) {
  for (double& x : t) x /= static_cast<double>(calls);
  return t;
}

void require_host(const Buffer& b, const char* what) {
  if (!b.on_host()) throw std::invalid_argument(std::string(what) + " must be in host memory");
}

// Whether the MPI library accepts GPU buffers, asked at run time where the library can say.
bool mpi_cuda_aware() {
#if defined(MPIX_CUDA_AWARE_SUPPORT)
  return MPIX_Query_cuda_support() == 1;
#elif defined(MPIX_GPU_SUPPORT_CUDA)
  int yes = 0;
  return MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &yes) == MPI_SUCCESS && yes == 1;
#else
  return false;
#endif
}

// Scratch memory for our algorithms, kept from call to call: a timed call is made several times per
// size (check, warm-up, timed iterations), and allocating and faulting in up to a whole message each
// time costs more than the call itself at large sizes.
template <typename T>
T* reused_scratch(std::size_t elems) {
  static std::unique_ptr<char[]> memory;
  static std::size_t capacity = 0;
  const std::size_t bytes = std::max<std::size_t>(elems * sizeof(T), 16);
  if (bytes > capacity) {
    memory.reset();  // the old block goes first, so the peak is the new size, not both
    memory.reset(new char[bytes]);
    capacity = bytes;
  }
  return reinterpret_cast<T*>(memory.get());
}

// collective_times.h's backend: MPI on host buffers, or, for the MPI library's own call alone, on GPU
// buffers when the library is CUDA-aware.
class MpiBackend {
 public:
  static constexpr const char* kLibrary = "mpi";

  explicit MpiBackend(MPI_Comm comm) : comm_(comm) {
    mpi_check(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank");
    mpi_check(MPI_Comm_size(comm, &size_), "MPI_Comm_size");
  }
  int rank() const { return rank_; }
  int size() const { return size_; }

  void check_buffers(const Buffer& send, const Buffer& recv, Algorithm algo) const {
    if (algo == Algorithm::Library && !send.on_host() && !recv.on_host() && mpi_cuda_aware()) return;
    require_host(send, "send buffer");
    require_host(recv, "recv buffer");
  }

  MpiTransport transport() const { return MpiTransport(comm_); }
  template <typename T, typename Op>
  auto reducer() const {
    return [](T* dst, const T* src, std::size_t n) { reduce_into(dst, src, n, Op{}); };
  }
  auto copy() const {
    return [](auto* dst, const auto* src, std::size_t n) {
      if (n > 0) std::memcpy(dst, src, n * sizeof(*src));
    };
  }
  template <typename T>
  T* scratch(std::size_t elems) const { return reused_scratch<T>(elems); }

  template <typename T, typename Op>
  std::function<void()> library_call(Collective coll, const CallBuffers<T>& b, RedOp op) {
    auto mop = std::make_shared<MpiOp<T, Op>>(op);
    op_ = mop;  // a user-defined MPI_Op must outlive the calls that use it
    return mpi_call(coll, b, *mop, comm_).blocking;
  }
  NoGroup library_group() const { return {}; }

  template <typename Body>
  std::vector<double> time(int64_t iters, int64_t calls, double delay_s, const std::string&, Body&& body) const {
    return time_iterations(comm_, iters, calls, delay_s, body);
  }

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::shared_ptr<void> op_;
};

std::vector<double> mpi_collective_times(Collective coll, Algorithm algo, const Buffer& send, const Buffer& recv,
                                         int64_t op_code, int64_t root, int64_t iters, int64_t comm_handle, int64_t chunk_bytes, int64_t agg,
                                         double delay_s, int64_t loop) {
  MpiBackend backend(comm_from(comm_handle));
  return collective_times(backend, coll, algo, send, recv, op_code, root, iters, chunk_bytes, agg, delay_s, loop);
}

// One size of `overlap` on host buffers: the MPI library's non-blocking call for `coll`, and beside
// it, on this rank's core, `sweeps` sweeps of the computation (compute.h), in `probes` parts with an
// MPI_Testall after each (OSU's num_probes: 0, its default, tests nothing until the wait). Per
// iteration, after an untimed barrier: `total` from the call's start to its wait's end, `compute` the
// computation's own time (the tests' not counted, as OSU subtracts them), `tests` the tests' time and
// `done` from the start to the test or wait that found the call complete. With sweeps 0 it is the call
// alone, started and waited for (OSU's pure communication time). `compute_wrong` counts the elements
// the computation left wrong over every iteration; the collective's result is checked by the caller.
struct OverlapTimes {
  std::vector<double> total, compute, tests, done;
  int64_t compute_wrong = 0;
};

OverlapTimes mpi_overlap_times(Collective coll, const Buffer& send, const Buffer& recv, int64_t op_code, int64_t root,
                               int64_t iters, int64_t comm_handle, int64_t sweeps, int64_t probes) {
  if (iters < 0 || sweeps < 0 || probes < 0) throw std::invalid_argument("iters, sweeps and probes must not be negative");
  require_host(send, "send buffer");
  require_host(recv, "recv buffer");
  if (send.dtype != recv.dtype) throw std::invalid_argument("send and recv buffers differ in dtype");
  MPI_Comm comm = comm_from(comm_handle);
  MpiBackend backend(comm);
  if (root < 0 || root >= backend.size()) throw std::invalid_argument("root must be a rank of the communicator");
  const RedOp op = redop_from(op_code);
  return dispatch_dtype_op(recv.dtype, op, [&](auto tag, auto functor) {
    using T = typename decltype(tag)::type;
    using Op = decltype(functor);
    const CallBuffers<T> b{static_cast<const T*>(send.data), static_cast<T*>(recv.data), send.count, recv.count,
                           overlap(send, recv), backend.rank(), backend.size(), static_cast<int>(root)};
    const MpiOp<T, Op> mop(op);
    const MpiCall call = mpi_call(coll, b, mop, comm);
    HostCompute work;
    const int64_t parts = std::max<int64_t>(probes, 1);
    OverlapTimes out;
    std::vector<MPI_Request> reqs;
    for (int64_t i = 0; i < iters; ++i) {
      work.reset();
      mpi_check(MPI_Barrier(comm), "MPI_Barrier");
      const auto t0 = Clock::now();
      reqs.clear();
      call.start(reqs);
      double tests = 0, done = -1;
      const auto c0 = Clock::now();
      for (int64_t p = 0; p < parts; ++p) {
        work.sweeps(sweeps / parts + (p < sweeps % parts));
        if (probes == 0) continue;
        const auto p0 = Clock::now();
        int flag = 0;
        mpi_check(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &flag, MPI_STATUSES_IGNORE), "MPI_Testall");
        const auto p1 = Clock::now();
        tests += std::chrono::duration<double>(p1 - p0).count();
        if (flag && done < 0) done = std::chrono::duration<double>(p1 - t0).count();
      }
      const double compute = std::chrono::duration<double>(Clock::now() - c0).count() - tests;
      mpi_check(MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
      call.finish();
      const double total = std::chrono::duration<double>(Clock::now() - t0).count();
      out.total.push_back(total);
      out.compute.push_back(compute);
      out.tests.push_back(tests);
      out.done.push_back(done < 0 ? total : done);
      out.compute_wrong += work.wrong(sweeps);
    }
    return out;
  });
}

// The computation alone: `iters` samples of `sweeps` sweeps, each checked (the wrong elements over
// every sample are the last figure).
std::pair<std::vector<double>, int64_t> compute_times(int64_t sweeps, int64_t iters) {
  if (iters < 0 || sweeps < 0) throw std::invalid_argument("iters and sweeps must not be negative");
  HostCompute work;
  std::vector<double> t;
  int64_t wrong = 0;
  for (int64_t i = 0; i < iters; ++i) {
    work.reset();
    const auto t0 = Clock::now();
    work.sweeps(sweeps);
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    wrong += work.wrong(sweeps);
  }
  return {t, wrong};
}

// One side of a point-to-point test: the pair's communicator and this rank's peer in it, and separate
// send and receive buffers as OSU and nccl-tests use them (one buffer for both directions costs up to
// twice the time at medium sizes, where the echo's receive and the next send contend for the same
// cache lines). The pair is either the two ranks of a two-rank communicator (peer -1: rank 0 leads)
// or two ranks of a larger one, the world's, that every pair of a round shares: then `peer` names
// the other rank and `first` whether this one leads (sends the ping, the windowed messages), and the
// pair synchronises and agrees on its samples by itself, never by a collective of the others.
struct PairSide {
  MPI_Comm comm;
  int peer;
  bool first;
  char* s;
  char* r;
  int len;

  // Tags of the pair's own barrier and exchange of samples, apart from the tests' 1 to 3.
  static constexpr int kSync = 4, kSamples = 5;

  void sync() const {
    mpi_check(MPI_Sendrecv(nullptr, 0, MPI_BYTE, peer, kSync, nullptr, 0, MPI_BYTE, peer, kSync, comm, MPI_STATUS_IGNORE),
              "MPI_Sendrecv");
  }

  // Element-wise maximum of the two sides' samples: the leader's times (the other side's are zero
  // or its own view, never longer than the exchange it took part in).
  std::vector<double> max(std::vector<double> t) const {
    std::vector<double> other(t.size());
    mpi_check(MPI_Sendrecv(t.data(), static_cast<int>(t.size()), MPI_DOUBLE, peer, kSamples, other.data(),
                           static_cast<int>(other.size()), MPI_DOUBLE, peer, kSamples, comm, MPI_STATUS_IGNORE),
              "MPI_Sendrecv");
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = std::max(t[i], other[i]);
    return t;
  }
};

PairSide pair_side(const Buffer& send, const Buffer& recv, int64_t bytes, int64_t iters, int64_t comm_handle,
                   int64_t peer, bool first) {
  if (iters < 0) throw std::invalid_argument("iters must not be negative");
  require_host(send, "send buffer");
  require_host(recv, "recv buffer");
  if (bytes < 0 || bytes > static_cast<int64_t>(std::min(nbytes(send), nbytes(recv))) || bytes > INT32_MAX)
    throw std::invalid_argument("message of " + std::to_string(bytes) + " bytes does not fit the buffers");
  PairSide p{comm_from(comm_handle), 0, first, static_cast<char*>(send.data), static_cast<char*>(recv.data),
             static_cast<int>(bytes)};
  int rank = 0, size = 0;
  mpi_check(MPI_Comm_rank(p.comm, &rank), "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(p.comm, &size), "MPI_Comm_size");
  if (peer < 0) {
    if (size != 2) throw std::invalid_argument("a pair's communicator without a peer must have two ranks");
    p.peer = 1 - rank;
    p.first = rank == 0;
  } else {
    if (peer >= size || peer == rank)
      throw std::invalid_argument("peer " + std::to_string(peer) + " is not another rank of the communicator");
    p.peer = static_cast<int>(peer);
  }
  return p;
}

// Ping-pong between the two sides of a pair: the leader sends, the other echoes. A sample is `loop`
// round trips back to back as seen by the leader (1: each round trip its own sample; more: the loop
// timing, one pair of timestamps around them), and its figure half a round trip; the other side
// reports zero, so the maximum over the pair is the leader's. No barrier between round trips: the
// exchange itself keeps lock step.
std::vector<double> pingpong_times(const Buffer& send, const Buffer& recv, int64_t bytes, int64_t iters,
                                   int64_t comm_handle, int64_t loop, int64_t peer, bool first) {
  const PairSide p = pair_side(send, recv, bytes, iters, comm_handle, peer, first);
  if (loop < 1) throw std::invalid_argument("loop must be at least 1");
  std::vector<double> t(static_cast<std::size_t>(std::max<int64_t>(iters, 0)), 0.0);
  p.sync();
  for (int64_t i = 0; i < iters; ++i) {
    if (p.first) {
      const auto t0 = Clock::now();
      for (int64_t c = 0; c < loop; ++c) {
        mpi_check(MPI_Send(p.s, p.len, MPI_BYTE, p.peer, 1, p.comm), "MPI_Send");
        mpi_check(MPI_Recv(p.r, p.len, MPI_BYTE, p.peer, 1, p.comm, MPI_STATUS_IGNORE), "MPI_Recv");
      }
      t[i] = std::chrono::duration<double>(Clock::now() - t0).count() / (2.0 * static_cast<double>(loop));
    } else {
      for (int64_t c = 0; c < loop; ++c) {
        mpi_check(MPI_Recv(p.r, p.len, MPI_BYTE, p.peer, 1, p.comm, MPI_STATUS_IGNORE), "MPI_Recv");
        mpi_check(MPI_Send(p.s, p.len, MPI_BYTE, p.peer, 1, p.comm), "MPI_Send");
      }
    }
  }
  return p.max(std::move(t));
}

// Windowed unidirectional bandwidth: the leader posts `window` sends of `bytes` from its send buffer,
// the other side receives them into its receive buffer and answers with a 4-byte ack. A sample is
// `loop` windows back to back after the pair's barrier, as seen by the leader; its figure the time
// per window.
std::vector<double> bandwidth_times(const Buffer& send, const Buffer& recv, int64_t bytes, int64_t window,
                                    int64_t iters, int64_t comm_handle, int64_t loop, int64_t peer, bool first) {
  const PairSide p = pair_side(send, recv, bytes, iters, comm_handle, peer, first);
  if (loop < 1) throw std::invalid_argument("loop must be at least 1");
  std::vector<MPI_Request> reqs(static_cast<std::size_t>(window));
  int ack = 0;
  return p.max(per_call(time_iterations_with(p.comm, [&p] { p.sync(); }, iters, loop, 0.0, [&] {
    for (int64_t w = 0; w < window; ++w) {
      if (p.first)
        mpi_check(MPI_Isend(p.s, p.len, MPI_BYTE, p.peer, 2, p.comm, &reqs[w]), "MPI_Isend");
      else
        mpi_check(MPI_Irecv(p.r, p.len, MPI_BYTE, p.peer, 2, p.comm, &reqs[w]), "MPI_Irecv");
    }
    mpi_check(MPI_Waitall(static_cast<int>(window), reqs.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    if (p.first)
      mpi_check(MPI_Recv(&ack, 1, MPI_INT, p.peer, 3, p.comm, MPI_STATUS_IGNORE), "MPI_Recv");
    else
      mpi_check(MPI_Send(&ack, 1, MPI_INT, p.peer, 3, p.comm), "MPI_Send");
  }), loop));
}

// Walks elements [0, n) of a pattern that repeats every `period` indices, starting at index
// `first`: f(offset, phase, m) for runs of m elements whose pattern indices are phase, phase + 1, ...
template <typename F>
void over_periods(std::size_t n, std::size_t first, std::size_t period, F&& f) {
  std::size_t phase = first % period;
  for (std::size_t k = 0; k < n;) {
    const std::size_t m = std::min(period - phase, n - k);
    f(k, phase, m);
    k += m;
    phase = 0;
  }
}

// Fills t with rank's share of the exact pattern (pattern.h) at pattern indices first, first + 1, ...
void fill_pattern(const Buffer& t, int64_t op_code, int64_t rank, int64_t nranks, int64_t first) {
  require_host(t, "buffer");
  const RedOp op = redop_from(op_code);
  const int r = static_cast<int>(rank), p = static_cast<int>(nranks);
  dispatch_dtype(t.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* d = static_cast<T*>(t.data);
    const std::size_t period = pattern_period(op, p);
    std::vector<T> table(period);
    for (std::size_t j = 0; j < period; ++j) table[j] = static_cast<T>(pattern_value(op, j, r, p));
    over_periods(t.count, static_cast<std::size_t>(first), period,
                 [&](std::size_t k, std::size_t phase, std::size_t m) { std::memcpy(d + k, table.data() + phase, m * sizeof(T)); });
    return 0;
  });
}

// Number of elements of t that differ from what they must hold at pattern indices first, first + 1,
// ... from `source` (pattern.h: the exact reduction, a rank's own values, or the stale value).
int64_t count_wrong(const Buffer& t, int64_t op_code, int64_t nranks, int64_t first, int64_t source) {
  require_host(t, "buffer");
  const RedOp op = redop_from(op_code);
  const int p = static_cast<int>(nranks);
  return dispatch_dtype(t.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* d = static_cast<const T*>(t.data);
    const std::size_t period = pattern_period(op, p);
    std::vector<double> expected(period);
    for (std::size_t j = 0; j < period; ++j)
      expected[j] = expected_at(op, j, static_cast<int>(source), p);
    int64_t wrong = 0;
    over_periods(t.count, static_cast<std::size_t>(first), period,
                 [&](std::size_t k, std::size_t phase, std::size_t m) {
                   for (std::size_t j = 0; j < m; ++j) wrong += static_cast<double>(d[k + j]) != expected[phase + j] ? 1 : 0;
                 });
    return wrong;
  });
}

// Smallest nonzero step of the steady clock, measured: the floor under any single timing.
double clock_floor() {
  double best = 1.0;
  for (int i = 0; i < 1000; ++i) {
    const auto a = Clock::now();
    auto b = Clock::now();
    while (b == a) b = Clock::now();
    best = std::min(best, std::chrono::duration<double>(b - a).count());
  }
  return best;
}

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(text, &len);
  // Some libraries count the terminating NUL in len.
  return std::string(text, strnlen(text, static_cast<std::size_t>(len)));
}

}  // namespace
}  // namespace commbench

PYBIND11_MODULE(_host, m) {
  using namespace commbench;
  m.doc() = "commbench host timed loops over MPI";
  bind_collective_enums(m);
  // The buffers by position, the integers by name: a dozen integers in a row are too easy to swap.
  m.def("collective_times", &mpi_collective_times, "this rank's per-iteration times of a collective",
        py::arg("collective"), py::arg("algorithm"), py::arg("send"), py::arg("recv"), py::kw_only(), py::arg("op"), py::arg("root"),
        py::arg("iters"), py::arg("comm"), py::arg("chunk_bytes"), py::arg("agg") = 1, py::arg("delay_s") = 0.0,
        py::arg("loop") = 1, py::call_guard<py::gil_scoped_release>());
  py::class_<OverlapTimes>(m, "OverlapTimes", "overlap_times' per-iteration seconds and the computation's wrong elements")
      .def_readonly("total", &OverlapTimes::total)
      .def_readonly("compute", &OverlapTimes::compute)
      .def_readonly("tests", &OverlapTimes::tests)
      .def_readonly("done", &OverlapTimes::done)
      .def_readonly("compute_wrong", &OverlapTimes::compute_wrong);
  m.def("overlap_times", &mpi_overlap_times, "this rank's per-iteration times of a non-blocking collective beside a computation",
        py::arg("collective"), py::arg("send"), py::arg("recv"), py::kw_only(), py::arg("op"), py::arg("root"), py::arg("iters"),
        py::arg("comm"), py::arg("sweeps"), py::arg("probes") = 0, py::call_guard<py::gil_scoped_release>());
  m.def("compute_times", &compute_times, "the computation's per-iteration times alone, and its wrong elements",
        py::kw_only(), py::arg("sweeps"), py::arg("iters"), py::call_guard<py::gil_scoped_release>());
  m.def("pingpong_times", &pingpong_times, py::arg("send"), py::arg("recv"), py::kw_only(), py::arg("bytes"), py::arg("iters"),
        py::arg("comm"), py::arg("loop") = 1, py::arg("peer") = -1, py::arg("first") = false,
        py::call_guard<py::gil_scoped_release>());
  m.def("bandwidth_times", &bandwidth_times, py::arg("send"), py::arg("recv"), py::kw_only(), py::arg("bytes"), py::arg("window"),
        py::arg("iters"), py::arg("comm"), py::arg("loop") = 1, py::arg("peer") = -1, py::arg("first") = false,
        py::call_guard<py::gil_scoped_release>());
  m.def("fill_pattern", &fill_pattern, py::arg("buffer"), py::arg("op"), py::arg("rank"), py::arg("nranks"),
        py::arg("first") = 0);
  m.def("count_wrong", &count_wrong, py::arg("buffer"), py::arg("op"), py::arg("nranks"), py::arg("first") = 0,
        py::arg("source") = -1);
  m.def("clock_floor", &clock_floor);
  m.def("mpi_cuda_aware", &mpi_cuda_aware);
  m.def("mpi_library_version", &mpi_library_version);
}
