// Backend tuning: the one validation rule (every setting of every linked
// backend, at and beyond the ends of its range; names no backend has),
// CreateCommunicator applying it before any backend starts, and the
// environment parser binaries use. The settings here are the front's own
// (comm.check_calls) and a fake backend's; each backend's own are checked
// where it lives.
#include "comm/tuning.h"

#include <atomic>
#include <map>
#include <stdexcept>
#include <string>

#include "comm/backend.h"
#include "comm/communicator.h"
#include "comm/tuning_env.h"
#include "gtest/gtest.h"

namespace ringlab::comm {
namespace {

// A backend that counts its creations and never starts.
std::atomic<int> g_fake_created{0};
const bool kFakeRegistered = RegisterBackend([] {
  BackendDescription d;
  d.name = "tuning_test_fake";
  d.summary = "a backend that never starts";
  d.needs_store = false;
  d.tuning = {
      {"fake.chunk_bytes", "RINGLAB_FAKE_CHUNK_BYTES", "chunk", 4096, 65536,
       8192, "a size"},
      {"fake.mode", "RINGLAB_FAKE_MODE", "mode", 0, 1, std::nullopt,
       "a switch; unset: chosen at creation"},
  };
  d.create = [](const RankContext&,
                const CommOptions&) -> std::unique_ptr<Backend> {
    ++g_fake_created;
    throw CommError("tuning_test_fake: created");
  };
  return d;
}());

// The message ValidateTuning gives for a value outside a setting's range.
std::string OutOfRange(const TuningSetting& s, uint64_t value) {
  return s.name + " = " + std::to_string(value) + " is outside [" +
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

TEST(TuningTest, EverySettingIsDescribedOnceAndItsFallbackIsInRange) {
  ASSERT_TRUE(kFakeRegistered);
  EXPECT_EQ(ValidationError(BackendTuning{}), "");
  std::map<std::string, int> seen;
  for (const TuningSetting& s : TuningSettings()) {
    EXPECT_EQ(++seen[s.name], 1) << s.name;
    EXPECT_EQ(++seen[s.variable], 1) << s.variable;
    EXPECT_EQ(s.variable.rfind("RINGLAB_", 0), 0u) << s.variable;
    EXPECT_LE(s.min, s.max) << s.name;
    EXPECT_FALSE(s.help.empty()) << s.name;
    if (s.fallback) {
      EXPECT_GE(*s.fallback, s.min) << s.name;
      EXPECT_LE(*s.fallback, s.max) << s.name;
    }
    EXPECT_EQ(FindTuningSetting(s.name)->variable, s.variable);
  }
  EXPECT_EQ(seen.count("comm.check_calls"), 1u);
  EXPECT_EQ(seen.count("fake.chunk_bytes"), 1u);
  EXPECT_EQ(FindTuningSetting("nobody.has_this"), nullptr);
}

// Both ends of every range are accepted; one beyond either end is refused,
// naming the setting, the value, the range and the variable.
TEST(TuningTest, EverySettingOutsideItsRangeIsRefused) {
  for (const TuningSetting& s : TuningSettings()) {
    SCOPED_TRACE(s.name);
    for (uint64_t ok : {s.min, s.max}) {
      BackendTuning t;
      t.Set(s.name, ok);
      EXPECT_EQ(t.Get(s.name), std::optional<uint64_t>(ok));
      EXPECT_EQ(ValidationError(t), "");
    }
    std::vector<uint64_t> bad = {s.max + 1};
    if (s.min > 0) bad.push_back(s.min - 1);
    for (uint64_t value : bad) {
      BackendTuning t;
      t.Set(s.name, value);
      EXPECT_EQ(ValidationError(t), OutOfRange(s, value));
    }
  }
}

TEST(TuningTest, ANameNoBackendHasIsRefused) {
  BackendTuning t;
  t.Set("shm_rnig.chunk_bytes", 8192);
  EXPECT_EQ(ValidationError(t),
            "no backend in this binary has a setting shm_rnig.chunk_bytes");
}

TEST(TuningTest, GetOrTakesTheFallback) {
  const TuningSetting& chunk = *FindTuningSetting("fake.chunk_bytes");
  BackendTuning t;
  EXPECT_EQ(t.GetOr(chunk), 8192u);
  t.Set(chunk.name, 4096);
  EXPECT_EQ(t.GetOr(chunk), 4096u);
  t.Unset(chunk.name);
  EXPECT_EQ(t.GetOr(chunk), 8192u);
  EXPECT_THROW(t.GetOr(*FindTuningSetting("fake.mode")), std::logic_error);
  EXPECT_EQ(BackendTuning{}.GetOr(CheckCallsSetting()), 1u);
}

// CreateCommunicator is where options enter: bad tuning is refused there,
// before the backend's factory runs; good tuning reaches it.
TEST(TuningTest, CreateCommunicatorValidatesBeforeTheBackendStarts) {
  CommOptions options;
  options.tuning.Set("fake.chunk_bytes", 1);
  const int before = g_fake_created.load();
  try {
    CreateCommunicator("tuning_test_fake", RankContext{}, options);
    ADD_FAILURE() << "bad tuning accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("fake.chunk_bytes = 1"),
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

TEST(TuningEnvironmentTest, NothingSetSetsNothing) {
  EXPECT_TRUE(Parse({}).values().empty());
  // An empty value counts as unset.
  Env empty;
  for (const TuningSetting& s : TuningSettings()) empty[s.variable] = "";
  EXPECT_TRUE(Parse(empty).values().empty());
}

TEST(TuningEnvironmentTest, EveryVariableReachesItsSetting) {
  Env env;
  for (const TuningSetting& s : TuningSettings()) {
    env[s.variable] = std::to_string(s.max);
  }
  const BackendTuning t = Parse(env);
  for (const TuningSetting& s : TuningSettings()) {
    EXPECT_EQ(t.Get(s.name), std::optional<uint64_t>(s.max)) << s.name;
  }
  EXPECT_EQ(Parse({{"RINGLAB_CHECK_CALLS", "0"}}).Get("comm.check_calls"),
            std::optional<uint64_t>(0));
}

// What lookup does not find keeps base's value.
TEST(TuningEnvironmentTest, OverrideKeepsWhatIsNotSet) {
  BackendTuning base;
  base.Set("fake.chunk_bytes", 8192);
  base.Set("comm.check_calls", 0);
  const BackendTuning t =
      OverrideTuning(base, [](const char* name) -> const char* {
        return std::string(name) == "RINGLAB_FAKE_CHUNK_BYTES" ? "4096"
                                                               : nullptr;
      });
  EXPECT_EQ(t.Get("fake.chunk_bytes"), std::optional<uint64_t>(4096));
  EXPECT_EQ(t.Get("comm.check_calls"), std::optional<uint64_t>(0));
  EXPECT_FALSE(t.Get("fake.mode").has_value());
}

TEST(TuningEnvironmentTest, TextThatIsNotANumberIsRefusedNamingTheVariable) {
  for (const char* text : {"12x", "-1", " 12", "12 ", "0x10", "1e6", "+5",
                           "4 KiB", "99999999999999999999999"}) {
    SCOPED_TRACE(text);
    EXPECT_EQ(ParseError({{"RINGLAB_FAKE_CHUNK_BYTES", text}}),
              std::string("RINGLAB_FAKE_CHUNK_BYTES='") + text +
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
