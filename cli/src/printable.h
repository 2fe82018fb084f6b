// Text from a server or a database on a terminal: control characters escaped, so that a name
// with ESC or a newline in it can neither drive the terminal nor forge a line of the output.
#pragma once

#include <string>
#include <string_view>

namespace ucudnn::cli {

// `text` with every byte below 0x20, DEL, the C1 controls (U+0080..U+009F) and every byte that is
// not part of valid UTF-8 written as \xNN (a backslash as \\); other UTF-8 is kept.
std::string Printable(std::string_view text);
// The same, keeping newlines: for multi-line text a server made (an explanation).
std::string PrintableLines(std::string_view text);

}  // namespace ucudnn::cli
