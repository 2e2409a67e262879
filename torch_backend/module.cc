// The Python module ringlab_torch: importing it registers "ringlab" with
// torch.distributed, so that a PyTorch program changes one word,
// dist.init_process_group("ringlab", ...), to run over ringlab's
// collectives (torch_backend/process_group.h); ringlab_torch.Synchronizer
// brings ringlab's synchronisers to any PyTorch loop
// (torch_backend/synchronizer_binding.h).
#include <pybind11/chrono.h>
#include <torch/extension.h>

#include <chrono>
#include <utility>

#include "torch_backend/process_group.h"
#include "torch_backend/synchronizer_binding.h"

namespace {

using ringlab::torch_backend::ProcessGroupRinglab;

// Python's reference to a group, dropped without the GIL: the group's
// destructor joins threads whose futures' Python callbacks take the GIL, so
// holding it there would deadlock (torch's own bindings hold its process
// groups this way). Laid out as c10::intrusive_ptr, which torch's casters
// read the holder as when the group is passed to them.
template <typename T>
class NoGilReference {
 public:
  NoGilReference() = default;
  explicit NoGilReference(T* p)
      : ptr_(c10::intrusive_ptr<T>::reclaim_copy(p)) {}
  NoGilReference(c10::intrusive_ptr<T> p) : ptr_(std::move(p)) {}  // NOLINT
  NoGilReference(const NoGilReference&) = default;
  NoGilReference& operator=(const NoGilReference&) = default;
  ~NoGilReference() {
    if (ptr_ && PyGILState_Check()) {
      pybind11::gil_scoped_release release;
      ptr_.reset();
    }
  }
  T* get() const { return ptr_.get(); }

 private:
  c10::intrusive_ptr<T> ptr_;
};
static_assert(sizeof(NoGilReference<ProcessGroupRinglab>) ==
              sizeof(c10::intrusive_ptr<ProcessGroupRinglab>));

// Joining waits for the other ranks: without the GIL, released here rather
// than by a call guard on the constructor (pybind11 #5473).
c10::intrusive_ptr<ProcessGroupRinglab> Create(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout) {
  pybind11::gil_scoped_release release;
  return c10::make_intrusive<ProcessGroupRinglab>(store, rank, size, timeout);
}

}  // namespace

PYBIND11_DECLARE_HOLDER_TYPE(T, NoGilReference<T>, true);

PYBIND11_MODULE(ringlab_torch, module) {
  module.doc() = "ringlab's collectives as a torch.distributed backend";
  // torch's ProcessGroup type must be known to pybind11 before ours derives.
  pybind11::module_ dist = pybind11::module_::import("torch.distributed");
  pybind11::class_<ProcessGroupRinglab, c10d::ProcessGroup,
                   NoGilReference<ProcessGroupRinglab>>(module,
                                                        "ProcessGroupRinglab")
      .def(pybind11::init(&Create), pybind11::arg("store"),
           pybind11::arg("rank"), pybind11::arg("size"),
           pybind11::arg("timeout"))
      .def_property_readonly("communicator", &ProcessGroupRinglab::communicator)
      .def_property_readonly("channels", &ProcessGroupRinglab::channels);
  // torch calls it with (store, rank, world_size, timeout).
  module.def("create", &Create, pybind11::arg("store"), pybind11::arg("rank"),
             pybind11::arg("size"), pybind11::arg("timeout"));
  dist.attr("Backend").attr("register_backend")("ringlab",
                                                module.attr("create"));
  ringlab::torch_backend::BindSynchronizer(module);
}
