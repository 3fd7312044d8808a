# Writes OUTPUT, a C++ file defining `const char NAME[]` with the bytes of
# INPUT (a text file without the sequence )CSEMBED" in it).
file(READ "${INPUT}" content)
string(FIND "${content}" ")CSEMBED\"" bad)
if(NOT bad EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw-string delimiter )CSEMBED\"")
endif()
file(WRITE "${OUTPUT}.tmp" "// Generated from ${INPUT} by cmake/embed.cmake.\nnamespace cs {\nextern const char ${NAME}[];\nconst char ${NAME}[] = R\"CSEMBED(${content})CSEMBED\";\n}  // namespace cs\n")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
