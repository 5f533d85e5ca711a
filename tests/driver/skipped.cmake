# A step that cannot run here: says why. The suite marks it skipped (SKIP_REGULAR_EXPRESSION).
#   cmake "-DWHY=<reason>" -P skipped.cmake
message("SKIPPED: ${WHY}")
