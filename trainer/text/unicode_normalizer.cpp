// Unicode normalization through ICU: see unicode_normalizer.hpp.
#include "trainer/text/unicode_normalizer.hpp"

#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <stdexcept>

namespace accel::text {

namespace {

const icu::Normalizer2* instance(NormalizerStep::Kind form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case NormalizerStep::Kind::nfc: n = icu::Normalizer2::getNFCInstance(status); break;
    case NormalizerStep::Kind::nfd: n = icu::Normalizer2::getNFDInstance(status); break;
    case NormalizerStep::Kind::nfkc: n = icu::Normalizer2::getNFKCInstance(status); break;
    case NormalizerStep::Kind::nfkd: n = icu::Normalizer2::getNFKDInstance(status); break;
    default: break;
  }
  if (!n || U_FAILURE(status)) throw std::runtime_error(std::string("ICU normalizer unavailable: ") + u_errorName(status));
  return n;
}

bool all_ascii(const std::string& s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

}  // namespace

void normalize_unicode(NormalizerStep::Kind form, std::string& text) {
  if (all_ascii(text)) return;  // ASCII is invariant under all four forms
  const icu::Normalizer2* n = instance(form);
  const icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  UErrorCode status = U_ZERO_ERROR;
  if (n->quickCheck(u, status) == UNORM_YES && U_SUCCESS(status)) return;
  status = U_ZERO_ERROR;
  const icu::UnicodeString out = n->normalize(u, status);
  if (U_FAILURE(status)) throw std::runtime_error(std::string("ICU normalization failed: ") + u_errorName(status));
  text.clear();
  out.toUTF8String(text);
}

}  // namespace accel::text
