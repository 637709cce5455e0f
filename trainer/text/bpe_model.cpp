// BpeModel: see bpe_model.hpp.
#include "trainer/text/bpe_model.hpp"

#include <algorithm>
#include <cstdio>

#include "runtime/common/errors.hpp"
#include "trainer/text/byte_level.hpp"
#include "trainer/text/utf8.hpp"

namespace accel::text {

namespace {

constexpr size_t kCacheEntries = 1 << 20;  // cleared when full: bounded memory, still most hits
constexpr size_t kCachedPieceBytes = 256;  // longer pieces (whole lines without pre-split) are not kept

[[noreturn]] void refuse(const TokenizerSpec& spec, const std::string& where, const std::string& what) {
  Diagnostic d;
  d.key_path = where;
  d.where = Location::in_file(spec.path, 0, 0);
  d.message = what;
  d.hint = "every merge's two tokens and their concatenation must be in model.vocab";
  throw ConfigError(std::move(d));
}

// Heap order: the smallest rank on top, then the leftmost position (tokenizers' Merge ordering).
bool later(uint32_t rank_a, uint32_t pos_a, uint32_t rank_b, uint32_t pos_b) {
  return rank_a != rank_b ? rank_a > rank_b : pos_a > pos_b;
}

}  // namespace

BpeModel::BpeModel(const TokenizerSpec& spec)
    : byte_level_(spec.byte_level()),
      byte_fallback_(spec.model.byte_fallback),
      fuse_unk_(spec.model.fuse_unk),
      ignore_merges_(spec.model.ignore_merges) {
  vocab_.reserve(spec.model.vocab.size() * 2);
  for (const auto& [spelled, id] : spec.model.vocab) {
    if (!byte_level_) {
      vocab_.emplace(spelled, id);
    } else if (auto bytes = decode_byte_level(spelled)) {
      vocab_.emplace(std::move(*bytes), id);  // entries outside the alphabet can never be produced
    }
  }
  std::fill(std::begin(byte_unit_), std::end(byte_unit_), -1);
  std::fill(std::begin(fallback_), std::end(fallback_), -1);
  for (int b = 0; b < 256; ++b) {
    if (byte_level_) byte_unit_[b] = unit_id(std::string(1, static_cast<char>(b)));
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);  // ASCII: spelled alike in a byte-level vocabulary
    if (byte_fallback_) fallback_[b] = unit_id(name);
  }
  if (spec.model.unk_token) {
    for (const auto& [spelled, id] : spec.model.vocab)
      if (spelled == *spec.model.unk_token) unk_id_ = id;
    if (unk_id_ < 0) refuse(spec, "model.unk_token", "'" + *spec.model.unk_token + "' is not in model.vocab");
  }
  merges_.reserve(spec.model.merges.size() * 2);
  for (size_t rank = 0; rank < spec.model.merges.size(); ++rank) {
    const auto& [a, b] = spec.model.merges[rank];
    std::string left = a, right = b;
    if (byte_level_) {
      auto da = decode_byte_level(a), db = decode_byte_level(b);
      if (!da || !db) refuse(spec, "model.merges[" + std::to_string(rank) + "]", "is outside the byte-level alphabet");
      left = std::move(*da);
      right = std::move(*db);
    }
    const auto ia = vocab_.find(left), ib = vocab_.find(right), ic = vocab_.find(left + right);
    if (ia == vocab_.end() || ib == vocab_.end() || ic == vocab_.end())
      refuse(spec, "model.merges[" + std::to_string(rank) + "]", "merges '" + a + "' and '" + b + "', which are not all in model.vocab");
    const uint64_t key = (uint64_t{ia->second} << 32) | ib->second;
    merges_.emplace(key, Merge{static_cast<uint32_t>(rank), ic->second});  // the first (lowest) rank wins
  }
}

int64_t BpeModel::unit_id(std::string_view unit) const {
  const auto it = vocab_.find(std::string(unit));
  return it == vocab_.end() ? -1 : static_cast<int64_t>(it->second);
}

void BpeModel::encode(std::string_view piece, std::vector<uint32_t>& out) {
  if (piece.empty()) return;
  const bool cacheable = piece.size() <= kCachedPieceBytes;
  std::string key;
  if (cacheable) {
    key.assign(piece);
    const auto hit = cache_.find(key);
    if (hit != cache_.end()) {
      out.insert(out.end(), hit->second.begin(), hit->second.end());
      return;
    }
  }
  const size_t first = out.size();
  if (ignore_merges_) {
    const int64_t whole = cacheable ? unit_id(key) : unit_id(piece);
    if (whole >= 0) out.push_back(static_cast<uint32_t>(whole));
  }
  if (out.size() == first) merge_word(piece, out);
  if (cacheable) {
    if (cache_.size() >= kCacheEntries) cache_.clear();
    cache_.emplace(std::move(key), std::vector<uint32_t>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
  }
}

void BpeModel::merge_word(std::string_view piece, std::vector<uint32_t>& out) {
  symbols_.clear();
  auto add = [&](uint32_t id, uint32_t len) {
    const auto n = static_cast<int32_t>(symbols_.size());
    symbols_.push_back({id, n - 1, -1, len});
    if (n > 0) symbols_[n - 1].next = n;
  };
  int64_t pending_unk = -1;
  uint32_t pending_len = 0;
  const auto* p = reinterpret_cast<const uint8_t*>(piece.data());
  for (size_t i = 0; i < piece.size();) {
    const size_t len = byte_level_ ? 1 : std::min(utf8_length(p[i]), piece.size() - i);
    const int64_t id = byte_level_ ? byte_unit_[p[i]] : unit_id(piece.substr(i, len));
    if (id >= 0) {
      if (pending_unk >= 0) add(static_cast<uint32_t>(pending_unk), pending_len);
      pending_unk = -1;
      add(static_cast<uint32_t>(id), static_cast<uint32_t>(len));
    } else {
      bool fell_back = false;
      if (byte_fallback_) {
        fell_back = true;
        for (size_t k = 0; k < len; ++k) fell_back = fell_back && fallback_[p[i + k]] >= 0;
        if (fell_back)  // as tokenizers does: a pending unk stays pending across fallback bytes
          for (size_t k = 0; k < len; ++k) add(static_cast<uint32_t>(fallback_[p[i + k]]), 1);
      }
      if (!fell_back && unk_id_ >= 0) {
        if (pending_unk >= 0 && fuse_unk_) {
          pending_len += static_cast<uint32_t>(len);
        } else {
          if (pending_unk >= 0) add(static_cast<uint32_t>(pending_unk), pending_len);
          pending_unk = unk_id_;
          pending_len = static_cast<uint32_t>(len);
        }
      }
    }
    i += len;
  }
  if (pending_unk >= 0) add(static_cast<uint32_t>(pending_unk), pending_len);

  heap_.clear();
  auto heap_order = [](const Candidate& a, const Candidate& b) { return later(a.rank, a.pos, b.rank, b.pos); };
  auto queue = [&](int32_t left) {
    const int32_t right = symbols_[left].next;
    if (right < 0) return;
    const auto it = merges_.find((uint64_t{symbols_[left].id} << 32) | symbols_[right].id);
    if (it == merges_.end()) return;
    heap_.push_back({it->second.rank, static_cast<uint32_t>(left), it->second.id});
    std::push_heap(heap_.begin(), heap_.end(), heap_order);
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols_.size()); ++i) queue(i);
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), heap_order);
    const Candidate top = heap_.back();
    heap_.pop_back();
    Symbol& left = symbols_[top.pos];
    if (left.len == 0 || left.next < 0) continue;
    const int32_t right_pos = left.next;
    const Symbol right = symbols_[right_pos];
    const auto it = merges_.find((uint64_t{left.id} << 32) | right.id);
    if (it == merges_.end() || it->second.id != top.id) continue;  // stale
    left.id = top.id;
    left.len += right.len;
    left.next = right.next;
    symbols_[right_pos].len = 0;
    if (right.next >= 0) symbols_[right.next].prev = static_cast<int32_t>(top.pos);
    if (left.prev >= 0) queue(left.prev);
    queue(static_cast<int32_t>(top.pos));
  }
  for (const Symbol& s : symbols_)
    if (s.len != 0) out.push_back(s.id);
}

}  // namespace accel::text
