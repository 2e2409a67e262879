// ringlab's Store (comm/store/store.h) over torch's c10d::Store: the store
// init_process_group made (from MASTER_ADDR/MASTER_PORT or init_method,
// under the group's prefix), through which the ranks of a ringlab process
// group meet, as every ringlab backend's ranks meet through the job's. Its
// waits poll torch's check (see Wait), to the deadline asked for.
#ifndef RINGLAB_TORCH_BACKEND_TORCH_STORE_H_
#define RINGLAB_TORCH_BACKEND_TORCH_STORE_H_

#include <chrono>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "comm/store/store.h"

namespace ringlab::torch_backend {

class TorchStore : public comm::Store {
 public:
  explicit TorchStore(c10::intrusive_ptr<c10d::Store> store);

  void Set(const std::string& key, const std::string& value) override;
  // StoreTimeout at the deadline; StoreError for any failure of torch's.
  std::string Get(const std::string& key,
                  std::chrono::milliseconds timeout) override;
  int64_t Add(const std::string& key, int64_t delta) override;
  void Wait(const std::vector<std::string>& keys,
            std::chrono::milliseconds timeout) override;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace ringlab::torch_backend

#endif  // RINGLAB_TORCH_BACKEND_TORCH_STORE_H_
