#include "tessera/comm/pair_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "tessera/core/error.h"

namespace tessera::comm::detail {
namespace {

constexpr int kMaxAddresses = 8;
constexpr int kSetupTag = 32001;  // above the exchanges' chunk tags (pair_reduction.cc)
// How long one connection attempt may take before the next address is tried, and how long the
// accepting member waits beyond the connecting member's attempts.
constexpr int kConnectMillis = 3000;
constexpr int kAcceptSlackMillis = 2000;

// What each member tells the other before connecting (exchanged over MPI, as bytes).
struct Offer {
  int32_t usable = 0;                 // 0: this member cannot or will not use a socket
  uint16_t port = 0;                  // rank 1's listening port (network order)
  int32_t addresses = 0;              // how many of `address` are filled
  uint32_t address[kMaxAddresses]{};  // IPv4, network order
  uint32_t netmask[kMaxAddresses]{};
  uint64_t cookie = 0;  // what the connecting member proves itself with
  char host[64]{};      // MPI_Get_processor_name, for messages
  char reason[160]{};   // why usable is 0
};

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

std::string dotted(uint32_t address) {
  char text[INET_ADDRSTRLEN] = "?";
  in_addr a{};
  a.s_addr = address;
  inet_ntop(AF_INET, &a, text, sizeof text);
  return text;
}

void set_reason(Offer& offer, const std::string& why) {
  offer.usable = 0;
  std::snprintf(offer.reason, sizeof offer.reason, "%s", why.c_str());
}

// This host's IPv4 addresses that are up, loopback excepted (it cannot reach another host).
void fill_addresses(Offer& offer) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return set_reason(offer, errno_text("getifaddrs"));
  for (ifaddrs* it = list; it != nullptr && offer.addresses < kMaxAddresses; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
    if (!(it->ifa_flags & IFF_UP) || (it->ifa_flags & IFF_LOOPBACK)) continue;
    offer.address[offer.addresses] = reinterpret_cast<sockaddr_in*>(it->ifa_addr)->sin_addr.s_addr;
    offer.netmask[offer.addresses] =
        it->ifa_netmask ? reinterpret_cast<sockaddr_in*>(it->ifa_netmask)->sin_addr.s_addr : 0;
    ++offer.addresses;
  }
  freeifaddrs(list);
  if (offer.addresses == 0) set_reason(offer, "no IPv4 address besides loopback");
}

// A listening socket on every address, on a port the kernel picks; -1 (and the reason) if not.
int listen_any(Offer& offer) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return set_reason(offer, errno_text("socket")), -1;
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t length = sizeof any;
  if (bind(fd, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0 || listen(fd, 4) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&any), &length) != 0) {
    set_reason(offer, errno_text("listen"));
    close(fd);
    return -1;
  }
  offer.port = any.sin_port;
  return fd;
}

// Waits until fd is ready for `events` or the deadline passes; false on timeout.
bool wait_ready(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, static_cast<int>(left.count()));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

bool make_blocking_and_fast(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  const int one = 1;
  // No Nagle: an exchange's last segment must not wait for the peer's delayed acknowledgement.
  return flags >= 0 && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0 &&
         setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0;
}

// The peer's addresses, those on a subnet of one of ours first (the route most likely direct).
std::vector<uint32_t> addresses_to_try(const Offer& mine, const Offer& theirs) {
  std::vector<uint32_t> near, far;
  for (int i = 0; i < theirs.addresses; ++i) {
    bool same_subnet = false;
    for (int j = 0; j < mine.addresses; ++j)
      same_subnet |= (theirs.address[i] & mine.netmask[j]) == (mine.address[j] & mine.netmask[j]);
    (same_subnet ? near : far).push_back(theirs.address[i]);
  }
  near.insert(near.end(), far.begin(), far.end());
  return near;
}

// The connecting member: the first of the peer's addresses where the peer answers (each side
// sends its cookie, each checks the other's).
int connect_to(const Offer& mine, const Offer& theirs, std::string& reason, std::string& peer) {
  for (uint32_t address : addresses_to_try(mine, theirs)) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return reason = errno_text("socket"), -1;
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = theirs.port;
    to.sin_addr.s_addr = address;
    peer = std::string(theirs.host) + " (" + dotted(address) + ":" +
           std::to_string(ntohs(theirs.port)) + ")";
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(kConnectMillis);
    int error = 0;
    socklen_t length = sizeof error;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0 && errno != EINPROGRESS) {
      error = errno;
    } else if (!wait_ready(fd, POLLOUT, deadline)) {
      error = ETIMEDOUT;
    } else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) {
      error = errno;
    }
    // The peer answers with its own cookie: an address of this host's own that shares the peer's
    // subnet (a container bridge on every machine) may lead to some other listener.
    uint64_t answer = 0;
    if (error == 0 && make_blocking_and_fast(fd) &&
        send(fd, &mine.cookie, sizeof mine.cookie, MSG_NOSIGNAL) ==
            static_cast<ssize_t>(sizeof mine.cookie) &&
        wait_ready(fd, POLLIN, deadline) &&
        recv(fd, &answer, sizeof answer, MSG_WAITALL) == static_cast<ssize_t>(sizeof answer) &&
        answer == theirs.cookie)
      return fd;
    reason = "cannot connect to " + peer + ": " +
             (error ? std::strerror(error) : "no answer with the peer's cookie");
    close(fd);
  }
  return -1;
}

// The accepting member: the first connection that presents the connecting member's cookie,
// answered with this member's.
int accept_from(int listener, const Offer& mine, const Offer& theirs, std::string& reason) {
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(kConnectMillis * mine.addresses + kAcceptSlackMillis);
  reason = std::string("no connection from ") + theirs.host + " within " +
           std::to_string((kConnectMillis * mine.addresses + kAcceptSlackMillis) / 1000) + " s";
  while (wait_ready(listener, POLLIN, deadline)) {
    const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    uint64_t cookie = 0;
    if (wait_ready(fd, POLLIN, deadline) &&
        recv(fd, &cookie, sizeof cookie, MSG_WAITALL) == static_cast<ssize_t>(sizeof cookie) &&
        cookie == theirs.cookie && make_blocking_and_fast(fd) &&
        send(fd, &mine.cookie, sizeof mine.cookie, MSG_NOSIGNAL) ==
            static_cast<ssize_t>(sizeof mine.cookie))
      return fd;
    close(fd);  // a stray connection, or one that said nothing
  }
  return -1;
}

}  // namespace

std::unique_ptr<PairSocket> PairSocket::connect(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  Offer mine;
  mine.usable = 1;
  int name_length = 0;
  char name[MPI_MAX_PROCESSOR_NAME] = "";
  MPI_Get_processor_name(name, &name_length);
  std::snprintf(mine.host, sizeof mine.host, "%s", name);
  int listener = -1;
  if (const char* v = std::getenv("TESSERA_PAIR_SOCKET"); v != nullptr && std::string(v) == "0") {
    set_reason(mine, std::string("TESSERA_PAIR_SOCKET=0 on ") + mine.host);
  } else {
    fill_addresses(mine);
    if (mine.usable && rank == 1) listener = listen_any(mine);  // rank 0 connects
    std::random_device random;
    mine.cookie = (uint64_t{random()} << 32) ^ random();
  }
  Offer theirs;
  MPI_Sendrecv(&mine, sizeof mine, MPI_BYTE, 1 - rank, kSetupTag, &theirs, sizeof theirs, MPI_BYTE,
               1 - rank, kSetupTag, comm, MPI_STATUS_IGNORE);
  int fd = -1;
  std::string reason = mine.usable ? theirs.reason : mine.reason, peer = theirs.host;
  if (mine.usable && theirs.usable) {
    fd = rank == 0 ? connect_to(mine, theirs, reason, peer)
                   : accept_from(listener, mine, theirs, reason);
  }
  if (listener >= 0) close(listener);
  int connected = fd >= 0 ? 1 : 0, both = 0;
  MPI_Allreduce(&connected, &both, 1, MPI_INT, MPI_MIN, comm);
  if (both) return std::unique_ptr<PairSocket>(new PairSocket(fd, peer));
  if (fd >= 0) close(fd);
  // Rank 0 says why, with the peer's reason if its own side went well.
  char peer_reason[sizeof mine.reason] = "";
  std::snprintf(peer_reason, sizeof peer_reason, "%s", connected ? "" : reason.c_str());
  char other[sizeof mine.reason] = "";
  MPI_Sendrecv(peer_reason, sizeof peer_reason, MPI_BYTE, 1 - rank, kSetupTag, other, sizeof other,
               MPI_BYTE, 1 - rank, kSetupTag, comm, MPI_STATUS_IGNORE);
  if (rank == 0) {
    std::fprintf(stderr,
                 "tessera: warning: the pair exchanges between %s and %s use MPI's TCP "
                 "transport (slower, and polled) instead of a connection of their own: %s\n",
                 mine.host, theirs.host, connected ? other : reason.c_str());
  }
  return nullptr;
}

PairSocket::~PairSocket() { close(fd_); }

void PairSocket::send_all(const void* data, int64_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n =
        send(fd_, p, static_cast<size_t>(std::min<int64_t>(bytes, 1 << 30)), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw Error("pair exchange: sending to " + peer_ + " failed: " + std::strerror(errno));
    p += n;
    bytes -= n;
  }
}

void PairSocket::recv_all(void* data, int64_t bytes) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n =
        recv(fd_, p, static_cast<size_t>(std::min<int64_t>(bytes, 1 << 30)), MSG_WAITALL);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) throw Error("pair exchange: " + peer_ + " closed the connection");
    if (n < 0)
      throw Error("pair exchange: receiving from " + peer_ + " failed: " + std::strerror(errno));
    p += n;
    bytes -= n;
  }
}

void PairSocket::abort() { shutdown(fd_, SHUT_RDWR); }

}  // namespace tessera::comm::detail
