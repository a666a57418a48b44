// The replays of NVMe offload's I/O, optimizer state and ZeRO 3 parameters (contract in
// offload_time.h).

#include "tessera/plan/offload_time.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessera/core/error.h"

namespace tessera::plan {
namespace {

// The device: one queue, each request served after those issued before it.
struct Device {
  double free_at = 0;
  double read_bytes = 0, write_bytes = 0;
  const StorageRates& rates;
  // Issued at `t`; returns when it completes.
  double read(double t, double bytes) {
    read_bytes += bytes;
    free_at = std::max(t, free_at) + bytes / rates.read_bytes_per_s;
    return free_at;
  }
  double write(double t, double bytes) {
    write_bytes += bytes;
    free_at = std::max(t, free_at) + bytes / rates.write_bytes_per_s;
    return free_at;
  }
};

// A buffer: the sub-group it holds (-1: none), when its read completes, whether the gradients
// were read with it, and its last write: in flight until the swapper waits for it (`writing`),
// complete at `write_done`.
struct Slot {
  int64_t group = -1;
  double ready = 0;
  bool grads = false;
  bool writing = false;
  int64_t written_group = -1;
  double write_done = 0;
};

void require_rates(const StorageRates& rates) {
  if (!rates.described())
    throw Error(
        "the machine description has no storage rates for NVMe offload: measure them with "
        "tessera-plan --calibrate --nvme-path DIR (DIR on the offload's device)");
}

}  // namespace

OptimizerSwapTimes simulate_optimizer_swap(const OptimizerSwapShape& shape,
                                           const IterationTimes& it, const StorageRates& rates) {
  require_rates(rates);
  TESSERA_CHECK(shape.owned_elements >= 0 && shape.sub_group > 0 && shape.buffers >= 2 &&
                shape.arrays >= 1);
  OptimizerSwapTimes out;
  out.update = it.update;
  const double n = shape.owned_elements;
  if (n == 0) return out;
  const double group = std::min(shape.sub_group, n);
  const auto groups = static_cast<int64_t>(std::ceil(n / group));
  const auto elements = [&](int64_t g) {
    return std::min(group, n - static_cast<double>(g) * group);
  };
  const auto state_bytes = [&](int64_t g) { return 4.0 * shape.arrays * elements(g); };
  const auto grad_bytes = [&](int64_t g) { return 4.0 * elements(g); };

  Device disk{0, 0, 0, rates};
  std::vector<Slot> slots(shape.buffers);
  double t = 0;  // the training thread's clock
  const auto slot_of = [&](int64_t g) -> Slot* {
    for (Slot& s : slots)
      if (s.group == g) return &s;
    return nullptr;
  };
  const auto finish_write = [&](Slot& s) {
    t = std::max(t, s.write_done);
    s.writing = false;
  };
  // NvmeStateStorage::free_slot: an idle buffer, else (when it may wait) the one whose write was
  // issued first, once that write completes; nullptr when every buffer holds a sub-group.
  const auto free_slot = [&](bool may_wait) -> Slot* {
    for (Slot& s : slots)
      if (!s.writing && s.group < 0) return &s;
    if (!may_wait) return nullptr;
    Slot* oldest = nullptr;
    for (Slot& s : slots)
      if (s.writing && (oldest == nullptr || s.write_done < oldest->write_done)) oldest = &s;
    if (oldest != nullptr) finish_write(*oldest);
    return oldest;
  };
  const auto start_read = [&](Slot& s, int64_t g, bool with_grads) {
    s.group = g;
    s.grads = with_grads;
    s.ready = disk.read(t, state_bytes(g) + (with_grads ? grad_bytes(g) : 0.0));
  };
  const auto read_grads = [&](Slot& s) {
    s.ready = std::max(s.ready, disk.read(t, grad_bytes(s.group)));
    s.grads = true;
  };

  constexpr int kIterations = 3;
  for (int iteration = 0; iteration < kIterations; ++iteration) {
    const double start = t;
    const double before_read = disk.read_bytes, before_write = disk.write_bytes;
    // prefetch(): the state of the first sub-groups, stopping at one whose write is in flight or
    // when no buffer is idle.
    const int64_t ahead = std::min<int64_t>(groups, shape.buffers - 1);
    for (int64_t g = 0; g < ahead; ++g) {
      if (slot_of(g) != nullptr) continue;
      bool written_now = false;
      for (const Slot& s : slots) written_now |= s.writing && s.written_group == g;
      if (written_now) break;
      Slot* s = free_slot(false);
      if (s == nullptr) break;
      start_read(*s, g, false);
    }
    // The gradients leave during the last micro-batch's backward; the step waits for them.
    double grads_written = start;
    for (const auto& [when, bytes] : it.gradient_writes)
      grads_written = disk.write(start + when, bytes);
    const double optimizer = start + it.optimizer_start;
    t = std::max(optimizer, grads_written);
    out.boundary_wait = t - optimizer;
    const double visit_start = t;
    // for_each_window(kStep): the last visit's writes first, then the sub-groups in order.
    for (Slot& s : slots)
      if (s.writing) finish_write(s);
    int64_t next_read = 0;
    for (int64_t g = 0; g < groups; ++g) {
      Slot* s = slot_of(g);
      if (s == nullptr) {
        s = free_slot(true);
        TESSERA_CHECK(s != nullptr);
        start_read(*s, g, true);
      } else if (!s->grads) {
        read_grads(*s);
      }
      next_read = std::max(next_read, g + 1);
      if (shape.pipeline_read)
        for (; next_read < groups; ++next_read) {
          if (Slot* held = slot_of(next_read)) {
            if (!held->grads) read_grads(*held);
            continue;
          }
          Slot* f = free_slot(true);
          if (f == nullptr) break;
          start_read(*f, next_read, true);
        }
      t = std::max(t, s->ready) + it.update * elements(g) / n;
      s->write_done = disk.write(t, state_bytes(g));
      s->writing = true;
      s->written_group = g;
      if (!shape.pipeline_write) finish_write(*s);
      s->group = -1;
      s->grads = false;
    }
    out.visit = t - visit_start;
    out.read_bytes = disk.read_bytes - before_read;
    out.write_bytes = disk.write_bytes - before_write;
    // The next iteration starts as the step ends (its writes may still be in flight).
  }
  return out;
}

double simulate_param_pass(const std::vector<SwappedUnit>& pass, const ParamSwapShape& shape,
                           const StorageRates& rates) {
  require_rates(rates);
  TESSERA_CHECK(shape.piece_bytes > 0 && shape.buffers >= 2);
  const int units = static_cast<int>(pass.size());
  Device disk{0, 0, 0, rates};
  double t = 0, compute = 0;
  // Per unit: its pieces' sizes, how many of them are on their way (in order), when each
  // completes; whether it is gathered (waited for).
  std::vector<std::vector<double>> pieces(units), done(units);
  std::vector<int> started(units, 0);
  std::vector<bool> gathered(units, false);
  for (int u = 0; u < units; ++u) {
    for (double left = pass[u].bytes; left > 0; left -= shape.piece_bytes)
      pieces[u].push_back(std::min(left, shape.piece_bytes));
    done[u].resize(pieces[u].size());
  }
  int in_flight = 0;  // buffers holding a piece read or being read
  const auto start_piece = [&](int u) {
    done[u][started[u]] = disk.read(t, pieces[u][started[u]]);
    ++started[u];
    ++in_flight;
  };
  // ParamSwap::start_read: the unit's pieces not on their way, while buffers are free.
  const auto start_read = [&](int u) {
    while (started[u] < static_cast<int>(pieces[u].size())) {
      if (in_flight >= shape.buffers) return false;
      start_piece(u);
    }
    return true;
  };
  // ParamSwap::wait_read: the unit's pieces in order, each waited for and its buffer freed once
  // it arrives; before each, the pieces not on their way start as far as buffers are free, and
  // if the piece itself still has none, the furthest read ahead of another unit is cancelled
  // (it is read again later).
  const auto wait_read = [&](int u) {
    const int count = static_cast<int>(pieces[u].size());
    for (int k = 0; k < count; ++k) {
      while (started[u] < count && in_flight < shape.buffers) start_piece(u);
      if (started[u] == k) {
        for (int v = units - 1; v > u && in_flight >= shape.buffers; --v)
          if (!gathered[v] && started[v] > 0) {
            --started[v];
            --in_flight;
          }
        TESSERA_CHECK(in_flight < shape.buffers);  // only other units' reads ahead hold buffers
        start_piece(u);
      }
      t = std::max(t, done[u][k]);
      --in_flight;
    }
    gathered[u] = true;
  };
  // Zero3Params::read_ahead: the next units' reads in pass order, until one finds no buffer.
  const auto read_ahead = [&](int u) {
    for (int v = u + 1; v < units; ++v)
      if (!gathered[v] && !start_read(v)) return;
  };
  for (int u = 0; u < units; ++u) {
    if (!gathered[u]) wait_read(u);
    // Zero3Params::acquire: reads ahead, the gathers ahead within the window (each waiting for
    // its read), and reads ahead again into the buffers those gathers freed.
    read_ahead(u);
    double prefetched = 0;
    for (int v = u + 1; v < units; ++v) {
      if (pass[v].elements == 0) continue;  // persistent: always there
      if (gathered[v]) {
        prefetched += pass[v].elements;
        continue;
      }
      if (prefetched + pass[v].elements > shape.window) break;
      wait_read(v);
      prefetched += pass[v].elements;
    }
    read_ahead(u);
    t += pass[u].compute;
    compute += pass[u].compute;
  }
  return t - compute;
}

}  // namespace tessera::plan
