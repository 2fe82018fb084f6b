// Text from a server on a terminal (cli/src/printable.h): control characters escaped.
#include "printable.h"

#include <gtest/gtest.h>

namespace ucudnn::cli {
namespace {

TEST(PrintableTest, ControlCharactersAreEscapedAndTextIsKept) {
  EXPECT_EQ(Printable("NVIDIA H100 80GB HBM3"), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(Printable("evil\x1b[2J"), "evil\\x1B[2J");
  EXPECT_EQ(Printable("a\nforged line"), "a\\x0Aforged line");
  EXPECT_EQ(Printable("tab\there\r\x7f"), "tab\\x09here\\x0D\\x7F");
  EXPECT_EQ(Printable("back\\slash"), "back\\\\slash");  // an escape cannot be faked
  EXPECT_EQ(Printable("Ärger €"), "Ärger €");            // UTF-8 stays readable
  EXPECT_EQ(Printable("c1\xc2\x9b"
                      "31m"),
            "c1\\xC2\\x9B31m");                            // CSI as a C1 control
  EXPECT_EQ(Printable("bad\xff\xc3("), "bad\\xFF\\xC3(");  // not UTF-8
  EXPECT_EQ(PrintableLines("line 1\nline\x1b 2\n"), "line 1\nline\\x1B 2\n");
}

}  // namespace
}  // namespace ucudnn::cli
