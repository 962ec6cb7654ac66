// Runs our algorithms (own_algorithms.h over the executors of collectives.h) -- the very code the
// CUDA path runs over NCCL -- for p ranks
// in one process, over a recording transport with NCCL's semantics:
//   - every call of a rank is queued on that rank's one stream and runs in order;
//   - calls between group() and end() form one group (a call outside a group is a group of one);
//   - a send from r to q and a receive at q from r pair up in posting order, and move data only
//     while both of their groups are at the head of their streams: a group completes only when
//     every peer's matching group has been posted;
//   - reductions and local copies are kernels on the stream, run when the stream reaches them.
// Each round moves every pair that can move; a round without progress is a deadlock.
//
//   nccl_semantics collectives COLL ALGO N CHUNK ROOT IN_PLACE P...
//       COLL of N elements (nccl-tests' size in elements) by our ALGO, each rank count's buffers,
//       inputs and expected outputs given on stdin from the registry (tests/test_device_schedules.py);
//       one JSON line per rank count: rounds, wrong elements, deadlock, the bytes the busiest rank
//       sends to others and receives from them, and the bytes on the busiest directed link; the root
//       is ROOT mod P
//   nccl_semantics alignment                       checks vec_split and align_like exhaustively
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "commbench/alignment.h"
#include "commbench/collectives.h"
#include "commbench/own_algorithms.h"
#include "commbench/pattern.h"
#include "commbench/reduce.h"
#include "commbench/schedule.h"

using namespace commbench;

namespace {

struct Transfer {
  bool send;
  int peer;
  char* ptr;
  std::size_t bytes;
  long seq;  // position among this rank's transfers with `peer` in this direction
  bool done = false;
};

struct Item {  // one entry of a stream: a group of transfers, or a kernel
  std::vector<Transfer> group;
  std::function<void()> kernel;
};

struct RankStream {
  std::vector<Item> items;
  std::size_t head = 0;
  std::size_t sent = 0;                    // bytes this rank sent to other ranks
  std::size_t received = 0;                // bytes it received from other ranks
  std::map<int, std::size_t> sent_to;     // ... per destination
  std::map<std::pair<int, bool>, long> posted;  // (peer, send) -> transfers posted so far
};

class RecordingTransport {
 public:
  struct Request {};
  static constexpr bool kStreamOrdered = true;
  struct Group {
    RecordingTransport* t;
    void end() { t->close(); }
  };

  explicit RecordingTransport(RankStream& s) : s_(s) {}

  Group group() {
    open();
    return Group{this};
  }
  void sendrecv(const void* sp, std::size_t sbytes, int dst, void* rp, std::size_t rbytes, int src) {
    open();
    isend(sp, sbytes, dst);
    irecv(rp, rbytes, src);
    close();
  }
  Request isend(const void* p, std::size_t bytes, int peer) {
    add(true, peer, const_cast<char*>(static_cast<const char*>(p)), bytes);
    return {};
  }
  Request irecv(void* p, std::size_t bytes, int peer) {
    add(false, peer, static_cast<char*>(p), bytes);
    return {};
  }
  void wait(Request&) {}
  void wait_all(std::vector<Request>&) {}

 private:
  void open() {
    if (depth_++ == 0) current_.clear();
  }
  void close() {
    // NCCL makes nothing of an empty group.
    if (--depth_ == 0 && !current_.empty()) s_.items.push_back(Item{current_, nullptr});
  }
  void add(bool send, int peer, char* p, std::size_t bytes) {
    Transfer t{send, peer, p, bytes, s_.posted[{peer, send}]++};
    if (depth_ == 0)
      s_.items.push_back(Item{{t}, nullptr});
    else
      current_.push_back(t);
  }
  RankStream& s_;
  int depth_ = 0;
  std::vector<Transfer> current_;
};

template <typename T>
struct RecordingReducer {
  RankStream& s;
  void operator()(T* dst, const T* src, std::size_t n) const {
    s.items.push_back(Item{{}, [dst, src, n] { reduce_into(dst, src, n, OpSum{}); }});
  }
};

// Runs the recorded streams; returns rounds, or -1 on deadlock (or a size mismatch, which NCCL
// would report as an error).
long run_streams(std::vector<RankStream>& ranks) {
  long rounds = 0;
  for (;;) {
    bool pending = false;
    for (RankStream& r : ranks) {
      while (r.head < r.items.size() && r.items[r.head].kernel) r.items[r.head++].kernel();
      pending = pending || r.head < r.items.size();
    }
    if (!pending) return rounds;
    bool moved = false;
    for (std::size_t me = 0; me < ranks.size(); ++me) {
      RankStream& r = ranks[me];
      if (r.head >= r.items.size()) continue;
      for (Transfer& t : r.items[r.head].group) {
        if (t.done || !t.send) continue;
        RankStream& q = ranks[static_cast<std::size_t>(t.peer)];
        if (q.head >= q.items.size() || q.items[q.head].kernel) continue;
        for (Transfer& u : q.items[q.head].group) {
          if (u.done || u.send || u.peer != static_cast<int>(me) || u.seq != t.seq) continue;
          if (u.bytes != t.bytes) return -1;
          std::memcpy(u.ptr, t.ptr, t.bytes);
          if (t.peer != static_cast<int>(me)) {
            r.sent += t.bytes;
            r.sent_to[t.peer] += t.bytes;
            q.received += t.bytes;
          }
          t.done = u.done = true;
          moved = true;
        }
      }
    }
    if (!moved) return -1;
    for (RankStream& r : ranks) {
      if (r.head >= r.items.size() || r.items[r.head].kernel) continue;
      bool all = true;
      for (const Transfer& t : r.items[r.head].group) all = all && t.done;
      if (all) ++r.head;
    }
    ++rounds;
  }
}

struct RecordingCopy {
  RankStream& s;
  template <typename T>
  void operator()(T* dst, const T* src, std::size_t n) const {
    s.items.push_back(Item{{}, [dst, src, n] { std::memmove(dst, src, n * sizeof(T)); }});
  }
};

// Elements [offset, offset + count) of a buffer hold pattern indices first, first + 1, ... of rank
// `source`'s values, or of their sum over all ranks (kReduced), or nothing defined (a negative other
// source: left as it was): commbench/collectives/base.py's Segment, from the registry.
constexpr int kReduced = -1;
struct Segment {
  std::size_t offset, count, first;
  int source;
};

// One rank's layout of a call, as the registry gives it on stdin: where send and receive lie in
// place, what its input holds and what its output must hold.
struct Layout {
  std::size_t send_at = 0, recv_at = 0;
  std::vector<Segment> inputs, expected;
};

std::vector<Segment> read_segments(std::istream& in) {
  std::size_t n = 0;
  in >> n;
  std::vector<Segment> segs(n);
  for (Segment& s : segs) in >> s.offset >> s.count >> s.first >> s.source;
  return segs;
}

// The value that the names of own_algorithms.h give `name`.
template <typename E, std::size_t N>
E named(const char* const (&names)[N], const std::string& name) {
  for (std::size_t i = 0; i < N; ++i)
    if (name == names[i]) return static_cast<E>(i);
  throw std::invalid_argument("unknown name '" + name + "'");
}

// For each rank count: `p send_n recv_n`, then per rank `send_at recv_at`, its input segments and its
// expected ones (read_segments), on stdin in the order of `sizes`.
int collectives(const std::string& name, const std::string& impl, std::size_t n, std::size_t chunk, int root_arg,
                bool in_place, const std::vector<int>& sizes) {
  using T = float;
  const Own own = own_algo(named<Collective>(kCollectiveNames, name), named<Algorithm>(kAlgorithmNames, impl));
  for (int p : sizes) {
    const int root = root_arg % p;
    int given = 0;
    std::size_t send_n = 0, recv_n = 0;
    std::cin >> given >> send_n >> recv_n;
    if (!std::cin || given != p) throw std::invalid_argument("no layout for " + std::to_string(p) + " ranks on stdin");
    std::vector<Layout> layouts(static_cast<std::size_t>(p));
    for (Layout& l : layouts) {
      std::cin >> l.send_at >> l.recv_at;
      l.inputs = read_segments(std::cin);
      l.expected = read_segments(std::cin);
    }
    std::vector<RankStream> streams(static_cast<std::size_t>(p));
    std::vector<std::vector<T>> whole(static_cast<std::size_t>(p)), recvs(static_cast<std::size_t>(p)),
        tmps(static_cast<std::size_t>(p));
    std::vector<T*> outs(static_cast<std::size_t>(p));
    for (int r = 0; r < p; ++r) {
      const Layout& l = layouts[static_cast<std::size_t>(r)];
      // In place, one buffer as nccl-tests places send and recv in it; else the send buffer.
      whole[r].assign(std::max(send_n, recv_n), T(-77));
      T* send = whole[r].data() + (in_place ? l.send_at : 0);
      for (const Segment& seg : l.inputs)
        for (std::size_t i = 0; i < seg.count; ++i)
          send[seg.offset + i] = static_cast<T>(pattern_value(RedOp::Sum, seg.first + i, seg.source, p));
      recvs[r].assign(recv_n, T(-77));
      outs[r] = in_place ? whole[r].data() + l.recv_at : recvs[r].data();
      const CallBuffers<T> b{send, outs[r], send_n, recv_n, in_place, r, p, root};
      const std::size_t tree_chunk = TreeSchedule::chunk_for(chunk * sizeof(T), sizeof(T), recv_n);
      tmps[r].resize(own_scratch_elems<T>(own, b, tree_chunk));
      RecordingTransport tr(streams[r]);
      RecordingReducer<T> red{streams[r]};
      RecordingCopy copy{streams[r]};
      own_call(own, tr, red, copy, b, tmps[r].data(), tree_chunk)();
    }
    const long rounds = run_streams(streams);
    // The busiest rank's bytes sent to others and received from them, and the busiest directed link's.
    std::size_t rank_max = 0, recv_max = 0, link_max = 0;
    for (const RankStream& st : streams) {
      rank_max = std::max(rank_max, st.sent);
      recv_max = std::max(recv_max, st.received);
      for (const auto& kv : st.sent_to) link_max = std::max(link_max, kv.second);
    }
    long wrong = 0;
    for (int r = 0; r < p && rounds >= 0; ++r)
      for (const Segment& seg : layouts[static_cast<std::size_t>(r)].expected) {
        if (seg.source < kReduced) continue;  // left as it was: NCCL's calls promise nothing here
        for (std::size_t i = 0; i < seg.count; ++i) {
          const double want = seg.source == kReduced ? pattern_expected(RedOp::Sum, seg.first + i, p)
                                                     : pattern_value(RedOp::Sum, seg.first + i, seg.source, p);
          wrong += outs[r][seg.offset + i] != want ? 1 : 0;
        }
      }
    std::printf("{\"collective\": \"%s\", \"algo\": \"%s\", \"ranks\": %d, \"n\": %zu, \"chunk\": %zu, \"rounds\": %ld, "
                "\"deadlock\": %s, \"wrong\": %ld, \"rank_bytes\": %zu, \"rank_recv_bytes\": %zu, \"link_bytes\": %zu}\n",
                name.c_str(), impl.c_str(), p, n, chunk, rounds, rounds < 0 ? "true" : "false", wrong, rank_max, recv_max,
                link_max);
  }
  return 0;
}

// Every way two buffers can be misaligned, for every element size the kernels use.
int alignment() {
  long failures = 0;
  auto fail = [&](const char* what, std::size_t e, std::size_t d, std::size_t s, std::size_t n) {
    if (++failures <= 10) std::printf("FAIL %s: elem %zu dst%%16 %zu src%%16 %zu n %zu\n", what, e, d, s, n);
  };
  for (std::size_t e : {1, 2, 4, 8}) {
    const std::size_t lanes = kVecBytes / e;
    for (std::size_t d = 0; d < kVecBytes; d += e)
      for (std::size_t s = 0; s < kVecBytes; s += e)
        for (std::size_t n = 0; n < 4 * lanes + 3; ++n) {
          const std::uintptr_t dst = 4096 + d, src = 8192 + s;
          const VecSplit sp = vec_split(dst, src, n, e);
          if (sp.head + sp.packs * lanes + sp.tail != n) fail("split does not cover n", e, d, s, n);
          if (sp.packs > 0 && ((dst + sp.head * e) % kVecBytes || (src + sp.head * e) % kVecBytes))
            fail("packs start misaligned", e, d, s, n);
          const std::size_t head = ((kVecBytes - d) % kVecBytes) / e;
          if (d == s && n >= head + lanes && (sp.packs != (n - head) / lanes || sp.head != head || sp.tail >= lanes))
            fail("equal misalignment not vectorised", e, d, s, n);
          if (d != s && sp.packs != 0) fail("unequal misalignment vectorised", e, d, s, n);
        }
    for (std::size_t base = 0; base < kVecBytes; base += e)
      for (std::size_t like = 0; like < kVecBytes; like += e) {
        alignas(16) static char slot[64];
        char* got = reinterpret_cast<char*>(align_like(reinterpret_cast<std::uint64_t*>(slot + base),
                                                       reinterpret_cast<const std::uint64_t*>(4096 + like)));
        const std::size_t shift = static_cast<std::size_t>(got - (slot + base));
        if (reinterpret_cast<std::uintptr_t>(got) % kVecBytes != like || shift >= kVecBytes || shift % e)
          fail("align_like", e, base, like, 0);
      }
  }
  std::printf("{\"failures\": %ld}\n", failures);
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "alignment") return alignment();
  if (mode == "collectives" && argc > 8) {
    std::vector<int> sizes;
    for (int i = 8; i < argc; ++i) sizes.push_back(std::atoi(argv[i]));
    return collectives(argv[2], argv[3], std::strtoull(argv[4], nullptr, 10), std::strtoull(argv[5], nullptr, 10),
                       std::atoi(argv[6]), std::atoi(argv[7]) != 0, sizes);
  }
  std::fprintf(stderr, "usage: nccl_semantics collectives COLL ALGO N CHUNK ROOT IN_PLACE P... | alignment\n");
  return 2;
}
