// Backend tuning: the one validation rule (every setting, at and beyond the
// ends of its range), CreateCommunicator applying it before any backend
// starts, and the environment parser binaries use.
#include "comm/tuning.h"

#include <atomic>
#include <map>
#include <stdexcept>
#include <string>

#include "comm/communicator.h"
#include "comm/tuning_env.h"
#include "gtest/gtest.h"

namespace ringlab::comm {
namespace {

// The message ValidateTuning gives for a value outside a setting's range.
std::string OutOfRange(const TuningSetting& s, uint64_t value) {
  return std::string(s.name) + " = " + std::to_string(value) + " is outside [" +
         std::to_string(s.min) + ", " + std::to_string(s.max) + "] (" +
         s.variable + ")";
}

std::string ValidationError(const BackendTuning& tuning) {
  try {
    ValidateTuning(tuning);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// Each setting's value in a and b alike (through the table: every field).
void ExpectSameTuning(const BackendTuning& a, const BackendTuning& b) {
  for (const TuningSetting& s : TuningSettings()) {
    EXPECT_EQ(s.get(a), s.get(b)) << s.name;
  }
}

TEST(TuningTest, DefaultsAreValidAndDocumented) {
  const BackendTuning defaults;
  EXPECT_EQ(ValidationError(defaults), "");
  EXPECT_EQ(defaults.shm_ring.oneshot_bytes, 4u << 10);
  EXPECT_FALSE(defaults.shm_ring.chunk_bytes.has_value());
  EXPECT_EQ(defaults.shm_ring.stage_bytes, 1u << 20);
  EXPECT_FALSE(defaults.shm_ring.ring_bytes.has_value());
  EXPECT_EQ(defaults.shm_ring.stores, ShmRingTuning::Stores::kMeasured);
  EXPECT_FALSE(defaults.shm_ring.debug);
  EXPECT_EQ(defaults.ipc_ring.oneshot_bytes, 256u << 10);
  EXPECT_EQ(defaults.ipc_ring.chunk_bytes, 1u << 20);
  EXPECT_EQ(defaults.ipc_ring.buffer_bytes, 64u << 20);
  EXPECT_TRUE(defaults.mpi.check_calls);
  // Every default that is set lies in its range (not only the first).
  for (const TuningSetting& s : TuningSettings()) {
    if (const auto v = s.get(defaults)) {
      EXPECT_GE(*v, s.min) << s.name;
      EXPECT_LE(*v, s.max) << s.name;
    }
  }
}

TEST(TuningTest, EverySettingHasADistinctNameAndVariable) {
  std::map<std::string, int> seen;
  for (const TuningSetting& s : TuningSettings()) {
    EXPECT_EQ(++seen[s.name], 1) << s.name;
    EXPECT_EQ(++seen[s.variable], 1) << s.variable;
    EXPECT_EQ(std::string(s.variable).rfind("RINGLAB_", 0), 0u) << s.variable;
    EXPECT_LE(s.min, s.max) << s.name;
  }
  EXPECT_EQ(TuningSettings().size(), 10u);
}

// Both ends of every range are accepted; one beyond either end is refused,
// naming the setting, the value, the range and the variable. Bools and the
// stores enum cannot hold some of those values at all (set stores them as
// something else): for them the type is the range.
TEST(TuningTest, EverySettingOutsideItsRangeIsRefused) {
  for (const TuningSetting& s : TuningSettings()) {
    SCOPED_TRACE(s.name);
    for (uint64_t ok : {s.min, s.max}) {
      BackendTuning t;
      s.set(t, ok);
      EXPECT_EQ(s.get(t), std::optional<uint64_t>(ok));
      EXPECT_EQ(ValidationError(t), "");
    }
    std::vector<uint64_t> bad = {s.max + 1, s.max + 2};
    if (s.min > 0) bad.push_back(s.min - 1);
    int refused = 0;
    for (uint64_t value : bad) {
      BackendTuning t;
      s.set(t, value);
      if (s.get(t) != std::optional<uint64_t>(value)) continue;  // see above
      EXPECT_EQ(ValidationError(t), OutOfRange(s, value));
      ++refused;
    }
    const std::string name = s.name;
    if (name != "shm_ring.debug" && name != "mpi.check_calls") {
      EXPECT_GE(refused, s.min > 0 ? 2 : 1);
    }
  }
}

// The table reaches the fields it names: typed values set directly are
// refused under the right name.
TEST(TuningTest, TypedFieldsAreCheckedUnderTheirNames) {
  BackendTuning t;
  t.shm_ring.chunk_bytes = 12;
  EXPECT_EQ(ValidationError(t),
            "shm_ring.chunk_bytes = 12 is outside [4096, 67108864] "
            "(RINGLAB_SHM_CHUNK_BYTES)");
  t = {};
  t.shm_ring.stage_bytes = 1 << 30;
  EXPECT_NE(ValidationError(t).find("shm_ring.stage_bytes = 1073741824"),
            std::string::npos);
  t = {};
  t.shm_ring.ring_bytes = (size_t{1} << 40) + 1;
  EXPECT_NE(ValidationError(t).find("shm_ring.ring_bytes"), std::string::npos);
  t = {};
  t.shm_ring.stores = static_cast<ShmRingTuning::Stores>(7);
  EXPECT_EQ(
      ValidationError(t),
      "shm_ring.stores = 7 is outside [0, 1] (RINGLAB_SHM_STREAM_STORES)");
  t = {};
  t.ipc_ring.chunk_bytes = 0;
  EXPECT_NE(ValidationError(t).find("ipc_ring.chunk_bytes = 0"),
            std::string::npos);
  t = {};
  t.ipc_ring.buffer_bytes = 4096;
  EXPECT_EQ(ValidationError(t),
            "ipc_ring.buffer_bytes = 4096 is outside [65536, 17179869184] "
            "(RINGLAB_IPC_RING_BUFFER_BYTES)");
  t = {};
  t.shm_ring.oneshot_bytes = (16 << 20) + 1;
  EXPECT_NE(ValidationError(t).find("shm_ring.oneshot_bytes"),
            std::string::npos);
}

// A backend that counts its creations and never starts.
std::atomic<int> g_fake_created{0};
const bool kFakeRegistered = RegisterCommunicator(
    "tuning_test_fake",
    [](const RankContext&,
       const CommOptions&) -> std::unique_ptr<Communicator> {
      ++g_fake_created;
      throw CommError("tuning_test_fake: created");
    });

// CreateCommunicator is where options enter: bad tuning is refused there,
// before the backend's factory runs; good tuning reaches it.
TEST(TuningTest, CreateCommunicatorValidatesBeforeTheBackendStarts) {
  ASSERT_TRUE(kFakeRegistered);
  CommOptions options;
  options.tuning.ipc_ring.chunk_bytes = 1;
  const int before = g_fake_created.load();
  try {
    CreateCommunicator("tuning_test_fake", RankContext{}, options);
    ADD_FAILURE() << "bad tuning accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("ipc_ring.chunk_bytes = 1"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(g_fake_created.load(), before);
  options.tuning = {};
  EXPECT_THROW(CreateCommunicator("tuning_test_fake", RankContext{}, options),
               CommError);
  EXPECT_EQ(g_fake_created.load(), before + 1);
}

// ---------------------------------------------------------------------------
// TuningFromEnvironment

using Env = std::map<std::string, std::string>;

BackendTuning Parse(const Env& env) {
  return TuningFromEnvironment([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

std::string ParseError(const Env& env) {
  try {
    Parse(env);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(TuningEnvironmentTest, NothingSetGivesTheDefaults) {
  ExpectSameTuning(Parse({}), BackendTuning{});
  // An empty value counts as unset.
  Env empty;
  for (const TuningSetting& s : TuningSettings()) empty[s.variable] = "";
  ExpectSameTuning(Parse(empty), BackendTuning{});
}

TEST(TuningEnvironmentTest, EveryVariableReachesItsField) {
  const BackendTuning t = Parse({
      {"RINGLAB_SHM_ONESHOT_BYTES", "0"},
      {"RINGLAB_SHM_CHUNK_BYTES", "8192"},
      {"RINGLAB_SHM_STAGE_BYTES", "65536"},
      {"RINGLAB_SHM_RING_BYTES", "1073741824"},
      {"RINGLAB_SHM_STREAM_STORES", "1"},
      {"RINGLAB_SHM_DEBUG", "1"},
      {"RINGLAB_IPC_RING_ONESHOT_BYTES", "1000000000"},
      {"RINGLAB_IPC_RING_CHUNK_BYTES", "4096"},
      {"RINGLAB_IPC_RING_BUFFER_BYTES", "8388608"},
      {"RINGLAB_MPI_CHECK_CALLS", "0"},
  });
  EXPECT_EQ(t.shm_ring.oneshot_bytes, 0u);
  EXPECT_EQ(t.shm_ring.chunk_bytes, std::optional<size_t>(8192));
  EXPECT_EQ(t.shm_ring.stage_bytes, 65536u);
  EXPECT_EQ(t.shm_ring.ring_bytes, std::optional<size_t>(1u << 30));
  EXPECT_EQ(t.shm_ring.stores, ShmRingTuning::Stores::kStreaming);
  EXPECT_TRUE(t.shm_ring.debug);
  EXPECT_EQ(t.ipc_ring.oneshot_bytes, 1000000000u);
  EXPECT_EQ(t.ipc_ring.chunk_bytes, 4096u);
  EXPECT_EQ(t.ipc_ring.buffer_bytes, 8388608u);
  EXPECT_FALSE(t.mpi.check_calls);
  const BackendTuning other = Parse({{"RINGLAB_SHM_STREAM_STORES", "0"},
                                     {"RINGLAB_SHM_DEBUG", "0"},
                                     {"RINGLAB_MPI_CHECK_CALLS", "1"}});
  EXPECT_EQ(other.shm_ring.stores, ShmRingTuning::Stores::kCached);
  EXPECT_FALSE(other.shm_ring.debug);
  EXPECT_TRUE(other.mpi.check_calls);
}

// What lookup does not find keeps base's value, not the default.
TEST(TuningEnvironmentTest, OverrideKeepsWhatIsNotSet) {
  BackendTuning base;
  base.shm_ring.chunk_bytes = 8192;
  base.ipc_ring.buffer_bytes = 1 << 20;
  base.mpi.check_calls = false;
  const BackendTuning t =
      OverrideTuning(base, [](const char* name) -> const char* {
        return std::string(name) == "RINGLAB_IPC_RING_BUFFER_BYTES" ? "65536"
                                                                    : nullptr;
      });
  EXPECT_EQ(t.shm_ring.chunk_bytes, std::optional<size_t>(8192));
  EXPECT_EQ(t.ipc_ring.buffer_bytes, 65536u);
  EXPECT_FALSE(t.mpi.check_calls);
  EXPECT_EQ(t.shm_ring.oneshot_bytes, ShmRingTuning::kDefaultOneShotBytes);
}

TEST(TuningEnvironmentTest, TextThatIsNotANumberIsRefusedNamingTheVariable) {
  for (const char* text : {"12x", "-1", " 12", "12 ", "0x10", "1e6", "+5",
                           "4 KiB", "99999999999999999999999"}) {
    SCOPED_TRACE(text);
    EXPECT_EQ(ParseError({{"RINGLAB_SHM_CHUNK_BYTES", text}}),
              std::string("RINGLAB_SHM_CHUNK_BYTES='") + text +
                  "' is not a whole number");
  }
}

// The parser applies ValidateTuning's rule to each variable before storing
// it, so switches refuse 2 rather than keep it as true.
TEST(TuningEnvironmentTest, NumbersOutsideTheRangeAreRefused) {
  for (const TuningSetting& s : TuningSettings()) {
    SCOPED_TRACE(s.name);
    EXPECT_EQ(ParseError({{s.variable, std::to_string(s.max + 1)}}),
              OutOfRange(s, s.max + 1));
    if (s.min > 0) {
      EXPECT_EQ(ParseError({{s.variable, std::to_string(s.min - 1)}}),
                OutOfRange(s, s.min - 1));
    }
    EXPECT_EQ(
        ParseError({{s.variable, std::to_string(s.min)}, {"UNRELATED", "x"}}),
        "");
  }
}

}  // namespace
}  // namespace ringlab::comm
