// MPI in commbench._host: its datatypes and reductions for our dtypes (library_calls.h), and its
// point-to-point as a collectives.h transport, where messages are sent as bytes and split into
// pieces of at most 1 GiB, because MPI counts are C ints.
#pragma once

#include <mpi.h>

#include <climits>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "commbench/reduce.h"

namespace commbench {

inline void mpi_check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  throw std::runtime_error(std::string(call) + " failed on rank " + std::to_string(rank) + ": " +
                           std::string(text, static_cast<std::size_t>(len)));
}

template <typename T> MPI_Datatype mpi_type() { return MPI_UINT16_T; }  // 16-bit floats
template <> inline MPI_Datatype mpi_type<float>() { return MPI_FLOAT; }
template <> inline MPI_Datatype mpi_type<double>() { return MPI_DOUBLE; }
template <> inline MPI_Datatype mpi_type<int32_t>() { return MPI_INT32_T; }
template <> inline MPI_Datatype mpi_type<int64_t>() { return MPI_INT64_T; }

// MPI has no 16-bit float types, so those reduce through a user-defined op that runs our functor.
template <typename T, typename Op>
void mpi_user_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_into(static_cast<T*>(inout), static_cast<const T*>(in), static_cast<std::size_t>(*len), Op{});
}

// The MPI_Op for (T, Op): a built-in one, or a user-defined one freed with this object.
template <typename T, typename Op>
class MpiOp {
 public:
  explicit MpiOp(RedOp op) {
    if (std::is_same<T, c10::Half>::value || std::is_same<T, c10::BFloat16>::value) {
      mpi_check(MPI_Op_create(&mpi_user_reduce<T, Op>, 1, &op_), "MPI_Op_create");
      user_ = true;
      return;
    }
    switch (op) {
      case RedOp::Prod: op_ = MPI_PROD; break;
      case RedOp::Max: op_ = MPI_MAX; break;
      case RedOp::Min: op_ = MPI_MIN; break;
      default: op_ = MPI_SUM;
    }
  }
  ~MpiOp() {
    if (user_) MPI_Op_free(&op_);
  }
  MPI_Op get() const { return op_; }
  MpiOp(const MpiOp&) = delete;
  MpiOp& operator=(const MpiOp&) = delete;

 private:
  MPI_Op op_ = MPI_OP_NULL;
  bool user_ = false;
};

inline int mpi_count(std::size_t n) {
  if (n > static_cast<std::size_t>(INT_MAX))
    throw std::invalid_argument("impl mpi: more than 2^31-1 elements in one MPI call");
  return static_cast<int>(n);
}

class MpiTransport {
 public:
  // One message may need several MPI requests when it is split into pieces.
  using Request = std::vector<MPI_Request>;
  static constexpr std::size_t kPiece = std::size_t{1} << 30;
  static constexpr bool kStreamOrdered = false;

  // MPI requests progress independently of each other, so a group needs no call.
  struct Group {
    void end() {}
  };

  explicit MpiTransport(MPI_Comm comm) : comm_(comm) {}

  Group group() { return {}; }

  void sendrecv(const void* s, std::size_t sbytes, int dst, void* r, std::size_t rbytes, int src) {
    const char* sp = static_cast<const char*>(s);
    char* rp = static_cast<char*>(r);
    // Both sides split the same message lengths identically, so the pieces pair up.
    std::size_t so = 0, ro = 0;
    do {
      const int sn = static_cast<int>(piece(sbytes, so)), rn = static_cast<int>(piece(rbytes, ro));
      mpi_check(MPI_Sendrecv(sp + so, sn, MPI_BYTE, dst, kTag, rp + ro, rn, MPI_BYTE, src, kTag,
                             comm_, MPI_STATUS_IGNORE),
                "MPI_Sendrecv");
      so += static_cast<std::size_t>(sn);
      ro += static_cast<std::size_t>(rn);
    } while (so < sbytes || ro < rbytes);
  }

  Request isend(const void* p, std::size_t bytes, int peer) {
    return in_pieces(bytes, [&](std::size_t off, int len, MPI_Request* req) {
      mpi_check(MPI_Isend(static_cast<const char*>(p) + off, len, MPI_BYTE, peer, kTag, comm_, req), "MPI_Isend");
    });
  }

  Request irecv(void* p, std::size_t bytes, int peer) {
    return in_pieces(bytes, [&](std::size_t off, int len, MPI_Request* req) {
      mpi_check(MPI_Irecv(static_cast<char*>(p) + off, len, MPI_BYTE, peer, kTag, comm_, req), "MPI_Irecv");
    });
  }

  void wait(Request& req) {
    if (req.empty()) return;
    mpi_check(MPI_Waitall(static_cast<int>(req.size()), req.data(), MPI_STATUSES_IGNORE),
              "MPI_Waitall");
    req.clear();
  }

  void wait_all(std::vector<Request>& reqs) {
    for (Request& r : reqs) wait(r);
  }

 private:
  static constexpr int kTag = 7711;
  static std::size_t piece(std::size_t total, std::size_t offset) {
    const std::size_t left = total > offset ? total - offset : 0;
    return left < kPiece ? left : kPiece;
  }
  // post(offset, length, &request) for each piece of a message of `bytes`; one empty piece for an
  // empty message, which MPI still has to match.
  template <typename Post>
  static Request in_pieces(std::size_t bytes, Post&& post) {
    Request req;
    std::size_t off = 0;
    do {
      const int len = static_cast<int>(piece(bytes, off));
      req.emplace_back();
      post(off, len, &req.back());
      off += static_cast<std::size_t>(len);
    } while (off < bytes);
    return req;
  }
  MPI_Comm comm_;
};

}  // namespace commbench
