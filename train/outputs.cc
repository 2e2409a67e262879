#include "train/outputs.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <variant>

#include "comm/gather_strings.h"
#include "io/atomic_file.h"
#include "io/dirs.h"
#include "nn/params_io.h"
#include "trace/trace.h"

namespace ringlab::train {
namespace {

namespace fs = std::filesystem;

std::string ConfigJson(const TrainConfig& c, int world_size,
                       const std::string& data_source) {
  // Every option of the synchroniser, as the flags that remake the run give
  // them.
  nlohmann::ordered_json sync_options = nlohmann::ordered_json::object();
  for (const auto& [name, value] : c.sync_options.values()) {
    std::visit([&, name = name](const auto& v) { sync_options[name] = v; },
               value);
  }
  const nlohmann::ordered_json json = {
      {"model", c.model},
      {"sync", c.sync},
      {"sync_options", sync_options},
      {"comm", c.comm},
      {"device", nn::DeviceName(c.device)},
      {"world_size", world_size},
      {"epochs", c.epochs},
      // The float's shortest exact text, read back as a number.
      {"lr", std::stod(FloatText(c.sgd.lr))},
      {"momentum", std::stod(FloatText(c.sgd.momentum))},
      {"nesterov", c.sgd.nesterov},
      {"weight_decay", std::stod(FloatText(c.sgd.weight_decay))},
      {"straggler_rank", c.straggler_rank},
      {"straggler_factor", c.straggler_factor},
      {"straggler_limit", StragglerLimitName(c.straggler_limit)},
      {"batch_size", c.batch_size},
      {"samples", c.samples},
      {"seed", c.seed},
      {"sampler_seed", c.sampler_seed},
      {"shuffle", c.shuffle},
      {"drop_last", c.drop_last},
      {"set_epoch", c.set_epoch},
      {"per_rank_data", c.per_rank_data},
      {"dataset", c.dataset.empty() ? "default" : c.dataset},
      {"data", data_source},
      {"eval_every", c.eval_every},
      {"init_dir", c.init_dir},
      {"checkpoint_every", c.checkpoint_every},
      {"resume", c.resume},
      {"trace", c.trace_path},
      {"timeout_ms", c.timeout.count()}};
  return json.dump(2) + "\n";
}

// A parameters directory is written whole into a temporary directory and
// swapped in, so it never mixes two runs' tensors (nor keeps a deeper
// model's fc3.*).
void ReplaceParamsDir(const std::string& final_dir, const nn::MlpLayout& layout,
                      const std::vector<float>& params) {
  const std::string fresh = final_dir + ".tmp-new";
  const std::string old = final_dir + ".tmp-old";
  std::error_code error;
  fs::remove_all(fresh, error);
  fs::remove_all(old, error);
  io::MakeDirs(fresh);
  nn::SaveParams(fresh, layout, params.data());
  if (fs::exists(final_dir)) fs::rename(final_dir, old, error);
  fs::rename(fresh, final_dir, error);
  if (error) {
    throw std::runtime_error("cannot write " + final_dir + ": " +
                             error.message());
  }
  fs::remove_all(old, error);
}

std::string RecordsToBytes(const std::vector<StepRecord>& records) {
  if (records.empty()) return "";
  return std::string(reinterpret_cast<const char*>(records.data()),
                     records.size() * sizeof(StepRecord));
}

std::vector<StepRecord> RecordsFromBytes(const std::string& bytes) {
  std::vector<StepRecord> records(bytes.size() / sizeof(StepRecord));
  if (records.empty()) return records;
  std::memcpy(records.data(), bytes.data(),
              records.size() * sizeof(StepRecord));
  return records;
}

std::string Fnv1a(const void* data, size_t size) {
  uint64_t hash = 1469598103934665603ull;
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
  return std::string(reinterpret_cast<const char*>(&hash), sizeof(hash));
}

// Final parameters of other ranks from an earlier run into this --out_dir.
void RemoveOtherRanksParams(const std::string& out_dir) {
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(out_dir, error)) {
    if (entry.path().filename().string().rfind("final_rank", 0) == 0) {
      fs::remove_all(entry.path(), error);
    }
  }
}

// "host sent received" of a rank's link traffic, "" off emulated hosts.
std::string LinkTrafficText(const std::optional<LinkTraffic>& link) {
  if (!link) return "";
  return std::to_string(link->host) + " " + std::to_string(link->sent) + " " +
         std::to_string(link->received);
}

// Per emulated host, what crossed its link per training step (as its first
// rank measured it) beside the bus bytes its ranks' collectives counted:
// the difference is the wire's (headers, acknowledgements, and a flat ring
// sending some of its steps through the switch twice).
nlohmann::ordered_json LinksJson(const std::vector<std::string>& traffic,
                                 const std::vector<std::string>& records) {
  nlohmann::ordered_json links = nlohmann::ordered_json::array();
  std::map<int, size_t> seen;  // host -> its entry
  for (size_t r = 0; r < traffic.size(); ++r) {
    std::istringstream fields(traffic[r]);
    int host = -1;
    uint64_t sent = 0, received = 0;
    if (!(fields >> host >> sent >> received)) continue;
    const std::vector<StepRecord> steps = RecordsFromBytes(records[r]);
    uint64_t bus = 0;
    for (const StepRecord& step : steps) bus += step.bytes_sent;
    const double n = std::max<size_t>(steps.size(), 1);
    if (seen.count(host) == 0) {
      seen[host] = links.size();
      links.push_back({{"host", host},
                       {"link_bytes_sent_per_step", sent / n},
                       {"link_bytes_received_per_step", received / n},
                       {"bus_bytes_sent_per_step", 0.0}});
    }
    links[seen[host]]["bus_bytes_sent_per_step"] =
        links[seen[host]]["bus_bytes_sent_per_step"].get<double>() + bus / n;
  }
  return links;
}

std::string SummaryJson(bool ranks_equal, int world_size, size_t steps,
                        const nlohmann::ordered_json& links) {
  nlohmann::ordered_json json = {{"ranks_bitwise_equal", ranks_equal},
                                 {"world_size", world_size},
                                 {"steps_per_rank", steps}};
  if (!links.empty()) json["links"] = links;
  return json.dump(2) + "\n";
}

}  // namespace

std::string FloatText(float value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.9g", value);
  return text;
}

void WriteRunOutputs(const TrainConfig& config, const nn::MlpLayout& layout,
                     const std::string& data_source, const TrainResult& result,
                     comm::Communicator& comm) {
  const int rank = comm.rank();
  const int world_size = comm.world_size();
  const bool writing = !config.out_dir.empty();
  // Before the first exchange, which no rank passes before rank 0: no rank
  // is writing its final_rank<r>/ yet.
  if (rank == 0 && writing) RemoveOtherRanksParams(config.out_dir);
  const auto all_records =
      comm::AllGatherStrings(comm, RecordsToBytes(result.history));
  // Whether every rank ends with rank 0's parameters, bit for bit.
  const auto all_hashes = comm::AllGatherStrings(
      comm, Fnv1a(result.final_params.data(),
                  result.final_params.size() * sizeof(float)));
  const bool ranks_equal =
      std::all_of(all_hashes.begin(), all_hashes.end(),
                  [&](const std::string& h) { return h == all_hashes[0]; });
  const auto all_traffic =
      comm::AllGatherStrings(comm, LinkTrafficText(result.link));
  std::vector<std::string> all_events;
  if (!config.trace_path.empty()) {
    all_events = comm::AllGatherStrings(comm, result.trace_events);
  }
  if (writing && rank != 0 && !ranks_equal) {
    ReplaceParamsDir(config.out_dir + "/final_rank" + std::to_string(rank),
                     layout, result.final_params);
  }
  if (writing && rank == 0) {
    std::string csv = StepRecordsToCsv({}, 0, /*header=*/true);
    for (int r = 0; r < world_size; ++r) {
      csv += StepRecordsToCsv(RecordsFromBytes(all_records[r]), r, false);
    }
    ReplaceParamsDir(config.out_dir + "/final", layout, result.final_params);
    io::WriteFileAtomically(config.out_dir + "/losses.csv", csv);
    if (!result.evaluations.empty()) {
      io::WriteFileAtomically(config.out_dir + "/eval.csv",
                              EvalRecordsToCsv(result.evaluations));
    } else {
      std::error_code error;  // an earlier run's, not this one's
      fs::remove(config.out_dir + "/eval.csv", error);
    }
    io::WriteFileAtomically(config.out_dir + "/config.json",
                            ConfigJson(config, world_size, data_source));
    io::WriteFileAtomically(
        config.out_dir + "/summary.json",
        SummaryJson(ranks_equal, world_size, result.history.size(),
                    LinksJson(all_traffic, all_records)));
  }
  // Last: a trace that cannot be written (its directory went away since the
  // launcher probed it) costs the trace, not the run's outputs.
  if (rank == 0 && !config.trace_path.empty()) {
    trace::WriteTrace(config.trace_path, all_events);
  }
  comm.Barrier();  // nobody exits before every rank has written
}

}  // namespace ringlab::train
