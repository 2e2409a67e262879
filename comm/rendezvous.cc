#include "comm/rendezvous.h"

#include <cerrno>
#include <cstdlib>
#include <stdexcept>

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

}  // namespace

bool Rendezvous::InLaunchedJob() {
  return Env("RANK") != nullptr || Env("OMPI_COMM_WORLD_RANK") != nullptr;
}

std::unique_ptr<Rendezvous> Rendezvous::FromEnv(
    std::chrono::milliseconds timeout) {
  std::unique_ptr<Rendezvous> rv(new Rendezvous);
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
  const long local_rank = EnvInt(local_var, rank, 0, 1 << 20);
  rv->context_.rank = static_cast<int>(rank);
  rv->context_.world_size = static_cast<int>(world);
  rv->context_.local_rank = static_cast<int>(local_rank);

  const long port = EnvInt("MASTER_PORT", -1, 1, 65535);
  const char* addr = Env("MASTER_ADDR");
  const std::string master = addr != nullptr ? addr : "127.0.0.1";
  if (port < 0) {
    if (world > 1) return rv;  // no store: only backends with their own
    rv->server_ = std::make_unique<TcpStoreServer>("127.0.0.1", 0);
    rv->store_ =
        std::make_unique<TcpStore>("127.0.0.1", rv->server_->port(), timeout);
  } else {
    const char* hosted = Env("RINGLAB_STORE_HOSTED");
    if (rank == 0 && (hosted == nullptr || std::string(hosted) != "1")) {
      const char* bind = Env("RINGLAB_STORE_BIND");
      rv->server_ = std::make_unique<TcpStoreServer>(
          bind != nullptr ? bind : "127.0.0.1", static_cast<int>(port));
    }
    rv->store_ =
        std::make_unique<TcpStore>(master, static_cast<int>(port), timeout);
  }
  rv->context_.store = rv->store_.get();
  return rv;
}

}  // namespace ringlab::comm
