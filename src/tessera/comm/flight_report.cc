#include "tessera/comm/flight_report.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "tessera/core/error.h"

namespace tessera::comm {
namespace {

std::string seconds(int64_t us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", us / 1e6);
  return buf;
}

std::string group_text(const FlightEntry& e) {
  return "group '" + e.group + "' (world ranks " + rank_list(e.ranks) + ")";
}

// A member's state at the collective `seq` of a group (its entries on that group by seq).
struct MemberState {
  const FlightEntry* at = nullptr;    // its entry for seq, if recorded
  const FlightEntry* last = nullptr;  // its last entry on the group
  int64_t first_seq = 0;              // the oldest seq its ring still holds
};

// The first collective of a group that some member has not completed: the lowest seq recorded
// as not done on any member.
struct StuckCollective {
  uint64_t group_id = 0;
  int64_t seq = 0;
  const FlightEntry* sample = nullptr;  // a member's entry (for the description)
  int64_t waiting_since_us = 0;         // earliest start among members waiting in it
};

}  // namespace

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(ranks[i]);
  }
  return s + "]";
}

std::string FlightEntry::describe() const {
  std::string s = op;
  if (!label.empty()) s += "('" + label + "')";
  if (seq > 0) s += " #" + std::to_string(seq);
  if (seq == 0 && peer >= 0) s += " world rank " + std::to_string(peer);
  if (count >= 0)
    s += " (" + dtype + ", " + std::to_string(count) + " elements, at " + site + ")";
  else if (!site.empty())
    s += " (in " + site + ")";
  return s;
}

FlightDump parse_flight_dump(const std::string& json_text, const std::string& where) {
  try {
    const nlohmann::json j = nlohmann::json::parse(json_text);
    if (j.value("format", "") != "tessera-flight-recorder-1")
      throw Error(
          "not a Tessera flight-recorder dump (expected \"format\": "
          "\"tessera-flight-recorder-1\")");
    FlightDump d;
    d.rank = j.at("rank").get<int>();
    d.world_size = j.at("world_size").get<int>();
    d.host = j.value("host", "");
    d.reason = j.value("reason", "");
    d.dump_us = j.at("dump_us").get<int64_t>();
    for (const auto& e : j.at("entries")) {
      FlightEntry f;
      f.id = e.at("id").get<uint64_t>();
      f.group = e.at("group").get<std::string>();
      f.group_id = e.at("group_id").get<uint64_t>();
      f.ranks = e.at("ranks").get<std::vector<int>>();
      f.op = e.at("op").get<std::string>();
      f.label = e.value("label", "");
      f.seq = e.at("seq").get<int64_t>();
      f.peer = e.value("peer", -1);
      f.count = e.value("count", int64_t{-1});
      f.dtype = e.value("dtype", "");
      f.site = e.value("site", "");
      f.state = e.at("state").get<std::string>();
      f.issued_us = e.value("issued_us", int64_t{0});
      f.started_us = e.value("started_us", int64_t{0});
      f.ended_us = e.value("ended_us", int64_t{0});
      d.entries.push_back(std::move(f));
    }
    if (d.rank < 0 || d.rank >= d.world_size)
      throw Error("rank " + std::to_string(d.rank) + " outside world size " +
                  std::to_string(d.world_size));
    return d;
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": malformed flight-recorder dump: " + e.what());
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
}

std::string analyze_flight_dumps(std::vector<FlightDump> dumps) {
  TESSERA_CHECK(!dumps.empty());
  std::sort(dumps.begin(), dumps.end(),
            [](const FlightDump& a, const FlightDump& b) { return a.rank < b.rank; });
  int world_size = 0;
  std::map<int, const FlightDump*> by_rank;
  for (const FlightDump& d : dumps) {
    world_size = std::max(world_size, d.world_size);
    if (by_rank.count(d.rank)) throw Error("two dumps of world rank " + std::to_string(d.rank));
    by_rank[d.rank] = &d;
  }
  std::string out = "tessera-flight: dumps of world ranks ";
  std::vector<int> dumped, missing;
  for (int r = 0; r < world_size; ++r) (by_rank.count(r) ? dumped : missing).push_back(r);
  out += rank_list(dumped) + " of " + std::to_string(world_size);
  if (!missing.empty()) out += "; no dump from " + rank_list(missing) + " (dead or unreachable)";
  out += "\n";
  for (const FlightDump& d : dumps)
    out += "  rank " + std::to_string(d.rank) + " (" + d.host + "): " + d.reason + "\n";

  // Per group and member: its collectives by seq; per rank: whether it waits anywhere.
  std::map<uint64_t, const FlightEntry*> group_sample;
  std::map<std::pair<uint64_t, int>, std::map<int64_t, const FlightEntry*>> collectives;
  std::map<int, const FlightEntry*> last_of_rank;
  std::set<int> waiting_ranks;
  for (const FlightDump& d : dumps) {
    for (const FlightEntry& e : d.entries) {
      last_of_rank[d.rank] = &e;
      // Waiting: inside a collective it started. A posted point-to-point receive (a pipeline's
      // next activation) or an issued, unstarted operation does not make a rank a victim.
      if (!e.done() && e.seq > 0 && e.started_us != 0) waiting_ranks.insert(d.rank);
      if (e.seq <= 0) continue;
      group_sample.emplace(e.group_id, &e);
      collectives[{e.group_id, d.rank}][e.seq] = &e;
    }
  }

  std::vector<StuckCollective> stuck;
  for (const auto& [gid, sample] : group_sample) {
    StuckCollective s{gid, 0, nullptr, 0};
    for (int r : sample->ranks) {
      auto it = collectives.find({gid, r});
      if (it == collectives.end()) continue;
      for (const auto& [seq, e] : it->second) {
        if (e->done() || (s.seq != 0 && seq > s.seq)) continue;
        if (s.seq == 0 || seq < s.seq) s = StuckCollective{gid, seq, e, 0};
      }
    }
    if (s.seq == 0) continue;
    for (int r : sample->ranks) {
      auto it = collectives.find({gid, r});
      if (it == collectives.end()) continue;
      auto at = it->second.find(s.seq);
      if (at == it->second.end() || at->second->done() || at->second->started_us == 0) continue;
      const int64_t t = at->second->started_us;
      s.waiting_since_us = s.waiting_since_us == 0 ? t : std::min(s.waiting_since_us, t);
    }
    stuck.push_back(s);
  }
  std::sort(stuck.begin(), stuck.end(), [](const StuckCollective& a, const StuckCollective& b) {
    // Collectives nobody has started (no wait time) last.
    const auto key = [](const StuckCollective& s) {
      return s.waiting_since_us == 0 ? INT64_MAX : s.waiting_since_us;
    };
    return key(a) < key(b);
  });

  // Ranks that did not reach a collective others waited in, and those that waited.
  std::map<int, std::vector<const StuckCollective*>> did_not_reach;
  std::map<const StuckCollective*, std::vector<int>> waited;
  bool all_entered_somewhere = false;
  if (!stuck.empty()) out += "collectives not completed by every member (earliest wait first):\n";
  for (const StuckCollective& s : stuck) {
    out += "  " + group_text(*s.sample) + ": " + s.sample->describe() + "\n";
    bool everyone_entered = true;
    for (int r : s.sample->ranks) {
      out += "    rank " + std::to_string(r) + ": ";
      auto dump = by_rank.find(r);
      if (dump == by_rank.end()) {
        out += "no dump\n";
        everyone_entered = false;
        continue;
      }
      MemberState m;
      auto it = collectives.find({s.group_id, r});
      if (it != collectives.end()) {
        auto at = it->second.find(s.seq);
        if (at != it->second.end()) m.at = at->second;
        m.last = it->second.rbegin()->second;
        m.first_seq = it->second.begin()->first;
      }
      if (m.at != nullptr) {
        if (m.at->done()) {
          out += "completed it\n";
        } else if (m.at->started_us != 0) {
          out += "waiting in it, " + seconds(dump->second->dump_us - m.at->started_us) +
                 " at its dump\n";
          waited[&s].push_back(r);
        } else {
          out += "issued it, not started (its communication thread was busy)\n";
          waited[&s].push_back(r);
        }
        continue;
      }
      everyone_entered = false;
      if (m.last != nullptr && m.first_seq > s.seq) {
        out += "its record no longer holds #" + std::to_string(s.seq) +
               " (a larger --flight-recorder-size keeps more)\n";
        continue;
      }
      did_not_reach[r].push_back(&s);
      out += "did not reach it; last on this group: " +
             (m.last ? m.last->describe() + ", " + m.last->state : std::string("nothing")) + "\n";
    }
    all_entered_somewhere = all_entered_somewhere || everyone_entered;
  }

  // Pending point-to-point transfers.
  std::string p2p;
  for (const FlightDump& d : dumps)
    for (const FlightEntry& e : d.entries)
      if (e.seq == 0 && !e.done())
        p2p += "  rank " + std::to_string(d.rank) + ": " + e.describe() + " on " + group_text(e) +
               ", " + e.state + "\n";
  if (!p2p.empty()) out += "point-to-point transfers not completed:\n" + p2p;

  // The verdict: a rank that others waited for while it waited for nothing is where the job
  // stopped; one that did not arrive but waits itself elsewhere is a victim of another.
  std::vector<std::string> verdicts;
  for (const auto& [r, where] : did_not_reach) {
    if (waiting_ranks.count(r)) continue;
    // A rank whose dump came from a crash signal (not the launcher's SIGTERM) crashed there.
    const std::string& reason = by_rank[r]->reason;
    const bool crashed = reason.rfind("signal ", 0) == 0 && reason.rfind("signal 15 ", 0) != 0;
    std::string v = "world rank " + std::to_string(r) +
                    (crashed ? " crashed (" + reason + ")" : " stopped outside communication") +
                    ": it did not reach ";
    std::set<int> waiters;
    for (size_t i = 0; i < where.size(); ++i) {
      v += (i ? (i + 1 == where.size() ? " nor " : ", ") : "") + where[i]->sample->describe() +
           " on " + group_text(*where[i]->sample);
      for (int w : waited[where[i]]) waiters.insert(w);
    }
    if (!waiters.empty())
      v += ", where world ranks " + rank_list({waiters.begin(), waiters.end()}) + " waited";
    if (const FlightEntry* last = last_of_rank.count(r) ? last_of_rank[r] : nullptr)
      v += "; its last operation: " + last->describe() + " on " + group_text(*last) + ", " +
           last->state + " " +
           seconds(by_rank[r]->dump_us - (last->ended_us ? last->ended_us : last->issued_us)) +
           " before its dump";
    verdicts.push_back(v);
  }
  if (verdicts.empty() && !missing.empty())
    verdicts.push_back("world ranks " + rank_list(missing) +
                       " left no dump (dead or unreachable): start there");
  if (verdicts.empty() && all_entered_somewhere)
    verdicts.push_back("every member entered " + stuck.front().sample->describe() + " on " +
                       group_text(*stuck.front().sample) +
                       ": the transfer itself did not complete (network, MPI)");
  // A point-to-point transfer waits for its peer: a peer that has nothing pending towards the
  // waiting rank and is inside no collective stopped outside communication.
  if (verdicts.empty() && !p2p.empty()) {
    std::set<std::pair<int, int>> pending;  // (rank, peer) with a transfer not completed
    for (const FlightDump& d : dumps)
      for (const FlightEntry& e : d.entries)
        if (e.seq == 0 && !e.done() && e.peer >= 0) pending.insert({d.rank, e.peer});
    std::map<int, std::string> stopped;  // peer -> the first transfer that waited for it
    for (const FlightDump& d : dumps)
      for (const FlightEntry& e : d.entries) {
        if (e.seq != 0 || e.done() || e.peer < 0 || stopped.count(e.peer) ||
            !by_rank.count(e.peer) || pending.count({e.peer, d.rank}) ||
            waiting_ranks.count(e.peer))
          continue;
        stopped[e.peer] = e.describe() + " of world rank " + std::to_string(d.rank);
      }
    for (const auto& [r, what] : stopped) {
      std::string v = "world rank " + std::to_string(r) +
                      " stopped outside communication: it did not take part in " + what;
      if (const FlightEntry* last = last_of_rank.count(r) ? last_of_rank[r] : nullptr)
        v += "; its last operation: " + last->describe() + " on " + group_text(*last) + ", " +
             last->state;
      verdicts.push_back(v);
    }
    if (verdicts.empty()) verdicts.push_back("a point-to-point transfer above did not complete");
  }
  if (verdicts.empty()) verdicts.push_back("no operation was waiting at the dumps");
  for (const std::string& v : verdicts) out += "verdict: " + v + ".\n";
  return out;
}

}  // namespace tessera::comm
