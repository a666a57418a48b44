#include "tessera/distributed/zero3_params.h"

#include <algorithm>
#include <string>

#include "tessera/core/error.h"
#include "tessera/core/memory.h"

namespace tessera::distributed {

bool persistent_unit(int64_t elems, int parts, int64_t persistence_threshold, bool offload) {
  return (parts == 1 && !offload) || elems < persistence_threshold;
}

void require_live_limit(int64_t max_live_elems, int64_t persistent_elems, int64_t largest) {
  if (largest > 0 && persistent_elems + largest > max_live_elems)
    throw Error("--stage3-max-live-parameters " + std::to_string(max_live_elems) +
                " is below what one step needs live: " + std::to_string(persistent_elems) +
                " persistent + " + std::to_string(largest) + " of the largest unit");
}

Zero3Params::Zero3Params(model::ParameterSet& params, std::shared_ptr<comm::ProcessGroup> dp,
                         std::vector<FlatRange> units, const ShardingPlan& plan,
                         std::shared_ptr<comm::ProcessGroup> expert_dp, std::vector<bool> expert,
                         PartSwap* swap)
    : params_(params),
      dp_(std::move(dp)),
      expert_dp_(std::move(expert_dp)),
      units_(std::move(units)),
      prefetch_elems_(plan.prefetch_elems),
      max_live_elems_(plan.max_live_elems),
      swap_(swap) {
  const int64_t persistence_threshold = plan.persistence_threshold;
  const size_t n = units_.size();
  persistent_.resize(n);
  expert_ = expert.empty() ? std::vector<bool>(n, false) : std::move(expert);
  TESSERA_CHECK(expert_.size() == n);
  state_.assign(n, State::kWhole);
  uses_.assign(n, 0);
  work_.resize(n);
  send_.resize(n);
  int64_t persistent_elems = 0, largest = 0;
  for (size_t u = 0; u < n; ++u) {
    const int parts = size_of(static_cast<int>(u));
    TESSERA_CHECK(units_[u].size() % parts == 0);
    persistent_[u] =
        persistent_unit(units_[u].size(), parts, persistence_threshold, swap_ != nullptr);
    if (persistent_[u])
      persistent_elems += units_[u].size();
    else
      largest = std::max(largest, units_[u].size());
  }
  require_live_limit(max_live_elems_, persistent_elems, largest);
  if (swap_) {
    // The initial owned parts go to disk first (drop() only releases a part read back).
    std::vector<PartSwap::Range> parts(n, {0, 0});
    for (size_t u = 0; u < n; ++u) {
      const FlatRange mine = owned_part(static_cast<int>(u));
      if (!persistent_[u]) parts[u] = {mine.begin, mine.end};
    }
    swap_->initialize(params_.flat_values(), std::move(parts));
    swap_->write_out_all();
  }
  for (size_t u = 0; u < n; ++u)
    if (!persistent_[u]) drop(static_cast<int>(u));
}

std::vector<std::pair<int64_t, int64_t>> Zero3Params::resident_ranges(
    const std::vector<std::pair<int64_t, int64_t>>& units, int dp_size, int dp_rank,
    int64_t persistence_threshold, const std::vector<bool>& expert, int edp_size, int edp_rank) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (size_t u = 0; u < units.size(); ++u) {
    const auto [b, e] = units[u];
    const bool over_edp = !expert.empty() && expert[u];
    const int parts = over_edp ? edp_size : dp_size, part = over_edp ? edp_rank : dp_rank;
    if (persistent_unit(e - b, parts, persistence_threshold, false)) {
      out.push_back({b, e});
    } else {
      const FlatRange mine = part_of({b, e}, parts, part);
      out.push_back({mine.begin, mine.end});
    }
  }
  return out;
}

Zero3Params::~Zero3Params() {
  for (const comm::Work& w : work_) w.wait();
}

int64_t Zero3Params::live_elems() const {
  int64_t total = 0;
  for (size_t u = 0; u < units_.size(); ++u)
    if (state_[u] != State::kDropped) total += units_[u].size();
  return total;
}

void Zero3Params::start_gather(int u) {
  if (swap_) swap_->wait_read(u);
  if (size_of(u) == 1) {  // the owned part is the whole unit
    state_[u] = State::kWhole;
    return;
  }
  const FlatRange mine = owned_part(u);
  Tensor& values = params_.flat_values();
  // The input may not alias the output: send a copy of the owned part.
  send_[u] = values.slice_rows(mine.begin, mine.end).clone(MemoryCategory::kComm);
  Tensor whole = values.slice_rows(units_[u].begin, units_[u].end);
  work_[u] = group_of(u)->all_gather(send_[u], whole);
  state_[u] = State::kGathering;
}

void Zero3Params::wait_gather(int u) {
  work_[u].wait();
  work_[u] = comm::Work();
  send_[u] = Tensor();
  state_[u] = State::kWhole;
}

void Zero3Params::drop(int u) {
  const FlatRange mine = owned_part(u), unit = units_[u];
  Tensor& values = params_.flat_values();
  const size_t elem = dtype_size(values.dtype());
  auto* base = static_cast<uint8_t*>(values.raw());
  release_pages(base + unit.begin * elem, (mine.begin - unit.begin) * elem);
  release_pages(base + mine.end * elem, (unit.end - mine.end) * elem);
  if (swap_) swap_->release(u);
  state_[u] = State::kDropped;
}

void Zero3Params::begin_pass(const std::vector<int>& order) {
  order_ = order;  // into the previous pass's storage: no allocation once it is large enough
  next_in_order_ = 0;
  read_ahead();
}

void Zero3Params::read_ahead() {
  if (!swap_) return;
  for (size_t i = next_in_order_; i < order_.size(); ++i)
    if (state_[order_[i]] == State::kDropped && !swap_->start_read(order_[i])) return;
}

bool Zero3Params::prefetched(int u) const {
  return state_[u] != State::kDropped && uses_[u] == 0 && !persistent_[u];
}

int64_t Zero3Params::prefetched_elems() const {
  int64_t total = 0;
  for (size_t u = 0; u < units_.size(); ++u)
    if (prefetched(static_cast<int>(u))) total += units_[u].size();
  return total;
}

void Zero3Params::make_room(int64_t elems) {
  int64_t live = live_elems();
  const auto drop_now = [&](int u) {
    if (state_[u] == State::kGathering) wait_gather(u);
    drop(u);
    live -= units_[u].size();
  };
  // Units gathered ahead for another pass go first (this pass will not use them), then this
  // pass's prefetched units from its far end (the nearest is the next one needed).
  std::vector<bool> in_pass(units_.size(), false);
  for (int u : order_) in_pass[u] = true;
  for (size_t u = 0; u < units_.size() && live + elems > max_live_elems_; ++u)
    if (!in_pass[u] && prefetched(static_cast<int>(u))) drop_now(static_cast<int>(u));
  for (size_t i = order_.size(); i-- > 0 && live + elems > max_live_elems_;)
    if (prefetched(order_[i])) drop_now(order_[i]);
}

void Zero3Params::acquire(int u) {
  TESSERA_CHECK(u >= 0 && u < static_cast<int>(units_.size()));
  if (state_[u] == State::kDropped) {
    // stage3_max_live_parameters holds on every gather: prefetched units give way first. What
    // is in use (a recompute group's layers) stays, even above the limit: the model needs it.
    make_room(units_[u].size());
    start_gather(u);
  }
  if (state_[u] == State::kGathering) wait_gather(u);
  ++uses_[u];
  // Prefetch only along the announced pass: an out-of-order acquisition (a recompute group's
  // earlier layers) prefetches nothing.
  if (next_in_order_ >= order_.size() || u != order_[next_in_order_]) return;
  ++next_in_order_;
  // Offload: the reads of the next units' owned parts first, so that the gathers below wait
  // for reads started units ago, not now.
  read_ahead();
  // DeepSpeed's stage3_prefetch_bucket_size: gather the pass's next units ahead, in order, while
  // the prefetched-but-unused elements fit the bucket and everything live fits the limit.
  int64_t prefetched = prefetched_elems(), live = live_elems();
  for (size_t i = next_in_order_; i < order_.size(); ++i) {
    const int next = order_[i];
    if (state_[next] != State::kDropped) continue;  // already live (persistent, or prefetched)
    const int64_t size = units_[next].size();
    if (prefetched + size > prefetch_elems_ || live + size > max_live_elems_) break;
    start_gather(next);
    prefetched += size;
    live += size;
  }
  // The buffers those gathers' reads freed go to the units after them.
  read_ahead();
}

void Zero3Params::release(int u) {
  TESSERA_CHECK(uses_[u] > 0);
  if (--uses_[u] > 0 || persistent_[u]) return;
  drop(u);
}

void Zero3Params::quiesce() {
  for (size_t u = 0; u < units_.size(); ++u) {
    if (state_[u] == State::kGathering) wait_gather(static_cast<int>(u));
    if (state_[u] == State::kWhole && uses_[u] == 0 && !persistent_[u]) drop(static_cast<int>(u));
  }
  if (swap_) swap_->cancel_reads();
}

void Zero3Params::after_step() {
  if (swap_) swap_->write_out_all();
  // Units sharded over a group of one are whole already.
  const auto regather = [&](size_t u) {
    return persistent_[u] && size_of(static_cast<int>(u)) > 1;
  };
  for (size_t u = 0; u < units_.size(); ++u)
    if (regather(u)) start_gather(static_cast<int>(u));
  for (size_t u = 0; u < units_.size(); ++u)
    if (regather(u)) wait_gather(static_cast<int>(u));
}

}  // namespace tessera::distributed
