// The synchronisers over the trainer's MLP (train/mlp_buffers.h), one rank
// against a simulated peer: what each reduces, and when.
#include "sync/synchronizer.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/testing/fake_backend.h"
#include "nn/mlp.h"
#include "sync/periodic_average.h"
#include "train/mlp_buffers.h"

namespace ringlab::train {
namespace {

// A synchroniser over an MLP, held as the trainer holds one.
struct MlpSync {
  MlpSync(const std::string& name, comm::Communicator& comm, nn::Mlp& model,
          const std::map<std::string, std::string>& given = {})
      : buffers(model),
        options(sync::ParseSyncOptions(name, given)),
        synchronizer(sync::CreateSync(name, {comm, buffers, options, tracer})) {
  }
  nn::BackwardObserver* backward_observer(int64_t step) {
    sync::GradObserver* observer = synchronizer->backward_observer(step);
    if (observer == nullptr) return nullptr;
    return &adapter.emplace(*observer);
  }
  void Start(nn::Mlp&, bool resumed) { synchronizer->Start(buffers, resumed); }
  void AfterBackward(nn::Mlp&, int64_t step) {
    synchronizer->AfterBackward(buffers, step);
  }
  void AfterStep(nn::Mlp&, int64_t step) {
    synchronizer->AfterStep(buffers, step);
  }
  std::vector<sync::SyncTensor> state() { return synchronizer->state(); }
  const std::vector<float>* evaluated_params() const {
    return synchronizer->evaluated_params();
  }

  trace::Tracer tracer{/*enabled=*/false, 0};
  MlpBuffers buffers;
  sync::OptionValues options;
  std::unique_ptr<sync::Synchronizer> synchronizer;
  std::optional<LayerToTensorObserver> adapter;
};

// A two-rank communicator whose other rank is simulated: it holds `peer` and
// reduces with it. Multi-process behaviour is tested in trainer_test; this
// checks what each synchroniser reduces, and when.
class PeerBackend : public comm::Backend {
 public:
  explicit PeerBackend(std::vector<float> peer) : peer_(std::move(peer)) {}
  void AllReduce(void* buffer, size_t count, comm::DataType,
                 comm::ReduceOp op) override {
    float* const data = static_cast<float*>(buffer);
    ++allreduce_calls;
    ASSERT_EQ(count, peer_.size());
    for (size_t i = 0; i < count; ++i) {
      data[i] += peer_[i];
      if (op == comm::ReduceOp::kAvg) data[i] /= 2;
    }
  }
  void Broadcast(void*, size_t, comm::DataType, int) override {}
  void Barrier() override {}
  void AllGather(const void*, void*, size_t, comm::DataType) override {}
  int allreduce_calls = 0;

 private:
  std::vector<float> peer_;
};

// Rank 0 of two over a PeerBackend; `backend` is it.
struct PeerCommunicator {
  explicit PeerCommunicator(std::vector<float> peer)
      : comm(comm::testing::CommunicatorOver(
            std::make_unique<PeerBackend>(std::move(peer)), 0, 2, &backend)) {}
  PeerBackend* backend = nullptr;
  std::unique_ptr<comm::Communicator> comm;
};

TEST(SynchronizerTest, PeriodicModelAveragerSchedule) {
  // PeriodicModelAverager(period=3, warmup_steps=2): averages at 2, 5, 8, ...
  std::vector<int64_t> averaged;
  for (int64_t step = 0; step < 10; ++step) {
    if (sync::IsAveragingStep(step, 3, 2)) averaged.push_back(step);
  }
  EXPECT_EQ(averaged, (std::vector<int64_t>{2, 5, 8}));
  EXPECT_TRUE(sync::IsAveragingStep(0, 1, 0));
}

TEST(SynchronizerTest, AllReduceAveragesGradientsOnly) {
  const nn::MlpLayout layout({2, 2});
  auto model = nn::CreateMlp(nn::Device::kCpu, layout);
  const std::vector<float> params = {1, 2, 3, 4, 5, 6};
  model->SetParams(params.data());
  const float x[2] = {1.0f, -1.0f};
  const int64_t y[1] = {1};
  auto plain = nn::CreateMlp(nn::Device::kCpu, layout);
  plain->SetParams(params.data());
  plain->ForwardBackward(x, y, 1);
  std::vector<float> grads(6);
  plain->GetGrads(grads.data());

  PeerCommunicator comm(std::vector<float>(6, 1.0f));
  auto sync = std::make_unique<MlpSync>("allreduce", *comm.comm, *model);
  ASSERT_NE(sync->backward_observer(0), nullptr);
  model->ForwardBackward(x, y, 1, sync->backward_observer(0));
  sync->AfterBackward(*model, 0);
  std::vector<float> averaged(6);
  model->GetGrads(averaged.data());
  // (g + 1) / 2 in float: exact here, both operations are exact or correctly
  // rounded the same way on both sides.
  for (int i = 0; i < 6; ++i) EXPECT_EQ(averaged[i], (grads[i] + 1.0f) / 2);
  sync->AfterStep(*model, 0);
  EXPECT_EQ(comm.backend->allreduce_calls, 1);
  std::vector<float> after(6);
  model->GetParams(after.data());
  EXPECT_EQ(after, params);
}

TEST(SynchronizerTest, ParamAvgAveragesParametersOnSchedule) {
  const nn::MlpLayout layout({2, 2});
  auto model = nn::CreateMlp(nn::Device::kCpu, layout);
  const std::vector<float> params = {1, 2, 3, 4, 5, 6};
  model->SetParams(params.data());
  PeerCommunicator comm(std::vector<float>(6, 3.0f));
  auto sync =
      std::make_unique<MlpSync>("param_avg", *comm.comm, *model,
                                std::map<std::string, std::string>{
                                    {"avg_period", "2"}, {"avg_warmup", "1"}});
  sync->AfterBackward(*model, 0);
  sync->AfterStep(*model, 0);  // warm-up: nothing
  EXPECT_EQ(comm.backend->allreduce_calls, 0);
  sync->AfterStep(*model, 1);  // (1 - 1) % 2 == 0: average
  EXPECT_EQ(comm.backend->allreduce_calls, 1);
  std::vector<float> after(6);
  model->GetParams(after.data());
  EXPECT_EQ(after, (std::vector<float>{2, 2.5, 3, 3.5, 4, 4.5}));
  sync->AfterStep(*model, 2);
  EXPECT_EQ(comm.backend->allreduce_calls, 1);
}

TEST(SynchronizerTest, NoneNeverCommunicates) {
  const nn::MlpLayout layout({2, 2});
  auto model = nn::CreateMlp(nn::Device::kCpu, layout);
  PeerCommunicator comm(std::vector<float>(6, 3.0f));
  auto sync = std::make_unique<MlpSync>("none", *comm.comm, *model);
  for (int step = 0; step < 5; ++step) {
    sync->AfterBackward(*model, 0);
    sync->AfterStep(*model, step);
  }
  EXPECT_EQ(comm.backend->allreduce_calls, 0);
}

TEST(SynchronizerTest, PostLocalSgdIsDdpDuringWarmupThenParamAvg) {
  const nn::MlpLayout layout({2, 2});
  auto model = nn::CreateMlp(nn::Device::kCpu, layout);
  const std::vector<float> params = {1, 2, 3, 4, 5, 6};
  model->SetParams(params.data());
  const float x[2] = {1.0f, -1.0f};
  const int64_t y[1] = {1};
  PeerCommunicator comm(std::vector<float>(6, 3.0f));
  // warm-up 1 step, then every 2nd
  auto sync =
      std::make_unique<MlpSync>("post_local_sgd", *comm.comm, *model,
                                std::map<std::string, std::string>{
                                    {"avg_period", "2"}, {"avg_warmup", "1"}});
  // Step 0 (warm-up): the gradients are allreduced, the parameters not.
  ASSERT_NE(sync->backward_observer(0), nullptr);
  model->ForwardBackward(x, y, 1, sync->backward_observer(0));
  sync->AfterBackward(*model, 0);
  sync->AfterStep(*model, 0);
  EXPECT_EQ(comm.backend->allreduce_calls, 1);
  // Step 1: local gradients, then the parameters averaged ((1-1) % 2 == 0).
  EXPECT_EQ(sync->backward_observer(1), nullptr);
  model->ForwardBackward(x, y, 1, sync->backward_observer(1));
  std::vector<float> local(6), after(6);
  model->GetGrads(local.data());
  sync->AfterBackward(*model, 1);
  model->GetGrads(after.data());
  EXPECT_EQ(after, local);
  EXPECT_EQ(comm.backend->allreduce_calls, 1);
  sync->AfterStep(*model, 1);
  EXPECT_EQ(comm.backend->allreduce_calls, 2);
  model->GetParams(after.data());
  EXPECT_EQ(after, (std::vector<float>{2, 2.5, 3, 3.5, 4, 4.5}));
  sync->AfterStep(*model, 2);  // (2-1) % 2 != 0
  EXPECT_EQ(comm.backend->allreduce_calls, 2);
}

// DiLoCo's outer step on values where every operation is exact (momentum
// and learning rate 0.5), so the expected numbers are worked out by hand:
// the first outer step's buffer is the averaged change itself, the second's
// b * mu + delta.
TEST(SynchronizerTest, DiLoCoAppliesTheAveragedChangeWithNesterov) {
  const nn::MlpLayout layout({1, 1});  // 2 parameters
  auto model = nn::CreateMlp(nn::Device::kCpu, layout);
  std::vector<float> params = {1.0f, 1.0f};
  model->SetParams(params.data());
  // The peer's change, already divided by the world size: 0.75.
  PeerCommunicator comm(std::vector<float>(2, 0.75f));
  auto sync = std::make_unique<MlpSync>(
      "diloco", *comm.comm, *model,
      std::map<std::string, std::string>{{"inner_steps", "2"},
                                         {"outer_lr", "0.5"},
                                         {"outer_momentum", "0.5"}});
  sync->Start(*model, /*resumed=*/false);
  ASSERT_EQ(sync->state().size(), 2u);
  EXPECT_EQ(sync->state()[0].name, "outer_params");
  std::vector<float> local = {0.5f, 0.5f};  // after step 0's inner update
  model->SetParams(local.data());
  sync->AfterStep(*model, 0);
  EXPECT_EQ(comm.backend->allreduce_calls, 0);
  sync->AfterStep(*model, 1);  // delta = (1 - 0.5) / 2 + 0.75 = 1
  EXPECT_EQ(comm.backend->allreduce_calls, 1);
  // b = 1, d = 1 + 0.5 * 1 = 1.5, theta = 1 - 0.5 * 1.5 = 0.25.
  model->GetParams(params.data());
  EXPECT_EQ(params, (std::vector<float>{0.25f, 0.25f}));
  EXPECT_EQ(*sync->evaluated_params(), params);
  sync->AfterStep(*model, 2);
  sync->AfterStep(*model, 3);  // delta = 0 + 0.75
  // b = 1 * 0.5 + 0.75 = 1.25, d = 0.75 + 0.5 * 1.25 = 1.375,
  // theta = 0.25 - 0.5 * 1.375 = -0.4375.
  model->GetParams(params.data());
  EXPECT_EQ(params, (std::vector<float>{-0.4375f, -0.4375f}));
  EXPECT_EQ(*sync->state()[1].values, (std::vector<float>{1.25f, 1.25f}));
}

// Fragment 0 (the weight) sends at 2 inner steps, fragment 1 (the bias) at
// 4; each is applied one step later and merged half and half.
TEST(SynchronizerTest, StreamingDiLoCoAppliesEachFragmentTauStepsLater) {
  const nn::MlpLayout layout({1, 1});  // a weight and a bias: 2 tensors
  auto model = nn::CreateMlp(nn::Device::kCpu, layout);
  std::vector<float> params = {1.0f, 1.0f};
  model->SetParams(params.data());
  PeerCommunicator comm(std::vector<float>(1, 0.75f));  // a fragment's peer
  MlpSync sync("streaming_diloco", *comm.comm, *model,
               {{"inner_steps", "4"},
                {"num_fragments", "2"},
                {"fragment_sync_delay", "1"},
                {"fragment_update_alpha", "0.5"},
                {"quantize_bits", "32"},
                {"outer_lr", "0.5"},
                {"outer_momentum", "0.5"}});
  sync.Start(*model, /*resumed=*/false);
  const std::vector<float> local = {0.5f, 0.5f};  // each step's inner update
  for (int64_t step = 0; step < 2; ++step) {
    model->SetParams(local.data());
    sync.AfterStep(*model, step);  // step 1: the weight's change sent
  }
  model->SetParams(local.data());
  sync.AfterStep(*model, 2);  // ... and applied: delta = 0.25 + 0.75
  EXPECT_EQ(comm.backend->allreduce_calls, 1);
  // As DiLoCo's first outer step: outer 0.25; merged: 0.5 * 0.5 + 0.125.
  model->GetParams(params.data());
  EXPECT_EQ(params, (std::vector<float>{0.375f, 0.5f}));
  EXPECT_EQ(*sync.evaluated_params(), (std::vector<float>{0.25f, 1.0f}));
  model->SetParams(local.data());
  sync.AfterStep(*model, 3);           // the bias's sent
  EXPECT_EQ(sync.state().size(), 3u);  // waits for it
  EXPECT_EQ(comm.backend->allreduce_calls, 2);
  model->GetParams(params.data());
  EXPECT_EQ(params, local);  // not yet applied
}

// One fragment, no delay, no merge and float32: DiLoCo, bit for bit.
TEST(SynchronizerTest, StreamingDiLoCoWithOneFragmentIsDiLoCo) {
  const nn::MlpLayout layout({3, 2});
  std::vector<std::vector<float>> params(2);
  for (const std::string name : {"diloco", "streaming_diloco"}) {
    auto model = nn::CreateMlp(nn::Device::kCpu, layout);
    std::vector<float> p = {1, -2, 3, 0.5f, 0.25f, -1, 2, 7};
    model->SetParams(p.data());
    PeerCommunicator comm(std::vector<float>(p.size(), 0.3f));
    std::map<std::string, std::string> given = {{"inner_steps", "3"}};
    if (name != "diloco") {
      given.insert({{"num_fragments", "1"},
                    {"fragment_sync_delay", "0"},
                    {"fragment_update_alpha", "0"},
                    {"quantize_bits", "32"}});
    }
    MlpSync sync(name, *comm.comm, *model, given);
    sync.Start(*model, /*resumed=*/false);
    for (int64_t step = 0; step < 9; ++step) {
      for (float& x : p) x = x * 0.9f + 0.01f * static_cast<float>(step);
      model->SetParams(p.data());
      sync.AfterStep(*model, step);
      model->GetParams(p.data());
    }
    params[name == "diloco" ? 0 : 1] = p;
  }
  EXPECT_EQ(params[0], params[1]);
}

TEST(SynchronizerTest, RejectsBadNamesAndOptions) {
  using Given = std::map<std::string, std::string>;
  EXPECT_THROW(sync::FindSync("ddp"), std::invalid_argument);
  EXPECT_THROW(sync::ParseSyncOptions("ddp", {}), std::invalid_argument);
  EXPECT_THROW(sync::ParseSyncOptions("param_avg", Given{{"avg_period", "0"}}),
               std::invalid_argument);
  EXPECT_THROW(sync::ParseSyncOptions("param_avg", Given{{"avg_warmup", "-1"}}),
               std::invalid_argument);
  EXPECT_THROW(
      sync::ParseSyncOptions("allreduce", Given{{"bucket_cap_mb", "0"}}),
      std::invalid_argument);
  EXPECT_THROW(sync::ParseSyncOptions("diloco", Given{{"inner_steps", "0"}}),
               std::invalid_argument);
  EXPECT_THROW(sync::ParseSyncOptions("diloco", Given{{"outer_momentum", "1"}}),
               std::invalid_argument);
  EXPECT_THROW(sync::ParseSyncOptions("diloco", Given{{"outer_lr", "-0.1"}}),
               std::invalid_argument);
  // Streaming DiLoCo's schedule: tau below H / P, P at most H.
  EXPECT_THROW(sync::ParseSyncOptions("streaming_diloco",
                                      Given{{"inner_steps", "8"},
                                            {"num_fragments", "4"},
                                            {"fragment_sync_delay", "2"}}),
               std::invalid_argument);
  EXPECT_THROW(sync::ParseSyncOptions("streaming_diloco",
                                      Given{{"inner_steps", "2"},
                                            {"num_fragments", "3"},
                                            {"fragment_sync_delay", "0"}}),
               std::invalid_argument);
  EXPECT_THROW(
      sync::ParseSyncOptions("streaming_diloco", Given{{"quantize_bits", "2"}}),
      std::invalid_argument);
  // Another synchroniser's option, and one of none.
  EXPECT_THROW(sync::ParseSyncOptions("allreduce", Given{{"inner_steps", "7"}}),
               std::invalid_argument);
  EXPECT_THROW(sync::ParseSyncOptions("none", Given{{"no_such", "1"}}),
               std::invalid_argument);
  for (const sync::SyncDescription* d : sync::AllSyncs()) {
    EXPECT_NO_THROW(sync::ParseSyncOptions(d->name, {})) << d->name;
  }
}

}  // namespace
}  // namespace ringlab::train
