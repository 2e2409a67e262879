#include "comm/job/rendezvous.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "comm/job/launch_variables.h"
#include "comm/store/job_secret.h"

namespace ringlab::comm {
namespace {

// MASTER_ADDR (a name or an address) as a dotted IPv4 address.
std::string ResolveIPv4(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0) {
    throw std::invalid_argument("MASTER_ADDR=" + host +
                                ": cannot resolve it: " + gai_strerror(rc));
  }
  char text[INET_ADDRSTRLEN] = "";
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr,
            text, sizeof(text));
  freeaddrinfo(res);
  return text;
}

bool IsLoopback(const std::string& ip) { return ip.rfind("127.", 0) == 0; }

// Whether ip belongs to an interface of this host (or is 0.0.0.0): binding
// it to an ephemeral port says so without taking any port that matters.
bool IsLocalAddress(const std::string& ip) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (inet_pton(AF_INET, ip.c_str(), &addr.sin_addr) != 1) return false;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return true;  // cannot tell: let the real bind report
  const bool local =
      bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 ||
      errno != EADDRNOTAVAIL;
  close(fd);
  return local;
}

// /tmp/ringlab-<uid>, created if missing, refused unless it is a directory
// of this user that nobody else may enter (another user could have made it
// first, to read or plant secrets).
std::string PrivateDirectory() {
  const std::string dir = "/tmp/ringlab-" + std::to_string(geteuid());
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    throw std::invalid_argument("cannot create " + dir + ": " +
                                std::strerror(errno));
  }
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
      st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    throw std::invalid_argument(
        dir +
        " must be a directory of this user that nobody else may enter "
        "(remove it), or set " +
        std::string(launch::kJobSecret) + " on every rank");
  }
  return dir;
}

void PublishSecret(const std::string& path, const std::string& secret) {
  const std::string temporary = path + ".tmp-" + JobSecretToHex(RandomBytes(8));
  const int fd =
      open(temporary.c_str(),
           O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  const std::string hex = JobSecretToHex(secret) + "\n";
  const bool ok = fd >= 0 && write(fd, hex.data(), hex.size()) ==
                                 static_cast<ssize_t>(hex.size());
  const int error = errno;
  if (fd >= 0) close(fd);
  if (!ok || rename(temporary.c_str(), path.c_str()) != 0) {
    unlink(temporary.c_str());
    throw CommError("cannot publish the store's secret in " + path + ": " +
                    std::strerror(ok ? errno : error));
  }
}

// The published secret, or "" while there is none (yet).
std::string ReadPublishedSecret(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return "";
  char text[300];
  const ssize_t n = read(fd, text, sizeof(text));
  close(fd);
  if (n <= 0) return "";
  std::string hex(text, static_cast<size_t>(n));
  while (!hex.empty() && (hex.back() == '\n' || hex.back() == '\r')) {
    hex.pop_back();
  }
  try {
    return JobSecretFromHex(hex, path);
  } catch (const std::invalid_argument&) {
    return "";
  }
}

}  // namespace

std::string LoopbackSecretPath(const std::string& address, int port) {
  return PrivateDirectory() + "/store-" + address + "-" + std::to_string(port);
}

std::unique_ptr<Rendezvous> Rendezvous::FromEnv(
    std::chrono::milliseconds timeout) {
  return Join(JobEnvironment::Read(), timeout);
}

std::unique_ptr<Rendezvous> Rendezvous::Join(
    const JobEnvironment& job, std::chrono::milliseconds timeout) {
  try {
    return JoinOrThrowStoreError(job, timeout);
  } catch (const StoreError& e) {
    throw CommError(std::string("rendezvous: ") + e.what());
  }
}

std::unique_ptr<Rendezvous> Rendezvous::JoinOrThrowStoreError(
    const JobEnvironment& job, std::chrono::milliseconds timeout) {
  std::unique_ptr<Rendezvous> rv(new Rendezvous);
  RankContext& context = rv->context_;
  context.rank = job.rank;
  context.world_size = job.world_size;
  context.local_rank = job.local_rank;
  context.job_secret = job.secret;
  if (job.master_port < 0) {
    // No store: only for backends that bring their own (mpi).
    if (job.world_size > 1) return rv;
    rv->server_ = std::make_unique<TcpStoreServer>("127.0.0.1", 0);
    context.job_secret = rv->server_->secret();
    rv->store_ = std::make_unique<TcpStore>("127.0.0.1", rv->server_->port(),
                                            timeout, context.job_secret);
  } else {
    rv->JoinStore(job, timeout);
  }
  context.store = rv->store_.get();
  rv->context_.peers =
      GatherPeers(*rv->store_, job.rank, job.world_size,
                  rv->store_->local_address(), job.host, timeout);
  return rv;
}

std::vector<PeerInfo> GatherPeers(Store& store, int rank, int world_size,
                                  const std::string& address,
                                  const std::string& host,
                                  std::chrono::milliseconds timeout) {
  PeerInfo mine = ThisPeer(address);
  mine.host = host;
  try {
    std::vector<PeerInfo> peers =
        ExchangePeers(store, rank, world_size, mine, timeout);
    store.Set("rendezvous/read/" + std::to_string(rank), "1");
    if (rank == 0) store.Wait(RankKeys("rendezvous/read", world_size), timeout);
    return peers;
  } catch (const StoreTimeout&) {
    int absent = 0;
    while (absent < world_size &&
           store.Check({"peer/" + std::to_string(absent)})) {
      ++absent;
    }
    if (absent == world_size) {
      throw CommError(
          "rendezvous: not every rank read the job's peers within " +
          std::to_string(timeout.count()) + " ms");
    }
    throw CommError("rendezvous: rank " + std::to_string(absent) +
                    " did not join the job's store within " +
                    std::to_string(timeout.count()) +
                    " ms (is it running, with the same MASTER_ADDR, "
                    "MASTER_PORT and " +
                    launch::kJobSecret + "?)");
  }
}

void Rendezvous::JoinStore(const JobEnvironment& job,
                           std::chrono::milliseconds timeout) {
  in_addr parsed{};
  if (!job.store_bind.empty() &&
      inet_pton(AF_INET, job.store_bind.c_str(), &parsed) != 1) {
    throw std::invalid_argument("the store's listening address " +
                                job.store_bind + " (--store_bind, " +
                                std::string(launch::kStoreBind) +
                                ") is not "
                                "an IPv4 address such as 0.0.0.0");
  }
  const std::string master_ip = ResolveIPv4(job.master_addr);
  const std::string bind = job.store_bind.empty() ? master_ip : job.store_bind;
  const bool host_here = job.rank == 0 && !job.store_hosted;
  // Only a store nobody can reach from another host may go without a
  // secret from the launcher: its secret then travels through a file only
  // this user reads.
  const bool loopback_only =
      IsLoopback(master_ip) && (!host_here || IsLoopback(bind));
  if (job.secret.empty() && !loopback_only) {
    throw std::invalid_argument(
        std::string(host_here ? "the store would listen on " + bind
                              : "MASTER_ADDR=" + job.master_addr) +
        ", beyond loopback: set " + launch::kJobSecret +
        " to the same 32 hex digits on every rank, e.g. " + launch::kJobSecret +
        "=$(openssl rand -hex 16)");
  }
  // What this rank presents: the secret it was given, rank 0's own, or
  // (loopback, none given) what rank 0 published, read after each connect.
  auto presented = std::make_shared<std::string>(job.secret);
  TcpStore::SecretSource secret = [presented] { return *presented; };
  if (!host_here && presented->empty()) {
    const std::string path = LoopbackSecretPath(master_ip, job.master_port);
    secret = [path, presented] {
      return *presented = ReadPublishedSecret(path);
    };
  }
  if (host_here) {
    if (!IsLocalAddress(bind)) {
      throw std::invalid_argument(
          "rank 0 hosts the store on " + bind +
          ", which is not an address of this host: run rank 0 where "
          "MASTER_ADDR=" +
          job.master_addr +
          " points, or listen on every interface with --store_bind=0.0.0.0");
    }
    server_ =
        std::make_unique<TcpStoreServer>(bind, job.master_port, job.secret);
    if (job.secret.empty()) {
      const std::string path = LoopbackSecretPath(master_ip, job.master_port);
      PublishSecret(path, server_->secret());
      published_secret_file_ = path;
    }
    *presented = server_->secret();
  }
  store_ =
      std::make_unique<TcpStore>(master_ip, job.master_port, timeout, secret);
  context_.job_secret = *presented;
}

Rendezvous::~Rendezvous() {
  if (!published_secret_file_.empty()) unlink(published_secret_file_.c_str());
}

}  // namespace ringlab::comm
