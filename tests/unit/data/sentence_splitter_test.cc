#include "tessera/data/sentence_splitter.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace tessera::data {
namespace {

std::vector<std::string> split(std::string_view text, bool keep_newlines = false) {
  std::vector<std::string> out;
  for (const auto s : split_sentences(text, keep_newlines)) out.emplace_back(s);
  return out;
}

using Sentences = std::vector<std::string>;

TEST(SentenceSplitter, EndsAtTerminalBeforeASentenceStart) {
  // Hand-worked against the rules of sentence_splitter.h: "Mr." (rule 3), "3.30" (no
  // whitespace, rule 1), "p.m. on" (lowercase next, rule 2) and "Dr." do not end a sentence.
  EXPECT_EQ(split("Mr. Smith went to Washington. He arrived at 3.30 p.m. on Monday! Did he "
                  "stay? \"Yes,\" said Dr. Jones."),
            (Sentences{"Mr. Smith went to Washington.", "He arrived at 3.30 p.m. on Monday!",
                       "Did he stay?", "\"Yes,\" said Dr. Jones."}));
}

TEST(SentenceSplitter, AbbreviationsInitialsAndClosingQuotes) {
  EXPECT_EQ(split("Use tools (e.g. Hammers). Then stop."),
            (Sentences{"Use tools (e.g. Hammers).", "Then stop."}));
  EXPECT_EQ(split("J. R. R. Tolkien wrote it. It sold."),
            (Sentences{"J. R. R. Tolkien wrote it.", "It sold."}));
  // Closing quotes and brackets stay with the sentence they close.
  EXPECT_EQ(split("He said \"Stop.\" Then he left."),
            (Sentences{"He said \"Stop.\"", "Then he left."}));
  // A run of terminals is one end; "?!" as well.
  EXPECT_EQ(split("Wait... What?! No way."), (Sentences{"Wait...", "What?!", "No way."}));
}

TEST(SentenceSplitter, NextCharacterMustStartASentence) {
  EXPECT_EQ(split("This is v. good. ok then."), (Sentences{"This is v. good. ok then."}));
  EXPECT_EQ(split("It cost 5. 6 were sold."), (Sentences{"It cost 5.", "6 were sold."}));
  EXPECT_EQ(split("Fin. \xC3\x89lan vital."), (Sentences{"Fin.", "\xC3\x89lan vital."}));
  EXPECT_EQ(split("One. (Two.) \xE2\x80\x9CThree.\xE2\x80\x9D"),
            (Sentences{"One.", "(Two.)", "\xE2\x80\x9CThree.\xE2\x80\x9D"}));
  // Newlines alone never end a sentence.
  EXPECT_EQ(split("a line\nAnother line"), (Sentences{"a line\nAnother line"}));
}

TEST(SentenceSplitter, WhitespaceBetweenSentences) {
  // Dropped between sentences; the document's own leading and trailing whitespace stays.
  EXPECT_EQ(split("  Yes. No.\n\nMaybe!  Sure?\n"),
            (Sentences{"  Yes.", "No.", "Maybe!", "Sure?\n"}));
  // --keep-newlines: it stays at the end of the sentence before it; the sentences concatenate
  // to the document.
  EXPECT_EQ(split("  Yes. No.\n\nMaybe!  Sure?\n", true),
            (Sentences{"  Yes. ", "No.\n\n", "Maybe!  ", "Sure?\n"}));
  EXPECT_TRUE(split("").empty());
  EXPECT_EQ(split("   "), (Sentences{"   "}));
  EXPECT_EQ(split("No end"), (Sentences{"No end"}));
}

}  // namespace
}  // namespace tessera::data
