// commbench._host: timed loops on host memory over MPI. Every function runs its whole loop in native
// code with the GIL released and returns one time per iteration (seconds), already reduced to the
// maximum over the ranks of the communicator, because the slowest rank sets the pace.
#include <torch/extension.h>

#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // CUDA-awareness queries (Open MPI, MPICH)
#endif

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "commbench/collectives.h"
#include "commbench/pattern.h"
#include "commbench/reduce.h"
#include "commbench/schedule.h"
#include "mpi_transport.h"
#include "torch_dispatch.h"

namespace commbench {
namespace {

using Clock = std::chrono::steady_clock;

MPI_Comm comm_from(int64_t fortran_handle) {
  return MPI_Comm_f2c(static_cast<MPI_Fint>(fortran_handle));
}

// Runs body() iters times, each preceded by an untimed barrier so that every iteration starts
// together, and returns the per-iteration maximum over ranks.
template <typename Body>
at::Tensor time_iterations(MPI_Comm comm, int64_t iters, Body&& body) {
  at::Tensor out = at::empty({iters}, at::kDouble);
  double* t = out.data_ptr<double>();
  {
    pybind11::gil_scoped_release no_gil;
    for (int64_t i = 0; i < iters; ++i) {
      mpi_check(MPI_Barrier(comm), "MPI_Barrier");
      const auto t0 = Clock::now();
      body();
      t[i] = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, t, static_cast<int>(iters), MPI_DOUBLE, MPI_MAX, comm),
              "MPI_Allreduce");
  }
  return out;
}

void require_host_contiguous(const at::Tensor& t, const char* what) {
  if (!t.device().is_cpu() || !t.is_contiguous())
    throw std::invalid_argument(std::string(what) + " must be a contiguous host tensor");
}

template <typename T, typename Op>
struct HostReducer {
  void operator()(T* dst, const T* src, std::size_t n) const { reduce_into(dst, src, n, Op{}); }
};

// MPI has no 16-bit float types, so those reduce through a user-defined op that runs our functor.
template <typename T, typename Op>
void mpi_user_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_into(static_cast<T*>(inout), static_cast<const T*>(in), static_cast<std::size_t>(*len), Op{});
}

template <typename T> MPI_Datatype mpi_type() { return MPI_UINT16_T; }  // 16-bit floats
template <> MPI_Datatype mpi_type<float>() { return MPI_FLOAT; }
template <> MPI_Datatype mpi_type<double>() { return MPI_DOUBLE; }
template <> MPI_Datatype mpi_type<int32_t>() { return MPI_INT32_T; }
template <> MPI_Datatype mpi_type<int64_t>() { return MPI_INT64_T; }

template <typename T>
constexpr bool mpi_has_type() {
  return !std::is_same<T, c10::Half>::value && !std::is_same<T, c10::BFloat16>::value;
}

MPI_Op mpi_builtin_op(RedOp op) {
  switch (op) {
    case RedOp::Prod: return MPI_PROD;
    case RedOp::Max: return MPI_MAX;
    case RedOp::Min: return MPI_MIN;
    default: return MPI_SUM;
  }
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

// Times one all-reduce implementation: "mpi" (MPI_Allreduce), "ring" or "tree" (ours).
// send and recv may be the same tensor (in place). Only "mpi" takes GPU buffers, and only from a
// CUDA-aware MPI library.
at::Tensor allreduce_times(const std::string& impl, at::Tensor send, at::Tensor recv, int64_t op_code,
                           int64_t iters, int64_t comm_handle, int64_t chunk_bytes) {
  if (impl == "mpi" && send.is_cuda() && recv.is_cuda() && mpi_cuda_aware()) {
    if (!send.is_contiguous() || !recv.is_contiguous())
      throw std::invalid_argument("buffers must be contiguous");
  } else {
    require_host_contiguous(send, "send buffer");
    require_host_contiguous(recv, "recv buffer");
  }
  if (send.scalar_type() != recv.scalar_type() || send.numel() != recv.numel())
    throw std::invalid_argument("send and recv buffers differ in dtype or length");
  const RedOp op = redop_from(op_code);
  MPI_Comm comm = comm_from(comm_handle);
  int rank = 0, size = 1;
  mpi_check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  const std::size_t n = static_cast<std::size_t>(recv.numel());
  const bool in_place = send.data_ptr() == recv.data_ptr();

  return dispatch_dtype_op(recv.scalar_type(), op, [&](auto tag, auto functor) {
    using T = typename decltype(tag)::type;
    using Op = decltype(functor);
    T* out = static_cast<T*>(recv.data_ptr());
    const T* in = static_cast<const T*>(send.data_ptr());
    if (impl == "mpi") {
      if (n > static_cast<std::size_t>(INT32_MAX))
        throw std::invalid_argument("impl mpi: more than 2^31-1 elements in one MPI_Allreduce");
      MPI_Op mop = mpi_builtin_op(op);
      if (!mpi_has_type<T>())
        mpi_check(MPI_Op_create(&mpi_user_reduce<T, Op>, 1, &mop), "MPI_Op_create");
      const void* sbuf = in_place ? MPI_IN_PLACE : static_cast<const void*>(in);
      at::Tensor times = time_iterations(comm, iters, [&] {
        mpi_check(MPI_Allreduce(sbuf, out, static_cast<int>(n), mpi_type<T>(), mop, comm),
                  "MPI_Allreduce");
      });
      if (!mpi_has_type<T>()) mpi_check(MPI_Op_free(&mop), "MPI_Op_free");
      return times;
    }
    MpiTransport transport(comm);
    HostReducer<T, Op> reducer;
    auto copy_in = [&] {
      if (!in_place && n > 0) std::memcpy(out, in, n * sizeof(T));
    };
    if (impl == "ring") {
      const RingSchedule sched{rank, size};
      std::vector<T> tmp(ring_scratch_elems<T>(n, size));
      return time_iterations(comm, iters, [&] {
        copy_in();
        ring_allreduce(transport, reducer, sched, out, tmp.data(), n);
      });
    }
    if (impl == "tree") {
      if (chunk_bytes < static_cast<int64_t>(sizeof(T)))
        throw std::invalid_argument("tree chunk must hold at least one element");
      const std::size_t chunk = TreeSchedule::chunk_for(static_cast<std::size_t>(chunk_bytes), sizeof(T), n);
      const TreeSchedule sched{rank, size, chunk};
      std::vector<T> tmp(tree_scratch_elems<T>(chunk));
      return time_iterations(comm, iters, [&] {
        copy_in();
        tree_allreduce(transport, reducer, sched, out, tmp.data(), n);
      });
    }
    throw std::invalid_argument("unknown native all-reduce impl '" + impl + "'");
  });
}

// One side of a point-to-point test: a two-rank communicator and the message buffer.
struct PairSide {
  MPI_Comm comm;
  int rank;
  char* p;
  int len;
};

PairSide pair_side(at::Tensor& buf, int64_t bytes, int64_t comm_handle) {
  require_host_contiguous(buf, "buffer");
  PairSide s{comm_from(comm_handle), 0, static_cast<char*>(buf.data_ptr()), static_cast<int>(bytes)};
  mpi_check(MPI_Comm_rank(s.comm, &s.rank), "MPI_Comm_rank");
  return s;
}

// Ping-pong between the two ranks of a two-rank communicator: rank 0 sends, rank 1 echoes. The time
// of an iteration is half the round trip as seen by rank 0 (rank 1 reports zero, so the maximum
// over ranks is rank 0's). No barrier between iterations: the exchange itself keeps lock step.
at::Tensor pingpong_times(at::Tensor buf, int64_t bytes, int64_t iters, int64_t comm_handle) {
  const auto [comm, rank, p, len] = pair_side(buf, bytes, comm_handle);
  at::Tensor out = at::zeros({iters}, at::kDouble);
  double* t = out.data_ptr<double>();
  {
    pybind11::gil_scoped_release no_gil;
    mpi_check(MPI_Barrier(comm), "MPI_Barrier");
    for (int64_t i = 0; i < iters; ++i) {
      if (rank == 0) {
        const auto t0 = Clock::now();
        mpi_check(MPI_Send(p, len, MPI_BYTE, 1, 1, comm), "MPI_Send");
        mpi_check(MPI_Recv(p, len, MPI_BYTE, 1, 1, comm, MPI_STATUS_IGNORE), "MPI_Recv");
        t[i] = std::chrono::duration<double>(Clock::now() - t0).count() / 2;
      } else {
        mpi_check(MPI_Recv(p, len, MPI_BYTE, 0, 1, comm, MPI_STATUS_IGNORE), "MPI_Recv");
        mpi_check(MPI_Send(p, len, MPI_BYTE, 0, 1, comm), "MPI_Send");
      }
    }
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, t, static_cast<int>(iters), MPI_DOUBLE, MPI_MAX, comm),
              "MPI_Allreduce");
  }
  return out;
}

// Windowed unidirectional bandwidth: rank 0 posts `window` sends of `bytes`, rank 1 receives them
// and answers with a 4-byte ack. The time of an iteration is the whole window, as seen by rank 0.
at::Tensor bandwidth_times(at::Tensor buf, int64_t bytes, int64_t window, int64_t iters,
                           int64_t comm_handle) {
  const auto [comm, rank, p, len] = pair_side(buf, bytes, comm_handle);
  std::vector<MPI_Request> reqs(static_cast<std::size_t>(window));
  int ack = 0;
  return time_iterations(comm, iters, [&] {
    for (int64_t w = 0; w < window; ++w) {
      if (rank == 0)
        mpi_check(MPI_Isend(p, len, MPI_BYTE, 1, 2, comm, &reqs[w]), "MPI_Isend");
      else
        mpi_check(MPI_Irecv(p, len, MPI_BYTE, 0, 2, comm, &reqs[w]), "MPI_Irecv");
    }
    mpi_check(MPI_Waitall(static_cast<int>(window), reqs.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    if (rank == 0)
      mpi_check(MPI_Recv(&ack, 1, MPI_INT, 1, 3, comm, MPI_STATUS_IGNORE), "MPI_Recv");
    else
      mpi_check(MPI_Send(&ack, 1, MPI_INT, 0, 3, comm), "MPI_Send");
  });
}

// Fills t with rank's share of the exact-reduction pattern (pattern.h).
void fill_pattern(at::Tensor t, int64_t op_code, int64_t rank, int64_t nranks) {
  require_host_contiguous(t, "tensor");
  const RedOp op = redop_from(op_code);
  const int r = static_cast<int>(rank), p = static_cast<int>(nranks);
  dispatch_dtype(t.scalar_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* d = static_cast<T*>(t.data_ptr());
    const std::size_t n = static_cast<std::size_t>(t.numel()), period = pattern_period(op, p);
    std::vector<T> table(period);
    for (std::size_t j = 0; j < period; ++j) table[j] = static_cast<T>(pattern_value(op, j, r, p));
    for (std::size_t base = 0; base < n; base += period)
      std::memcpy(d + base, table.data(), std::min(period, n - base) * sizeof(T));
    return 0;
  });
}

// Number of elements of t that differ from the exact reduction over nranks ranks.
int64_t count_wrong(at::Tensor t, int64_t op_code, int64_t nranks) {
  require_host_contiguous(t, "tensor");
  const RedOp op = redop_from(op_code);
  const int p = static_cast<int>(nranks);
  return dispatch_dtype(t.scalar_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* d = static_cast<const T*>(t.data_ptr());
    const std::size_t n = static_cast<std::size_t>(t.numel()), period = pattern_period(op, p);
    std::vector<double> expected(period);
    for (std::size_t j = 0; j < period; ++j) expected[j] = pattern_expected(op, j, p);
    int64_t wrong = 0;
    for (std::size_t base = 0; base < n; base += period) {
      const std::size_t m = std::min(period, n - base);
      for (std::size_t j = 0; j < m; ++j)
        wrong += static_cast<double>(d[base + j]) != expected[j] ? 1 : 0;
    }
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

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace commbench;
  m.doc() = "commbench host timed loops over MPI";
  m.def("allreduce_times", &allreduce_times, "per-iteration all-reduce times (max over ranks)",
        py::arg("impl"), py::arg("send"), py::arg("recv"), py::arg("op"), py::arg("iters"),
        py::arg("comm"), py::arg("chunk_bytes"));
  m.def("pingpong_times", &pingpong_times, py::arg("buf"), py::arg("bytes"), py::arg("iters"),
        py::arg("comm"));
  m.def("bandwidth_times", &bandwidth_times, py::arg("buf"), py::arg("bytes"), py::arg("window"),
        py::arg("iters"), py::arg("comm"));
  m.def("fill_pattern", &fill_pattern, py::arg("tensor"), py::arg("op"), py::arg("rank"),
        py::arg("nranks"));
  m.def("count_wrong", &count_wrong, py::arg("tensor"), py::arg("op"), py::arg("nranks"));
  m.def("clock_floor", &clock_floor);
  m.def("mpi_cuda_aware", &mpi_cuda_aware);
  m.def("mpi_library_version", &mpi_library_version);
}
