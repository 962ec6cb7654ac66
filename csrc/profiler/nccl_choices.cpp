// NCCL's own choice for each collective: a profiler plugin (NCCL_PROFILER_PLUGIN=<this library>) that
// NCCL hands, for every collective it enqueues, the algorithm, protocol and channel count it chose.
// The choices are kept per (function, datatype, element count) until the process takes them
// (commbench_nccl_choices, through ctypes: transports/nccl_choices.py), so that a sweep learns, size
// by size, what NCCL ran.
//
// The interface is NCCL's profiler plugin interface, retyped here from its published layout (NCCL's
// src/include/plugin/profiler/profiler_v4.h and _v5.h): version 5 (NCCL 2.28 and later; 2.29's v6
// adds copy-engine events only, and NCCL falls back to v5) and version 4 (NCCL 2.27). Both hand a
// collective's descriptor in the same layout; they differ in the width of the event type and in the
// order of init's arguments. Versions 1-3 (NCCL 2.23-2.26) are not offered: NCCL older than 2.27
// records no choice (docs/gpus.md). NCCL calls the plugin on the thread that enqueues, or on a CUDA
// host callback's thread for graph replays, so the table has a lock.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

namespace {

using Result = int;  // ncclResult_t; 0 is ncclSuccess
constexpr int kGroupEvent = 1 << 0;  // ncclProfileGroup: a group of collectives, one kernel plan
constexpr int kCollEvent = 1 << 1;  // ncclProfileColl: a collective's host-side event
using Logger = void (*)(int, unsigned long, const char*, int, const char*, ...);  // ncclDebugLogger_t

// A collective's part of the event descriptor (the `coll` member of its union).
struct Coll {
  uint64_t seq;
  const char* func;
  const void* send;
  void* recv;
  size_t count;
  int root;
  const char* datatype;
  uint8_t channels;
  uint8_t warps;
  const char* algo;
  const char* proto;
};

// The descriptors' heads: the union, whose `coll` member is all that is read, follows at the same
// offset in both (8-byte aligned after a pointer and an int).
struct DescrV4 {
  uint8_t type;
  void* parent;
  int rank;
  Coll coll;
};
struct DescrV5 {
  uint64_t type;
  void* parent;
  int rank;
  Coll coll;
};

struct Choice {
  std::string algo, proto;
  int channels = 0;
  uint64_t calls = 0;
};

std::mutex mu;
// (function, datatype, count) -> the choice NCCL made for it and how often, since the last take.
std::map<std::tuple<std::string, std::string, size_t>, Choice> choices;

const char* text(const char* s) { return s ? s : "?"; }

void note(const Coll& c) {
  std::lock_guard<std::mutex> hold(mu);
  Choice& ch = choices[{text(c.func), text(c.datatype), c.count}];
  ch.algo = text(c.algo);
  ch.proto = text(c.proto);
  ch.channels = c.channels;
  ++ch.calls;
}

// Every communicator's events share the table: the context only has to be non-null.
int context_token;
// NCCL's activation mask, one for the process, which NCCL reads at each event: where the process
// listens (commbench_nccl_choices_listen), collective events are on.
int* active_mask = nullptr;
bool listening = true;

Result init(void** context, int* mask) {
  std::lock_guard<std::mutex> hold(mu);
  active_mask = mask;
  if (listening) *mask |= kCollEvent;
  *context = &context_token;
  return 0;
}

Result init_v5(void** context, uint64_t, int* mask, const char*, int, int, int, Logger) { return init(context, mask); }
Result init_v4(void** context, int* mask, const char*, uint64_t, int, int, int, Logger) { return init(context, mask); }

// NCCL also starts group and API events whenever collective events are on: each gets a null handle,
// written every time (NCCL keeps a slot's handle until the next start). But NCCL 2.27 (version 4)
// starts a plan's collective events only under a group event whose handle is not null
// (ncclProfilerStartTaskEvents): there a group gets the context's token, which stop ignores.
Result start_v5(void*, void** handle, DescrV5* d) {
  *handle = nullptr;
  if (d->type == kCollEvent) note(d->coll);
  return 0;
}

Result start_v4(void*, void** handle, DescrV4* d) {
  *handle = d->type == kGroupEvent ? &context_token : nullptr;
  if (d->type == kCollEvent) note(d->coll);
  return 0;
}

Result stop(void*) { return 0; }
Result record_state(void*, int, void*) { return 0; }
Result finalize(void*) { return 0; }

template <typename Descr, typename Init>
struct Plugin {
  const char* name;
  Init init;
  Result (*start)(void*, void**, Descr*);
  Result (*stop)(void*);
  Result (*record)(void*, int, void*);
  Result (*finalize)(void*);
};

}  // namespace

extern "C" {

__attribute__((visibility("default"))) Plugin<DescrV5, decltype(&init_v5)> ncclProfiler_v5{
    "commbench", init_v5, start_v5, stop, record_state, finalize};
__attribute__((visibility("default"))) Plugin<DescrV4, decltype(&init_v4)> ncclProfiler_v4{
    "commbench", init_v4, start_v4, stop, record_state, finalize};

// Whether NCCL hands its collectives to the plugin from now on: a sweep listens to the untimed check of
// each size and not to the timed calls, which then run without the profiler's events on the host.
__attribute__((visibility("default"))) void commbench_nccl_choices_listen(int on) {
  std::lock_guard<std::mutex> hold(mu);
  listening = on != 0;
  if (active_mask) *active_mask = listening ? (*active_mask | kCollEvent) : (*active_mask & ~kCollEvent);
}

// The choices seen since the last call, one line each, "function datatype count algorithm protocol
// channels calls", into `out` (at most `room` bytes, NUL-terminated); the table is emptied. Returns the
// bytes the lines need: more than `room` - 1 means they did not fit, and the table is kept.
__attribute__((visibility("default"))) size_t commbench_nccl_choices(char* out, size_t room) {
  std::lock_guard<std::mutex> hold(mu);
  std::string lines;
  for (const auto& [key, ch] : choices) {
    char line[512];
    std::snprintf(line, sizeof(line), "%s %s %zu %s %s %d %llu\n", std::get<0>(key).c_str(), std::get<1>(key).c_str(),
                  std::get<2>(key), ch.algo.c_str(), ch.proto.c_str(), ch.channels,
                  static_cast<unsigned long long>(ch.calls));
    lines += line;
  }
  if (lines.size() + 1 > room) return lines.size() + 1;
  lines.copy(out, lines.size());
  out[lines.size()] = '\0';
  choices.clear();
  return lines.size() + 1;
}
}
