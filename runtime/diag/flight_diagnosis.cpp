// The diagnosis of a collective fault from every rank's flight records; see flight_diagnosis.hpp.
// Every group is examined on its own (sequence numbers are per group), each check giving at most one
// candidate; the candidate of the strongest finding wins, and among equals the one whose op was
// issued first (the earliest fault explains the later ones).
#include "runtime/diag/flight_diagnosis.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>

namespace accel::flight {
namespace {

using Records = std::vector<OpRecord>;  // one rank's records of one group, by sequence number
using Facts = RankFacts::Process;

// A rank that arrived more than this after the first one to enter an op is named late: well above
// the scheduling jitter of a loaded machine (tens of ms), well below any collective timeout.
constexpr int64_t kLateNs = 1'000'000'000;

struct GroupView {
  std::string name;
  std::vector<int> members;
  std::map<int, Records> of;  // rank -> its records as of the cutoff
};

struct Candidate {
  Diagnosis d;
  int64_t when = std::numeric_limits<int64_t>::max();  // issue time of the op at fault
};

// The record as it stood at `cutoff`; nothing when it was issued later.
std::optional<OpRecord> as_of(OpRecord r, int64_t cutoff) {
  if (cutoff <= 0) return r;
  if (r.issued_ns > cutoff) return std::nullopt;
  if (r.started_ns > cutoff) r.started_ns = 0;
  if (r.ended_ns > cutoff || r.started_ns == 0) {
    r.ended_ns = 0;
    r.state = OpState::Running;
  }
  return r;
}

const OpRecord* at(const Records& recs, uint64_t seq) {
  auto it = std::lower_bound(recs.begin(), recs.end(), seq, [](const OpRecord& r, uint64_t s) { return r.seq < s; });
  return it != recs.end() && it->seq == seq ? &*it : nullptr;
}

uint64_t last_seq(const Records& recs) { return recs.empty() ? 0 : recs.back().seq; }

std::string rank_list(const std::vector<int>& ranks) {
  if (ranks.empty()) return "no rank";
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) text += i + 1 == ranks.size() ? " and " : ", ";
    text += std::to_string(ranks[i]);
  }
  return text;
}

std::string seconds(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(std::max<int64_t>(ns, 0)) / 1e9);
  return buf;
}

std::string where(const std::string& group, uint64_t seq) { return "seq " + std::to_string(seq) + " of group " + group; }

std::string plural(uint64_t n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

// "another size": how `x` differs from `m`.
std::string difference(const OpRecord& x, const OpRecord& m) {
  if (x.op != m.op) return "another op";
  if (x.dtype != m.dtype) return "another dtype";
  if (x.count != m.count || x.bytes != m.bytes) return "another size";
  return "another root";
}

bool hard_fact(const RankFacts* f) {
  return f && (f->process == Facts::Stopped || f->process == Facts::Killed || f->process == Facts::Exited);
}

// "it was stopped (...)", "it exited with code 0", ...; "" when nothing is known.
std::string process_phrase(const RankFacts* f) {
  if (!f) return "";
  switch (f->process) {
    case Facts::Stopped: return "it was " + f->how;
    case Facts::Killed:
    case Facts::Exited: return "it " + f->how;
    case Facts::Running: return "it is running outside any collective: slow, or stuck in its own code";
    case Facts::Unknown: break;
  }
  return "";
}

// True when `a` from `from_a` on has the signatures of `b` from `from_b` on (at least one pair
// compared, at most four).
bool same_run(const Records& a, uint64_t from_a, const Records& b, uint64_t from_b) {
  int compared = 0;
  for (uint64_t j = 0; j < 4; ++j) {
    const OpRecord* x = at(a, from_a + j);
    const OpRecord* y = at(b, from_b + j);
    if (!x || !y) break;
    if (!same_signature(*x, *y)) return false;
    ++compared;
  }
  return compared > 0;
}

// A divergence that is a shift: the culprit skipped ops, or issued extra ones.
std::string shift_note(const Records& culprit, const Records& majority, uint64_t s) {
  for (uint64_t d = 1; d <= 3; ++d) {
    if (same_run(culprit, s, majority, s + d))
      return " (it looks to have skipped " + plural(d, "collective") + ": its seq " + std::to_string(s) +
             " is their seq " + std::to_string(s + d) + ")";
    if (same_run(majority, s, culprit, s + d))
      return " (it looks to have issued " + plural(d, "extra collective") + ": their seq " + std::to_string(s) +
             " is its seq " + std::to_string(s + d) + ")";
  }
  return "";
}

class Diagnoser {
 public:
  explicit Diagnoser(const DiagnosisInput& in) {
    for (const RankFacts& f : in.facts) facts_[f.rank] = f;
    now_ = in.detected_at_ns;
    for (const RankDump& d : in.dumps) {
      dumped_[d.rank] = &d;
      if (hosts_.empty()) hosts_ = d.hosts;
      if (in.detected_at_ns <= 0) now_ = std::max(now_, d.dumped_at_ns);
      world_ = std::max(world_, d.world);
      for (const GroupRecords& g : d.groups) {
        GroupView& view = view_of(g);
        Records& recs = view.of[d.rank];
        for (const OpRecord& r : g.records)
          if (auto kept = as_of(r, in.detected_at_ns)) recs.push_back(*kept);
        std::sort(recs.begin(), recs.end(), [](const OpRecord& a, const OpRecord& b) { return a.seq < b.seq; });
      }
    }
    if (in.world > 0) world_ = in.world;
    for (const RankFacts& f : in.facts) world_ = std::max(world_, f.rank + 1);
  }

  Diagnosis run() {
    std::optional<Candidate> best;
    auto offer = [&](std::optional<Candidate> c) {
      if (!c) return;
      if (!best || c->d.finding < best->d.finding || (c->d.finding == best->d.finding && c->when < best->when))
        best = std::move(c);
    };
    for (const GroupView& g : views_) offer(diverged(g));
    offer(other_group());
    offer(missing());
    for (const GroupView& g : views_) {
      offer(behind(g));
      offer(together(g));
    }
    Diagnosis d;
    if (best) {
      d = std::move(best->d);
    } else {
      d.finding = Finding::NoRecords;
      d.headline = "no flight records: no rank wrote any (no collective issued, or every rank ended before it could)";
    }
    for (int r = 0; r < world_; ++r)
      if (dumped_.count(r) || facts_.count(r)) d.lines.push_back(rank_line(r));
    return d;
  }

 private:
  GroupView& view_of(const GroupRecords& g) {
    for (GroupView& v : views_)
      if (v.name == g.name) return v;
    views_.push_back(GroupView{g.name, g.members, {}});
    return views_.back();
  }

  const RankFacts* fact(int rank) const {
    auto it = facts_.find(rank);
    return it == facts_.end() ? nullptr : &it->second;
  }

  std::optional<Candidate> diverged(const GroupView& g) const {
    uint64_t lo = 0, hi = 0;
    for (const auto& [rank, recs] : g.of) {
      if (recs.empty()) continue;
      lo = std::max(lo, recs.front().seq);
      hi = std::max(hi, recs.back().seq);
    }
    for (uint64_t s = std::max<uint64_t>(lo, 1); s <= hi; ++s) {
      std::vector<std::pair<const OpRecord*, std::vector<int>>> kinds;  // each signature and its ranks
      for (const auto& [rank, recs] : g.of) {
        const OpRecord* rec = at(recs, s);
        if (!rec) continue;
        auto it = std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return same_signature(*k.first, *rec); });
        if (it == kinds.end())
          kinds.push_back({rec, {rank}});
        else
          it->second.push_back(rank);
      }
      if (kinds.size() >= 2) return divergence(g, s, std::move(kinds));
    }
    return std::nullopt;
  }

  Candidate divergence(const GroupView& g, uint64_t s,
                       std::vector<std::pair<const OpRecord*, std::vector<int>>> kinds) const {
    std::stable_sort(kinds.begin(), kinds.end(), [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
    const bool majority = kinds[0].second.size() > kinds[1].second.size();
    Candidate c;
    c.d.finding = Finding::Diverged;
    c.d.group = g.name;
    c.d.seq = s;
    c.d.first_disagreement = s;
    std::string issued;
    for (size_t k = majority ? 1 : 0; k < kinds.size(); ++k) {
      for (int r : kinds[k].second) c.d.ranks.push_back(r);
      issued += std::string(issued.empty() ? "" : ", ") + rank_list(kinds[k].second) + " issued " + describe_op(*kinds[k].first);
      c.when = std::min(c.when, kinds[k].first->issued_ns);
    }
    std::sort(c.d.ranks.begin(), c.d.ranks.end());
    const auto& [culprit_op, culprit_ranks] = kinds[majority ? 1 : 0];
    c.d.op = culprit_op->op;
    if (!majority) {
      c.d.headline = "the ranks disagree at " + where(g.name, s) + ": " + issued +
                     " (no majority to tell which is at fault: compare the code paths that issue it)";
    } else if (kinds.size() == 2 && culprit_ranks.size() == 1) {
      const int culprit = culprit_ranks[0];
      const Records& mine = g.of.at(culprit);
      const Records& theirs = g.of.at(kinds[0].second[0]);
      c.d.headline = "rank " + std::to_string(culprit) + " diverged at " + where(g.name, s) + " (" +
                     difference(*culprit_op, *kinds[0].first) + "): it issued " + describe_op(*culprit_op) + " where " +
                     rank_list(kinds[0].second) + " issued " + describe_op(*kinds[0].first) + shift_note(mine, theirs, s);
    } else {
      c.d.headline = rank_list(c.d.ranks) + " diverged at " + where(g.name, s) + ": " + issued + " where " +
                     rank_list(kinds[0].second) + " issued " + describe_op(*kinds[0].first);
    }
    std::string line = "first disagreement: " + where(g.name, s) + ":";
    for (const auto& [rank, recs] : g.of)
      if (const OpRecord* rec = at(recs, s)) line += " rank " + std::to_string(rank) + " " + describe_op(*rec) + ";";
    line.pop_back();
    c.d.lines.push_back(line);
    return c;
  }

  // A rank behind in one group and alone ahead in another with the op its peers wait for.
  std::optional<Candidate> other_group() const {
    std::optional<Candidate> found;
    for (const GroupView& g : views_) {
      for (const auto& [rank, recs] : g.of) {
        const OpRecord* waited = nullptr;
        std::vector<int> waiting;
        for (const auto& [other, theirs] : g.of) {
          const OpRecord* rec = other == rank ? nullptr : at(theirs, last_seq(recs) + 1);
          if (!rec) continue;
          waiting.push_back(other);
          if (!waited) waited = rec;
        }
        if (!waited) continue;
        for (const GroupView& h : views_) {
          auto mine = h.of.find(rank);
          if (&h == &g || mine == h.of.end() || mine->second.empty() || h.of.size() < 2) continue;
          const OpRecord& newest = mine->second.back();
          bool alone = newest.state != OpState::Completed && same_signature(newest, *waited);
          for (const auto& [other, theirs] : h.of)
            if (other != rank && last_seq(theirs) >= newest.seq) alone = false;
          if (!alone || (found && found->when <= waited->issued_ns)) continue;
          Candidate c;
          c.d.finding = Finding::OtherGroup;
          c.d.ranks = {rank};
          c.d.group = h.name;
          c.d.seq = newest.seq;
          c.d.op = newest.op;
          c.when = waited->issued_ns;
          c.d.headline = "rank " + std::to_string(rank) + " issued " + describe_op(newest) + " on another group: " +
                         where(h.name, newest.seq) + ", where " + rank_list(waiting) + " issued it on group " + g.name +
                         " (seq " + std::to_string(waited->seq) + ") and wait for it there";
          found = std::move(c);
        }
      }
    }
    return found;
  }

  // A rank that exited, was killed or is stopped without leaving records, and what its peers were in.
  std::optional<Candidate> missing() const {
    std::optional<Candidate> found;
    for (const auto& [rank, f] : facts_) {
      if (dumped_.count(rank) || !hard_fact(&f)) continue;
      Candidate c;
      c.d.finding = Finding::Missing;
      c.d.ranks = {rank};
      c.d.headline = "rank " + std::to_string(rank) + (f.process == Facts::Stopped ? " was " : " ") + f.how +
                     " and left no records" + (f.process == Facts::Stopped ? " (a stopped process cannot write them)" : "");
      // The op the others were in: the earliest issued one still running, in a group it belongs to.
      const OpRecord* waited = nullptr;
      const GroupView* group = nullptr;
      for (const GroupView& g : views_) {
        if (std::find(g.members.begin(), g.members.end(), rank) == g.members.end()) continue;
        for (const auto& [other, recs] : g.of) {
          if (recs.empty() || recs.back().state == OpState::Completed) continue;
          if (!waited || recs.back().issued_ns < waited->issued_ns) {
            waited = &recs.back();
            group = &g;
          }
        }
      }
      std::vector<int> waiting;
      if (waited)
        for (const auto& [other, recs] : group->of)
          if (const OpRecord* rec = at(recs, waited->seq); rec && rec->state != OpState::Completed) waiting.push_back(other);
      if (waited) {
        c.d.group = group->name;
        c.d.seq = waited->seq;
        c.d.op = waited->op;
        c.when = waited->issued_ns;
        c.d.headline += "; " + rank_list(waiting) + (waiting.size() == 1 ? " was in " : " were in ") + describe_op(*waited) +
                        " (" + where(group->name, waited->seq) + "), waiting for it";
        const OpRecord* before = nullptr;  // the newest op the others completed before it
        for (int other : waiting)
          if (const OpRecord* rec = at(group->of.at(other), waited->seq - 1); rec && rec->state == OpState::Completed) before = rec;
        if (before)
          c.d.headline += "; the last op " + std::string(waiting.size() == 1 ? "it" : "they") + " completed is seq " +
                          std::to_string(before->seq) + ", " + describe_op(*before);
      } else {
        c.d.headline += "; no other rank was in a collective";
      }
      if (!found || c.when < found->when) found = std::move(c);
    }
    return found;
  }

  // Members that never issued the op the others are in (or the one rank that issued an op no
  // one else did, when the rest are fine and outnumber it).
  std::optional<Candidate> behind(const GroupView& g) const {
    uint64_t front = 0;
    for (const auto& [rank, recs] : g.of) front = std::max(front, last_seq(recs));
    std::vector<int> ahead, back;
    for (const auto& [rank, recs] : g.of) (last_seq(recs) == front ? ahead : back).push_back(rank);
    if (back.empty()) return std::nullopt;
    const bool any_hard = std::any_of(back.begin(), back.end(), [&](int r) { return hard_fact(fact(r)); });
    Candidate c;
    c.d.group = g.name;
    if (ahead.size() < back.size() && !any_hard) {
      const OpRecord& extra = g.of.at(ahead[0]).back();
      c.d.finding = Finding::Behind;
      c.d.ranks = ahead;
      c.d.seq = front;
      c.d.op = extra.op;
      c.when = extra.issued_ns;
      c.d.headline = rank_list(ahead) + (ahead.size() == 1 ? " is" : " are") + " ahead: " +
                     (ahead.size() == 1 ? "it" : "they") + " issued " + describe_op(extra) + " (" + where(g.name, front) +
                     "), which " + rank_list(back) + " never issued";
      return c;
    }
    uint64_t lowest = front;
    for (int r : back) lowest = std::min(lowest, last_seq(g.of.at(r)));
    const OpRecord* waited = nullptr;
    for (int r : ahead) {
      const OpRecord* rec = at(g.of.at(r), lowest + 1);
      if (rec && (!waited || (rec->started_ns && rec->started_ns < waited->started_ns))) waited = rec;
    }
    c.d.finding = Finding::Behind;
    c.d.ranks = back;
    c.d.seq = lowest + 1;
    c.d.op = waited ? waited->op : "";
    c.when = waited ? waited->issued_ns : std::numeric_limits<int64_t>::max() - 1;
    const bool one = back.size() == 1;
    std::string text = rank_list(back) + (one ? " is" : " are") + " behind: " + (one ? "it" : "they") + " never issued " +
                       where(g.name, lowest + 1);
    if (waited) {
      text += ", " + describe_op(*waited) + ", which " + rank_list(ahead) + " issued";
      if (waited->state != OpState::Completed && waited->started_ns)
        text += " and " + std::string(waited->state == OpState::Failed ? "waited in for "
                                      : ahead.size() == 1             ? "has been in for "
                                                                      : "have been in for ") +
                seconds((waited->ended_ns ? waited->ended_ns : now_) - waited->started_ns);
    }
    if (one) {
      const std::string phrase = process_phrase(fact(back[0]));
      if (!phrase.empty()) text += "; " + phrase;
      const Records& recs = g.of.at(back[0]);
      if (!recs.empty()) text += "; its last op there is seq " + std::to_string(recs.back().seq) + ", " + describe_op(recs.back()) +
                                 " (" + to_string(recs.back().state) + ")";
      text += waiting_elsewhere(back[0], g.name);
    }
    c.d.headline = text;
    return c;
  }

  // Every member issued the newest op: one arrived late, all are in it, or all completed it.
  std::optional<Candidate> together(const GroupView& g) const {
    uint64_t front = 0;
    for (const auto& [rank, recs] : g.of) front = std::max(front, last_seq(recs));
    if (front == 0) return std::nullopt;
    std::vector<const OpRecord*> newest;
    std::vector<int> ranks;
    for (const auto& [rank, recs] : g.of) {
      if (last_seq(recs) != front) return std::nullopt;  // behind() reports it
      newest.push_back(&recs.back());
      ranks.push_back(rank);
    }
    std::vector<int> silent;  // members that left no records of the group
    for (int m : g.members)
      if (!g.of.count(m)) silent.push_back(m);
    const OpRecord& op = *newest[0];
    Candidate c;
    c.d.group = g.name;
    c.d.seq = front;
    c.d.op = op.op;
    c.when = op.issued_ns;
    const bool all_done = std::all_of(newest.begin(), newest.end(), [](const OpRecord* r) { return r->state == OpState::Completed; });
    if (all_done) {
      c.d.finding = Finding::Agree;
      c.d.headline = "the ranks' collectives agree: " + rank_list(ranks) + " completed " + where(g.name, front) + ", " +
                     describe_op(op) + ", and none is in a collective" +
                     (silent.empty() ? "" : " (no records from " + rank_list(silent) + ")");
      return c;
    }
    int64_t first = std::numeric_limits<int64_t>::max();
    for (const OpRecord* r : newest) first = std::min(first, r->started_ns ? r->started_ns : now_);
    std::vector<int> late, early;
    int64_t lateness = 0;
    for (size_t i = 0; i < newest.size(); ++i) {
      const int64_t start = newest[i]->started_ns ? newest[i]->started_ns : now_;
      (start - first > kLateNs ? late : early).push_back(ranks[i]);
      lateness = std::max(lateness, start - first);
    }
    if (!late.empty() && late.size() < early.size()) {
      c.d.finding = Finding::Late;
      c.d.ranks = late;
      c.d.headline = rank_list(late) + " arrived late at " + where(g.name, front) + ", " + describe_op(op) + ": up to " +
                     seconds(lateness) + " after " + rank_list(early);
      return c;
    }
    c.d.finding = Finding::InFlight;
    c.d.ranks = silent;
    c.d.headline = rank_list(ranks) + (ranks.size() == 1 ? " is" : " are") + " in " + where(g.name, front) + ", " +
                   describe_op(op) + (silent.empty() ? ", none missing or late"
                                                     : "; no records from " + rank_list(silent) + on_hosts(silent) +
                                                           " (not supervised here, or no answer): look at them first");
    return c;
  }

  // Why a rank behind in one group may be so: it is in an op of another group with ranks whose
  // records are not here (another machine's, behind a partition). "" when it is not.
  std::string waiting_elsewhere(int rank, const std::string& group) const {
    (void)group;  // its own group too: its last op there may be the one that failed across the cut
    for (const GroupView& g : views_) {
      auto it = g.of.find(rank);
      if (it == g.of.end() || it->second.empty() || it->second.back().state == OpState::Completed) continue;
      std::vector<int> silent;
      for (int m : g.members)
        if (!g.of.count(m)) silent.push_back(m);
      if (silent.empty()) continue;
      const OpRecord& op = it->second.back();
      return std::string(op.state == OpState::Failed ? "; it failed in " : "; it is in ") + where(g.name, op.seq) + ", " + describe_op(op) + ", with " + rank_list(silent) +
             on_hosts(silent) + ", whose records are not here: look at them first";
    }
    return "";
  }

  // " on host-b" (" on host-b and host-c"): where `ranks` run, as the dumps' host tables say; ""
  // when no dump has one.
  std::string on_hosts(const std::vector<int>& ranks) const {
    std::vector<std::string> hosts;
    for (int r : ranks) {
      if (r < 0 || r >= static_cast<int>(hosts_.size())) return "";
      if (std::find(hosts.begin(), hosts.end(), hosts_[r]) == hosts.end()) hosts.push_back(hosts_[r]);
    }
    std::string text;
    for (size_t i = 0; i < hosts.size(); ++i) text += (i == 0 ? " on " : i + 1 == hosts.size() ? " and " : ", ") + hosts[i];
    return text;
  }

  std::string rank_line(int rank) const {
    const RankFacts* f = fact(rank);
    std::string line = "rank " + std::to_string(rank);
    auto dump = dumped_.find(rank);
    if (dump != dumped_.end()) line += " (pid " + std::to_string(dump->second->pid) + ")";
    if (f && !f->how.empty()) line += " " + f->how;
    if (dump == dumped_.end()) return line + on_hosts({rank}) + ": no records";
    const OpRecord* current = nullptr;
    const OpRecord* done = nullptr;
    std::string current_group, done_group;
    for (const GroupView& g : views_) {
      auto it = g.of.find(rank);
      if (it == g.of.end()) continue;
      for (const OpRecord& r : it->second) {
        const OpRecord*& slot = r.state == OpState::Completed ? done : current;
        if (!slot || r.order > slot->order) {
          slot = &r;
          (r.state == OpState::Completed ? done_group : current_group) = g.name;
        }
      }
    }
    if (current && done && done->order > current->order) current = nullptr;  // an old failure, since passed
    if (!current)
      line += ": not in a collective";
    else if (current->state == OpState::Failed)
      line += ": failed in " + describe_op(*current) + " (" + where(current_group, current->seq) + ") after " +
              seconds(current->ended_ns - current->started_ns);
    else if (!current->started_ns)
      line += ": issued " + describe_op(*current) + " (" + where(current_group, current->seq) + "), not yet started";
    else
      line += ": in " + describe_op(*current) + " (" + where(current_group, current->seq) + ") for " +
              seconds(now_ - current->started_ns);
    if (done)
      line += "; last completed " + where(done_group, done->seq) + ", " + describe_op(*done) + ", " +
              seconds(now_ - done->ended_ns) + " before";
    else
      line += "; none completed";
    return line;
  }

  std::map<int, RankFacts> facts_;
  std::map<int, const RankDump*> dumped_;
  std::vector<std::string> hosts_;  // every rank's host, from the first dump that has the table
  std::vector<GroupView> views_;
  int world_ = 0;
  int64_t now_ = 0;
};

}  // namespace

const char* to_string(Finding finding) {
  switch (finding) {
    case Finding::Diverged: return "diverged";
    case Finding::OtherGroup: return "other_group";
    case Finding::Missing: return "missing";
    case Finding::Behind: return "behind";
    case Finding::Late: return "late";
    case Finding::InFlight: return "in_flight";
    case Finding::Agree: return "agree";
    case Finding::NoRecords: return "no_records";
  }
  return "unknown";
}

Diagnosis diagnose(const DiagnosisInput& input) { return Diagnoser(input).run(); }

std::string render(const Diagnosis& diagnosis, const std::string& prefix) {
  std::string text = prefix + "diagnosis: " + diagnosis.headline + "\n";
  for (const std::string& line : diagnosis.lines) text += prefix + line + "\n";
  return text;
}

}  // namespace accel::flight
