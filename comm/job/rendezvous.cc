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

#include "comm/store/job_secret.h"

namespace ringlab::comm {
namespace {

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// The integer in variable `name`, or fallback when unset.
long EnvInt(const char* name, long fallback, long lo, long hi) {
  const char* v = Env(name);
  if (v == nullptr) return fallback;
  char* end = nullptr;
  errno = 0;
  long n = std::strtol(v, &end, 10);
  if (errno != 0 || *end != '\0' || n < lo || n > hi) {
    throw std::invalid_argument(
        std::string(name) + "='" + v + "': expected an integer in [" +
        std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return n;
}

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
        std::string(kJobSecretVariable) + " on every rank");
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

std::string ReadFirstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Every rank reports its host and learns everyone's. Rank 0 may host the
// store: it returns only once every rank has read every host, so that a job
// refused for spanning hosts is refused by each rank with the same message
// rather than by rank 0 and, for the others, a store gone.
std::vector<std::string> ExchangeHosts(const JobEnvironment& job,
                                       std::chrono::milliseconds timeout,
                                       Store& store) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  store.Set("rendezvous/host/" + std::to_string(job.rank), job.host);
  std::vector<std::string> hosts(job.world_size);
  for (int q = 0; q < job.world_size; ++q) {
    const std::string key = "rendezvous/host/" + std::to_string(q);
    try {
      hosts[q] = store.Get(key, timeout);
    } catch (const CommError& e) {
      if (std::string(e.what()).find("timed out") == std::string::npos) throw;
      throw CommError("rendezvous: rank " + std::to_string(q) +
                      " did not join the job's store within " +
                      std::to_string(timeout.count()) +
                      " ms (is it running, with the same MASTER_ADDR, "
                      "MASTER_PORT and " +
                      kJobSecretVariable + "?)");
    }
  }
  int64_t done = store.Add("rendezvous/hosts_read", 1);
  for (auto pause = std::chrono::milliseconds(1);
       job.rank == 0 && done < job.world_size;
       pause = std::min(pause * 2, std::chrono::milliseconds(20))) {
    if (std::chrono::steady_clock::now() + pause > deadline) {
      throw CommError("rendezvous: only " + std::to_string(done) + " of " +
                      std::to_string(job.world_size) +
                      " ranks read the job's hosts within " +
                      std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(pause);
    done = store.Add("rendezvous/hosts_read", 0);
  }
  return hosts;
}

}  // namespace

std::string ThisHostIdentity() {
  if (const char* id = Env("RINGLAB_HOST_ID")) return id;
  char name[256] = "";
  gethostname(name, sizeof(name) - 1);
  const std::string boot =
      ReadFirstLine("/proc/sys/kernel/random/boot_id").substr(0, 8);
  char ns[64] = "";
  const ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
  std::string pid_ns = n > 0 ? std::string(ns, static_cast<size_t>(n)) : "?";
  const size_t open = pid_ns.find('['), close = pid_ns.find(']');
  if (open != std::string::npos && close != std::string::npos) {
    pid_ns = pid_ns.substr(open + 1, close - open - 1);
  }
  return std::string(name) + " (boot " + (boot.empty() ? "?" : boot) +
         ", pid namespace " + pid_ns + ")";
}

std::string LoopbackSecretPath(const std::string& address, int port) {
  return PrivateDirectory() + "/store-" + address + "-" + std::to_string(port);
}

bool Rendezvous::InLaunchedJob() {
  return Env("RANK") != nullptr || Env("OMPI_COMM_WORLD_RANK") != nullptr;
}

JobEnvironment JobEnvironment::Read() {
  JobEnvironment job;
  // torchrun's variables first; mpirun's when those are absent.
  const bool torch = Env("RANK") != nullptr || Env("WORLD_SIZE") != nullptr;
  const char* rank_var = torch ? "RANK" : "OMPI_COMM_WORLD_RANK";
  const char* world_var = torch ? "WORLD_SIZE" : "OMPI_COMM_WORLD_SIZE";
  const char* local_var = torch ? "LOCAL_RANK" : "OMPI_COMM_WORLD_LOCAL_RANK";
  if (torch && (Env("RANK") == nullptr) != (Env("WORLD_SIZE") == nullptr)) {
    throw std::invalid_argument(
        "RANK and WORLD_SIZE must be set together (as torchrun does)");
  }
  const long world = EnvInt(world_var, 1, 1, 1 << 20);
  const long rank = EnvInt(rank_var, 0, 0, 1 << 20);
  if (rank >= world) {
    throw std::invalid_argument(std::string(rank_var) + "=" +
                                std::to_string(rank) + " is not below " +
                                world_var + "=" + std::to_string(world));
  }
  job.rank = static_cast<int>(rank);
  job.world_size = static_cast<int>(world);
  job.local_rank = static_cast<int>(EnvInt(local_var, rank, 0, 1 << 20));
  job.master_port = static_cast<int>(EnvInt("MASTER_PORT", -1, 1, 65535));
  if (const char* addr = Env("MASTER_ADDR")) job.master_addr = addr;
  if (const char* hex = Env(kJobSecretVariable)) {
    job.secret = JobSecretFromHex(hex, kJobSecretVariable);
  }
  const char* hosted = Env("RINGLAB_STORE_HOSTED");
  job.store_hosted = hosted != nullptr && std::string(hosted) == "1";
  if (const char* bind = Env("RINGLAB_STORE_BIND")) job.store_bind = bind;
  job.host = ThisHostIdentity();
  return job;
}

std::unique_ptr<Rendezvous> Rendezvous::FromEnv(
    std::chrono::milliseconds timeout) {
  return Join(JobEnvironment::Read(), timeout);
}

std::unique_ptr<Rendezvous> Rendezvous::Join(
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
  context.hosts = ExchangeHosts(job, timeout, *rv->store_);
  return rv;
}

void Rendezvous::JoinStore(const JobEnvironment& job,
                           std::chrono::milliseconds timeout) {
  in_addr parsed{};
  if (!job.store_bind.empty() &&
      inet_pton(AF_INET, job.store_bind.c_str(), &parsed) != 1) {
    throw std::invalid_argument("the store's listening address " +
                                job.store_bind +
                                " (--store_bind, RINGLAB_STORE_BIND) is not "
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
        ", beyond loopback: set " + kJobSecretVariable +
        " to the same 32 hex digits on every rank, e.g. " + kJobSecretVariable +
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
