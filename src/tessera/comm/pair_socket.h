// Internal to comm/: a TCP connection of its own between the two members of a pair group on
// different hosts, which the pair exchanges (pair_reduction.h) move their bytes over instead of
// MPI's TCP transport.
//
// Why: Open MPI 4.1's TCP transport moves data only while a thread is inside MPI (a test, a
// wait), so a transfer that lasts as long as a slow link needs must be polled all along. On two
// shaped 1 Gbit/s "hosts" (scripts/multihost.sh) with one core each, an all-reduce of 524 MB
// through the pair exchange polled every 20 us cost 27% of a core per rank (mostly system time)
// and ran at 104-114 MB/s each way; polling every 500 us cut the cost to 9% but left the link
// idle between chunks under a computing thread, and two sends in flight instead of one ran at 79
// MB/s (2026-12-05, docs/distributed.md). A plain socket is moved by the kernel: the threads
// block in send and recv and wake when the kernel has room or data. Gloo (PyTorch's CPU
// collectives) talks to its peers over plain TCP the same way.
//
// Contract:
//  - PairSocket::connect(comm) is collective over the two members of `comm`; both get a
//    connected socket or both get nullptr (then the caller keeps MPI's transport, and rank 0 of
//    `comm` prints one warning line naming the reason). It fails when either member has
//    TESSERA_PAIR_SOCKET=0 in its environment, has no IPv4 address besides loopback, or cannot
//    connect: rank 0 tries rank 1's addresses (those on TESSERA_PAIR_SOCKET_IF's networks, else
//    on Open MPI's btl_tcp_if_include, else all; a CIDR or an interface name each) for
//    kPairConnectMillis each, rank 1 accepts on an ephemeral port of every address until rank 0's
//    attempts are over. Each side sends the random 64-bit cookie it gave the other over MPI and
//    checks the other's, so a stray connection to the port is refused and some other program's
//    listener is not taken for the peer. TESSERA_PAIR_SOCKET=verbose (on either member) makes
//    rank 0 print the connection made; another value than 0, 1 or verbose throws Error.
//  - send_all / recv_all move exactly `bytes` and block until done; one thread may send while
//    another receives. Both members must move the same byte sequence in the same order (the pair
//    operations run one at a time and in the same order on both); send_header / expect_header
//    frame each exchange (its number and size), so members that disagree get an Error naming both
//    sizes instead of reading one exchange's bytes as another's. A failure (the peer gone) throws
//    Error naming the peer and errno; abort() (any thread) makes the other side's blocked call
//    fail at once, so a thread can stop its partner before joining it.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>

namespace tessera::comm::detail {

constexpr int kPairConnectMillis = 3000;      // one connection attempt, and a cookie's wait
constexpr int kPairAcceptSlackMillis = 2000;  // the accepting member's wait beyond the attempts

class PairSocket {
 public:
  static std::unique_ptr<PairSocket> connect(MPI_Comm comm);
  ~PairSocket();
  PairSocket(const PairSocket&) = delete;
  PairSocket& operator=(const PairSocket&) = delete;

  void send_all(const void* data, int64_t bytes);
  void recv_all(void* data, int64_t bytes);
  void send_header(int64_t bytes);    // the sending thread's, before an exchange's bytes
  void expect_header(int64_t bytes);  // the receiving thread's, before an exchange's bytes
  void abort();

 private:
  PairSocket(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {}
  int fd_;
  std::string peer_;                // "host (address:port)" for messages
  int64_t sent_exchanges_ = 0;      // the sending thread's count
  int64_t received_exchanges_ = 0;  // the receiving thread's count
};

}  // namespace tessera::comm::detail
