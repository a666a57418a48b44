// Reading flight-recorder dumps (comm/flight_recorder.h writes them; the format is in
// docs/observability.md) and saying where a hung job stopped, as PyTorch's flight recorder
// analyser (tools/flight_recorder, "fr_trace") does for NCCL dumps: match every group's
// collectives across its members by sequence number, find the first one some member waited in
// while another never reached it, and name the rank that stopped outside communication.
//
// Pure functions of the dumps' text: no MPI, no files (tools/tessera-flight.cc reads them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::comm {

// One recorded operation.
struct FlightEntry {
  uint64_t id = 0;  // issue order within its rank
  std::string group;
  uint64_t group_id = 0;   // the same on every member; names alone repeat ('dp' of each replica)
  std::vector<int> ranks;  // world ranks of the group
  std::string op, label;
  int64_t seq = 0;  // collective sequence number on the group; 0: point-to-point
  int peer = -1;    // point-to-point: the peer's world rank
  int64_t count = -1;
  std::string dtype, site;
  std::string state;  // "issued", "started", "completed", "failed"
  int64_t issued_us = 0, started_us = 0, ended_us = 0;

  bool done() const { return state == "completed" || state == "failed"; }
  // "all_reduce #27 (fp32, 4096 elements, at mappings.cc:23)", "send to world rank 3 (...)".
  std::string describe() const;
};

// One rank's dump.
struct FlightDump {
  int rank = 0, world_size = 1;
  std::string host, reason;
  int64_t dump_us = 0;
  std::vector<FlightEntry> entries;  // oldest first
};

// "[0,1,3]": world ranks as the watchdog and the report print them.
std::string rank_list(const std::vector<int>& ranks);

// Parses one dump; `where` (a file name) prefixes the tessera::Error a malformed dump throws.
FlightDump parse_flight_dump(const std::string& json_text, const std::string& where);

// The report: which ranks dumped (and which did not), every group's first collective that not
// all members completed with each member's state at it, pending point-to-point transfers, and
// a verdict line starting "verdict: ": a rank that did not reach a collective others waited in,
// while it was inside no started collective itself, stopped outside communication (or crashed,
// if its dump came from a crash signal); a rank waiting in another collective is a victim.
// `dumps` may come in any order; at least one.
std::string analyze_flight_dumps(std::vector<FlightDump> dumps);

}  // namespace tessera::comm
