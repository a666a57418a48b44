// The sentence splitter of tessera-preprocess --split-sentences.
//
// Megatron's tools/preprocess_data.py splits with NLTK's punkt model for --lang (english by
// default), a statistical model of abbreviations, collocations and sentence starters. This is a
// plain rule-based splitter instead: it needs no model file, is deterministic and fast, and
// agrees with punkt on ordinary prose, but it is not punkt, and its boundaries differ on
// unusual text (abbreviations it does not list, sentences starting in lowercase, ...).
//
// A sentence ends after a run of '.', '!' or '?' (ASCII), together with any closing quotes or
// brackets right after it (" ' ) ] } ” ’ »), when
//   1. whitespace follows (any amount, newlines included), and
//   2. the next non-whitespace character can start a sentence: an uppercase or titlecase letter
//      (Unicode), a digit 0-9, or an opening quote or bracket (" ' ( [ { “ ‘ «);
// except after a single '.' that ends
//   3. an abbreviation of the list kAbbreviations below ("Mr.", "Dr.", "e.g.", "i.e.", "etc.",
//      "vs.", month names, ...; compared case-sensitively after dropping opening quotes or
//      brackets before the word, so "(e.g." counts), or
//   4. a single letter, taken for an initial ("J. R. R. Tolkien").
// Decimal numbers ("3.14"), URLs and "a.m." in the middle of a sentence never split (rule 1).
// Newlines alone never end a sentence (punkt does not split on them either).
//
// Spans: without keep_newlines, the whitespace between two sentences belongs to neither (as
// punkt drops it); the first sentence keeps the document's leading whitespace and the last one
// its trailing whitespace. With keep_newlines (Megatron's --keep-newlines, its
// CustomLanguageVars), the whitespace after a sentence stays at its end, so the sentences
// concatenated are the document, newlines included. A document without a boundary is one
// sentence; an empty document has none.
#pragma once

#include <string_view>
#include <vector>

namespace tessera::data {

// Sentences of `text` as views into it, in order; never empty views. Thread-safe.
std::vector<std::string_view> split_sentences(std::string_view text, bool keep_newlines);

// The abbreviations of rule 3, without their final '.'.
extern const std::vector<std::string_view> kAbbreviations;

}  // namespace tessera::data
