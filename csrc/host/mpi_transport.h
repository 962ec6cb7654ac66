// MPI point-to-point as a collectives.h transport. Messages are sent as bytes and split into pieces
// of at most 1 GiB, because MPI counts are C ints.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

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
