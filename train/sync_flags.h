// The trainer's flags for the synchronisers' options, made from their
// declarations (sync/options.h) when the program starts, and what
// `train --list_syncs` prints of the descriptions.
#ifndef RINGLAB_TRAIN_SYNC_FLAGS_H_
#define RINGLAB_TRAIN_SYNC_FLAGS_H_

#include <string>

#include "sync/options.h"

namespace ringlab::train {

// Registers a gflags flag for every option a registered synchroniser
// declares (once per name). Call before parsing the command line.
void RegisterSyncFlags();

// The options of --sync=`name` from the command line: those given, checked
// (an option of another synchroniser is refused, naming it), the others at
// their defaults. std::invalid_argument.
sync::OptionValues SyncOptionsFromFlags(const std::string& name);

// The registered synchronisers: one paragraph each (format "text") or a JSON
// array of their descriptions with their options ("json");
// std::invalid_argument for another format.
std::string ListSyncs(const std::string& format);

}  // namespace ringlab::train

#endif  // RINGLAB_TRAIN_SYNC_FLAGS_H_
