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
#include <thread>
#include <vector>

#include "tessera/core/clock.h"
#include "tessera/core/error.h"

namespace tessera::comm::detail {
namespace {

constexpr int kMaxAddresses = 16;
constexpr int kSetupTag = 32001;  // above the exchanges' chunk tags (pair_reduction.cc)

// What each member tells the other before connecting (exchanged over MPI, as bytes; zeroed
// whole, padding included, before it is filled).
struct Offer {
  int32_t usable;                              // 0: this member cannot or will not use a socket
  int32_t verbose;                             // TESSERA_PAIR_SOCKET=verbose
  uint16_t port;                               // rank 1's listening port (network order)
  int32_t addresses;                           // how many of the arrays below are filled
  uint32_t address[kMaxAddresses];             // IPv4, network order
  uint32_t netmask[kMaxAddresses];             // the address's subnet mask, network order
  char interface[kMaxAddresses][IF_NAMESIZE];  // the address's interface
  uint64_t cookie;                             // what this member proves itself with
  char host[64];                               // MPI_Get_processor_name, for messages
  char reason[160];                            // why usable is 0
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
    const int i = offer.addresses++;
    offer.address[i] = reinterpret_cast<sockaddr_in*>(it->ifa_addr)->sin_addr.s_addr;
    offer.netmask[i] =
        it->ifa_netmask ? reinterpret_cast<sockaddr_in*>(it->ifa_netmask)->sin_addr.s_addr : 0;
    std::snprintf(offer.interface[i], IF_NAMESIZE, "%s", it->ifa_name);
  }
  freeifaddrs(list);
  if (offer.addresses == 0) set_reason(offer, "no IPv4 address besides loopback");
}

// The networks the pair may connect over: TESSERA_PAIR_SOCKET_IF, else Open MPI's
// btl_tcp_if_include (the user's choice of network for MPI's own traffic), as a list of
// "a.b.c.d/bits" and interface names separated by commas; empty: any.
std::vector<std::string> allowed_networks() {
  const char* v = std::getenv("TESSERA_PAIR_SOCKET_IF");
  if (v == nullptr) v = std::getenv("OMPI_MCA_btl_tcp_if_include");
  std::vector<std::string> out;
  std::string item;
  for (const char* c = v ? v : "";; ++c) {
    if (*c == ',' || *c == '\0') {
      if (!item.empty()) out.push_back(item);
      item.clear();
      if (*c == '\0') break;
    } else if (*c != ' ') {
      item += *c;
    }
  }
  return out;
}

// Whether the peer's address i is on one of the allowed networks (a CIDR holding it, or its
// interface's name); a malformed CIDR matches nothing.
bool allowed(const Offer& peer, int i, const std::vector<std::string>& networks) {
  if (networks.empty()) return true;
  for (const std::string& net : networks) {
    const size_t slash = net.find('/');
    if (slash == std::string::npos) {
      if (net == peer.interface[i]) return true;
      continue;
    }
    in_addr base{};
    const int bits = std::atoi(net.c_str() + slash + 1);
    if (inet_pton(AF_INET, net.substr(0, slash).c_str(), &base) != 1 || bits < 0 || bits > 32)
      continue;
    const uint32_t mask = bits == 0 ? 0 : htonl(~uint32_t{0} << (32 - bits));
    if ((peer.address[i] & mask) == (base.s_addr & mask)) return true;
  }
  return false;
}

// The peer's addresses to try: on an allowed network, not one of this host's own (an address
// every machine has, a container bridge's, would lead back here), those on a subnet of ours first
// (the route most likely direct).
std::vector<uint32_t> addresses_to_try(const Offer& mine, const Offer& theirs) {
  const std::vector<std::string> networks = allowed_networks();
  std::vector<uint32_t> near, far;
  for (int i = 0; i < theirs.addresses; ++i) {
    if (!allowed(theirs, i, networks)) continue;
    bool ours = false, same_subnet = false;
    for (int j = 0; j < mine.addresses; ++j) {
      ours |= theirs.address[i] == mine.address[j];
      same_subnet |= (theirs.address[i] & mine.netmask[j]) == (mine.address[j] & mine.netmask[j]);
    }
    if (!ours) (same_subnet ? near : far).push_back(theirs.address[i]);
  }
  near.insert(near.end(), far.begin(), far.end());
  return near;
}

// A listening socket on every address, on a port the kernel picks; -1 (and the reason) if not.
int listen_any(Offer& offer) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return set_reason(offer, errno_text("socket")), -1;
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t length = sizeof any;
  if (bind(fd, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0 || listen(fd, 16) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&any), &length) != 0) {
    set_reason(offer, errno_text("listen"));
    close(fd);
    return -1;
  }
  offer.port = any.sin_port;
  return fd;
}

// Waits until fd is ready for `events` or the deadline passes; false on timeout or error.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, static_cast<int>(left.count()));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

// The 8 bytes of a cookie from a non-blocking socket, by the deadline.
bool read_cookie(int fd, uint64_t& cookie, Clock::time_point deadline) {
  char* p = reinterpret_cast<char*>(&cookie);
  size_t got = 0;
  while (got < sizeof cookie) {
    if (!wait_ready(fd, POLLIN, deadline)) return false;
    const ssize_t n = recv(fd, p + got, sizeof cookie - got, 0);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return false;
    if (n > 0) got += static_cast<size_t>(n);
  }
  return true;
}

// 8 bytes into a fresh connection's empty send buffer: all of them go at once.
bool send_cookie(int fd, uint64_t cookie) {
  return send(fd, &cookie, sizeof cookie, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof cookie);
}

bool make_blocking_and_fast(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  const int one = 1;
  // No Nagle: an exchange's last segment must not wait for the peer's delayed acknowledgement.
  return flags >= 0 && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0 &&
         setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0;
}

std::string describe(const char* host, uint32_t address, uint16_t port) {
  return std::string(host) + " (" + dotted(address) + ":" + std::to_string(ntohs(port)) + ")";
}

// The connecting member: the first of the peer's addresses where the peer answers. Each side
// sends its cookie and checks the other's; until then the socket stays non-blocking, so a
// listener of some other program that says less than a cookie cannot hold this member.
int connect_to(const Offer& mine, const Offer& theirs, std::string& reason, std::string& peer) {
  const std::vector<uint32_t> candidates = addresses_to_try(mine, theirs);
  if (candidates.empty()) {
    reason = std::string("none of ") + theirs.host +
             "'s addresses is on the networks allowed (TESSERA_PAIR_SOCKET_IF, else Open MPI's "
             "btl_tcp_if_include)";
  }
  for (uint32_t address : candidates) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return reason = errno_text("socket"), -1;
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = theirs.port;
    to.sin_addr.s_addr = address;
    peer = describe(theirs.host, address, theirs.port);
    const auto deadline = Clock::now() + std::chrono::milliseconds(kPairConnectMillis);
    int error = 0;
    socklen_t length = sizeof error;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0 && errno != EINPROGRESS) {
      error = errno;
    } else if (!wait_ready(fd, POLLOUT, deadline)) {
      error = ETIMEDOUT;
    } else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) {
      error = errno;
    }
    uint64_t answer = 0;
    if (error == 0 && send_cookie(fd, mine.cookie) && read_cookie(fd, answer, deadline) &&
        answer == theirs.cookie && make_blocking_and_fast(fd))
      return fd;
    reason = "cannot connect to " + peer + ": " +
             (error ? std::strerror(error) : "no answer with the peer's cookie");
    close(fd);
  }
  return -1;
}

// The accepting member: the first connection that presents the connecting member's cookie within
// kPairConnectMillis of its arrival, answered with this member's.
int accept_from(int listener, const Offer& mine, const Offer& theirs, std::string& reason,
                std::string& peer) {
  const int attempts = std::max(1, mine.addresses);  // rank 0 tries each once
  const int wait_ms = kPairConnectMillis * attempts + kPairAcceptSlackMillis;
  const auto deadline = Clock::now() + std::chrono::milliseconds(wait_ms);
  reason = std::string("no connection from ") + theirs.host + " within " +
           std::to_string(wait_ms / 1000) + " s";
  while (wait_ready(listener, POLLIN, deadline)) {
    sockaddr_in from{};
    socklen_t length = sizeof from;
    const int fd = accept4(listener, reinterpret_cast<sockaddr*>(&from), &length,
                           SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // Out of descriptors, say: pause rather than spin on a listener that stays readable.
      if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    const auto by =
        std::min(deadline, Clock::now() + std::chrono::milliseconds(kPairConnectMillis));
    uint64_t cookie = 0;
    if (read_cookie(fd, cookie, by) && cookie == theirs.cookie && send_cookie(fd, mine.cookie) &&
        make_blocking_and_fast(fd)) {
      peer = describe(theirs.host, from.sin_addr.s_addr, from.sin_port);
      return fd;
    }
    close(fd);  // a stray connection, or one that said nothing in time
  }
  return -1;
}

// Whether to make the connection (and whether to say which it made): TESSERA_PAIR_SOCKET.
int socket_setting() {
  const char* v = std::getenv("TESSERA_PAIR_SOCKET");
  if (v == nullptr || std::string(v) == "1") return 1;
  if (std::string(v) == "0") return 0;
  if (std::string(v) == "verbose") return 2;
  throw Error(std::string("TESSERA_PAIR_SOCKET='") + v + "' is not 0, 1 or verbose");
}

}  // namespace

std::unique_ptr<PairSocket> PairSocket::connect(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  Offer mine;
  std::memset(&mine, 0, sizeof mine);
  mine.usable = 1;
  int name_length = 0;
  char name[MPI_MAX_PROCESSOR_NAME] = "";
  MPI_Get_processor_name(name, &name_length);
  std::snprintf(mine.host, sizeof mine.host, "%s", name);
  const int setting = socket_setting();
  mine.verbose = setting == 2;
  int listener = -1;
  if (setting == 0) {
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
                   : accept_from(listener, mine, theirs, reason, peer);
  }
  if (listener >= 0) close(listener);
  int connected = fd >= 0 ? 1 : 0, both = 0;
  MPI_Allreduce(&connected, &both, 1, MPI_INT, MPI_MIN, comm);
  if (both) {
    if (rank == 0 && (mine.verbose || theirs.verbose)) {
      std::fprintf(stderr,
                   "tessera: the pair exchanges between %s and %s use a TCP connection of their "
                   "own, to %s\n",
                   mine.host, theirs.host, peer.c_str());
    }
    return std::unique_ptr<PairSocket>(new PairSocket(fd, peer));
  }
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
    if (n < 0)
      throw Error("pair exchange: sending to " + peer_ + " failed: " + std::strerror(errno));
    if (n == 0) throw Error("pair exchange: sending to " + peer_ + " moved nothing");
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

void PairSocket::send_header(int64_t bytes) {
  const int64_t header[2] = {sent_exchanges_++, bytes};
  send_all(header, sizeof header);
}

void PairSocket::expect_header(int64_t bytes) {
  int64_t header[2] = {0, 0};
  recv_all(header, sizeof header);
  const int64_t expected = received_exchanges_++;
  if (header[0] != expected || header[1] != bytes) {
    throw Error("pair exchange: " + peer_ + " sent exchange #" + std::to_string(header[0]) +
                " of " + std::to_string(header[1]) + " bytes where this rank expected #" +
                std::to_string(expected) + " of " + std::to_string(bytes) +
                ": the two ranks' collectives differ");
  }
}

void PairSocket::abort() { shutdown(fd_, SHUT_RDWR); }

}  // namespace tessera::comm::detail
