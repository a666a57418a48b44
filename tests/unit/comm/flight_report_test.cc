// tessera-flight's analysis on hand-made dumps: the rank that never reached a collective its
// peer waited in is named; a rank waiting elsewhere is a victim, not the verdict; a member whose
// ring no longer holds the collective is not blamed; every member inside it means the transfer
// is stuck; a missing dump is reported; malformed dumps throw naming the file.
#include "tessera/comm/flight_report.h"

#include <gtest/gtest.h>

#include <string>

#include "tessera/core/error.h"

namespace tessera::comm {
namespace {

FlightEntry collective(uint64_t id, const std::string& group, uint64_t gid, std::vector<int> ranks,
                       int64_t seq, const std::string& state) {
  FlightEntry e;
  e.id = id;
  e.group = group;
  e.group_id = gid;
  e.ranks = std::move(ranks);
  e.op = "all_reduce";
  e.seq = seq;
  e.count = 8;
  e.dtype = "fp32";
  e.site = "x.cc:" + std::to_string(10 + seq);
  e.state = state;
  e.issued_us = 1000 * id;
  e.started_us = state == "issued" ? 0 : 1000 * id + 1;
  e.ended_us = state == "completed" ? 1000 * id + 2 : 0;
  return e;
}

FlightDump dump(int rank, int world, std::vector<FlightEntry> entries) {
  FlightDump d;
  d.rank = rank;
  d.world_size = world;
  d.reason = "test";
  d.dump_us = 3'000'000;
  d.entries = std::move(entries);
  return d;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(FlightReport, NamesTheRankThatNeverArrivedNotItsVictims) {
  // Ranks 0,1 form 'tp' (id 7); ranks 1,2 form 'dp' (id 9). Rank 0 stopped after tp #1; rank 1
  // waits in tp #2, so it never reached dp #1, where rank 2 waits.
  const std::vector<FlightDump> dumps = {
      dump(0, 3, {collective(1, "tp", 7, {0, 1}, 1, "completed")}),
      dump(1, 3,
           {collective(1, "tp", 7, {0, 1}, 1, "completed"),
            collective(2, "tp", 7, {0, 1}, 2, "started")}),
      dump(2, 3, {collective(1, "dp", 9, {1, 2}, 1, "started")})};
  const std::string r = analyze_flight_dumps(dumps);
  EXPECT_TRUE(has(r, "dumps of world ranks [0,1,2] of 3\n")) << r;
  EXPECT_TRUE(has(r, "    rank 0: did not reach it; last on this group: all_reduce #1")) << r;
  EXPECT_TRUE(has(r, "    rank 1: waiting in it, ")) << r;
  EXPECT_TRUE(has(r,
                  "verdict: world rank 0 stopped outside communication: it did not reach "
                  "all_reduce #2 (fp32, 8 elements, at x.cc:12) on group 'tp' (world ranks "
                  "[0,1]), where world ranks [1] waited"))
      << r;
  EXPECT_FALSE(has(r, "verdict: world rank 1")) << r;  // it waits: a victim
}

TEST(FlightReport, ARingThatLostTheCollectiveIsNotBlamed) {
  // Rank 1's ring starts at seq 5: it cannot say whether it reached seq 2.
  const std::vector<FlightDump> dumps = {
      dump(0, 2, {collective(1, "dp", 9, {0, 1}, 2, "started")}),
      dump(1, 2, {collective(9, "dp", 9, {0, 1}, 5, "completed")})};
  const std::string r = analyze_flight_dumps(dumps);
  EXPECT_TRUE(has(r, "rank 1: its record no longer holds #2")) << r;
  EXPECT_FALSE(has(r, "stopped outside communication")) << r;
}

TEST(FlightReport, EveryMemberInsideMeansTheTransferIsStuck) {
  const std::vector<FlightDump> dumps = {
      dump(0, 2, {collective(1, "world", 1, {0, 1}, 1, "started")}),
      dump(1, 2, {collective(1, "world", 1, {0, 1}, 1, "started")})};
  EXPECT_TRUE(has(analyze_flight_dumps(dumps),
                  "verdict: every member entered all_reduce #1 (fp32, 8 elements, at x.cc:11) on "
                  "group 'world' (world ranks [0,1]): the transfer itself did not complete"));
}

TEST(FlightReport, AMissingDumpIsReported) {
  const std::vector<FlightDump> dumps = {
      dump(0, 2, {collective(1, "world", 1, {0, 1}, 1, "started")})};
  const std::string r = analyze_flight_dumps(dumps);
  EXPECT_TRUE(has(r, "no dump from [1] (dead or unreachable)")) << r;
  EXPECT_TRUE(has(r, "    rank 1: no dump\n")) << r;
  EXPECT_TRUE(has(r, "verdict: world ranks [1] left no dump")) << r;
}

TEST(FlightReport, MalformedDumpsThrowNamingTheFile) {
  EXPECT_THROW(parse_flight_dump("{", "a.json"), Error);
  try {
    parse_flight_dump(R"({"format": "other"})", "b.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "b.json: not a Tessera flight-recorder dump")) << e.what();
  }
  try {
    parse_flight_dump(R"({"format": "tessera-flight-recorder-1", "rank": 0})", "c.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "c.json: malformed flight-recorder dump")) << e.what();
  }
}

}  // namespace
}  // namespace tessera::comm
