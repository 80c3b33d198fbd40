/* replay_flags.h: the replayer's flag table (struct replay_config,
 * replay.h), shared by every command that replays a trace. */
#ifndef REPLAY_FLAGS_H
#define REPLAY_FLAGS_H

#include "traces/base/flags.h"

/* --concurrency, --duration, --mode, --arrival, ... into a struct
 * replay_config (replay_config.c). */
extern const struct flag replay_flags[];

#endif
