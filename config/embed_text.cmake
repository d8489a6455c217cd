# cmake -DINPUT=<text file> -DOUTPUT=<.cpp> -DFUNCTION=<name> -P embed_text.cmake
# Writes a C++ source defining `std::string_view troupe::config::FUNCTION()` that
# returns the file's bytes. Hex escapes keep any content (quotes, backslashes,
# raw-string delimiters) intact.
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" n)
set(body "")
set(line "")
math(EXPR last "${n} - 2")
if(n GREATER 0)
  foreach(i RANGE 0 ${last} 2)
    string(SUBSTRING "${hex}" ${i} 2 byte)
    string(APPEND line "\\x${byte}")
    string(LENGTH "${line}" len)
    if(len GREATER 72)
      string(APPEND body "    \"${line}\"\n")
      set(line "")
    endif()
  endforeach()
endif()
string(APPEND body "    \"${line}\"\n")
math(EXPR bytes "${n} / 2")
file(WRITE "${OUTPUT}.tmp"
"// Generated from ${INPUT} by config/embed_text.cmake. Do not edit.
#include <string_view>

namespace troupe::config {

std::string_view ${FUNCTION}() {
  static constexpr char kText[] =
${body}  ;
  return std::string_view(kText, ${bytes});
}

}  // namespace troupe::config
")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
