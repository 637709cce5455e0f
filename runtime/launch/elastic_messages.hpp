// The lines launchers of an elastic job exchange with machine 0's rendezvous host
// (docs/design/0027). One message per '\n'-terminated line, fields separated by tabs:
//   launcher -> host:  join <machine_rank> <hostname> | failed <round> <what> | done <round>
//   host -> launcher:  round <round> <rank> <worker_port> <machines> <left> <cause>
//                      | stop <round> <cause> | wait <round> | end <exit_code> <why>
// <machines> lists the round's members by their machine_rank, in the order of their new (dense)
// ranks; <left> the previous round's members that are not in this one ("-" for none).
// Invariant: decode(encode(m)) == m for every message whose text has no tab or newline (encode
// replaces them by spaces) or other control byte, and decode() refuses any line it cannot read whole.
// decode() writes every control byte of a text field as \xNN (secret::printable): launchers print
// these texts, and a peer's bytes must not drive the reader's terminal.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace accel::launch {

enum class ElasticKind { Join, Failed, Done, Round, Stop, Wait, End };

struct ElasticMessage {
  ElasticKind kind = ElasticKind::Join;
  int round = 0;              // Failed, Done, Round, Stop, Wait
  int machine = -1;           // Join: the sender's machine_rank
  int rank = 0;               // Round: the receiver's machine rank in this round
  int worker_port = 0;        // Round: the workers' store port on machine 0 (MASTER_PORT)
  std::vector<int> machines;  // Round: the members' machine_ranks, in rank order
  std::vector<int> left;      // Round: the previous round's members not in this one
  int exit_code = 0;          // End: 0 the job finished, 1 it failed, 2 this launcher was refused
  std::string text;           // Join: hostname; Failed: what failed; Round/Stop: the restart's cause;
                              // End: why the job ended

  bool operator==(const ElasticMessage&) const = default;
};

// A message of `kind` for `round` with `text` (Failed, Done, Stop, Wait; the other fields default).
inline ElasticMessage elastic_message(ElasticKind kind, int round, std::string text = "") {
  ElasticMessage m;
  m.kind = kind;
  m.round = round;
  m.text = std::move(text);
  return m;
}

std::string encode(const ElasticMessage& message);               // one line with its '\n'
std::optional<ElasticMessage> decode(const std::string& line);  // a line without its '\n'

// "0, 2 and 3" for a list of machine ranks.
std::string machines_text(const std::vector<int>& machines);

}  // namespace accel::launch
