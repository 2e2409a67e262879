#include "train/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "io/atomic_file.h"
#include "io/checksums.h"
#include "io/dirs.h"
#include "io/npy.h"
#include "nn/params_io.h"

namespace ringlab::train {

using io::FsyncDirectory;
using io::MakeDirs;
namespace {

namespace fs = std::filesystem;

std::string StepDir(const std::string& dir, int64_t next_step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld",
                static_cast<long long>(next_step));
  return dir + "/" + name;
}

// The step a "step_<N>" directory holds, or nothing for another name.
std::optional<int64_t> StepOfDirectory(const std::string& name) {
  if (name.rfind("step_", 0) != 0 || name.size() == 5 || name.size() > 23) {
    return std::nullopt;
  }
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    step = step * 10 + (name[i] - '0');  // at most 18 digits: no overflow
  }
  return step;
}

// What a part holds beside its tensors: the rank that wrote it and its job's
// description, both covered by the part's checksums.
constexpr char kPartRankFile[] = "rank";
constexpr char kPartJobFile[] = "job.txt";

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

void WriteRankCheckpoint(const std::string& dir, int rank,
                         const nn::MlpLayout& layout,
                         const RankCheckpoint& checkpoint,
                         const std::function<void()>& before_rename) {
  const std::string step_dir = StepDir(dir, checkpoint.next_step);
  MakeDirs(step_dir);
  FsyncDirectory(dir);  // step_dir's entry
  const std::string final_dir = step_dir + "/rank" + std::to_string(rank);
  const std::string temporary = final_dir + ".tmp-" + io::RandomHex();
  MakeDirs(temporary);
  try {
    // Each file is fsynced as it is written (io::WriteFileAtomically).
    nn::SaveParams(temporary, layout, checkpoint.params.data());
    for (const sync::SyncTensor& tensor : checkpoint.sync_state) {
      io::WriteNpyFloat32(temporary + "/sync." + tensor.name + ".npy",
                          {static_cast<int64_t>(tensor.values->size())},
                          tensor.values->data());
    }
    io::WriteFileAtomically(temporary + "/history.csv",
                            StepRecordsToCsv(checkpoint.history, rank, true));
    io::WriteFileAtomically(temporary + "/next_step",
                            std::to_string(checkpoint.next_step) + "\n");
    io::WriteFileAtomically(temporary + "/" + kPartRankFile,
                            std::to_string(rank) + "\n");
    io::WriteFileAtomically(temporary + "/" + kPartJobFile, checkpoint.job);
    // Taken of the files as they are on disk, so that a resume reads back
    // exactly what was written or refuses.
    io::WriteChecksums(temporary);
    FsyncDirectory(temporary);
  } catch (...) {
    // A write that failed (a full disk) leaves nothing half-made behind.
    std::error_code ignored;
    fs::remove_all(temporary, ignored);
    throw;
  }
  if (before_rename) before_rename();
  std::error_code error;
  fs::remove_all(final_dir, error);  // a partial one from an earlier crash
  io::Rename(temporary, final_dir);
  FsyncDirectory(step_dir);
}

void MarkLatestCheckpoint(const std::string& dir, int64_t next_step) {
  io::WriteFileAtomically(dir + "/latest", std::to_string(next_step) + "\n");
  FsyncDirectory(dir);
}

void PruneCheckpointsBefore(const std::string& dir, int64_t next_step) {
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    const std::optional<int64_t> step = StepOfDirectory(name);
    // Only rank 0 writes at the top (latest, job.txt): temporaries there
    // are its own, from a crash.
    if ((step && *step < next_step) ||
        (!step && name.find(".tmp-") != std::string::npos)) {
      fs::remove_all(entry.path(), error);
    }
  }
}

void RemoveUnfinishedCheckpoints(const std::string& dir, int64_t latest) {
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    const std::optional<int64_t> step = StepOfDirectory(name);
    if ((step && *step > latest) ||
        (!step && name.find(".tmp-") != std::string::npos)) {
      fs::remove_all(entry.path(), error);
    }
  }
  for (const auto& entry :
       fs::directory_iterator(StepDir(dir, latest), error)) {
    if (entry.path().filename().string().find(".tmp-") != std::string::npos) {
      fs::remove_all(entry.path(), error);
    }
  }
}

void WriteJobDescription(const std::string& dir, const std::string& text) {
  MakeDirs(dir);
  io::WriteFileAtomically(dir + "/job.txt", text);
}

std::string ReadJobDescription(const std::string& dir) {
  if (!fs::exists(dir + "/job.txt")) return "";
  return ReadFile(dir + "/job.txt");
}

std::optional<int64_t> LatestCheckpoint(const std::string& dir) {
  const std::string path = dir + "/latest";
  std::error_code error;
  if (!fs::exists(path, error)) return std::nullopt;
  const std::string text = ReadFile(path);
  // What MarkLatestCheckpoint writes, and nothing else: "8junk" is no 8.
  const size_t digits = text.find_first_not_of("0123456789");
  if (digits == 0 || digits == std::string::npos || digits > 18 ||
      text.substr(digits) != "\n") {
    throw std::invalid_argument(path + ": not a step number");
  }
  return std::stoll(text.substr(0, digits));
}

std::string StagingDir(const std::string& dir) { return dir + ".next"; }

void PromoteStagedCheckpoints(const std::string& dir) {
  const std::string staged = StagingDir(dir), old = dir + ".old";
  std::error_code error;
  // A promotion a crash interrupted after moving <dir> aside.
  if (!fs::exists(dir, error) && fs::exists(old, error) &&
      !LatestCheckpoint(staged)) {
    fs::rename(old, dir, error);
  }
  if (!LatestCheckpoint(staged)) return;
  if (fs::exists(dir, error)) {
    fs::remove_all(old, error);
    fs::rename(dir, old, error);
    if (error) {
      throw std::runtime_error("cannot move " + dir +
                               " aside: " + error.message());
    }
  }
  fs::rename(staged, dir, error);
  if (error) {
    throw std::runtime_error("cannot move " + staged + " into " + dir +
                             "'s place: " + error.message());
  }
  FsyncDirectory(fs::path(dir).parent_path().string());
  fs::remove_all(old, error);
}

std::string ResumableCheckpointDir(const std::string& dir) {
  return LatestCheckpoint(StagingDir(dir)) ? StagingDir(dir) : dir;
}

std::string FirstJobDifference(const std::string& theirs,
                               const std::string& ours) {
  const std::vector<std::string> a = Lines(theirs), b = Lines(ours);
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string mine = i < b.size() ? b[i] : "nothing";
    const std::string other = i < a.size() ? a[i] : "nothing";
    if (mine != other) return other + ", this run " + mine;
  }
  return "";
}

namespace {

// A part is resumed only by the rank that wrote it, in the job that wrote it
// (its files' checksums were checked before: these are as written).
void CheckPartIsOurs(const std::string& rank_dir, int rank,
                     const std::string& job) {
  std::error_code error;
  if (!fs::exists(rank_dir + "/" + kPartRankFile, error)) {
    throw std::invalid_argument(
        rank_dir +
        " records no rank and job: a part written by an older ringlab, which "
        "this one does not resume (start the run afresh)");
  }
  const std::string written = ReadFile(rank_dir + "/" + kPartRankFile);
  if (written != std::to_string(rank) + "\n") {
    throw std::invalid_argument(rank_dir + " holds rank " +
                                written.substr(0, written.find('\n')) +
                                "'s part, not rank " + std::to_string(rank) +
                                "'s: parts are never resumed by another rank");
  }
  const std::string difference =
      FirstJobDifference(ReadFile(rank_dir + "/" + kPartJobFile), job);
  if (!difference.empty()) {
    throw std::invalid_argument(rank_dir + " is another job's part (it has " +
                                difference + ")");
  }
}

}  // namespace

RankCheckpoint ReadRankCheckpoint(
    const std::string& dir, int rank, const nn::MlpLayout& layout,
    int64_t next_step, const std::string& job,
    const std::vector<sync::SyncTensor>& sync_state) {
  const std::string step_dir = StepDir(dir, next_step);
  const std::string rank_dir = step_dir + "/rank" + std::to_string(rank);
  for (const std::string& path : {step_dir, rank_dir}) {
    std::error_code error;
    if (fs::is_symlink(fs::symlink_status(path, error))) {
      throw std::invalid_argument(path +
                                  " is a symbolic link: a checkpoint's step "
                                  "directories and parts are never followed");
    }
  }
  if (!fs::is_directory(rank_dir)) {
    throw std::invalid_argument("the checkpoint of step " +
                                std::to_string(next_step) + " in " + dir +
                                " is incomplete: rank " + std::to_string(rank) +
                                "'s part (" + rank_dir + ") is missing");
  }
  try {
    io::VerifyChecksums(rank_dir);
  } catch (const io::ChecksumError& e) {
    throw std::invalid_argument(std::string("the checkpoint of step ") +
                                std::to_string(next_step) +
                                " is damaged: " + e.what());
  }
  CheckPartIsOurs(rank_dir, rank, job);
  RankCheckpoint checkpoint;
  checkpoint.next_step = next_step;
  checkpoint.job = job;
  checkpoint.params.resize(layout.num_params());
  try {
    nn::LoadParams(rank_dir, layout, checkpoint.params.data());
    for (const sync::SyncTensor& tensor : sync_state) {
      const std::string path = rank_dir + "/sync." + tensor.name + ".npy";
      std::vector<int64_t> shape;
      std::vector<float> values = io::ReadNpyFloat32(path, &shape);
      if (values.size() != tensor.values->size() || shape.size() != 1) {
        throw std::invalid_argument(
            path + " holds shape " + io::ShapeToString(shape) + ", expected (" +
            std::to_string(tensor.values->size()) + ",)");
      }
      *tensor.values = std::move(values);
    }
    checkpoint.sync_state = sync_state;
  } catch (const io::NpyError& e) {
    throw std::invalid_argument(e.what());
  }
  checkpoint.history = StepRecordsFromCsv(ReadFile(rank_dir + "/history.csv"),
                                          rank_dir + "/history.csv");
  if (static_cast<int64_t>(checkpoint.history.size()) != next_step) {
    throw std::invalid_argument(rank_dir + "/history.csv holds " +
                                std::to_string(checkpoint.history.size()) +
                                " steps, expected " +
                                std::to_string(next_step));
  }
  return checkpoint;
}

}  // namespace ringlab::train
