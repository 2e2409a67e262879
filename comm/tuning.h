// Backend tuning as named numbers: the settings that choose a backend's
// algorithm thresholds and buffer sizes (shm_ring.chunk_bytes,
// ipc_ring.oneshot_bytes, ...) and the front's own (comm.check_calls). Each
// setting is declared once, by whoever reads it — a backend in its
// description (comm/backend.h), the front here — with its variable, its
// range and what unset means; a BackendTuning holds the values a user set.
// CreateCommunicator validates them once, before any backend sees them, the
// same way for every backend; a backend reads its own with Get. Library code
// never reads the environment for them: binaries' main turns the RINGLAB_*
// variables into these values (comm/tuning_env.h). Where ranks could choose
// differently, rank 0's values are the ones every rank uses (each backend
// says how).
#ifndef RINGLAB_COMM_TUNING_H_
#define RINGLAB_COMM_TUNING_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ringlab::comm {

struct TuningSetting {
  std::string name;      // "shm_ring.chunk_bytes"
  std::string variable;  // "RINGLAB_SHM_CHUNK_BYTES"
  std::string option;    // in a benchmark's backend spec: "chunk"
  uint64_t min = 0;
  uint64_t max = 0;
  // The value when unset; nullopt where the backend chooses at creation
  // (`help` says how).
  std::optional<uint64_t> fallback;
  std::string help;  // one line: what it chooses, and unset's meaning
};

// The values set, by setting name; a setting left out takes its fallback.
class BackendTuning {
 public:
  void Set(const std::string& name, uint64_t value) { values_[name] = value; }
  void Unset(const std::string& name) { values_.erase(name); }
  std::optional<uint64_t> Get(const std::string& name) const;
  // The value set, else the setting's fallback (which must then exist).
  uint64_t GetOr(const TuningSetting& setting) const;
  const std::map<std::string, uint64_t>& values() const { return values_; }

 private:
  std::map<std::string, uint64_t> values_;
};

// The front's own: whether it checks, before every call of a backend that
// cannot notice it, that all ranks make the same call (one small allreduce
// per call). 0 measures the plain library call (allreduce_bench's
// "mpi:check=0"), the anchor other backends are compared with; every rank
// checks when any rank asks it to. RINGLAB_CHECK_CALLS.
const TuningSetting& CheckCallsSetting();

// Every setting: the front's and every registered backend's (a setting two
// backends share, such as ipc_ring's, once).
std::vector<TuningSetting> TuningSettings();
// nullptr for a name no setting has.
const TuningSetting* FindTuningSetting(const std::string& name);

// The one rule: every value set belongs to a setting and lies in its range.
// Throws std::invalid_argument naming the first that does not, e.g.
// "shm_ring.chunk_bytes = 12 is outside [4096, 67108864]
// (RINGLAB_SHM_CHUNK_BYTES)".
void ValidateTuning(const BackendTuning& tuning);
// The same rule for one value of one setting, for parsers that must check a
// number before it is stored.
void ValidateTuningValue(const TuningSetting& setting, uint64_t value);

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_TUNING_H_
