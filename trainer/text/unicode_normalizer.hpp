// Unicode normalization forms (NFC, NFD, NFKC, NFKD) through ICU's Normalizer2, as tokenizers'
// normalizers of those names apply them. Text already in the form (all ASCII, most prose) is
// recognised by ICU's quick check and returned without a copy through UTF-16.
#pragma once

#include <string>
#include <string_view>

#include "trainer/text/tokenizer_spec.hpp"

namespace accel::text {

// `form` must be nfc, nfd, nfkc or nfkd. `text` must be valid UTF-8.
void normalize_unicode(NormalizerStep::Kind form, std::string& text);

}  // namespace accel::text
