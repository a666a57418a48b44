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
//    connected socket or both get nullptr (then the caller keeps MPI's transport). It fails
//    when either member has TESSERA_PAIR_SOCKET=0 in its environment, has no IPv4 address
//    besides loopback, or cannot connect within a few seconds (a firewall); rank 0 of `comm`
//    then prints one warning line naming the reason. The member of rank 0 connects to the other's
//    listening port (an ephemeral one on every address); each side sends the random 64-bit cookie
//    it gave the other over MPI and checks the other's, so a stray connection to the port is
//    refused and a connection to some other listener is not taken for the peer.
//  - send_all / recv_all move exactly `bytes` and block until done; one thread may send while
//    another receives. Both members must move the same byte sequence in the same order (the pair
//    operations run one at a time and in the same order on both). A failure (the peer gone) throws
//    Error naming the host and errno; abort() (any thread) makes the other side's blocked call
//    fail at once, so a thread can stop its partner before joining it.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>

namespace tessera::comm::detail {

class PairSocket {
 public:
  static std::unique_ptr<PairSocket> connect(MPI_Comm comm);
  ~PairSocket();
  PairSocket(const PairSocket&) = delete;
  PairSocket& operator=(const PairSocket&) = delete;

  void send_all(const void* data, int64_t bytes);
  void recv_all(void* data, int64_t bytes);
  void abort();

 private:
  PairSocket(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {}
  int fd_;
  std::string peer_;  // "host (address:port)" for error messages
};

}  // namespace tessera::comm::detail
