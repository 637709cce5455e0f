// Which keys of a resolved job kept accel's default. `accel launch` writes the resolved job with
// every key (workers must run exactly what the launcher checked), so a worker that reloads it would
// see every key as set by a file. Some decisions need to know whether the user set a key: a class
// name in fsdp.transformer_layer_cls_to_wrap that matches no module of a user's model is an error
// when the user wrote it and nothing when it is the default (Block). The launcher therefore writes
// the default keys beside the job (`<job file>.defaults`, one key path per line) and the worker
// marks them as defaults again after loading.
#pragma once

#include <string>

#include "runtime/config/job_loader.hpp"

namespace accel::config {

// The side file's name for a job file.
std::string default_keys_path(const std::string& job_file);
// The side file's text: a comment line, then every key path of `loaded` whose origin is Default.
std::string default_keys_text(const LoadedJob& loaded);
// For a job loaded from loaded.file: each key `<file>.defaults` lists whose value came from that
// file gets the Default origin back (keys the worker's environment set stay as they are). Nothing
// happens when the side file does not exist (a job file written by hand).
void restore_default_origins(LoadedJob& loaded);

}  // namespace accel::config
