// Which GPU a rank owns, decided once per rank before it creates its model or
// its communicator (so that both land on it, whatever the communicator): the
// device asked for (--device=cuda:N), else LOCAL_RANK modulo the devices this
// machine has, as torchrun-style launchers expect. The launcher never calls
// it: it must not create a CUDA context before forking ranks.
#ifndef RINGLAB_TRAIN_RANK_DEVICE_H_
#define RINGLAB_TRAIN_RANK_DEVICE_H_

namespace ringlab::train {

// Makes the chosen device current on the calling thread and returns it
// (requested >= 0: that one). Throws std::invalid_argument where this binary
// has no CUDA or the machine no such device.
int SelectRankDevice(int requested, int local_rank);

// For the launcher, which must not touch a GPU itself: asks a forked child
// how many devices there are and throws std::invalid_argument when there is
// none (saying why) or none with the requested index.
void CheckDevicesFromLauncher(int requested);

}  // namespace ringlab::train

#endif  // RINGLAB_TRAIN_RANK_DEVICE_H_
