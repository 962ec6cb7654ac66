// The emulated NCCL (see include/nccl.h). A communicator is a shared-memory segment named by its
// unique id: one slot per rank (who it is, its votes in ncclCommSplit) and a byte ring per ordered
// rank pair. A group becomes one piece of work on its stream, which moves every message of the group
// through the rings at once, as NCCL progresses a group's operations together, so a group completes
// only once its peers' matching groups run. Collectives are their messages plus a local step (the
// reduction in rank order, the same on every rank). Faults are injected with
// COMMBENCH_EMU_NCCL_FAULT=KIND:RANK[:GROUP] (KIND stall, error, init-stall or destroy-error); with
// COMMBENCH_EMU_NCCL_LOG=FILE every communicator made is logged there (how, rank, ranks); with
// COMMBENCH_EMU_NCCL_CHANNEL_GBPS=RATE a point-to-point flow between hosts is held to its channels per
// peer times RATE (hold_to_channel_rate). Each
// collective's algorithm, protocol and channels are chosen by choose() (NCCL_ALGO and NCCL_PROTO as
// each communicator's initialisation found them) and reported to a profiler plugin
// (NCCL_PROFILER_PLUGIN) through NCCL's own version 5 interface.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "emu.h"
#include <nccl.h>

namespace {

constexpr std::size_t kRing = 256 << 10;
constexpr int kMaxRanks = 64;
constexpr int kVotes = 8;  // ncclCommSplit rounds a rank can see at once: one ahead is the most

struct alignas(64) Ring {
  std::atomic<uint64_t> head;  // bytes written, by the sender
  char pad[56];
  std::atomic<uint64_t> tail;  // bytes read, by the receiver
  char pad2[56];
  char data[kRing];
};

struct Slot {
  char host[128];
  int physical;
  std::atomic<uint64_t> vote_round[kVotes];
  int color[kVotes], key[kVotes];
};

struct Shared {
  std::atomic<int> arrived, mapped;
  Slot slots[kMaxRanks];
};

std::size_t rings_offset() { return (sizeof(Shared) + 63) / 64 * 64; }
std::size_t segment_bytes(int n) { return rings_offset() + sizeof(Ring) * n * n; }

std::mutex error_mu;
std::string last_error;

// As NCCL does, every error is also a WARN line of its log where NCCL_DEBUG asks for WARN or more
// (its format: "host:pid:tid NCCL WARN text"), in NCCL_DEBUG_FILE or on stdout.
void log_warning(const std::string& text) {
  const char* level = std::getenv("NCCL_DEBUG");
  if (!level || (strcasecmp(level, "WARN") != 0 && strcasecmp(level, "INFO") != 0 && strcasecmp(level, "TRACE") != 0))
    return;
  const char* path = std::getenv("NCCL_DEBUG_FILE");
  FILE* f = path ? std::fopen(path, "a") : stdout;
  if (!f) return;
  std::fprintf(f, "%s:%d:%d NCCL WARN %s\n", emu::host_name().c_str(), getpid(), static_cast<int>(gettid()),
               text.c_str());
  if (path) std::fclose(f);
}

ncclResult_t error(ncclResult_t rc, const std::string& text) {
  log_warning(text);
  std::lock_guard<std::mutex> l(error_mu);
  last_error = text;
  return rc;
}

struct Fault {
  std::string kind;
  int rank = -1;
  uint64_t group = 1;
};

Fault fault() {
  Fault f;
  const char* v = std::getenv("COMMBENCH_EMU_NCCL_FAULT");
  if (!v) return f;
  char kind[32] = {0};
  unsigned long long group = 1;
  if (std::sscanf(v, "%31[a-z-]:%d:%llu", kind, &f.rank, &group) >= 2) {
    f.kind = kind;
    f.group = group;
  }
  return f;
}

struct Comm {
  std::string name;
  int rank = 0, nranks = 0, device = 0;
  bool blocking = true;
  Shared* shared = nullptr;
  std::atomic<bool> aborted{false}, ready{false}, enqueue_reported{true}, connected{false};
  bool aggregate_connected = false;  // connect_aggregate() ran
  std::atomic<int> graph_holds{0};
  std::atomic<int> async{ncclSuccess};
  uint64_t split_round = 0;
  uint64_t groups_run = 0;  // by the stream's worker
  std::thread init_thread, split_thread;
  // A split's new communicator, while it is made: its parent's abort ends its initialisation too.
  const std::atomic<bool>* parent_aborted = nullptr;
  // NCCL_ALGO and NCCL_PROTO as the environment held them when it was made (NCCL reads them in each
  // communicator's initialisation, splits included): the names they allow, none for NCCL's choice.
  std::set<std::string> algos, protos;
  std::string algo_env, proto_env;
  void* profiler = nullptr;  // the profiler plugin's context for it
  uint64_t collectives = 0;  // its collectives so far: the profiler's sequence numbers
  int p2p_per_peer = 0;  // the channels of each point-to-point peer (p2p_channels_per_peer), on its first call

  bool aborting() const { return aborted || (parent_aborted && *parent_aborted); }

  Ring& ring(int from, int to) {
    return reinterpret_cast<Ring*>(reinterpret_cast<char*>(shared) + rings_offset())[from * nranks + to];
  }
  ~Comm() {
    if (init_thread.joinable()) init_thread.join();
    if (split_thread.joinable()) split_thread.join();
    if (shared) munmap(shared, segment_bytes(nranks));
  }
};

}  // namespace

struct ncclComm {
  std::shared_ptr<Comm> impl;
};

namespace {

std::size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
  }
  return 0;
}

template <typename T>
void combine(T* dst, const T* src, std::size_t n, ncclRedOp_t op) {
  for (std::size_t i = 0; i < n; ++i) {
    const T a = dst[i], b = src[i];
    switch (op) {
      case ncclSum: dst[i] = static_cast<T>(a + b); break;
      case ncclProd: dst[i] = static_cast<T>(a * b); break;
      case ncclMax: dst[i] = a < b ? b : a; break;
      default: dst[i] = b < a ? b : a; break;
    }
  }
}

void reduce_into(void* dst, const void* src, std::size_t n, ncclDataType_t t, ncclRedOp_t op) {
  switch (t) {
    case ncclInt8: return combine(static_cast<int8_t*>(dst), static_cast<const int8_t*>(src), n, op);
    case ncclUint8: return combine(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), n, op);
    case ncclInt32: return combine(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src), n, op);
    case ncclUint32: return combine(static_cast<uint32_t*>(dst), static_cast<const uint32_t*>(src), n, op);
    case ncclInt64: return combine(static_cast<int64_t*>(dst), static_cast<const int64_t*>(src), n, op);
    case ncclUint64: return combine(static_cast<uint64_t*>(dst), static_cast<const uint64_t*>(src), n, op);
    case ncclFloat16: return combine(static_cast<c10::Half*>(dst), static_cast<const c10::Half*>(src), n, op);
    case ncclBfloat16: return combine(static_cast<c10::BFloat16*>(dst), static_cast<const c10::BFloat16*>(src), n, op);
    case ncclFloat32: return combine(static_cast<float*>(dst), static_cast<const float*>(src), n, op);
    case ncclFloat64: return combine(static_cast<double*>(dst), static_cast<const double*>(src), n, op);
  }
}

// One message of a group: from device memory (`device`) or from the group's host scratch (offset
// `scratch`), to or from `peer`. A receive reads the sender's length first and refuses a mismatch.
struct Message {
  bool send;
  int peer;
  char* device;
  std::size_t scratch;
  std::size_t bytes;
};

// One call of a group: its messages, and what it does locally before and after them with the
// scratch it asks for.
struct Call {
  bool collective = true;  // not ncclSend or ncclRecv
  std::shared_ptr<Comm> comm;
  std::vector<Message> messages;
  std::size_t scratch_bytes = 0;
  std::function<void(char*)> before, after;
};

// A message on its way. A send is finished only once the receiver took all of it, so that a group
// completes only when the peers' matching groups run, whatever room the ring has.
struct Progress {
  Message m;
  Comm* comm;
  char* at;
  bool header_done = false;
  std::size_t done = 0;
  uint64_t end = 0;  // a send: the ring position after its last byte
  bool moved_all() const { return header_done && done == m.bytes; }
};

std::size_t push(Ring& r, const char* src, std::size_t n) {
  const uint64_t head = r.head.load(std::memory_order_relaxed);
  const std::size_t room = kRing - static_cast<std::size_t>(head - r.tail.load(std::memory_order_acquire));
  const std::size_t k = std::min(n, room);
  const std::size_t at = head % kRing, first = std::min(k, kRing - at);
  std::memcpy(r.data + at, src, first);
  std::memcpy(r.data, src + first, k - first);
  r.head.store(head + k, std::memory_order_release);
  return k;
}

std::size_t pull(Ring& r, char* dst, std::size_t n) {
  const uint64_t tail = r.tail.load(std::memory_order_relaxed);
  const std::size_t ready = static_cast<std::size_t>(r.head.load(std::memory_order_acquire) - tail);
  const std::size_t k = std::min(n, ready);
  const std::size_t at = tail % kRing, first = std::min(k, kRing - at);
  std::memcpy(dst, r.data + at, first);
  std::memcpy(dst + first, r.data, k - first);
  r.tail.store(tail + k, std::memory_order_release);
  return k;
}

std::size_t available(Ring& r) {
  return static_cast<std::size_t>(r.head.load(std::memory_order_acquire) - r.tail.load(std::memory_order_relaxed));
}

std::size_t room(Ring& r) {
  return kRing - static_cast<std::size_t>(r.head.load(std::memory_order_relaxed) - r.tail.load(std::memory_order_acquire));
}

// Moves what it can of one message; whether anything moved. A length that differs from the
// receiver's sets the communicator's asynchronous error.
bool step(Progress& p) {
  Comm& c = *p.comm;
  Ring& r = p.m.send ? c.ring(c.rank, p.m.peer) : c.ring(p.m.peer, c.rank);
  bool moved = false;
  if (!p.header_done) {
    const uint64_t len = p.m.bytes;
    if (p.m.send) {
      if (room(r) < sizeof(len)) return false;
      push(r, reinterpret_cast<const char*>(&len), sizeof(len));
    } else {
      if (available(r) < sizeof(len)) return false;
      uint64_t sent = 0;
      pull(r, reinterpret_cast<char*>(&sent), sizeof(sent));
      if (sent != len) {
        c.async = error(ncclInvalidUsage, "rank " + std::to_string(p.m.peer) + " sent " + std::to_string(sent) +
                                              " bytes where rank " + std::to_string(c.rank) + " receives " +
                                              std::to_string(len) + " (mismatched point-to-point calls)");
        return false;
      }
    }
    p.header_done = moved = true;
  }
  if (p.done < p.m.bytes) {
    const std::size_t k = p.m.send ? push(r, p.at + p.done, p.m.bytes - p.done) : pull(r, p.at + p.done, p.m.bytes - p.done);
    p.done += k;
    moved = moved || k > 0;
  }
  if (p.m.send && p.moved_all() && !p.end) p.end = r.head.load(std::memory_order_relaxed);
  return moved;
}

bool finished(Progress& p) {
  if (!p.moved_all()) return false;
  if (!p.m.send) return true;
  Ring& r = p.comm->ring(p.comm->rank, p.m.peer);
  return r.tail.load(std::memory_order_acquire) >= p.end;
}

// COMMBENCH_EMU_NCCL_CHANNEL_GBPS=RATE: a point-to-point message to or from another host runs at no more
// than the communicator's channels per peer times RATE GB/s, as a real flow carries only the channels
// NCCL gives it: the group ends no earlier than its largest bytes of one peer and way allow.
void hold_to_channel_rate(const std::vector<Call>& calls, std::chrono::steady_clock::time_point started) {
  static const char* v = std::getenv("COMMBENCH_EMU_NCCL_CHANNEL_GBPS");
  if (!v || std::atof(v) <= 0) return;
  std::map<std::tuple<Comm*, bool, int>, double> bytes;
  for (const Call& call : calls) {
    if (call.collective) continue;
    Comm& c = *call.comm;
    for (const Message& m : call.messages)
      if (std::strcmp(c.shared->slots[c.rank].host, c.shared->slots[m.peer].host) != 0)
        bytes[std::make_tuple(&c, m.send, m.peer)] += static_cast<double>(m.bytes);
  }
  double seconds = 0;
  for (auto& [key, n] : bytes) seconds = std::max(seconds, n / (std::max(1, std::get<0>(key)->p2p_per_peer) * std::atof(v) * 1e9));
  std::this_thread::sleep_until(started + std::chrono::duration<double>(seconds));
}

// Runs one group's calls on the stream's worker: all their messages together, then each call's local
// step. Re-run as is by every launch of a graph that captured it.
// COMMBENCH_EMU_NCCL_GROUP_US=US: each group of calls takes at least US microseconds on its stream (the
// device's time), a known cost that a timing of the calls, graph replays included, must enclose.
void hold_the_stream(std::chrono::steady_clock::time_point started) {
  static const char* v = std::getenv("COMMBENCH_EMU_NCCL_GROUP_US");
  if (v && std::atof(v) > 0) std::this_thread::sleep_until(started + std::chrono::duration<double, std::micro>(std::atof(v)));
}

void run_group(const std::vector<Call>& calls) {
  static const Fault injected = fault();
  for (const Call& call : calls) {
    Comm& c = *call.comm;
    if (c.aborted || c.async != ncclSuccess) return;
    ++c.groups_run;
    if (c.nranks > 1 && c.rank == injected.rank && c.groups_run == injected.group) {
      if (injected.kind == "error") {
        // As NCCL warns of a cause and its remedy before the failure it returns (its last error).
        log_warning("the injected fault's cause, on rank " + std::to_string(c.rank) +
                    " (set COMMBENCH_EMU_NCCL_FAULT= to disable it)");
        c.async = error(ncclSystemError, "injected failure (COMMBENCH_EMU_NCCL_FAULT) on rank " + std::to_string(c.rank));
        return;
      }
      if (injected.kind == "stall") {
        unsigned rounds = 0;
        while (!c.aborted) emu::idle(rounds);
        return;
      }
    }
  }
  std::vector<std::vector<char>> scratch(calls.size());
  std::vector<Progress> work;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    scratch[i].resize(calls[i].scratch_bytes);
    if (calls[i].before) calls[i].before(scratch[i].data());
    for (const Message& m : calls[i].messages)
      work.push_back({m, calls[i].comm.get(), m.device ? m.device : scratch[i].data() + m.scratch});
  }
  const auto started = std::chrono::steady_clock::now();
  unsigned rounds = 0;
  for (;;) {
    bool all = true, moved = false;
    // Messages between the same two ranks in the same direction go in the order they were posted.
    std::map<std::tuple<Comm*, bool, int>, bool> busy;
    for (Progress& p : work) {
      if (finished(p)) continue;
      all = false;
      if (!busy.emplace(std::make_tuple(p.comm, p.m.send, p.m.peer), true).second) continue;
      if (!p.moved_all()) moved = step(p) || moved;
      if (p.comm->aborted || p.comm->async != ncclSuccess) return;
    }
    if (all) break;
    if (moved)
      rounds = 0;
    else
      emu::idle(rounds);
  }
  hold_to_channel_rate(calls, started);
  hold_the_stream(started);
  for (std::size_t i = 0; i < calls.size(); ++i)
    if (calls[i].after) calls[i].after(scratch[i].data());
}

// What a graph that captured a group keeps alive: its communicators' count of graphs holding them,
// which ncclCommAbort waits on.
struct GraphHold {
  std::vector<std::shared_ptr<Comm>> comms;
  void add(const std::shared_ptr<Comm>& c) {
    ++c->graph_holds;
    comms.push_back(c);
  }
  ~GraphHold() {
    for (auto& c : comms) --c->graph_holds;
  }
};

struct Pending {
  cudaStream_t stream;
  Call call;
};
thread_local int group_depth = 0;
thread_local std::vector<Pending> pending;

// COMMBENCH_EMU_NCCL_CONNECT_S=SECONDS: NCCL chooses a collective's algorithm by the bytes of its
// whole group and connects an algorithm on its first use, on the host, inside the call (run-time
// connect, NCCL's default since 2.22): a group of several collectives (nccl-tests' -m, --agg) may need
// one the single calls did not. Here the first such group of a communicator spends SECONDS on the host
// before it is enqueued; behind a held stream, more than the gate's 2 s expire the gate.
void connect_aggregate(const std::vector<Pending>& items) {
  const char* v = std::getenv("COMMBENCH_EMU_NCCL_CONNECT_S");
  if (!v) return;
  std::map<Comm*, int> collectives;
  for (const Pending& p : items)
    if (p.call.collective) ++collectives[p.call.comm.get()];
  for (auto& [comm, n] : collectives)
    if (n > 1 && !comm->aggregate_connected) {
      comm->aggregate_connected = true;
      std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(v)));
    }
}

// COMMBENCH_EMU_NCCL_ENQUEUE_US=RANK:US: each group that rank RANK of a communicator enqueues costs its
// host US more (a rank whose host is slower to enqueue than its peers').
void slow_enqueue(const std::vector<Pending>& items) {
  const char* v = std::getenv("COMMBENCH_EMU_NCCL_ENQUEUE_US");
  int rank = -1;
  long us = 0;
  if (!v || std::sscanf(v, "%d:%ld", &rank, &us) != 2 || items.empty() || items.front().call.comm->rank != rank) return;
  std::this_thread::sleep_for(std::chrono::microseconds(us));
}

void report_group();

ncclResult_t flush() {
  report_group();
  std::vector<Pending> items;
  items.swap(pending);
  connect_aggregate(items);
  slow_enqueue(items);
  std::vector<cudaStream_t> streams;
  std::vector<std::shared_ptr<Comm>> nonblocking;
  for (const Pending& p : items) {
    if (std::find(streams.begin(), streams.end(), p.stream) == streams.end()) streams.push_back(p.stream);
    if (!p.call.comm->blocking) nonblocking.push_back(p.call.comm);
  }
  for (cudaStream_t s : streams) {
    std::vector<Call> calls;
    auto hold = std::make_shared<GraphHold>();
    for (Pending& p : items)
      if (p.stream == s) {
        hold->add(p.call.comm);
        calls.push_back(std::move(p.call));
      }
    if (emu::enqueue(s, [calls = std::move(calls)] { run_group(calls); }, hold) != cudaSuccess)
      return error(ncclUnhandledCudaError, "cannot enqueue on the stream: " + std::string(cudaGetErrorString(cudaGetLastError())));
  }
  // A non-blocking communicator's group may still be enqueuing when ncclGroupEnd returns; the caller
  // polls ncclCommGetAsyncError until it is no longer ncclInProgress.
  if (!nonblocking.empty()) {
    for (auto& c : nonblocking) c->enqueue_reported = false;
    return ncclInProgress;
  }
  return ncclSuccess;
}

// COMMBENCH_EMU_NCCL_LOG: a line per communicator made ("init" or "split"), per communicator's first
// call ("call") and per communicator ended ("destroy" or "abort"): how, pid, rank, ranks and whether
// the communicator is blocking.
void log_comm(const char* how, int rank, int nranks, bool blocking) {
  const char* path = std::getenv("COMMBENCH_EMU_NCCL_LOG");
  if (!path) return;
  const int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return;
  char line[96];
  const int n = std::snprintf(line, sizeof(line), "%s %d %d %d %s\n", how, static_cast<int>(getpid()), rank, nranks,
                              blocking ? "blocking" : "nonblocking");
  [[maybe_unused]] const ssize_t written = write(fd, line, static_cast<std::size_t>(n));
  close(fd);
}

// COMMBENCH_EMU_NCCL_CALLS: the name of each of NCCL's calls the first time this process makes it, so
// that a test sees which of NCCL's calls an impl runs.
void note_call(const char* name) {
  static std::mutex lock;
  static std::vector<std::string> seen;
  const char* path = std::getenv("COMMBENCH_EMU_NCCL_CALLS");
  if (!path) return;
  std::lock_guard<std::mutex> hold(lock);
  if (std::find(seen.begin(), seen.end(), name) != seen.end()) return;
  seen.emplace_back(name);
  const int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return;
  const std::string line = std::string(name) + "\n";
  [[maybe_unused]] const ssize_t written = write(fd, line.data(), line.size());
  close(fd);
}

// With NCCL_DEBUG=INFO, the lines NCCL logs for each connection it makes, here one per peer, to
// NCCL_DEBUG_FILE (NCCL's %h and %p in it are not expanded), on the communicator's first call: NCCL
// connects at run time (its default since 2.22), so a communicator that makes no call logs none. In
// NCCL's own formats (2.28, src/transport/shm.cc and net.cc): a peer on the same host by shared memory,
// "Channel 00 : 0[0] -> 1[1] via SHM/direct/direct" (no connection index), a peer on another host
// (or every peer where NCCL_SHM_DISABLE=1) by the network, logged by both ends: "Channel 00/0 : 0[0] ->
// 1[1] [send] via NET/Socket/0" on the sender and the same connection's "[receive]" line on the receiver.
// NCCL 2.29-2.30's channels to each point-to-point peer (graph/paths.cc ncclTopoComputeP2pChannels):
// one count for every peer of the communicator; on one host all kP2pChannels; across hosts
// NCCL_NCHANNELS_PER_NET_PEER (rounded up to a power of two) where set, else 4 (what one 400G NIC
// needs at 14 GB/s a channel), halved while it times the host count exceeds kP2pChannels.
constexpr int kCollChannels = 8, kP2pChannels = 8;

int p2p_channels_per_peer(const Comm& c) {
  std::set<std::string> hosts;
  for (int r = 0; r < c.nranks; ++r) hosts.insert(c.shared->slots[r].host);
  const int nodes = static_cast<int>(hosts.size());
  if (nodes <= 1) return kP2pChannels;
  if (const char* v = std::getenv("NCCL_NCHANNELS_PER_NET_PEER"); v && std::atoi(v) > 0) {
    int n = 1;
    while (n < std::atoi(v)) n *= 2;
    return std::min(n, kP2pChannels);
  }
  int per_peer = 4;
  while (per_peer > 1 && per_peer * nodes > kP2pChannels) per_peer /= 2;
  return per_peer;
}

// The host's network interfaces as NCCL's socket transport lists them ("[0]eth0:10.0.0.1<0>"): IPv4,
// up, not loopback, in the kernel's order.
std::vector<std::string> net_devices() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || std::strcmp(a->ifa_name, "lo") == 0) continue;
    char addr[INET_ADDRSTRLEN] = "";
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, addr, sizeof(addr));
    out.push_back(std::string(a->ifa_name) + ":" + addr + "<0>");
  }
  freeifaddrs(list);
  return out;
}

// NCCL's INIT lines of its network devices (2.28, misc/socket.cc and transport/net_socket.cc) and its
// channel counts (2.27-2.30, src/init.cc), and the lines of each connection: GPU i's connections go
// through device i of the list (modulo its length), as a rail-per-GPU node's do.
void log_connections(const Comm& c) {
  const char* level = std::getenv("NCCL_DEBUG");
  const char* path = std::getenv("NCCL_DEBUG_FILE");
  if (!level || strcasecmp(level, "INFO") != 0) return;
  FILE* f = path ? std::fopen(path, "a") : stdout;
  if (!f) return;
  const char* shm_off = std::getenv("NCCL_SHM_DISABLE");
  const bool shm = !(shm_off && std::strcmp(shm_off, "1") == 0);
  const std::string prefix = emu::host_name() + ":" + std::to_string(getpid()) + ":" + std::to_string(gettid()) +
                             " [" + std::to_string(c.device) + "] NCCL INFO Channel 00";
  const int me = c.shared->slots[c.rank].physical;
  const std::vector<std::string> devices = net_devices();
  std::string using_line;
  for (std::size_t i = 0; i < devices.size(); ++i) using_line += " [" + std::to_string(i) + "]" + devices[i];
  if (!devices.empty())
    std::fprintf(f, "%s:%d:%d [%d] NCCL INFO NET/Socket : Using%s\n", emu::host_name().c_str(), static_cast<int>(getpid()),
                 static_cast<int>(gettid()), c.device, using_line.c_str());
  const int net = devices.empty() ? 0 : c.device % static_cast<int>(devices.size());
  std::fprintf(f, "%s:%d:%d [%d] NCCL INFO %d coll channels, %d collnet channels, 0 nvls channels, %d p2p channels, "
               "%d p2p channels per peer\n", emu::host_name().c_str(), static_cast<int>(getpid()), static_cast<int>(gettid()),
               c.device, kCollChannels, kCollChannels, kP2pChannels, c.p2p_per_peer);
  for (int peer = 0; peer < c.nranks; ++peer) {
    if (peer == c.rank) continue;
    const int other = c.shared->slots[peer].physical;
    if (shm && std::strcmp(c.shared->slots[c.rank].host, c.shared->slots[peer].host) == 0) {
      std::fprintf(f, "%s : %d[%d] -> %d[%d] via SHM/direct/direct\n", prefix.c_str(), c.rank, me, peer, other);
    } else {
      std::fprintf(f, "%s/0 : %d[%d] -> %d[%d] [send] via NET/Socket/%d\n", prefix.c_str(), c.rank, me, peer, other, net);
      std::fprintf(f, "%s/0 : %d[%d] -> %d[%d] [receive] via NET/Socket/%d\n", prefix.c_str(), peer, other, c.rank, me, net);
    }
  }
  if (path) std::fclose(f);
}

// ---- NCCL's choice of algorithm and protocol, and its profiler plugin ------------------------------
// The emulated NCCL's choice, a function of the collective, its bytes (a group's collectives of one
// function and datatype: their bytes together, report_group) and the rank count alone, so that tests
// can assert it (docs/testing.md): all-reduce on 3 ranks or more below 64 KiB by Tree, everything
// else by Ring; LL below 64 KiB, LL128 below 1 MiB, Simple from 1 MiB on; 1, 4 and 8 channels with
// them. Tree serves all-reduce alone; NVLS, NVLSTree, CollNet and PAT need hardware the emulation has
// not. NCCL_ALGO and NCCL_PROTO restrict the choice as NCCL's do (case-insensitive lists, "^" to
// exclude; the per-function "func:list;..." form is not read here): a name NCCL does not know fails the
// communicator's initialisation, and where nothing allowed serves a collective its call fails with
// ncclInvalidUsage (NCCL 2.28's enqueue.cc).

const char* const kAlgos[] = {"Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"};
const char* const kProtos[] = {"LL", "LL128", "Simple"};

template <std::size_t N>
ncclResult_t allowed(const char* var, const char* const (&names)[N], std::set<std::string>& out, std::string& text) {
  const char* v = std::getenv(var);
  out.clear();
  text = v ? v : "";
  if (text.empty()) return ncclSuccess;
  const bool exclude = text[0] == '^';
  std::set<std::string> listed;
  std::size_t pos = exclude ? 1 : 0;
  while (pos <= text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    const std::string token = text.substr(pos, comma - pos);
    const auto* known = std::find_if(std::begin(names), std::end(names),
                                     [&](const char* n) { return strcasecmp(n, token.c_str()) == 0; });
    if (known == std::end(names)) return error(ncclInvalidUsage, std::string(var) + ": Unrecognized element token \"" + token + "\"");
    listed.insert(*known);
    pos = comma + 1;
  }
  for (const char* n : names)
    if (listed.count(n) != exclude) out.insert(n);
  return ncclSuccess;
}

struct Pick {
  const char* algo;   // as NCCL's profiler names them: "TREE", "RING"
  const char* proto;  // "LL", "LL128", "SIMPLE"
  uint8_t channels;
};

ncclResult_t choose(const Comm& c, const char* func, std::size_t bytes, const char* datatype, Pick& pick) {
  const bool allreduce = std::strcmp(func, "AllReduce") == 0;
  const char* algo = allreduce && c.nranks >= 3 && bytes < (64u << 10) ? "Tree" : "Ring";
  const char* proto = bytes < (64u << 10) ? "LL" : bytes < (1u << 20) ? "LL128" : "Simple";
  auto ok_algo = [&](const char* a) {
    return (std::strcmp(a, "Ring") == 0 || (allreduce && std::strcmp(a, "Tree") == 0)) && (c.algos.empty() || c.algos.count(a));
  };
  auto ok_proto = [&](const char* p) { return c.protos.empty() || c.protos.count(p); };
  if (!ok_algo(algo)) algo = ok_algo("Tree") ? "Tree" : ok_algo("Ring") ? "Ring" : nullptr;
  if (!ok_proto(proto)) proto = ok_proto("LL") ? "LL" : ok_proto("LL128") ? "LL128" : ok_proto("Simple") ? "Simple" : nullptr;
  if (!algo || !proto) {
    std::string set;
    if (!c.algo_env.empty()) set += " NCCL_ALGO was set to " + c.algo_env + ".";
    if (!c.proto_env.empty()) set += " NCCL_PROTO was set to " + c.proto_env + ".";
    return error(ncclInvalidUsage, std::string("No algorithm/protocol available for function ") + func + " with datatype " +
                                       datatype + "." + set);
  }
  pick.algo = std::strcmp(algo, "Tree") == 0 ? "TREE" : "RING";
  pick.proto = std::strcmp(proto, "Simple") == 0 ? "SIMPLE" : proto;
  pick.channels = std::strcmp(proto, "LL") == 0 ? 1 : std::strcmp(proto, "LL128") == 0 ? 4 : 8;
  return ncclSuccess;
}

// NCCL's profiler plugin interface, version 5 (NCCL 2.28): what it hands a plugin for a collective.
struct ProfilerColl {
  uint64_t seq;
  const char* func;
  const void* send;
  void* recv;
  std::size_t count;
  int root;
  const char* datatype;
  uint8_t channels, warps;
  const char* algo;
  const char* proto;
  void* parent_group;
};
struct ProfilerDescr {
  uint64_t type;
  void* parent;
  int rank;
  ProfilerColl coll;
};
struct Profiler {
  const char* name;
  ncclResult_t (*init)(void**, uint64_t, int*, const char*, int, int, int, void (*)(int, unsigned long, const char*, int,
                                                                                     const char*, ...));
  ncclResult_t (*start)(void*, void**, ProfilerDescr*);
  ncclResult_t (*stop)(void*);
  ncclResult_t (*record)(void*, int, void*);
  ncclResult_t (*finalize)(void*);
};
constexpr int kProfileColl = 1 << 1;
int profiled_events = 0;  // the activation mask, one for the process as NCCL's

void no_log(int, unsigned long, const char*, int, const char*, ...) {}

// NCCL_PROFILER_PLUGIN, loaded once as NCCL loads it (a path or a name dlopen finds; "none" for none):
// missing, it is left out without a word, as NCCL says so only at INFO level.
// COMMBENCH_EMU_NCCL_PROFILER=none: an NCCL whose profiler interface the plugin does not offer (NCCL
// 2.26 and older asks for versions 1-3), which loads it and never calls it.
const Profiler* profiler() {
  static const Profiler* loaded = [] () -> const Profiler* {
    const char* path = std::getenv("NCCL_PROFILER_PLUGIN");
    const char* iface = std::getenv("COMMBENCH_EMU_NCCL_PROFILER");
    if (!path || !*path || strcasecmp(path, "none") == 0 || (iface && std::strcmp(iface, "none") == 0)) return nullptr;
    void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    return lib ? static_cast<const Profiler*>(dlsym(lib, "ncclProfiler_v5")) : nullptr;
  }();
  return loaded;
}

uint64_t fnv(const std::string& text) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char ch : text) h = (h ^ ch) * 1099511628211ULL;
  return h;
}

// Once a communicator is made: the plugin's context for it.
void profile_start(Comm& c) {
  if (const Profiler* p = profiler(); p && p->init(&c.profiler, fnv(c.name), &profiled_events, c.name.c_str(), 1,
                                                  c.nranks, c.rank, no_log) != ncclSuccess)
    c.profiler = nullptr;
}

void profile_end(Comm& c) {
  if (const Profiler* p = profiler(); p && c.profiler) p->finalize(c.profiler);
  c.profiler = nullptr;
}

const char* type_name(ncclDataType_t t) {
  static const char* const names[] = {"ncclInt8", "ncclUint8", "ncclInt32", "ncclUint32", "ncclInt64", "ncclUint64",
                                      "ncclFloat16", "ncclFloat32", "ncclFloat64", "ncclBfloat16"};
  return t >= 0 && t < static_cast<int>(sizeof(names) / sizeof(names[0])) ? names[t] : "Unknown";
}

// A collective of the group being made, to report once the group is enqueued.
struct Chosen {
  std::shared_ptr<Comm> comm;
  const char* func;
  const void* in;
  void* out;
  std::size_t count;
  ncclDataType_t t;
  int root;
};
thread_local std::vector<Chosen> chosen_in_group;

// A collective about to be posted: the choice of its own bytes checked (a restricted NCCL_ALGO or
// NCCL_PROTO that serves none fails the call), and kept for report_group. One rank, or nothing to
// move, has no choice to make and no event, as in NCCL.
ncclResult_t chosen(ncclComm_t comm, const char* func, const void* in, void* out, std::size_t count, ncclDataType_t t,
                    int root) {
  Comm& c = *comm->impl;
  if (c.nranks < 2 || count == 0) return ncclSuccess;
  Pick pick{};
  if (const ncclResult_t rc = choose(c, func, count * type_size(t), type_name(t), pick)) return rc;
  chosen_in_group.push_back({comm->impl, func, in, out, count, t, root});
  return ncclSuccess;
}

// The group's collectives reported to the profiler as NCCL reports them, as it enqueues them: those of
// one communicator, function and datatype chosen for on their bytes together (NCCL 2.19 and later
// bin a group's tasks so: nccl-tests' -m, --agg), an all-gather's and a broadcast's count in bytes of
// ncclInt8 (NCCL 2.28's enqueue.cc).
void report_group() {
  std::vector<Chosen> items;
  items.swap(chosen_in_group);
  std::map<std::tuple<Comm*, std::string, int>, std::size_t> bytes;
  for (const Chosen& x : items) bytes[{x.comm.get(), x.func, x.t}] += x.count * type_size(x.t);
  const Profiler* p = profiler();
  for (const Chosen& x : items) {
    Comm& c = *x.comm;
    Pick pick{};
    if (!p || !c.profiler || !(profiled_events & kProfileColl) ||
        choose(c, x.func, bytes[{&c, x.func, x.t}], type_name(x.t), pick) != ncclSuccess)
      continue;
    const bool in_bytes = std::strcmp(x.func, "AllGather") == 0 || std::strcmp(x.func, "Broadcast") == 0;
    ProfilerDescr d{};
    d.type = kProfileColl;
    d.rank = c.rank;
    d.coll = {c.collectives++, x.func, x.in, x.out, in_bytes ? x.count * type_size(x.t) : x.count, x.root,
              in_bytes ? "ncclInt8" : type_name(x.t), pick.channels, 16, pick.algo, pick.proto, nullptr};
    void* handle = nullptr;
    if (p->start(c.profiler, &handle, &d) == ncclSuccess && handle) p->stop(handle);
  }
}

ncclResult_t post(ncclComm_t comm, cudaStream_t stream, Call call) {
  if (!comm || !comm->impl) return error(ncclInvalidArgument, "invalid communicator");
  Comm& c = *comm->impl;
  if (!c.ready) return error(ncclInvalidUsage, "communicator used before its initialisation completed");
  if (c.aborted) return error(ncclInvalidUsage, "communicator was aborted");
  // Another device's buffer or stream: NCCL's kernel, launched on the communicator's device, cannot
  // launch into another device's stream (CUDA refuses it), and reads another GPU's memory only
  // through peer access, or faults; NCCL_CHECK_POINTERS=1 refuses the buffer as this does.
  for (const Message& m : call.messages) {
    if (!m.device || !m.bytes) continue;
    const int dev = emu::device_of(m.device, m.bytes);
    if (dev < 0) return error(ncclInvalidArgument, "buffer is not device memory of " + std::to_string(m.bytes) + " bytes");
    if (dev != c.device)
      return error(ncclInvalidArgument, "buffer allocated on device " + std::to_string(dev) +
                                            " mismatchs with NCCL device " + std::to_string(c.device));
  }
  if (const int dev = emu::stream_device(stream); dev >= 0 && dev != c.device)
    return error(ncclUnhandledCudaError, "Cuda failure 'invalid resource handle': a stream of device " +
                                             std::to_string(dev) + ", not NCCL device " + std::to_string(c.device));
  if (!c.connected.exchange(true)) {
    c.p2p_per_peer = p2p_channels_per_peer(c);
    log_connections(c);
    log_comm("call", c.rank, c.nranks, c.blocking);
  }
  call.comm = comm->impl;
  pending.push_back({stream, std::move(call)});
  if (group_depth > 0) return ncclSuccess;
  return flush();
}

ncclResult_t check_peer(ncclComm_t comm, int peer) {
  if (!comm || !comm->impl) return error(ncclInvalidArgument, "invalid communicator");
  if (peer < 0 || peer >= comm->impl->nranks) return error(ncclInvalidArgument, "peer " + std::to_string(peer) + " out of range");
  return ncclSuccess;
}

ncclResult_t check_buffer(const void* p, std::size_t bytes, const char* what) {
  if (bytes && !emu::device_range(p, bytes))
    return error(ncclInvalidArgument, std::string(what) + " is not device memory of " + std::to_string(bytes) + " bytes");
  return ncclSuccess;
}

ncclResult_t init(Comm& c, const std::string& name, int nranks, int rank) {
  static const Fault injected = fault();
  const int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0) return error(ncclSystemError, "shm_open " + name + ": " + std::strerror(errno));
  const std::size_t bytes = segment_bytes(nranks);
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    close(fd);
    return error(ncclSystemError, "ftruncate " + name + ": " + std::strerror(errno));
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return error(ncclSystemError, "mmap " + name + ": " + std::strerror(errno));
  c.shared = static_cast<Shared*>(p);
  c.name = name;
  c.rank = rank;
  c.nranks = nranks;
  unsigned rounds = 0;
  if (injected.kind == "init-stall" && injected.rank == rank && nranks > 1)
    while (!c.aborting()) emu::idle(rounds);
  Slot& me = c.shared->slots[rank];
  // NCCL tells hosts apart by NCCL_HOSTID where it is set, else by the host name.
  const char* host_id = std::getenv("NCCL_HOSTID");
  std::snprintf(me.host, sizeof(me.host), "%s", host_id && *host_id ? host_id : emu::host_name().c_str());
  me.physical = emu::physical_index(c.device);
  c.shared->arrived.fetch_add(1);
  while (c.shared->arrived.load() < nranks) {
    if (c.aborting()) return error(ncclInvalidUsage, "communicator aborted during its initialisation");
    emu::idle(rounds);
  }
  if (c.shared->mapped.fetch_add(1) + 1 == nranks) shm_unlink(name.c_str());
  for (int r = 0; r < nranks; ++r)
    if (r != rank && std::strcmp(c.shared->slots[r].host, me.host) == 0 && c.shared->slots[r].physical == me.physical) {
      char text[160];
      std::snprintf(text, sizeof(text), "Duplicate GPU detected : rank %d and rank %d both on CUDA device %x",
                    std::min(r, rank), std::max(r, rank), 0x10 + me.physical);
      return error(ncclInvalidUsage, text);
    }
  return ncclSuccess;
}


// A new communicator on the calling thread's current device, or for a split on its parent's (NCCL's
// split may run on a thread of its own).
ncclResult_t start(ncclComm_t* out, const std::string& name, int nranks, int rank, bool blocking, const char* how,
                   const Comm* parent = nullptr) {
  *out = nullptr;
  log_comm(how, rank, nranks, blocking);
  if (nranks < 1 || nranks > kMaxRanks || rank < 0 || rank >= nranks)
    return error(ncclInvalidArgument, "rank " + std::to_string(rank) + " of " + std::to_string(nranks));
  auto impl = std::make_shared<Comm>();
  impl->blocking = blocking;
  if (ncclResult_t rc = allowed("NCCL_ALGO", kAlgos, impl->algos, impl->algo_env);
      rc || (rc = allowed("NCCL_PROTO", kProtos, impl->protos, impl->proto_env)))
    return rc;
  if (parent) {
    impl->parent_aborted = &parent->aborted;
    impl->device = parent->device;
  } else if (cudaGetDevice(&impl->device) != cudaSuccess) {
    return error(ncclUnhandledCudaError, "no current device");
  }
  if (blocking) {
    const ncclResult_t rc = init(*impl, name, nranks, rank);
    impl->parent_aborted = nullptr;  // the parent may go once its child is made
    if (rc != ncclSuccess) return rc;
    profile_start(*impl);
    impl->ready = true;
  } else {
    Comm* c = impl.get();
    c->async = ncclInProgress;
    c->init_thread = std::thread([c, name, nranks, rank] {
      const ncclResult_t rc = init(*c, name, nranks, rank);
      c->parent_aborted = nullptr;
      if (rc == ncclSuccess) profile_start(*c);
      c->ready = rc == ncclSuccess;
      c->async = rc;
    });
  }
  *out = new ncclComm{impl};
  return blocking ? ncclSuccess : ncclInProgress;
}

std::string name_of(const ncclUniqueId& id) { return std::string(id.internal, strnlen(id.internal, sizeof(id.internal))); }

}  // namespace

ncclResult_t ncclGetVersion(int* v) {
  *v = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id->internal, 0, sizeof(id->internal));
  unsigned char random[16];
  const int fd = open("/dev/urandom", O_RDONLY);
  if (fd < 0 || read(fd, random, sizeof(random)) != static_cast<ssize_t>(sizeof(random))) {
    if (fd >= 0) close(fd);
    return error(ncclSystemError, "cannot read /dev/urandom");
  }
  close(fd);
  std::string name = "/commbench-emu-";
  for (unsigned char b : random) {
    char hex[3];
    std::snprintf(hex, sizeof(hex), "%02x", b);
    name += hex;
  }
  std::memcpy(id->internal, name.data(), name.size());
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t rc) {
  switch (rc) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
  }
  return "unknown result code";
}

const char* ncclGetLastError(ncclComm_t) {
  static thread_local std::string copy;
  std::lock_guard<std::mutex> l(error_mu);
  copy = last_error;
  return copy.c_str();
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return start(comm, name_of(id), nranks, rank, true, "init");
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  const bool blocking = !config || config->blocking == NCCL_CONFIG_UNDEF_INT || config->blocking != 0;
  return start(comm, name_of(id), nranks, rank, blocking, "init");
}

namespace {

// The split itself: every rank of `c` votes its color and key, and this rank's members make the new
// communicator, blocking or not.
ncclResult_t split(Comm& c, int color, int key, ncclComm_t* newcomm, bool blocking) {
  const uint64_t round = ++c.split_round;
  const int v = static_cast<int>(round % kVotes);
  Slot& me = c.shared->slots[c.rank];
  me.color[v] = color;
  me.key[v] = key;
  me.vote_round[v].store(round, std::memory_order_release);
  std::vector<std::pair<std::pair<int, int>, int>> members;  // ((key, parent rank), parent rank)
  unsigned rounds = 0;
  for (int r = 0; r < c.nranks; ++r) {
    Slot& s = c.shared->slots[r];
    while (s.vote_round[v].load(std::memory_order_acquire) != round) {
      if (c.aborted) return error(ncclInvalidUsage, "communicator aborted during ncclCommSplit");
      emu::idle(rounds);
    }
    if (color != NCCL_SPLIT_NOCOLOR && s.color[v] == color) members.push_back({{s.key[v], r}, r});
  }
  if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
  std::sort(members.begin(), members.end());
  int rank = 0;
  while (members[rank].second != c.rank) ++rank;
  return start(newcomm, c.name + "-" + std::to_string(round) + "-" + std::to_string(color),
               static_cast<int>(members.size()), rank, blocking, "split", &c);
}

}  // namespace

// As NCCL's: the split of a non-blocking communicator runs on a thread and answers ncclSuccess at
// once; the new handle is written only when the split is done, and until then the parent's state
// (ncclCommGetAsyncError) is ncclInProgress.
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  *newcomm = nullptr;
  if (!comm || !comm->impl || !comm->impl->ready) return error(ncclInvalidArgument, "invalid communicator");
  Comm& c = *comm->impl;
  const bool blocking = !config || config->blocking == NCCL_CONFIG_UNDEF_INT || config->blocking != 0;
  if (c.blocking) return split(c, color, key, newcomm, blocking);
  if (c.async == ncclInProgress) return error(ncclInvalidArgument, "a split of this communicator is in progress");
  if (c.split_thread.joinable()) c.split_thread.join();
  c.async = ncclInProgress;
  c.split_thread = std::thread([&c, color, key, newcomm, blocking] {
    ncclComm_t made = nullptr;
    ncclResult_t rc = split(c, color, key, &made, blocking);
    unsigned rounds = 0;
    while (rc == ncclSuccess && made && !made->impl->ready && made->impl->async == ncclInProgress) emu::idle(rounds);
    if (rc == ncclSuccess && made) rc = static_cast<ncclResult_t>(made->impl->async.load());
    *newcomm = made;
    c.async = rc;
  });
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (!comm || !comm->impl) return error(ncclInvalidArgument, "invalid communicator");
  Comm& c = *comm->impl;
  *state = static_cast<ncclResult_t>(c.async.load());
  if (*state == ncclSuccess && !c.enqueue_reported.exchange(true)) *state = ncclInProgress;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* n) {
  if (!comm || !comm->impl) return error(ncclInvalidArgument, "invalid communicator");
  *n = comm->impl->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!comm || !comm->impl) return error(ncclInvalidArgument, "invalid communicator");
  *rank = comm->impl->rank;
  return ncclSuccess;
}

// As NCCL 2.28's (init.cc): a group is opened first, and a communicator whose state is an error (or
// still in progress) makes it return that error at once, the group left open on this thread (every
// later call of the thread deferred) and the communicator not freed. A communicator in error is for
// ncclCommAbort.
// COMMBENCH_EMU_NCCL_FAULT=destroy-error:RANK: a peer's failure seen by RANK's communicators just as
// they are destroyed, after the caller last asked for their state.
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return error(ncclInvalidArgument, "invalid communicator");
  static const Fault injected = fault();
  if (injected.kind == "destroy-error" && injected.rank == comm->impl->rank && comm->impl->nranks > 1)
    comm->impl->async = ncclSystemError;
  ++group_depth;
  if (const int state = comm->impl->async.load(); state != ncclSuccess)
    return error(state == ncclInProgress ? ncclInvalidArgument : static_cast<ncclResult_t>(state),
                 "ncclCommDestroy of a communicator in error or in progress");
  --group_depth;
  log_comm("destroy", comm->impl->rank, comm->impl->nranks, comm->impl->blocking);
  profile_end(*comm->impl);
  // The segment stays mapped while queued work or a graph still refers to the communicator.
  delete comm;
  return ncclSuccess;
}

// As NCCL's: stops the communicator's pending work, then waits for every graph that captured work
// of it to be destroyed, for as long as that takes.
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  comm->impl->aborted = true;
  log_comm("abort", comm->impl->rank, comm->impl->nranks, comm->impl->blocking);
  profile_end(*comm->impl);
  unsigned rounds = 0;
  while (comm->impl->graph_holds.load() > 0) emu::idle(rounds);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return error(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--group_depth > 0) return ncclSuccess;
  return flush();
}

ncclResult_t ncclSend(const void* buf, std::size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t s) {
  note_call("ncclSend");
  if (const ncclResult_t rc = check_peer(comm, peer)) return rc;
  Call call;
  call.collective = false;
  call.messages.push_back({true, peer, const_cast<char*>(static_cast<const char*>(buf)), 0, count * type_size(t)});
  return post(comm, s, std::move(call));
}

ncclResult_t ncclRecv(void* buf, std::size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t s) {
  note_call("ncclRecv");
  if (const ncclResult_t rc = check_peer(comm, peer)) return rc;
  Call call;
  call.collective = false;
  call.messages.push_back({false, peer, static_cast<char*>(buf), 0, count * type_size(t)});
  return post(comm, s, std::move(call));
}

// Every rank's input gathered into scratch (slot r at r * bytes) by messages; own input copied in.
static Call gather_all(ncclComm_t comm, const void* in, std::size_t bytes, int only_to = -1) {
  Call call;
  const int n = comm->impl->nranks, me = comm->impl->rank;
  call.scratch_bytes = bytes * n;
  char* src = const_cast<char*>(static_cast<const char*>(in));
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    if (only_to < 0 || only_to == r) call.messages.push_back({true, r, src, 0, bytes});
    if (only_to < 0 || only_to == me) call.messages.push_back({false, r, nullptr, r * bytes, bytes});
  }
  call.before = [src, bytes, me](char* scratch) { std::memcpy(scratch + me * bytes, src, bytes); };
  return call;
}

ncclResult_t ncclAllReduce(const void* in, void* out, std::size_t count, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t s) {
  note_call("ncclAllReduce");
  const std::size_t bytes = count * type_size(t);
  if (!comm || !comm->impl) return error(ncclInvalidArgument, "invalid communicator");
  if (ncclResult_t rc = check_buffer(in, bytes, "sendbuff"); rc || (rc = check_buffer(out, bytes, "recvbuff"))) return rc;
  Call call = gather_all(comm, in, bytes);
  const int n = comm->impl->nranks;
  call.after = [out, bytes, count, t, op, n](char* scratch) {
    for (int r = 1; r < n; ++r) reduce_into(scratch, scratch + r * bytes, count, t, op);
    std::memcpy(out, scratch, bytes);
  };
  if (const ncclResult_t rc = chosen(comm, "AllReduce", in, out, count, t, -1)) return rc;
  return post(comm, s, std::move(call));
}

ncclResult_t ncclReduce(const void* in, void* out, std::size_t count, ncclDataType_t t, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t s) {
  note_call("ncclReduce");
  if (const ncclResult_t rc = check_peer(comm, root)) return rc;
  const std::size_t bytes = count * type_size(t);
  const bool at_root = comm->impl->rank == root;
  if (ncclResult_t rc = check_buffer(in, bytes, "sendbuff"); rc || (at_root && (rc = check_buffer(out, bytes, "recvbuff"))))
    return rc;
  Call call = gather_all(comm, in, bytes, root);
  const int n = comm->impl->nranks;
  if (at_root)
    call.after = [out, bytes, count, t, op, n](char* scratch) {
      for (int r = 1; r < n; ++r) reduce_into(scratch, scratch + r * bytes, count, t, op);
      std::memcpy(out, scratch, bytes);
    };
  if (const ncclResult_t rc = chosen(comm, "Reduce", in, out, count, t, root)) return rc;
  return post(comm, s, std::move(call));
}

ncclResult_t ncclBroadcast(const void* in, void* out, std::size_t count, ncclDataType_t t, int root, ncclComm_t comm,
                           cudaStream_t s) {
  note_call("ncclBroadcast");
  if (const ncclResult_t rc = check_peer(comm, root)) return rc;
  const std::size_t bytes = count * type_size(t);
  const int n = comm->impl->nranks, me = comm->impl->rank;
  if (ncclResult_t rc = check_buffer(out, bytes, "recvbuff"); rc || (me == root && (rc = check_buffer(in, bytes, "sendbuff"))))
    return rc;
  Call call;
  char* dst = static_cast<char*>(out);
  if (me == root) {
    char* src = const_cast<char*>(static_cast<const char*>(in));
    for (int r = 0; r < n; ++r)
      if (r != me) call.messages.push_back({true, r, src, 0, bytes});
    if (src != dst) call.after = [src, dst, bytes](char*) { std::memmove(dst, src, bytes); };
  } else {
    call.messages.push_back({false, root, dst, 0, bytes});
  }
  if (const ncclResult_t rc = chosen(comm, "Broadcast", in, out, count, t, root)) return rc;
  return post(comm, s, std::move(call));
}

ncclResult_t ncclAllGather(const void* in, void* out, std::size_t count, ncclDataType_t t, ncclComm_t comm,
                           cudaStream_t s) {
  note_call("ncclAllGather");
  if (!comm || !comm->impl) return error(ncclInvalidArgument, "invalid communicator");
  const std::size_t bytes = count * type_size(t);
  const int n = comm->impl->nranks, me = comm->impl->rank;
  if (ncclResult_t rc = check_buffer(in, bytes, "sendbuff"); rc || (rc = check_buffer(out, bytes * n, "recvbuff"))) return rc;
  Call call = gather_all(comm, in, bytes);
  call.after = [out, bytes, n](char* scratch) { std::memcpy(out, scratch, bytes * n); };
  (void)me;
  if (const ncclResult_t rc = chosen(comm, "AllGather", in, out, count, t, -1)) return rc;
  return post(comm, s, std::move(call));
}

// Block r of the send buffer goes to rank r; block r of the receive buffer comes from rank r.
ncclResult_t ncclAlltoAll(const void* in, void* out, std::size_t count, ncclDataType_t t, ncclComm_t comm,
                          cudaStream_t s) {
  if (!comm || !comm->impl) return error(ncclInvalidArgument, "invalid communicator");
  note_call("ncclAlltoAll");
  const std::size_t bytes = count * type_size(t);
  const int n = comm->impl->nranks, me = comm->impl->rank;
  if (ncclResult_t rc = check_buffer(in, bytes * n, "sendbuff"); rc || (rc = check_buffer(out, bytes * n, "recvbuff")))
    return rc;
  Call call;
  char* src = const_cast<char*>(static_cast<const char*>(in));
  char* dst = static_cast<char*>(out);
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    call.messages.push_back({true, r, src + r * bytes, 0, bytes});
    call.messages.push_back({false, r, dst + r * bytes, 0, bytes});
  }
  call.after = [src, dst, bytes, me](char*) { std::memmove(dst + me * bytes, src + me * bytes, bytes); };
  return post(comm, s, std::move(call));
}

// NCCL 2.28's gather and scatter: the root's count-element block per rank, received from or sent
// to each rank (its own copied).
ncclResult_t ncclGather(const void* in, void* out, std::size_t count, ncclDataType_t t, int root, ncclComm_t comm,
                        cudaStream_t s) {
  note_call("ncclGather");
  if (const ncclResult_t rc = check_peer(comm, root)) return rc;
  const std::size_t bytes = count * type_size(t);
  const int n = comm->impl->nranks, me = comm->impl->rank;
  if (ncclResult_t rc = check_buffer(in, bytes, "sendbuff"); rc || (me == root && (rc = check_buffer(out, bytes * n, "recvbuff"))))
    return rc;
  Call call;
  char* src = const_cast<char*>(static_cast<const char*>(in));
  char* dst = static_cast<char*>(out);
  if (me == root) {
    for (int r = 0; r < n; ++r)
      if (r != me) call.messages.push_back({false, r, dst + r * bytes, 0, bytes});
    call.after = [src, dst, bytes, me](char*) { std::memmove(dst + me * bytes, src, bytes); };
  } else {
    call.messages.push_back({true, root, src, 0, bytes});
  }
  return post(comm, s, std::move(call));
}

ncclResult_t ncclScatter(const void* in, void* out, std::size_t count, ncclDataType_t t, int root, ncclComm_t comm,
                         cudaStream_t s) {
  note_call("ncclScatter");
  if (const ncclResult_t rc = check_peer(comm, root)) return rc;
  const std::size_t bytes = count * type_size(t);
  const int n = comm->impl->nranks, me = comm->impl->rank;
  if (ncclResult_t rc = check_buffer(out, bytes, "recvbuff"); rc || (me == root && (rc = check_buffer(in, bytes * n, "sendbuff"))))
    return rc;
  Call call;
  char* src = const_cast<char*>(static_cast<const char*>(in));
  char* dst = static_cast<char*>(out);
  if (me == root) {
    for (int r = 0; r < n; ++r)
      if (r != me) call.messages.push_back({true, r, src + r * bytes, 0, bytes});
    call.after = [src, dst, bytes, me](char*) { std::memmove(dst, src + me * bytes, bytes); };
  } else {
    call.messages.push_back({false, root, dst, 0, bytes});
  }
  return post(comm, s, std::move(call));
}

ncclResult_t ncclReduceScatter(const void* in, void* out, std::size_t count, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t s) {
  note_call("ncclReduceScatter");
  if (!comm || !comm->impl) return error(ncclInvalidArgument, "invalid communicator");
  const std::size_t bytes = count * type_size(t);
  const int n = comm->impl->nranks, me = comm->impl->rank;
  if (ncclResult_t rc = check_buffer(in, bytes * n, "sendbuff"); rc || (rc = check_buffer(out, bytes, "recvbuff"))) return rc;
  Call call;
  call.scratch_bytes = bytes * n;
  char* src = const_cast<char*>(static_cast<const char*>(in));
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    call.messages.push_back({true, r, src + r * bytes, 0, bytes});
    call.messages.push_back({false, r, nullptr, r * bytes, bytes});
  }
  call.before = [src, bytes, me](char* scratch) { std::memcpy(scratch + me * bytes, src + me * bytes, bytes); };
  call.after = [out, bytes, count, t, op, n](char* scratch) {
    for (int r = 1; r < n; ++r) reduce_into(scratch, scratch + r * bytes, count, t, op);
    std::memcpy(out, scratch, bytes);
  };
  if (const ncclResult_t rc = chosen(comm, "ReduceScatter", in, out, count, t, -1)) return rc;
  return post(comm, s, std::move(call));
}
