// Tokenizer: see tokenizer.hpp.
#include "trainer/text/tokenizer.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "runtime/common/errors.hpp"
#include "trainer/text/unicode_normalizer.hpp"

namespace accel::text {

namespace {

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (s.find(from) == std::string::npos) return;
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  size_t start = 0;
  for (size_t at; (at = s.find(from, start)) != std::string::npos; start = at + from.size()) {
    out.append(s, start, at - start);
    out += to;
  }
  out.append(s, start, std::string::npos);
  s.swap(out);
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

}  // namespace

Tokenizer::Tokenizer(TokenizerSpec spec) : spec_(std::move(spec)) {
  model_ = std::make_unique<BpeModel>(spec_);
  for (size_t i = 0; i < spec_.pre_tokenizer.size(); ++i) {
    const PreTokenizerStep& step = spec_.pre_tokenizer[i];
    const bool regex = step.kind == PreTokenizerStep::Kind::split ||
                       (step.kind == PreTokenizerStep::Kind::byte_level && step.use_regex);
    if (!regex) {
      splitters_.push_back(nullptr);
      continue;
    }
    try {
      splitters_.push_back(std::make_unique<RegexSplitter>(step.pattern));
    } catch (const std::invalid_argument& e) {
      Diagnostic d;
      d.key_path = "pre_tokenizer (step " + std::to_string(i) + ").pattern";
      d.where = Location::in_file(spec_.path, 0, 0);
      d.message = std::string("PCRE2 cannot compile this Oniguruma pattern: ") + e.what();
      d.value = step.pattern;
      d.hint = "use a tokenizer whose pattern PCRE2 reads, or tokenize the data yourself (data.kind: tokens)";
      throw ConfigError(std::move(d));
    }
  }
  for (size_t i = 0; i < spec_.added_tokens.size(); ++i)
    added_by_first_byte_[static_cast<uint8_t>(spec_.added_tokens[i].content[0])].push_back(static_cast<int>(i));
  for (auto& list : added_by_first_byte_)
    std::stable_sort(list.begin(), list.end(), [&](int a, int b) {
      return spec_.added_tokens[a].content.size() > spec_.added_tokens[b].content.size();
    });
}

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

int Tokenizer::added_at(std::string_view text, size_t i) const {
  for (int k : added_by_first_byte_[static_cast<uint8_t>(text[i])]) {
    const std::string& c = spec_.added_tokens[k].content;
    if (text.size() - i >= c.size() && std::memcmp(text.data() + i, c.data(), c.size()) == 0) return k;
  }
  return -1;
}

void Tokenizer::encode(std::string_view text, std::vector<uint32_t>& out) {
  size_t stretch = 0;
  if (!spec_.added_tokens.empty()) {
    for (size_t i = 0; i < text.size(); ++i) {
      if (added_by_first_byte_[static_cast<uint8_t>(text[i])].empty()) continue;
      const int k = added_at(text, i);
      if (k < 0) continue;
      if (i > stretch) encode_stretch(text.substr(stretch, i - stretch), stretch == 0, out);
      out.push_back(spec_.added_tokens[k].id);
      stretch = i + spec_.added_tokens[k].content.size();
      i = stretch - 1;
    }
  }
  if (stretch < text.size()) encode_stretch(text.substr(stretch), stretch == 0, out);
}

void Tokenizer::encode_stretch(std::string_view raw, bool at_text_start, std::vector<uint32_t>& out) {
  normalized_.assign(raw);
  for (const NormalizerStep& n : spec_.normalizer) {
    switch (n.kind) {
      case NormalizerStep::Kind::prepend:
        if (!normalized_.empty()) normalized_.insert(0, n.text);
        break;
      case NormalizerStep::Kind::replace: replace_all(normalized_, n.text, n.replacement); break;
      default: normalize_unicode(n.kind, normalized_); break;
    }
  }
  if (normalized_.empty()) return;

  // Pieces are views into `normalized_` or into strings a step had to rewrite (owned_).
  owned_.clear();
  std::vector<std::string_view> pieces{normalized_}, next;
  for (size_t s = 0; s < spec_.pre_tokenizer.size(); ++s) {
    const PreTokenizerStep& step = spec_.pre_tokenizer[s];
    next.clear();
    for (size_t k = 0; k < pieces.size(); ++k) {
      std::string_view piece = pieces[k];
      const bool first_piece = at_text_start && k == 0;
      switch (step.kind) {
        case PreTokenizerStep::Kind::byte_level:
          if (step.add_prefix_space && !starts_with(piece, " ")) {
            owned_.push_back(" " + std::string(piece));
            piece = owned_.back();
          }
          if (splitters_[s]) splitters_[s]->split(piece, next);
          else next.push_back(piece);
          break;
        case PreTokenizerStep::Kind::split: splitters_[s]->split(piece, next); break;
        case PreTokenizerStep::Kind::metaspace: {
          std::string text(piece);
          replace_all(text, " ", step.replacement);
          const bool prepend = step.prepend == PreTokenizerStep::Prepend::always ||
                               (step.prepend == PreTokenizerStep::Prepend::first && first_piece);
          if (prepend && !starts_with(text, step.replacement)) text.insert(0, step.replacement);
          owned_.push_back(std::move(text));
          const std::string_view t = owned_.back();
          if (!step.split) {
            next.push_back(t);
            break;
          }
          size_t begin = 0;  // each "▁" starts a piece (merged with what follows it)
          for (size_t at = t.find(step.replacement, 1); at != std::string_view::npos;
               at = t.find(step.replacement, at + step.replacement.size())) {
            if (at > begin) next.push_back(t.substr(begin, at - begin));
            begin = at;
          }
          if (begin < t.size()) next.push_back(t.substr(begin));
          break;
        }
      }
    }
    pieces.swap(next);
  }
  for (std::string_view piece : pieces) model_->encode(piece, out);
}

}  // namespace accel::text
