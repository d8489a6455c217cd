# cmake -DINPUT=x.cu -DOUTPUT=x.cu.cpp -P transform_launches.cmake
# Rewrites every kernel launch `k<<<config>>>(` of a .cu file into a call of the CPU
# emulation's launcher (include/troupe_cuda_emulation.h), so that the file compiles as
# C++. A #line directive keeps diagnostics pointing at the original file.
file(READ "${INPUT}" text)
string(REGEX REPLACE "([A-Za-z_][A-Za-z0-9_]*)<<<([^>]*)>>>\\("
       "::troupe_emu::launch([&](auto... troupe_a_) { \\1(troupe_a_...); }, \\2)(" text "${text}")
string(FIND "${text}" "<<<" left)
if(NOT left EQUAL -1)
  message(FATAL_ERROR "${INPUT}: a kernel launch the emulation cannot rewrite (launch configs must not contain '>')")
endif()
file(WRITE "${OUTPUT}.tmp" "// Generated from ${INPUT} by transform_launches.cmake.\n#line 1 \"${INPUT}\"\n${text}")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
