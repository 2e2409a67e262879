#include "torch_backend/synchronizer_binding.h"

#include <torch/extension.h>

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "sync/synchronizer.h"
#include "torch_backend/process_group.h"
#include "torch_backend/torch_synchronizer.h"

namespace ringlab::torch_backend {
namespace {

namespace py = pybind11;

// What the Python object and the gradient hooks share; the hooks hold it
// weakly, so that a model outliving its Synchronizer reports to nothing.
struct State {
  std::unique_ptr<TorchSynchronizer> core;
  std::vector<py::object> params;      // the model's trainable parameters
  std::vector<at::Tensor> grad_views;  // each one's .grad in the flat buffer

  // Autograd has accumulated parameter i's gradient. Where .grad is not the
  // view (zero_grad(set_to_none=True) dropped it), the new one is copied in
  // and the view put back.
  void GradReady(size_t i) {
    const py::object grad = params[i].attr("grad");
    if (!grad.is_none()) {
      const at::Tensor g = grad.cast<at::Tensor>();
      if (g.data_ptr() != grad_views[i].data_ptr()) {
        torch::NoGradGuard no_grad;
        grad_views[i].copy_(g);
        params[i].attr("grad") = grad_views[i];
      }
    }
    core->GradReady(i);
  }
};

// A keyword argument as a flag would give it.
std::string OptionText(const std::string& name, const py::handle& value) {
  if (py::isinstance<py::bool_>(value)) {
    return value.cast<bool>() ? "true" : "false";
  }
  if (py::isinstance<py::int_>(value)) return py::str(value);
  if (py::isinstance<py::float_>(value)) return py::repr(value);
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  throw py::type_error("option " + name + " must be a bool, int, float or " +
                       "str, not " + std::string(py::str(value.get_type())));
}

py::object DefaultRinglabGroup() {
  const py::module_ c10d =
      py::module_::import("torch.distributed.distributed_c10d");
  if (!c10d.attr("is_initialized")().cast<bool>()) {
    throw py::value_error(
        "ringlab_torch.Synchronizer needs the process group: call "
        "torch.distributed.init_process_group(\"ringlab\", ...) first");
  }
  py::object group = c10d.attr("_get_default_group")();
  if (!py::isinstance<ProcessGroupRinglab>(group)) {
    throw py::value_error(
        "ringlab_torch.Synchronizer runs over the ringlab process group, "
        "and the default group is " +
        std::string(py::str(c10d.attr("get_backend")())) +
        "'s: init_process_group(\"ringlab\", ...)");
  }
  return group;
}

// The model's trainable parameters, each checked; their names and shapes.
NamedShapes TrainableParameters(const py::object& model,
                                std::vector<py::object>* params) {
  NamedShapes layout;
  for (const py::handle item : model.attr("named_parameters")()) {
    const auto pair = item.cast<py::tuple>();
    const std::string name = pair[0].cast<std::string>();
    py::object p = pair[1];
    if (!p.attr("requires_grad").cast<bool>()) continue;
    const at::Tensor t = p.cast<at::Tensor>();
    if (!t.device().is_cpu()) {
      throw py::value_error("parameter " + name + " is on " + t.device().str() +
                            ": the ringlab group reduces host memory (the "
                            "model must be on the CPU)");
    }
    if (t.scalar_type() != at::kFloat) {
      throw py::value_error("parameter " + name + " is " +
                            std::string(c10::toString(t.scalar_type())) +
                            ": the synchronisers reduce float32");
    }
    layout.emplace_back(name, t.sizes().vec());
    params->push_back(std::move(p));
  }
  if (params->empty()) {
    throw py::value_error("the model has no trainable parameters");
  }
  return layout;
}

void CheckOptimizerOwns(const py::object& optimizer,
                        const std::vector<py::object>& params) {
  std::set<PyObject*> owned;
  for (const py::handle group : optimizer.attr("param_groups")) {
    for (const py::handle p : group["params"]) owned.insert(p.ptr());
  }
  size_t shared = 0;
  for (const py::object& p : params) shared += owned.count(p.ptr());
  if (shared != params.size() || owned.size() != params.size()) {
    throw py::value_error(
        "the optimizer must own exactly the model's trainable parameters: " +
        std::to_string(shared) + " of the model's " +
        std::to_string(params.size()) + " are among its " +
        std::to_string(owned.size()));
  }
}

class Synchronizer {
 public:
  Synchronizer(const py::object& model, const py::object& optimizer,
               const std::string& name, const py::kwargs& kwargs)
      : group_(DefaultRinglabGroup()),
        optimizer_(optimizer),
        state_(std::make_shared<State>()) {
    std::map<std::string, std::string> options;
    for (const auto& [key, value] : kwargs) {
      const std::string option = py::str(key);
      options[option] = OptionText(option, value);
    }
    sync::ParseSyncOptions(name, options);  // before any collective
    const NamedShapes layout = TrainableParameters(model, &state_->params);
    CheckOptimizerOwns(optimizer, state_->params);
    ProcessGroupRinglab& group = *group_.cast<ProcessGroupRinglab*>();
    {
      py::gil_scoped_release release;
      state_->core = std::make_unique<TorchSynchronizer>(
          group.CreateCommunicator(), layout, name, options);
    }
    MoveIntoFlatBuffers();
    {
      py::gil_scoped_release release;
      state_->core->Start();
    }
    HookGradientAccumulators();
  }

  // In place of optimizer.step(), after loss.backward(). before_optimizer
  // (None or a callable) runs once the gradients are synchronised, before
  // the optimiser's step: where a DDP loop clips its gradients.
  void Step(const py::object& before_optimizer) {
    using Clock = std::chrono::steady_clock;
    Clock::duration synchronising{};
    {
      py::gil_scoped_release release;
      const auto start = Clock::now();
      state_->core->AfterBackward();
      synchronising += Clock::now() - start;
    }
    if (!before_optimizer.is_none()) before_optimizer();
    optimizer_.attr("step")();
    py::gil_scoped_release release;
    const auto start = Clock::now();
    state_->core->AfterStep();
    synchronising += Clock::now() - start;
    last_sync_ms_ =
        std::chrono::duration<double, std::milli>(synchronising).count();
  }

  // The parameters the run's result is, by name (DiLoCo's outer ones; the
  // model's own for the others), as copies.
  py::dict EvaluatedParameters() const {
    const TorchSynchronizer& core = *state_->core;
    const float* values = core.evaluated_params() != nullptr
                              ? core.evaluated_params()->data()
                              : state_->core->params();
    py::dict out;
    for (const sync::TensorSlot& slot : core.layout().tensors()) {
      out[py::str(slot.name)] =
          torch::from_blob(const_cast<float*>(values) + slot.offset, slot.shape,
                           torch::kFloat32)
              .clone();
    }
    return out;
  }

  int64_t steps() const { return state_->core->step(); }
  // The last step's time in the synchroniser, the optimiser's step excluded
  // (what the trainer's losses.csv calls comm_ms).
  double last_sync_ms() const { return last_sync_ms_; }
  uint64_t bytes_sent() const { return state_->core->bytes_sent(); }

 private:
  // Each parameter and its .grad become views of the flat buffers (the
  // values copied in first), as DDP's gradient_as_bucket_view makes .grad.
  void MoveIntoFlatBuffers() {
    TorchSynchronizer& core = *state_->core;
    const int64_t n = static_cast<int64_t>(core.num_params());
    const at::Tensor flat = torch::from_blob(core.params(), {n});
    const at::Tensor grads = torch::from_blob(core.grads(), {n});
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < state_->params.size(); ++i) {
      const sync::TensorSlot& slot = core.layout().tensors()[i];
      const auto offset = static_cast<int64_t>(slot.offset);
      const auto size = static_cast<int64_t>(slot.size);
      at::Tensor view = flat.narrow(0, offset, size).view(slot.shape);
      view.copy_(state_->params[i].cast<at::Tensor>());
      state_->params[i].attr("data") = view;
      at::Tensor grad = grads.narrow(0, offset, size).view(slot.shape);
      state_->params[i].attr("grad") = grad;
      state_->grad_views.push_back(grad);
    }
  }

  // A post-hook on each parameter's gradient accumulator (what DDP's reducer
  // hooks): it runs once the gradient is in .grad.
  void HookGradientAccumulators() {
    const std::weak_ptr<State> weak = state_;
    for (size_t i = 0; i < state_->params.size(); ++i) {
      const py::object& p = state_->params[i];
      py::object accumulator = p.attr("expand_as")(p).attr("grad_fn").attr(
          "next_functions")[py::int_(0)][py::int_(0)];
      accumulator.attr("register_hook")(py::cpp_function([weak, i](py::args) {
        if (const std::shared_ptr<State> state = weak.lock()) {
          state->GradReady(i);
        }
      }));
      accumulators_.append(accumulator);
    }
  }

  py::object group_;  // keeps the group alive while its communicator runs
  py::object optimizer_;
  std::shared_ptr<State> state_;
  py::list accumulators_;  // hooked: kept alive with their hooks
  double last_sync_ms_ = 0;
};

py::list DescribeSyncs() {
  py::list all;
  for (const sync::SyncDescription* d : sync::AllSyncs()) {
    py::list options;
    for (const sync::OptionSpec& spec : d->options) {
      py::dict option;
      option["name"] = spec.name;
      option["type"] = sync::OptionTypeName(spec.type);
      option["default"] = spec.default_text;
      option["range"] = sync::DescribeRange(spec);
      option["help"] = spec.help;
      options.append(option);
    }
    py::dict entry;
    entry["name"] = d->name;
    entry["summary"] = d->summary;
    entry["sends"] = d->sends;
    entry["pytorch"] = d->pytorch;
    entry["options"] = options;
    entry["short_run"] = d->short_run;
    all.append(entry);
  }
  return all;
}

}  // namespace

void BindSynchronizer(py::module_& module) {
  py::class_<Synchronizer>(module, "Synchronizer",
                           "ringlab's synchronisers from a PyTorch loop: "
                           "loss.backward(); sync.step() in place of "
                           "optimizer.step()")
      .def(py::init<const py::object&, const py::object&, const std::string&,
                    const py::kwargs&>(),
           py::arg("model"), py::arg("optimizer"), py::arg("sync"))
      .def("step", &Synchronizer::Step,
           py::arg("before_optimizer") = py::none(),
           "in place of optimizer.step(); before_optimizer() runs between the "
           "synchronised gradients and the optimiser's step (clip there)")
      .def("evaluated_parameters", &Synchronizer::EvaluatedParameters)
      .def_property_readonly("steps", &Synchronizer::steps)
      .def_property_readonly("last_sync_ms", &Synchronizer::last_sync_ms)
      .def_property_readonly("bytes_sent", &Synchronizer::bytes_sent);
  module.def("syncs", &DescribeSyncs,
             "the registered synchronisers: name, summary, sends, pytorch, "
             "options, short_run");
}

}  // namespace ringlab::torch_backend
